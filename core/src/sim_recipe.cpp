// Recipes per linear (training-mechanics.md §1-§2). A recipe picks a spec
// (quant_spec.hpp: how one tensor is quantized) for each operand of the
// linear's three GEMMs; it starts from a named spec and states every change
// it makes to it (e.g. the mxfp8 recipe takes spec mxfp8, TransformerEngine's
// RCEIL, with Primus's EVEN rule).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "mxsim/names.hpp"
#include "mxsim/spec_args.hpp"
#include "mxsim/sim/recipe.hpp"

namespace mxsim::sim {

QuantSpec mxfp4_weight_spec() {
  QuantSpec s = named_spec("mxfp4_2d");  // E2M1, 32x32, E8M0 EVEN
  s.rule = ScaleRule::Even;
  s.round = RoundMode::RNE;
  return s;
}

const OperandSpecs& operand_specs(const Recipe& r) {
  const OperandSpecs* p = std::visit(
      [](const auto& x) -> const OperandSpecs* {
        if constexpr (requires { x.specs; }) return &x.specs;
        else return nullptr;
      },
      r);
  if (!p) throw std::logic_error("operand_specs: a bf16 recipe quantizes nothing");
  return *p;
}

Recipe make_recipe(const std::string& given, const RecipeConfig& rc) {
  const std::string name = canonical_recipe_name(given);
  if (name == "bf16") return Bf16Recipe{};
  if (name == "mxfp4") {
    Mxfp4Recipe r;
    QuantSpec a = named_spec("mxfp4");  // 1x32 E8M0 EVEN
    a.rule = ScaleRule::Even;
    r.specs.x_fprop = a;
    r.specs.w = mxfp4_weight_spec();
    r.specs.dy_dgrad = a;
    if (rc.mxfp4_sr_grad) r.specs.dy_dgrad.round = RoundMode::Stochastic;
    r.specs.dy_wgrad = r.specs.dy_dgrad;
    r.specs.dy_wgrad.hadamard16 = rc.mxfp4_hadamard_wgrad;
    r.specs.x_wgrad = a;
    r.specs.x_wgrad.hadamard16 = rc.mxfp4_hadamard_wgrad;
    return r;
  }
  if (name == "mxfp8") {  // Primus MX_BLOCKWISE: 1x32 / 32x32, E4M3, EVEN, no RHT or SR
    Mxfp8Recipe r;
    QuantSpec a = named_spec("mxfp8");
    a.rule = ScaleRule::Even;
    QuantSpec w = named_spec("mxfp8_2d");
    w.rule = ScaleRule::Even;
    r.specs = {a, w, a, a, a};
    return r;
  }
  if (name == "fp8_current") {  // TENSORWISE HYBRID: E4M3 forward, E5M2 dy; eps 1e-12 by default
    Fp8CurrentRecipe r;
    QuantSpec f = named_spec("fp8_tensor");
    QuantSpec b = named_spec("fp8_tensor_e5m2");
    for (QuantSpec* s : {&f, &b}) {
      set_amax_epsilon(*s, rc.fp8_current_amax_epsilon, "recipe.fp8_current_amax_epsilon");
      set_pow2_scale(*s, rc.fp8_current_pow2_scale, "recipe.fp8_current_pow2_scale");
    }
    r.specs = {f, f, b, b, f};
    return r;
  }
  if (name == "fp8_delayed") {  // per-tensor, scale from the amax history (set per use)
    Fp8DelayedRecipe r;
    QuantSpec f = named_spec("fp8_tensor");
    QuantSpec b = named_spec("fp8_tensor_e5m2");
    r.specs = {f, f, b, b, f};
    r.history = rc.fp8_amax_history;
    r.margin = rc.fp8_margin;
    return r;
  }
  if (name == "fp8_block") {  // BLOCKWISE: 1x128 activations/gradients, 128x128 W; eps 1e-4, general scales by default
    Fp8BlockRecipe r;
    QuantSpec a = named_spec("fp8_block");
    QuantSpec w = named_spec("fp8_block2d");
    for (QuantSpec* s : {&a, &w}) {
      set_amax_epsilon(*s, rc.fp8_block_amax_epsilon, "recipe.fp8_block_amax_epsilon");
      set_pow2_scale(*s, rc.fp8_block_pow2_scale, "recipe.fp8_block_pow2_scale");
    }
    r.specs = {a, w, a, a, a};
    return r;
  }
  if (name == "nvfp4") {  // NVIDIA's NVFP4 recipe: 1x16 / 16x16, RHT on the wgrad operands, SR on dy
    Nvfp4Recipe r;
    const QuantSpec a = named_spec("nvfp4");
    r.specs.x_fprop = a;
    r.specs.w = named_spec("nvfp4_2d");
    r.specs.dy_dgrad = a;
    if (rc.nvfp4_sr_grad) r.specs.dy_dgrad.round = RoundMode::Stochastic;
    r.specs.dy_wgrad = r.specs.dy_dgrad;
    r.specs.x_wgrad = a;
    for (QuantSpec* s : {&r.specs.dy_wgrad, &r.specs.x_wgrad}) {
      s->hadamard16 = rc.nvfp4_hadamard_wgrad;
      s->hadamard16_signs = rc.nvfp4_hadamard_wgrad ? kTeNvfp4WgradSigns : 0;
    }
    return r;
  }
  throw std::invalid_argument("unknown recipe: " + unknown_recipe_message(given));
}

void set_recipe_option(RecipeConfig& rc, std::string_view key, std::string_view v) {
  auto integer = [&](int lo, int hi) {
    const double d = double_arg(key, v);
    if (!(d >= lo && d <= hi) || d != std::floor(d))  // range first: int(d) of 1e30 or NaN is undefined
      throw std::invalid_argument("recipe option " + std::string(key) + " = '" + std::string(v) +
                                  "' is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return int(d);
  };
  auto epsilon = [&] {
    const double d = double_arg(key, v);
    if (!(d >= 0) || !std::isfinite(d))
      throw std::invalid_argument("recipe option " + std::string(key) + " = '" + std::string(v) + "' must be finite and >= 0");
    return float(d);
  };
  if (key == "mxfp4_hadamard_wgrad") rc.mxfp4_hadamard_wgrad = bool_arg(key, v);
  else if (key == "mxfp4_sr_grad") rc.mxfp4_sr_grad = bool_arg(key, v);
  else if (key == "nvfp4_hadamard_wgrad") rc.nvfp4_hadamard_wgrad = bool_arg(key, v);
  else if (key == "nvfp4_sr_grad") rc.nvfp4_sr_grad = bool_arg(key, v);
  else if (key == "fp8_amax_history") rc.fp8_amax_history = integer(1, kMaxAmaxHistory);
  else if (key == "fp8_margin") rc.fp8_margin = integer(0, 1 << 20);
  else if (key == "fp8_current_amax_epsilon") rc.fp8_current_amax_epsilon = epsilon();
  else if (key == "fp8_current_pow2_scale") rc.fp8_current_pow2_scale = bool_arg(key, v);
  else if (key == "fp8_block_amax_epsilon") rc.fp8_block_amax_epsilon = epsilon();
  else if (key == "fp8_block_pow2_scale") rc.fp8_block_pow2_scale = bool_arg(key, v);
  else
    throw std::invalid_argument("unknown recipe option '" + std::string(key) +
                                "' (mxfp4_hadamard_wgrad, mxfp4_sr_grad, nvfp4_hadamard_wgrad, nvfp4_sr_grad, fp8_amax_history, fp8_margin, "
                                "fp8_current_amax_epsilon, fp8_current_pow2_scale, fp8_block_amax_epsilon, "
                                "fp8_block_pow2_scale)");
}

bool LinearRecipe::quantized(GemmForm g) const { return is_quantized(of(g)); }
bool LinearRecipe::quantized() const {
  return std::any_of(gemm.begin(), gemm.end(), [](const Recipe& r) { return is_quantized(r); });
}
bool LinearRecipe::uniform() const {
  return gemm[1].index() == gemm[0].index() && gemm[2].index() == gemm[0].index();
}
const OperandSpecs& LinearRecipe::specs(GemmForm g) const& { return operand_specs(of(g)); }
std::optional<GemmForm> LinearRecipe::weight_gemm() const {
  for (GemmForm g : {GemmForm::Fprop, GemmForm::Dgrad})
    if (quantized(g)) return g;
  return std::nullopt;
}
const QuantSpec& LinearRecipe::weight_spec() const& {
  const std::optional<GemmForm> g = weight_gemm();
  if (!g) throw std::logic_error("LinearRecipe::weight_spec: neither fprop nor dgrad quantizes W");
  return specs(*g).w;
}
bool LinearRecipe::records(Role r) const {
  return r == Role::W ? weight_quantized() : quantized(r == Role::X ? GemmForm::Fprop : GemmForm::Dgrad);
}
const QuantSpec& LinearRecipe::role_spec(Role r) const& {
  if (!records(r)) throw std::logic_error(std::string("LinearRecipe::role_spec: ") + name_of(r) + " is not quantized");
  return r == Role::W ? weight_spec() : r == Role::X ? specs(GemmForm::Fprop).x_fprop : specs(GemmForm::Dgrad).dy_dgrad;
}
bool LinearRecipe::two_level_scale(Role r) const { return records(r) && has_tensor_scale(role_spec(r).scale_kind); }
bool LinearRecipe::fused_wgrad_accum() const { return sim::fused_wgrad_accum(of(GemmForm::Wgrad)); }
bool LinearRecipe::transposed_cache_allowed() const { return sim::transposed_cache_allowed(of(GemmForm::Dgrad)); }
bool LinearRecipe::deosc_eligible() const { return sim::deosc_eligible(of(GemmForm::Fprop)); }
bool LinearRecipe::dgrad_reuses_fprop_w() const {
  return quantized(GemmForm::Fprop) && quantized(GemmForm::Dgrad) && transposed_cache_allowed() &&
         specs(GemmForm::Dgrad).w == specs(GemmForm::Fprop).w;
}

LinearRecipe RecipeConfig::linear(Layer l) const {
  return make_linear_recipe(of(l), per_gemm[size_t(l)], *this, std::string("recipe.") + name_of(l));
}

std::string linear_recipe_name(const LinearRecipe& r) {
  std::string s = recipe_name(r.of(GemmForm::Fprop));
  for (GemmForm g : {GemmForm::Dgrad, GemmForm::Wgrad})
    if (r.of(g).index() != r.of(GemmForm::Fprop).index())
      s += std::string(",") + kGemmNames[size_t(g)] + "=" + recipe_name(r.of(g));
  return s;
}

LinearRecipe make_linear_recipe(const std::string& name, const std::array<std::string, 3>& per_gemm,
                                const RecipeConfig& rc, std::string_view where) {
  auto named = [&](const std::string& n, const std::string& key) {
    try {
      return make_recipe(n, rc);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(key + ": " + e.what());
    }
  };
  LinearRecipe r(named(name, std::string(where)));
  for (size_t g = 0; g < 3; ++g)
    if (!per_gemm[g].empty()) r.gemm[g] = named(per_gemm[g], std::string(where) + "_" + kGemmNames[g]);
  const auto delayed = [](const Recipe& x) { return std::holds_alternative<Fp8DelayedRecipe>(x); };
  const size_t n = size_t(std::count_if(r.gemm.begin(), r.gemm.end(), delayed));
  if (n != 0 && n != 3)
    throw std::invalid_argument(std::string(where) + ": " + linear_recipe_name(r) +
                                ": fp8_delayed keeps one amax history per operand across the linear's GEMMs, so it "
                                "is the recipe of all three GEMMs or of none");
  return r;
}

LinearRecipe parse_linear_recipe(std::string_view text, const RecipeConfig& rc) {
  std::array<std::string, 3> per{};
  const size_t comma = text.find(',');
  const std::string base(text.substr(0, comma));
  for (size_t at = comma; at != std::string_view::npos;) {
    const size_t next = text.find(',', at + 1);
    const std::string_view item = text.substr(at + 1, next == std::string_view::npos ? next : next - at - 1);
    const size_t eq = item.find('=');
    const std::string_view gemm = item.substr(0, eq);
    const auto it = std::find(kGemmNames.begin(), kGemmNames.end(), gemm);
    if (eq == std::string_view::npos || it == kGemmNames.end() || !per[size_t(it - kGemmNames.begin())].empty())
      throw std::invalid_argument("linear recipe '" + std::string(text) + "': '" + std::string(item) +
                                  "' is not one <gemm>=<recipe> with gemm fprop, dgrad or wgrad, each at most once");
    per[size_t(it - kGemmNames.begin())] = std::string(item.substr(eq + 1));
    at = next;
  }
  return make_linear_recipe(base, per, rc, "linear recipe '" + std::string(text) + "'");
}

std::optional<DelayedScaling> delayed_scaling_of(const Recipe& r, Role role) {
  const auto* d = std::get_if<Fp8DelayedRecipe>(&r);
  if (!d) return std::nullopt;
  const Format fmt = role == Role::W ? d->specs.w.elem : role == Role::X ? d->specs.x_fprop.elem : d->specs.dy_dgrad.elem;
  return DelayedScaling(fmt, d->history, d->margin, AmaxAlgo::Max);
}

std::string canonical_recipe_name(std::string_view name) {
  for (const char* n : kRecipeNames)
    if (name == n) return n;
  for (const RecipeAlias& a : kRecipeAliases)
    if (name == a.alias) return a.recipe;
  return "";
}

std::string unknown_recipe_message(std::string_view name) {
  std::vector<std::string> words(kRecipeNames.begin(), kRecipeNames.end());
  std::string known;
  for (const auto& w : words) known += (known.empty() ? "" : ", ") + w;
  for (const RecipeAlias& a : kRecipeAliases) {
    words.emplace_back(a.alias);
    known += std::string("; alias ") + a.alias + " = " + a.recipe;
  }
  std::string m = "expected one of " + known + ", got '" + std::string(name) + "'";
  const std::vector<std::string> specs = named_spec_names();
  if (std::find(specs.begin(), specs.end(), name) != specs.end())
    return m + ": that is a spec of one tensor (mxsim quantize --recipe), not a per-linear training recipe";
  return m + did_you_mean(name, words);
}

}  // namespace mxsim::sim
