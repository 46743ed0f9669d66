// Per-linear numerics recipes of the training simulator, as types.
//
// Each recipe says how the three GEMMs of a linear quantize their operands
// (training-mechanics.md §1-§2):
//   fprop  y  = x . W^T     x along K (Axis::Cols), W rowwise / 2-D tiles
//   dgrad  dx = dy . W      dy along N (Axis::Cols), W columnwise / 2-D tiles
//   wgrad  dW = dy^T . x    dy and x along M (Axis::Rows), per expert
// and how the weight gradient reaches main_grad (§3): `fused_wgrad_accum`
// = the wgrad GEMM accumulates into FP32 main_grad from its FP32 accumulator
// (Primus PR #995: BF16 and FP8 tensorwise); otherwise the GEMM writes BF16
// and main_grad = fl32(main_grad + bf16(dW_mb)) (MXFP4, MXFP8, FP8 block,
// FP8 delayed, as Primus's unfused bridge).
//
// Eligibility for weight de-oscillation is a property of the recipe *type*:
// deosc_eligible_v<R> is true only for Mxfp4Recipe (the weight is quantized
// to MXFP4 in fprop). Nothing looks at cached buffers (§6 FP8-vs-FP4 bug).
#pragma once
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "mxsim/delayed_scaling.hpp"
#include "mxsim/gemm_plan.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/sim/config.hpp"

