// The layers of the simulator's MoE classifier and the operand roles of a
// linear: one enum each, one spelling each (the trace, checkpoint and config
// names below are the ones trace/schema.hpp's builders take).
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

namespace mxsim::sim {

/// The linears, in model order (embed -> router -> fc1 -> fc2 -> head).
enum class Layer : uint8_t { Embed, Router, Fc1, Fc2, Head };
inline constexpr std::array<Layer, 5> kLayers{Layer::Embed, Layer::Router, Layer::Fc1, Layer::Fc2, Layer::Head};

/// "embed", "router", "fc1", "fc2", "head".
constexpr const char* name_of(Layer l) {
  constexpr const char* n[] = {"embed", "router", "fc1", "fc2", "head"};
  return n[size_t(l)];
}
/// Parses the names above; false for anything else.
constexpr bool layer_from_name(std::string_view s, Layer& out) {
  for (Layer l : kLayers)
    if (s == name_of(l)) {
      out = l;
      return true;
    }
  return false;
}
/// Philox tensor-id base of a layer (1-based model order): initialisation
/// streams use it, stochastic rounding of the layer's dy uses 16 * id + 1
/// (dgrad) and 16 * id + 2 (wgrad).
constexpr uint32_t layer_id(Layer l) { return uint32_t(l) + 1; }
/// Whether the layer runs a dgrad GEMM: every layer but the embedding, whose input is the data
/// (which takes no gradient).
constexpr bool has_dgrad(Layer l) { return l != Layer::Embed; }

/// The quantized operands of a linear (training-mechanics.md §1-§2).
enum class Role : uint8_t { W, X, Dy };
inline constexpr std::array<Role, 3> kRoles{Role::W, Role::X, Role::Dy};
/// "w", "x", "dy".
constexpr const char* name_of(Role r) {
  constexpr const char* n[] = {"w", "x", "dy"};
  return n[size_t(r)];
}

/// The quantized activation operands of a linear whose block maps the trace records
/// (docs/trace-format.md "Element and block maps"): x of fprop (along K), dy of dgrad (along
/// N), and the wgrad operands x and dy quantized along M per group (Hadamard and stochastic
/// rounding where the recipe uses them). Names are the OperandSpecs fields' (sim/recipe.hpp).
enum class Operand : uint8_t { X, Dy, XWgrad, DyWgrad };
inline constexpr std::array<Operand, 4> kOperands{Operand::X, Operand::Dy, Operand::XWgrad, Operand::DyWgrad};
/// "x", "dy", "x_wgrad", "dy_wgrad" (the trace's operand names; x and dy are Role's).
constexpr const char* name_of(Operand o) {
  constexpr const char* n[] = {"x", "dy", "x_wgrad", "dy_wgrad"};
  return n[size_t(o)];
}
/// Whether the operand is quantized along M (Axis::Rows, per group): the wgrad operands.
constexpr bool along_m(Operand o) { return o == Operand::XWgrad || o == Operand::DyWgrad; }

}  // namespace mxsim::sim
