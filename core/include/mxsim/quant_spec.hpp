// How one tensor is quantized: element format, block shape, scale kind and
// rule, rounding. The named specs live in quant_spec.cpp.
#pragma once
#include <cstdint>
#include <optional>
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
/// Whether a scale kind has a second level: one FP32 tensor scale (tensor_scale_inv, S_dec) that
/// every block scale multiplies. The one place that says so; code that needs, stores or records
/// a tensor scale asks this rather than naming the kind.
MXSIM_HD constexpr bool has_tensor_scale(ScaleKind k) { return k == ScaleKind::UE4M3; }

/// Which axis of a logical [rows, cols] tensor the 1-D blocks run along.
///  Cols ("rowwise"): blocks of consecutive elements of a row, i.e. along the
///    last (K) axis; storage keeps the logical layout. fprop operands.
///  Rows ("columnwise"): blocks run down a column; storage holds the
///    transpose [cols, rows] so blocks are contiguous, as TransformerEngine
///    and Primus-Turbo store column-wise data. wgrad operands.
/// 2-D tiles and per-tensor scaling ignore the axis: storage is the logical
/// layout and the same bytes serve both directions.
enum class Axis : uint8_t { Cols, Rows };

/// Whose arithmetic an FP32-scaled spec follows (docs/numerics.md §3.4): how
/// the block scale comes from the amax, how elements are scaled by it and what
/// is stored. amax is max |x| over the block in every convention.
///  TE: TransformerEngine current scaling: scale = fl32(fp8_max / max(amax,
///    amax_epsilon)), codes encode(fl32(x * scale)), scale_inv = fl32(1 /
///    scale) stored (x ~= code * scale_inv).
///  Torchao: torchao Float8Tensor (quantize_ workflows;
///    torchao/quantization/quant_primitives.py _choose_scale_float8 and
///    _quantize_affine_float8) as PyTorch computes it on the CPU: scale =
///    fl32(max(amax, hp_value_lb) / fp8_max), a division, rounded to the
///    high-precision tensor's dtype (hp_dtype); codes encode(clamp(fl32(x /
///    scale), -max, max)), one RNE division per element; the scale itself is
///    stored (x ~= code * scale).
///  TorchaoCuda: the same with the scale as PyTorch computes it on CUDA,
///    where a tensor divided by a Python number is multiplied by the number's
///    FP32 reciprocal: scale = fl32(amax * fl32(1 / fp8_max)).
///  TorchaoTraining: torchao float8 training (torchao/float8/float8_utils.py
///    amax_to_scale, float8_training_tensor.py _ToFloat8ConstrFunc): scale =
///    fl32(fl64(fl64(1 / max(amax, 1e-12)) * fp8_max)) in FP64 (optionally
///    2^floor(log2(scale)) in FP32), codes encode(clamp(fl32(x * scale), -max,
///    max)); the scale is stored and decodes divide by it
///    (Fp32ScaleUse::DivideByScale: x ~= code / scale).
/// The torchao conventions write NaN codes as PyTorch on CUDA does (E4M3 and
/// E5M2 0x7F, FNUZ 0x80) and take no zero_codes shortcut for NaN/Inf blocks.
enum class ScaleConvention : uint8_t { TE, Torchao, TorchaoCuda, TorchaoTraining };

