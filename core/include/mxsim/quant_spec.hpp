// How one tensor is quantized: element format, block shape, scale kind and
// rule, rounding. The named specs live in quant_spec.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mxsim/format.hpp"
#include "mxsim/philox.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/scale_rule.hpp"

namespace mxsim {

/// What kind of number a block scale is.
enum class ScaleKind : uint8_t {
  E8M0,   ///< OCP MX power-of-two byte; stored as the byte (bias 127)
  FP32,   ///< FP8 recipes: FP32 scale_inv per block (x ~= code * scale_inv)
  UE4M3,  ///< NVFP4: E4M3 byte per block (sign ignored) plus one FP32 tensor scale
};

/// Which axis of a logical [rows, cols] tensor the 1-D blocks run along.
///  Cols ("rowwise"): blocks of consecutive elements of a row, i.e. along the
///    last (K) axis; storage keeps the logical layout. fprop operands.
///  Rows ("columnwise"): blocks run down a column; storage holds the
///    transpose [cols, rows] so blocks are contiguous, as TransformerEngine
///    and Primus-Turbo store column-wise data. wgrad operands.
/// 2-D tiles and per-tensor scaling ignore the axis: storage is the logical
/// layout and the same bytes serve both directions.
enum class Axis : uint8_t { Cols, Rows };

struct QuantSpec {
  Format elem = Format::E2M1;
  /// Block shape in storage coordinates; 0 means the whole extent
  /// (block_rows = 0, block_cols = 0 is per-tensor; 1 x 0 is per-row).
  int block_rows = 1;
  int block_cols = 32;
  ScaleKind scale_kind = ScaleKind::E8M0;
  ScaleRule rule = ScaleRule::Even;  ///< E8M0 scales only
  RoundMode round = RoundMode::RNE;
  /// FP32 scales only: round the scale down to a power of two
  /// (TransformerEngine Float8BlockScaling default).
  bool pow2_scale = false;
  /// FP32 scales only: amax used is max(amax, amax_epsilon)
  /// (Primus-Turbo: 1e-12 tensorwise, 1e-4 blockwise; 0 = TE behaviour).
  float amax_epsilon = 0.0f;
  /// FP32 per-tensor only: a given scale (delayed scaling); 0 = current scaling.
  float fixed_scale = 0.0f;
  /// Apply the 16-point Hadamard transform (scaled 1/4) to runs of 16 along
  /// the block axis before amax (Primus-Turbo MXFP4 wgrad operands).
  bool hadamard16 = false;
  /// Random bits for RoundMode::Stochastic.
  PhiloxStream sr{};
  /// Stochastic rounding only: element i of the tensor being quantized (its
  /// logical row-major index) draws sr(sr_index_base + i). A slice of a larger
  /// tensor sets this to the logical index of its first element in the whole
  /// tensor (slice rows [m0, ...) of an [M, C] tensor: m0 * C), so it draws
  /// the words the whole tensor would (docs/numerics.md §2.5).
  uint64_t sr_index_base = 0;