namespace mxsim::sim {

/// Operand specs of one linear. For Bf16Recipe nothing is quantized.
struct OperandSpecs {
  QuantSpec x_fprop, w, dy_dgrad, dy_wgrad, x_wgrad;
};

struct Bf16Recipe {
  static constexpr const char* name = "bf16";
  static constexpr bool quantized = false, fused_wgrad_accum = true, transposed_cache_allowed = true;
};
struct Mxfp4Recipe {
  static constexpr const char* name = "mxfp4";
  static constexpr bool quantized = true, fused_wgrad_accum = false, transposed_cache_allowed = true;
  OperandSpecs specs;
};
struct Mxfp8Recipe {
  static constexpr const char* name = "mxfp8";
  static constexpr bool quantized = true, fused_wgrad_accum = false, transposed_cache_allowed = true;
  OperandSpecs specs;
};
struct Fp8CurrentRecipe {
  static constexpr const char* name = "fp8_current";
  /// Current scaling: transposed cache never allowed (Primus PR #891).
  static constexpr bool quantized = true, fused_wgrad_accum = true, transposed_cache_allowed = false;
  OperandSpecs specs;
};
struct Fp8DelayedRecipe {
  static constexpr const char* name = "fp8_delayed";
  static constexpr bool quantized = true, fused_wgrad_accum = false, transposed_cache_allowed = true;
  OperandSpecs specs;
  int history = 16;  ///< amax history length (TE amax_history_len)
  int margin = 0;    ///< scale = fp8_max / amax / 2^margin (TE margin, an integer)
};
struct Fp8BlockRecipe {
  static constexpr const char* name = "fp8_block";
  static constexpr bool quantized = true, fused_wgrad_accum = false, transposed_cache_allowed = true;
  OperandSpecs specs;
};

/// NVIDIA's NVFP4 training recipe (TransformerEngine `NVFP4BlockScaling`; arXiv 2509.25149 §4):
/// E2M1 with a UE4M3 scale per 16 and an FP32 tensor scale; 16x16 tiles for W, 1x16 for x and dy;
/// the wgrad operands through the random Hadamard transform (TE's fixed sign vector); stochastic
/// rounding on the gradient dy. TE's GEMM accumulates dW into main_grad in its epilogue
/// (fuse_wgrad_accumulation: beta = 1), hence fused.
struct Nvfp4Recipe {
  static constexpr const char* name = "nvfp4";
  static constexpr bool quantized = true, fused_wgrad_accum = true, transposed_cache_allowed = true;
  OperandSpecs specs;
};

using Recipe =
    std::variant<Bf16Recipe, Mxfp4Recipe, Mxfp8Recipe, Fp8CurrentRecipe, Fp8DelayedRecipe, Fp8BlockRecipe, Nvfp4Recipe>;

/// The config names of the recipes (recipe.<layer> in the config), in
/// variant order: the `name` of each alternative.
inline constexpr auto kRecipeNames = []<size_t... I>(std::index_sequence<I...>) {
  return std::array<const char*, sizeof...(I)>{std::variant_alternative_t<I, Recipe>::name...};
}(std::make_index_sequence<std::variant_size_v<Recipe>>{});

/// Other names the config accepts for a recipe (recipe.<layer>), each standing for one: the
/// single-tensor spec (mxsim::named_spec) the recipe quantizes its forward operands with, where
/// the two vocabularies name one scheme differently (mxsim::kSpecAliases is the reverse). The
/// config then holds the recipe's own name, and so do the canonical text, the trace and the
/// checkpoint.
struct RecipeAlias {
  const char* alias;
  const char* recipe;
};
inline constexpr RecipeAlias kRecipeAliases[] = {{"fp8_tensor", "fp8_current"}};
/// The config name of `name`: itself for a recipe name (kRecipeNames), the recipe an alias stands
/// for, "" otherwise.
std::string canonical_recipe_name(std::string_view name);
/// Why `name` is no recipe: "expected one of NAMES (alias A = R), got 'NAME'", with a "did you
/// mean" for a near miss, or saying that NAME is a spec of one tensor (for mxsim quantize), not
/// a per-linear recipe.
std::string unknown_recipe_message(std::string_view name);

/// De-oscillation eligibility, decided by the recipe type only.
template <class R>
inline constexpr bool deosc_eligible_v = std::is_same_v<R, Mxfp4Recipe>;

inline bool deosc_eligible(const Recipe& r) {
  return std::visit([](const auto& x) { return deosc_eligible_v<std::decay_t<decltype(x)>>; }, r);
}
inline bool is_quantized(const Recipe& r) {
  return std::visit([](const auto& x) { return std::decay_t<decltype(x)>::quantized; }, r);
}
inline bool fused_wgrad_accum(const Recipe& r) {
  return std::visit([](const auto& x) { return std::decay_t<decltype(x)>::fused_wgrad_accum; }, r);
}
inline bool transposed_cache_allowed(const Recipe& r) {
  return std::visit([](const auto& x) { return std::decay_t<decltype(x)>::transposed_cache_allowed; }, r);
}
inline const char* recipe_name(const Recipe& r) {
  return std::visit([](const auto& x) { return std::decay_t<decltype(x)>::name; }, r);
}
/// Operand specs (throws std::logic_error for Bf16Recipe). The reference lives
/// in `r`; of a temporary recipe the specs come by value, so a reference bound
/// to the result stays valid (one into the temporary dangled: ASan caught a test
/// holding one). LinearRecipe's accessors below follow the same rule.
const OperandSpecs& operand_specs(const Recipe& r);
inline OperandSpecs operand_specs(const Recipe&& r) { return operand_specs(r); }

/// Build a recipe by config name (kRecipeNames, or an alias of kRecipeAliases); throws
/// std::invalid_argument with unknown_recipe_message for any other name.
Recipe make_recipe(const std::string& name, const RecipeConfig& rc);

/// Sets one recipe option of the config (the recipe.* keys of docs/simulator.md other than the
/// per-layer names: mxfp4_hadamard_wgrad, mxfp4_sr_grad, nvfp4_hadamard_wgrad, nvfp4_sr_grad,
/// fp8_amax_history, fp8_margin,
/// fp8_current_amax_epsilon, fp8_current_pow2_scale, fp8_block_amax_epsilon,
/// fp8_block_pow2_scale) from text, for callers outside the TOML config (the C interface's
/// linear recipes). Throws std::invalid_argument naming an unknown key or a bad value.
void set_recipe_option(RecipeConfig& rc, std::string_view key, std::string_view value);

/// A linear's recipe per GEMM (docs/simulator.md "Per-GEMM recipes"): fprop, dgrad and wgrad each
/// run as one named recipe runs that GEMM, quantizing both its operands by that recipe's specs
/// (bf16: the GEMM on BF16 operands). A uniform one (the three the same) is the named recipe.
///   fprop  x_fprop and W by specs(Fprop)
///   dgrad  dy_dgrad and W by specs(Dgrad): the fprop bytes when the two W specs agree (and the
///          dgrad recipe allows a cached copy), else W quantized afresh by the dgrad spec
///   wgrad  dy_wgrad and x_wgrad by specs(Wgrad), which also decides how dW reaches main_grad
/// De-oscillation eligibility follows fprop (the master snaps to the grid fprop quantizes W to).
/// fp8_delayed keeps one amax history per operand across a linear's GEMMs: it is all or none.
struct LinearRecipe {
  std::array<Recipe, 3> gemm;  ///< indexed by GemmForm