/// TransformerEngine's fixed random sign vector of the NVFP4 recipe's wgrad
/// Hadamard transform, [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]
/// (transformer_engine/pytorch/tensor/nvfp4_tensor.py get_wgrad_sign_vector;
/// the same list in TE's JAX hadamard.py), as a mask: bit k set where entry k is -1.
inline constexpr uint16_t kTeNvfp4WgradSigns = 0xD7E8;

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
  /// FP32 per-tensor current scaling only (fixed_scale = 0, TE convention, no Hadamard): one
  /// scale for the whole tensor, from the amax of all its groups together (and in
  /// quantize_grouped_colwise of all the row slices together, the whole [M, C] operand), where a
  /// per-tensor spec otherwise gives each group of [G, R, C] its own. The scale is the one
  /// with_current_scale computes from that amax on the host (same bits); the quantizer finds it
  /// where the tensor lives, so a GPU run needs no synchronisation to learn the amax
  /// (TransformerEngine's current scaling keeps amax and scale on the device the same way).
  /// A non-finite amax gives every block a NaN scale_inv and zero codes; callers that must
  /// refuse it check the amax themselves (Backend::amax_deferred).
  bool whole_tensor_scale = false;
  /// FP32 scales only: whose scale arithmetic (ScaleConvention; TE default).
  ScaleConvention scale_convention = ScaleConvention::TE;
  /// ScaleConvention::Torchao / TorchaoCuda only: the dtype of the tensor
  /// torchao was given (FP32, BF16 or FP16), in which it computes amax,
  /// hp_value_lb and the scale (_choose_scale_float8 divides a tensor of that
  /// dtype); the scale is then rounded to it (RNE). Elements are FP32 either way.
  Format hp_dtype = Format::FP32;
  /// Apply the 16-point Hadamard transform (scaled 1/4) to runs of 16 along
  /// the block axis before amax (Primus-Turbo MXFP4 wgrad operands).
  bool hadamard16 = false;
  /// With hadamard16: bit k set negates element k of each run of 16 before the
  /// transform, the random sign diagonal D of a randomized Hadamard transform
  /// y = H (D x) (numerics.md §2.6; kTeNvfp4WgradSigns is TransformerEngine's
  /// NVFP4 wgrad vector). 0: no signs (Primus-Turbo's MXFP4 transform).
  uint16_t hadamard16_signs = 0;
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
  /// Per-tensor FP32 scales (fp8_current, fp8_delayed): the scale of a whole group from its amax,
  /// or fixed_scale.
  bool fp32_per_tensor() const { return per_tensor() && scale_kind == ScaleKind::FP32; }
  /// The specs whole_tensor_scale applies to: per-tensor FP32 current scaling in TE's
  /// arithmetic (no fixed scale, no Hadamard transform).
  bool takes_whole_tensor_scale() const {
    return fp32_per_tensor() && fixed_scale == 0 && scale_convention == ScaleConvention::TE && !hadamard16;
  }
  /// The refusal of whole_tensor_scale on a spec that does not take it (one text for every check).
  static constexpr const char* kWholeTensorScaleRule =
      "a whole-tensor scale needs FP32 per-tensor current scaling (TE convention, no fixed scale, no Hadamard "
      "transform)";
  std::string describe() const;
  /// Field-wise equality (random stream included): two equal specs quantize
  /// a tensor to the same bytes.
  friend bool operator==(const QuantSpec& a, const QuantSpec& b) {
    return a.elem == b.elem && a.block_rows == b.block_rows && a.block_cols == b.block_cols &&
           a.scale_kind == b.scale_kind && a.rule == b.rule && a.round == b.round && a.pow2_scale == b.pow2_scale &&
           f32_bits(a.amax_epsilon) == f32_bits(b.amax_epsilon) && f32_bits(a.fixed_scale) == f32_bits(b.fixed_scale) &&
           a.whole_tensor_scale == b.whole_tensor_scale &&
           a.scale_convention == b.scale_convention && a.hp_dtype == b.hp_dtype &&
           a.hadamard16 == b.hadamard16 && a.hadamard16_signs == b.hadamard16_signs && a.sr.seed == b.sr.seed && a.sr.stream == b.sr.stream &&
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
/// The scale convention of an FP32-scaled spec (not delayed scaling). A torchao
/// convention also turns pow2_scale off (torchao's default; fp8_block's TE
/// default of on is dropped) and hp_dtype back to FP32. With the torchao
/// conventions set_amax_epsilon is hp_value_lb (Torchao, TorchaoCuda) or
/// refused (TorchaoTraining: torchao's EPS = 1e-12 is fixed), set_pow2_scale(on)
/// is refused for Torchao / TorchaoCuda (Float8Tensor has no such option).
/// Throws std::invalid_argument naming `what`.
void set_scale_convention(QuantSpec& s, ScaleConvention c, const std::string& what);
/// hp_dtype of a Torchao / TorchaoCuda spec: FP32, BF16 or FP16; throws
/// std::invalid_argument naming `what` for another format or convention.
void set_hp_dtype(QuantSpec& s, Format hp, const std::string& what);
/// torchao's Float8Tensor (conventions Torchao / TorchaoCuda) computes its scale
/// in the dtype of the tensor it was given: for a float16 or bfloat16 input and
/// a spec whose hp_dtype is still FP32 (not set), the spec to quantize it with
/// takes the input's dtype. Other specs and inputs are returned unchanged.
QuantSpec spec_for_input(QuantSpec s, Format input_dtype);
/// The spec of rows [m0, m0 + rows) of an [M, C] tensor quantized on their own (a group of a
/// grouped columnwise wgrad operand): stochastic rounding draws the words of the elements'
/// indices in the whole tensor, sr_index_base + m0 * C (docs/numerics.md §2.5); an empty slice
/// keeps the spec. The one rule of the emulator, the GPU backend and the C interface.
inline QuantSpec row_slice_spec(QuantSpec s, uint64_t m0, uint64_t rows, uint64_t C) {
  if (rows > 0) s.sr_index_base += m0 * C;
  return s;
}
/// Current scaling of a per-tensor FP32-scaled spec (docs/numerics.md §3.3): s with the one
/// scale (fixed_scale) of a tensor whose amax is given, current_scale(elem max, amax,
/// amax_epsilon, pow2_scale); one scale for every group of the tensor. nullopt when that scale
/// is NaN (a NaN amax): callers refuse in their own words (a fixed_scale of 0 would silently
/// mean per-group scales). Throws std::invalid_argument for a spec that is not per-tensor FP32.
std::optional<QuantSpec> with_current_scale(QuantSpec s, float amax);
/// Whether check_hp_values has anything to check for an input of `input_dtype`: a torchao
/// Float8Tensor spec with a 16-bit hp_dtype other than the input's own dtype.
bool needs_hp_value_check(const QuantSpec& s, Format input_dtype);
/// Refuses x (n float32 values) when s is a torchao Float8Tensor spec with a
/// 16-bit hp_dtype and a non-NaN value of x is not a value of that dtype
/// (torchao was given a tensor of it), naming the first such value, its flat
/// index and `op`. Other specs take any x.
void check_hp_values(const QuantSpec& s, const float* x, size_t n, const std::string& op);

/// Parse enums from their documented lower-case names ("floor", "rceil",
/// "even", "ceil"; "rne", "rz", "sr"). Throw std::invalid_argument.
ScaleRule scale_rule_from_name(std::string_view);
RoundMode round_mode_from_name(std::string_view);
/// "te", "torchao", "torchao_cuda", "torchao_training" ('-' for '_' accepted).
ScaleConvention scale_convention_from_name(std::string_view);
const char* name_of(ScaleConvention);
/// True for the torchao conventions (every one but TE).
inline bool is_torchao(ScaleConvention c) { return c != ScaleConvention::TE; }
const char* name_of(ScaleRule);
const char* name_of(RoundMode);
const char* name_of(ScaleKind);

}  // namespace mxsim
