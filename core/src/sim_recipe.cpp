// Recipes per linear (training-mechanics.md §1-§2).
#include <stdexcept>

#include "mxsim/sim/recipe.hpp"

namespace mxsim::sim {

QuantSpec mxfp4_weight_spec() {
  QuantSpec s = tensor_recipe("mxfp4_2d");  // E2M1, 32x32, E8M0 EVEN
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

Recipe make_recipe(const std::string& name, const RecipeConfig& rc) {
  if (name == "bf16") return Bf16Recipe{};
  if (name == "mxfp4") {
    Mxfp4Recipe r;
    QuantSpec a = tensor_recipe("mxfp4");  // 1x32 E8M0 EVEN
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
    QuantSpec a = tensor_recipe("mxfp8");
    a.rule = ScaleRule::Even;
    QuantSpec w = tensor_recipe("mxfp8_2d");
    w.rule = ScaleRule::Even;
    r.specs = {a, w, a, a, a};
    return r;
  }
  if (name == "fp8_current") {  // TENSORWISE HYBRID: E4M3 forward, E5M2 dy; eps 1e-12
    Fp8CurrentRecipe r;
    QuantSpec f = tensor_recipe("fp8_tensor");
    f.amax_epsilon = 1e-12f;
    QuantSpec b = tensor_recipe("fp8_tensor_e5m2");
    b.amax_epsilon = 1e-12f;
    r.specs = {f, f, b, b, f};
    return r;
  }
  if (name == "fp8_delayed") {  // per-tensor, scale from the amax history (set per use)
    Fp8DelayedRecipe r;
    QuantSpec f = tensor_recipe("fp8_tensor");
    QuantSpec b = tensor_recipe("fp8_tensor_e5m2");
    r.specs = {f, f, b, b, f};
    r.history = rc.fp8_amax_history;
    r.margin = rc.fp8_margin;
    return r;
  }
  if (name == "fp8_block") {  // BLOCKWISE: 1x128 activations/gradients, 128x128 W, eps 1e-4
    Fp8BlockRecipe r;
    QuantSpec a = tensor_recipe("fp8_block");
    a.amax_epsilon = 1e-4f;
    a.pow2_scale = false;
    QuantSpec w = tensor_recipe("fp8_block2d");
    w.amax_epsilon = 1e-4f;
    w.pow2_scale = false;
    r.specs = {a, w, a, a, a};
    return r;
  }
  throw std::invalid_argument("unknown recipe '" + name +
                              "' (expected bf16, mxfp4, mxfp8, fp8_current, fp8_delayed, fp8_block)");
}

}  // namespace mxsim::sim
