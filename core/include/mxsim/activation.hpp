// The activation of the MoE experts' fc1 (config key model.activation).
// Definitions: docs/numerics.md §6, core/include/mxsim/hd/elementwise.hpp.
#pragma once
#include <cstdint>
#include <string_view>

namespace mxsim {

enum class Activation : uint8_t {
  Relu,  ///< max(x, 0)
  Gelu,  ///< erf form (not the tanh approximation), as torch.nn.GELU()
  Silu,  ///< x * sigmoid(x)
};

/// "relu", "gelu", "silu".
const char* name_of(Activation a);
/// Parses the names above; throws std::invalid_argument naming the bad value
/// and the known ones.
Activation activation_from_name(std::string_view name);

}  // namespace mxsim