  bool is_2d_tile() const { return block_rows != 1 && block_cols != 1 && !(block_rows == 0 && block_cols == 0); }
  bool per_tensor() const { return block_rows == 0 && block_cols == 0; }
  std::string describe() const;
  /// Field-wise equality (random stream included): two equal specs quantize
  /// a tensor to the same bytes.
  friend bool operator==(const QuantSpec& a, const QuantSpec& b) {
    return a.elem == b.elem && a.block_rows == b.block_rows && a.block_cols == b.block_cols &&
           a.scale_kind == b.scale_kind && a.rule == b.rule && a.round == b.round && a.pow2_scale == b.pow2_scale &&
           f32_bits(a.amax_epsilon) == f32_bits(b.amax_epsilon) && f32_bits(a.fixed_scale) == f32_bits(b.fixed_scale) &&
           a.hadamard16 == b.hadamard16 && a.sr.seed == b.sr.seed && a.sr.stream == b.sr.stream &&
           a.sr_index_base == b.sr_index_base;
  }
};

/// Named specs: how ONE tensor is quantized, as `mxsim quantize --spec` takes
/// them. (A *recipe* is the per-linear choice of the training simulator --
/// which spec each operand of a linear's three GEMMs gets: sim/recipe.hpp.
/// The words are kept apart: spec = one tensor, recipe = one linear.)
///   mxfp4            E2M1, 1x32, E8M0 EVEN (Primus-Turbo / aiter)
///   mxfp4_2d         E2M1, 32x32 tiles, E8M0 EVEN (Primus-Turbo weights)
///   mxfp4_ocp        E2M1, 1x32, E8M0 FLOOR (OCP MX v1.0 §6.3)
///   mxfp6_e2m3 / mxfp6_e3m2   1x32, E8M0 RCEIL
///   mxfp8 / mxfp8_e5m2        E4M3 / E5M2, 1x32, E8M0 RCEIL (TransformerEngine MXFP8)
///   mxfp8_2d         E4M3, 32x32 tiles, RCEIL
///   fp8_tensor / fp8_tensor_e5m2   per-tensor current scaling (TE Float8CurrentScaling)
///   fp8_row          E4M3, one FP32 scale per row (PyTorch _scaled_mm rowwise)
///   fp8_block / fp8_block2d   E4M3, 1x128 / 128x128 FP32 power-of-two scales
///                              (TE Float8BlockScaling; DeepSeek-V3 §3.3)
///   nvfp4 / nvfp4_2d E2M1, 1x16 / 16x16 UE4M3 + FP32 tensor scale (TE NVFP4)
/// An alias (kSpecAliases) gives the spec it stands for. Throws std::invalid_argument for an
/// unknown name, with a "did you mean" for a near miss (mxsim/names.hpp) and the known names.
QuantSpec named_spec(std::string_view name);
std::vector<std::string> named_spec_names();

/// Other names named_spec accepts, each standing for one spec: the training recipe
/// (sim/recipe.hpp) that quantizes its forward operands with that spec, where the two
/// vocabularies name one scheme differently, so that the word `mxsim train` takes works in
/// `mxsim quantize` and `gemm` too. fp8_current is TransformerEngine's Float8CurrentScaling:
/// per-tensor current scaling, spec fp8_tensor. (The reverse alias, fp8_tensor for the training
/// recipe fp8_current, is sim::kRecipeAliases.)
struct SpecAlias {
  const char* alias;
  const char* spec;
};
inline constexpr SpecAlias kSpecAliases[] = {{"fp8_current", "fp8_tensor"}};
/// The table name of `name`: itself for a spec name, the spec an alias stands for, "" otherwise.
std::string canonical_spec_name(std::string_view name);
/// The former names of named_spec / named_spec_names, kept while code outside
/// the simulator and CLI moves over.
inline QuantSpec tensor_recipe(std::string_view name) { return named_spec(name); }
inline std::vector<std::string> tensor_recipe_names() { return named_spec_names(); }

/// The FP32-scale parameters of current scaling (docs/numerics.md §3.3) set on
/// a spec by a user: amax_epsilon (a = max(amax, amax_epsilon)) and pow2_scale
/// (the scale rounded down to a power of two). `what` names the setting in
/// messages (a CLI option, a config key, a Python argument). amax_epsilon must
/// be finite and >= 0; it is stored as its FP32 rounding (RNE), and a positive
/// value whose rounding is 0 is refused. Throws std::invalid_argument naming
/// `what` unless the spec has FP32 scales and no fixed (delayed-scaling) scale.
void set_amax_epsilon(QuantSpec& s, double amax_epsilon, const std::string& what);
void set_pow2_scale(QuantSpec& s, bool pow2_scale, const std::string& what);

/// Parse enums from their documented lower-case names ("floor", "rceil",
/// "even", "ceil"; "rne", "rz", "sr"). Throw std::invalid_argument.
ScaleRule scale_rule_from_name(std::string_view);
RoundMode round_mode_from_name(std::string_view);
const char* name_of(ScaleRule);
const char* name_of(RoundMode);
const char* name_of(ScaleKind);

}  // namespace mxsim