  LinearRecipe() = default;
  explicit LinearRecipe(const Recipe& r) : gemm{r, r, r} {}
  const Recipe& of(GemmForm g) const& { return gemm[size_t(g)]; }
  Recipe of(GemmForm g) const&& { return gemm[size_t(g)]; }
  bool quantized(GemmForm g) const;
  /// Whether any GEMM quantizes.
  bool quantized() const;
  bool uniform() const;
  /// Operand specs of GEMM g (throws std::logic_error when g runs in BF16).
  const OperandSpecs& specs(GemmForm g) const&;
  OperandSpecs specs(GemmForm g) const&& { return specs(g); }
  /// The GEMM whose quantization of W the trace's weight statistics, oscillation metrics, maps and
  /// watched elements follow: fprop when it quantizes, else dgrad; none when W is never quantized.
  std::optional<GemmForm> weight_gemm() const;
  bool weight_quantized() const { return weight_gemm().has_value(); }
  /// W's spec in weight_gemm() (throws std::logic_error when W is never quantized).
  const QuantSpec& weight_spec() const&;
  QuantSpec weight_spec() const&& { return weight_spec(); }
  /// Whether role r's operand has quantization statistics (the trace's quant/{w,x,dy}): W when
  /// weight_quantized(), X when fprop quantizes, Dy when dgrad does.
  bool records(Role r) const;
  /// Role r's spec where records(r): weight_spec(), fprop's x_fprop, dgrad's dy_dgrad (throws
  /// std::logic_error where r is not recorded).
  const QuantSpec& role_spec(Role r) const&;
  QuantSpec role_spec(Role r) const&& { return role_spec(r); }
  /// Whether role r is recorded with a two-level scale (NVFP4: UE4M3 block scales under an FP32
  /// tensor scale), so the trace has its quant/<r>/tensor_scale_inv.
  bool two_level_scale(Role r) const;
  bool fused_wgrad_accum() const;
  bool transposed_cache_allowed() const;
  bool deosc_eligible() const;
  /// Whether dgrad may take fprop's quantized W bytes (its cached copy): both GEMMs quantize W by
  /// one spec and dgrad's recipe allows a transposed cache (not under current scaling).
  bool dgrad_reuses_fprop_w() const;
};

/// The GEMM an activation operand feeds: x to fprop, dy to dgrad, the wgrad operands to wgrad.
constexpr GemmForm gemm_of(Operand o) {
  return o == Operand::X ? GemmForm::Fprop : o == Operand::Dy ? GemmForm::Dgrad : GemmForm::Wgrad;
}

/// The GEMM names of the config's per-GEMM keys (recipe.<layer>_<gemm>), in GemmForm order.
inline constexpr std::array<const char*, 3> kGemmNames = {"fprop", "dgrad", "wgrad"};

/// The name of a linear recipe: the named recipe's for a uniform one, else fprop's followed by
/// each other GEMM whose recipe differs, as ",<gemm>=<recipe>" ("mxfp4,wgrad=mxfp8",
/// "bf16,dgrad=mxfp4,wgrad=mxfp4"). The trace's layer attribute `recipe` spells it so (the
/// inspector, the C interface's recorder and its linear recipes (mxsim.torch modules) read it back
/// with parse_linear_recipe).
std::string linear_recipe_name(const LinearRecipe& r);

/// A layer's recipe from its name (a recipe or alias) and per-GEMM overrides (indexed by
/// GemmForm; "" = the layer's recipe). Throws std::invalid_argument naming `where` (e.g.
/// "recipe.fc1") for an unknown name or an fp8_delayed GEMM beside another recipe.
LinearRecipe make_linear_recipe(const std::string& name, const std::array<std::string, 3>& per_gemm,
                                const RecipeConfig& rc, std::string_view where);
/// make_linear_recipe from linear_recipe_name's spelling ("mxfp4", "mxfp4,wgrad=mxfp8"; a GEMM
/// named twice, an unknown GEMM or recipe, or a missing '=' is a std::invalid_argument).
LinearRecipe parse_linear_recipe(std::string_view text, const RecipeConfig& rc);

/// fp8_delayed's amax-history state of one operand role (W, X or Dy): a DelayedScaling of the
/// role's element format with the recipe's history and margin, TE's AmaxAlgo::Max; nullopt for
/// every other recipe. The simulator's weights and the C interface's modules build it here.
std::optional<DelayedScaling> delayed_scaling_of(const Recipe& r, Role role);

/// The MXFP4 forward weight grid (E2M1, 32x32 tiles, E8M0 EVEN, RNE): the
/// grid de-oscillation snaps to (training-mechanics.md §6 step 3).
QuantSpec mxfp4_weight_spec();

}  // namespace mxsim::sim
