// Promises of docs/simulator.md and docs/numerics.md §6 that no other test pins, each with
// values derived by hand from the rule as the docs state it (transcendental constants are the
// FP32 roundings of 200-bit evaluations, each noted with the exact value's distance from it in
// ulps, so each lies well away from an FP32 rounding boundary):
//   - softmax on unequal logits; gelu and silu (and their gradients) away from x = 0;
//   - the LR schedule: linear warm-up, then cosine from lr to min_lr;
//   - the simulator recipes' operand specs: scale rules (read off bytes that tell the rules
//     apart), the amax epsilons (1e-12 per tensor, 1e-4 per block) and general FP32 block scales;
//   - current scaling: dgrad's W re-derived from the current BF16 weight, never a cached copy;
//   - divergence: no optimizer update of the diverging step reaches the weights;
//   - with recipe.mxfp4_sr_grad on, the stochastic-rounding words and the data order are keyed by
//     the global step and the epoch: a run resumed across an epoch boundary is bit-identical.
//   - the oscillation metrics over a hand sequence of steps.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "mxsim/activation.hpp"
#include "mxsim/backend.hpp"
#include "mxsim/backend_profile.hpp"
#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/hd/math.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/model.hpp"
#include "mxsim/sim/recipe.hpp"
#include "mxsim/sim/trainer.hpp"

using namespace mxsim;
using namespace mxsim::sim;

namespace {

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

Tensor row(Backend& be, std::vector<float> v) {
  Tensor t = be.alloc(DType::f32, {1, v.size()});
  be.upload(t, std::span<const float>(v));
  return t;
}

Config tiny(std::vector<std::string> extra = {}) {
  std::vector<std::string> s = {"run.epochs=1",           "run.max_steps=12",        "run.train_limit=2048",
                                "run.test_limit=500",     "model.d_model=32",        "model.d_ff=64",
                                "model.experts=4",        "model.top_k=2",           "batch.global_batch=128",
                                "batch.num_microbatches=4", "optim.warmup_steps=2",  "deosc.period=3",
                                "deosc.start_step=2",     "deosc.ratio=1.0",         "trace.snapshot_steps=[]"};
  s.insert(s.end(), extra.begin(), extra.end());
  return parse_config(default_config_text(), s, "tiny");
}

std::string tmp(const std::string& n) {
  return (std::filesystem::temp_directory_path() / ("mxsim_simp_" + std::to_string(::getpid()) + "_" + n)).string();
}

}  // namespace

// softmax_rows (numerics §6): mx = max l; e_j = exp_f32(l_j - mx); s = sum e_j (j ascending,
// FP32); p_j = fl32(e_j / s). Logits {3, 2, 4, 2}: mx = 4, differences {-1, -2, 0, -2} (exact).
// exp_f32(-1) = fl32(0.36787944117144232..) = 0x1.78b564p-2 (0.31 ulp from it),
// exp_f32(-2) = fl32(0.13533528323661269..) = 0x1.152aaap-3 (0.12 ulp); then FP32:
// s = ((e1 + e2) + 1) + e2 = 0x1.a37804p+0, p = {0x1.cbcea4p-3, 0x1.524ea6p-4, 0x1.3878acp-1,
// 0x1.524ea6p-4}. (Constants: 200-bit evaluation rounded to FP32; distance from it in ulps.)
TEST(SimPromises, SoftmaxOnUnequalLogits) {
  auto be = emu::make_emu_backend();
  Tensor p = be->alloc(DType::f32, {1, 4});
  be->softmax_rows(row(*be, {3, 2, 4, 2}), p);
  const std::vector<float> got = be->download<float>(p);
  const std::vector<float> want = {0x1.cbcea4p-3f, 0x1.524ea6p-4f, 0x1.3878acp-1f, 0x1.524ea6p-4f};
  ASSERT_EQ(got.size(), 4u);
  for (size_t j = 0; j < 4; ++j) EXPECT_EQ(bits(got[j]), bits(want[j])) << j << ": " << got[j];
  // The same values shifted by a constant (mx subtracted first): the same bits.
  be->softmax_rows(row(*be, {103, 102, 104, 102}), p);
  EXPECT_EQ(be->download<float>(p), got);
  // Logits {4, 3, 3, 1}, where the summation order shows: e = {1, e1, e1, exp_f32(-3)},
  // exp(-3) = fl32(0.04978706836786394..) = 0x1.97db0cp-5 (0.40 ulp); ((1 + e1) + e1) + e3 =
  // 0x1.c91988p+0 (the reverse order gives 0x1.c9198ap+0); p = {0x1.1ebf3ep-1, 0x1.a5f412p-3,
  // 0x1.a5f412p-3, 0x1.c8d768p-6} (p_j = e_j * fl32(1 / s) would differ in the last three).
  be->softmax_rows(row(*be, {4, 3, 3, 1}), p);
  const std::vector<float> got2 = be->download<float>(p);
  const std::vector<float> want2 = {0x1.1ebf3ep-1f, 0x1.a5f412p-3f, 0x1.a5f412p-3f, 0x1.c8d768p-6f};
  for (size_t j = 0; j < 4; ++j) EXPECT_EQ(bits(got2[j]), bits(want2[j])) << j << ": " << std::hexfloat << got2[j];
}

// activation / activation_grad (numerics §6), FP32 in the code's order, then bf16 (RNE):
//   gelu(x) = (0.5 x)(1 + erf_f32(x c)), c = 0.70710678f = 0x1.6a09e6p-1;
//   gelu'(x) = 0.5 (1 + erf_f32(x c)) + x (k exp_f32((-0.5 x) x)), k = 0.39894228f;
//   silu(x) = x / (1 + exp_f32(-x)); silu'(x) = s (1 + x (1 - s)), s = 1 / (1 + exp_f32(-x)).
// Correctly rounded FP32 constants (200-bit evaluation; distance of the exact value from the
// FP32 one, in ulps, so each is far from a rounding boundary):
//   erf(c) = 0x1.5d897ap-1 (0.07)   erf(2c) = 0x1.e8b43p-1 (0.18)   erf(fl32(3c)) = 0x1.fe9e22p-1 (0.08)
//   erf(fl32(0.75c)) = 0x1.17efp-1 (0.43)
//   exp(-0.5) = 0x1.368b3p-1 (0.11)  exp(-2) = 0x1.152aaap-3 (0.12)  exp(-4.5) = 0x1.6c0504p-7 (0.21)
//   exp(-0.28125) = 0x1.827a56p-1 (0.05)  exp(-1) = 0x1.78b564p-2 (0.31)  exp(2) = 0x1.d8e64cp+2 (0.22)
//   exp(-3) = 0x1.97db0cp-5 (0.40)  exp(0.75) = 0x1.0ef9dcp+1 (0.36)
// FP32 results -> bf16, at x = 1, -2, 3, -0.75:
//   gelu   0x1.aec4bcp-1 -> 0x1.aep-1;  -0x1.74bdp-5 -> -0x1.74p-5;  0x1.7f7b4cp+1 -> 0x1.8p+1;
//          -0x1.5c198p-3 -> -0x1.5cp-3
//   gelu'  0x1.15542ap+0 -> 0x1.16p+0;  -0x1.5d1c04p-4 -> -0x1.5ep-4; 0x1.030edep+0 -> 0x1.04p+0;
//          0x1.95fp-11 -> 0x1.96p-11 (cdf and x pdf nearly cancel)
//   silu   0x1.764d5p-1 -> 0x1.76p-1;   -0x1.e84152p-3 -> -0x1.e8p-3; 0x1.6dc9dap+1 -> 0x1.6ep+1;
//          -0x1.ecc81p-3 -> -0x1.ecp-3
//   silu'  0x1.daf7a2p-1 -> 0x1.dap-1;  -0x1.73da3p-4 -> -0x1.74p-4;  0x1.168dfep+0 -> 0x1.16p+0;
//          0x1.425af4p-3 -> 0x1.42p-3
// (da = 1, so the gradient is bf16(act'(u)).)
TEST(SimPromises, GeluAndSiluAwayFromZero) {
  auto be = emu::make_emu_backend();
  struct Case {
    Activation k;
    std::vector<float> act, grad;
  };
  const std::vector<float> u = {1.0f, -2.0f, 3.0f, -0.75f};
  const Case cases[] = {
      {Activation::Gelu, {0x1.aep-1f, -0x1.74p-5f, 0x1.8p+1f, -0x1.5cp-3f}, {0x1.16p+0f, -0x1.5ep-4f, 0x1.04p+0f, 0x1.96p-11f}},
      {Activation::Silu, {0x1.76p-1f, -0x1.e8p-3f, 0x1.6ep+1f, -0x1.ecp-3f}, {0x1.dap-1f, -0x1.74p-4f, 0x1.16p+0f, 0x1.42p-3f}},
  };
  for (const Case& c : cases) {
    Tensor a = be->alloc(DType::f32, {1, u.size()}), du = be->alloc(DType::f32, {1, u.size()});
    be->activation(c.k, row(*be, u), a);
    be->activation_grad(c.k, row(*be, u), row(*be, std::vector<float>(u.size(), 1.0f)), du);
    const auto av = be->download<float>(a), dv = be->download<float>(du);
    for (size_t i = 0; i < u.size(); ++i) {
      EXPECT_EQ(bits(av[i]), bits(c.act[i])) << name_of(c.k) << "(" << u[i] << ") = " << std::hexfloat << av[i];
      EXPECT_EQ(bits(dv[i]), bits(c.grad[i])) << name_of(c.k) << "'(" << u[i] << ") = " << std::hexfloat << dv[i];
    }
  }
  // A sweep over x = j / 64, |x| <= 8, against the formulas above written out here with
  // exp_f32 / erf_f32 (correctly rounded on every FP32 input: test_hd_math, hd_math_exhaustive)
  // and RNE to BF16. The hand values above pin the constants; this pins the composition where
  // the BF16 output is near a rounding boundary.
  std::vector<float> xs, ones;
  for (int j = -512; j <= 512; ++j) xs.push_back(float(j) / 64.0f);
  ones.assign(xs.size(), 1.0f);
  auto bf = [](float v) { return std::bit_cast<float>(round_bf16_code(bits(v)) << 16); };
  for (Activation k : {Activation::Gelu, Activation::Silu}) {
    Tensor a = be->alloc(DType::f32, {1, xs.size()}), du = be->alloc(DType::f32, {1, xs.size()});
    be->activation(k, row(*be, xs), a);
    be->activation_grad(k, row(*be, xs), row(*be, ones), du);
    const auto av = be->download<float>(a), dv = be->download<float>(du);
    for (size_t i = 0; i < xs.size(); ++i) {
      const float x = xs[i];
      float act, grad;
      if (k == Activation::Gelu) {
        const float one_plus_erf = 1.0f + erf_f32(x * 0.70710678f);
        act = (0.5f * x) * one_plus_erf;
        grad = 0.5f * one_plus_erf + x * (0.39894228f * exp_f32((-0.5f * x) * x));
      } else {
        const float d = 1.0f + exp_f32(-x);
        act = x / d;
        const float s = 1.0f / d;
        grad = s * (1.0f + x * (1.0f - s));
      }
      ASSERT_EQ(bits(av[i]), bits(bf(act))) << name_of(k) << "(" << x << ")";
      ASSERT_EQ(bits(dv[i]), bits(bf(grad))) << name_of(k) << "'(" << x << ")";
    }
  }
}

// LR at step t of T (docs/simulator.md "Optimizer"): t <= W: lr * t / W; after it
// min_lr + (lr - min_lr) (1 + cos(pi (t - W) / (T - W))) / 2, reaching min_lr at T and staying
// there. lr 2, min_lr 0.5, W 4, T 12: t = 1, 3, 4 -> 0.5, 1.5, 2 (exact); t = 8 (half way,
// cos = 0) -> 1.25; t = 12 and 13 -> 0.5; t = 6 and 10 (cos = +-sqrt(2)/2): 0.5 + 0.75 (1 +-
// 0.70710678118654752..) = 1.78033008588991064.. and 0.71966991411008935.., whose FP32 values
// are 0x1.c7c3b6p+0 and 0x1.707894p-1 (0.20 and 0.40 ulp from them, so 0.30 and 0.10 ulp from
// a rounding boundary: far beyond an FP64 evaluation's error). No warm-up: t = 1 is already on
// the cosine, prog = 1 / T.
TEST(SimPromises, LrWarmUpThenCosineToMinLr) {
  const Config c = parse_config(default_config_text(), {"optim.lr=2", "optim.min_lr=0.5", "optim.warmup_steps=4"});
  const std::pair<int64_t, float> want[] = {{1, 0.5f},   {2, 1.0f},          {3, 1.5f},  {4, 2.0f},
                                            {6, 0x1.c7c3b6p+0f}, {8, 1.25f}, {10, 0x1.707894p-1f},
                                            {12, 0.5f},  {13, 0.5f}};
  for (auto [t, lr] : want) EXPECT_EQ(bits(lr_at(c, t, 12)), bits(lr)) << "t=" << t << " got " << lr_at(c, t, 12);
  const Config n = parse_config(default_config_text(), {"optim.lr=2", "optim.min_lr=0.5", "optim.warmup_steps=0"});
  EXPECT_EQ(bits(lr_at(n, 2, 4)), bits(1.25f));  // prog 2/4
  EXPECT_EQ(bits(lr_at(n, 4, 4)), bits(0.5f));
}

// ---- The simulator recipes' operand specs (docs/simulator.md "Recipes per linear").
namespace {
/// Scale bytes of three 1x32 blocks / 32x32 tiles with amax m * 2^emax for m = 1.125, m2, 1.96875
/// (numerics §3.1, as in QuantizePromises.NamedMxRecipeDefaultsTellTheScaleRulesApart): FLOOR
/// reads (127,127,127), EVEN (127,127,128), RCEIL (127,128,128), CEIL (128,128,128).
/// E2M1: emax 2, m2 1.625; E4M3: emax 8, m2 1.8125.
std::array<int, 3> rule_bytes(QuantSpec s) {
  s.hadamard16 = false;  // the rule is read off the amax of the values themselves
  s.round = RoundMode::RNE;
  const int emax = s.elem == Format::E2M1 ? 2 : 8;
  const float m2 = s.elem == Format::E2M1 ? 1.625f : 1.8125f;
  Tensor3f x = Tensor3f::from_shape({1, 32, 96});
  x.fill(0.0f);
  const float m[3] = {1.125f, m2, 1.96875f};
  for (int k = 0; k < 3; ++k) x(0, 0, size_t(32 * k)) = std::ldexp(m[k], emax);
  const QuantizedTensor q = emu::quantize(x, s);
  return {q.scale_bytes(0, 0, 0), q.scale_bytes(0, 0, 1), q.scale_bytes(0, 0, 2)};
}
constexpr std::array<int, 3> kEven{127, 127, 128};

/// scale_inv of the first block of an all-`v` tensor of shape {1, rows, cols} under s.
float first_scale_inv(const QuantSpec& s, size_t rows, size_t cols, float v) {
  Tensor3f x = Tensor3f::from_shape({1, rows, cols});
  x.fill(v);
  return emu::quantize(x, s).scale_inv(0, 0, 0);
}
}  // namespace

TEST(SimPromises, MxRecipesUseEvenOnEveryOperand) {
  // mxfp4: E2M1, 1x32 activations / gradients, 32x32 weight tiles, EVEN everywhere; Hadamard on
  // both wgrad operands by default; SR only on dy and only with mxfp4_sr_grad.
  RecipeConfig rc;
  const OperandSpecs m4 = operand_specs(make_recipe("mxfp4", rc));
  for (const QuantSpec* s : {&m4.x_fprop, &m4.w, &m4.dy_dgrad, &m4.dy_wgrad, &m4.x_wgrad}) {
    EXPECT_EQ(s->elem, Format::E2M1);
    EXPECT_EQ(s->block_cols, 32u);
    EXPECT_EQ(s->block_rows, s == &m4.w ? 32u : 1u);
    EXPECT_EQ(rule_bytes(*s), kEven);
    EXPECT_EQ(s->round, RoundMode::RNE);
  }
  EXPECT_TRUE(m4.dy_wgrad.hadamard16 && m4.x_wgrad.hadamard16);
  EXPECT_FALSE(m4.x_fprop.hadamard16 || m4.w.hadamard16 || m4.dy_dgrad.hadamard16);
  rc.mxfp4_sr_grad = true;
  const OperandSpecs sr = operand_specs(make_recipe("mxfp4", rc));
  EXPECT_EQ(sr.dy_dgrad.round, RoundMode::Stochastic);
  EXPECT_EQ(sr.dy_wgrad.round, RoundMode::Stochastic);
  EXPECT_EQ(sr.x_fprop.round, RoundMode::RNE);
  EXPECT_EQ(sr.x_wgrad.round, RoundMode::RNE);
  EXPECT_EQ(sr.w.round, RoundMode::RNE);
  // mxfp8: E4M3 with Primus's EVEN, not the named mxfp8 spec's RCEIL (which reads 127,128,128).
  const OperandSpecs m8 = operand_specs(make_recipe("mxfp8", {}));
  for (const QuantSpec* s : {&m8.x_fprop, &m8.w, &m8.dy_dgrad, &m8.dy_wgrad, &m8.x_wgrad}) {
    EXPECT_EQ(s->elem, Format::E4M3);
    EXPECT_EQ(s->block_rows, s == &m8.w ? 32u : 1u);
    EXPECT_EQ(rule_bytes(*s), kEven);
    EXPECT_FALSE(s->hadamard16);
    EXPECT_EQ(s->round, RoundMode::RNE);
  }
}

// Current scaling (numerics §3.3): a = max(amax, eps), scale = fl32(fp8_max / a), scale_inv =
// fl32(1 / scale). fp8_current: eps 1e-12 on every operand, E4M3 (448) forward and for x in
// wgrad, E5M2 (57344) for dy. A tensor of amax 1e-13 < eps takes eps. fp8_delayed: no epsilon
// (TE's delayed scaling has none), the same element formats.
TEST(SimPromises, Fp8CurrentAmaxEpsilonAndFormats) {
  const OperandSpecs c = operand_specs(make_recipe("fp8_current", {}));
  const OperandSpecs d = operand_specs(make_recipe("fp8_delayed", {}));
  const float a = 1e-13f, eps = 1e-12f;
  for (const QuantSpec* s : {&c.x_fprop, &c.w, &c.x_wgrad, &c.dy_dgrad, &c.dy_wgrad}) {
    const bool dy = s == &c.dy_dgrad || s == &c.dy_wgrad;
    EXPECT_EQ(s->elem, dy ? Format::E5M2 : Format::E4M3);
    EXPECT_EQ(s->scale_kind, ScaleKind::FP32);
    const float fmax = dy ? 57344.0f : 448.0f;
    EXPECT_EQ(bits(first_scale_inv(*s, 3, 40, a)), bits(1.0f / (fmax / eps))) << (dy ? "dy" : "x/w");
    EXPECT_NE(bits(1.0f / (fmax / eps)), bits(1.0f / (fmax / a)));  // the epsilon is visible
  }
  for (const QuantSpec* s : {&d.x_fprop, &d.w, &d.x_wgrad, &d.dy_dgrad, &d.dy_wgrad}) {
    const bool dy = s == &d.dy_dgrad || s == &d.dy_wgrad;
    EXPECT_EQ(s->elem, dy ? Format::E5M2 : Format::E4M3);
    EXPECT_EQ(bits(s->amax_epsilon), bits(0.0f));
  }
}

// fp8_block (Primus-Turbo BLOCKWISE): E4M3, 1x128 activations / gradients, 128x128 weights,
// eps 1e-4, general (not power-of-two) FP32 scales. Block amax 1e-6 < eps: scale_inv =
// fl32(1 / fl32(448 / 1e-4)); amax 3: fl32(1 / fl32(448 / 3)) (448 / 3 = 149.33..; a power-of-two
// scale would be 128).
TEST(SimPromises, Fp8BlockEpsilonAndGeneralScales) {
  const OperandSpecs b = operand_specs(make_recipe("fp8_block", {}));
  for (const QuantSpec* s : {&b.x_fprop, &b.w, &b.dy_dgrad, &b.dy_wgrad, &b.x_wgrad}) {
    const bool w = s == &b.w;
    EXPECT_EQ(s->elem, Format::E4M3);
    EXPECT_EQ(s->block_rows, w ? 128u : 1u);
    EXPECT_EQ(s->block_cols, 128u);
    const size_t rows = w ? 128 : 1;
    EXPECT_EQ(bits(first_scale_inv(*s, rows, 128, 1e-6f)), bits(1.0f / (448.0f / 1e-4f))) << (w ? "w" : "x/dy");
    EXPECT_EQ(bits(first_scale_inv(*s, rows, 128, 3.0f)), bits(1.0f / (448.0f / 3.0f))) << (w ? "w" : "x/dy");
  }
}

// Current scaling's dgrad W is re-derived from the weight at every use, never the cached fprop
// copy (Primus PR #891): after the weight changes (new version) the dgrad operand of a later
// micro-batch has the new weight's per-tensor scale, while the fprop cache still holds the old
// one. W = all 2, then all 3 (eps 1e-12 below both): scale_inv fl32(1 / fl32(448 / 2)) = 1/224,
// then fl32(1 / fl32(448 / 3)); 3 * fl32(448 / 3) = 447.99998.. rounds to E4M3 448 (code 0x7E).
// A recipe with a transposed cache (mxfp8) refuses the stale cache instead.
TEST(SimPromises, CurrentScalingDgradWeightReDerivedEachUse) {
  auto be = emu::make_emu_backend();
  Weight w;
  w.name = "fc1";
  w.G = 1;
  w.N = 32;
  w.K = 32;
  w.recipe = LinearRecipe(make_recipe("fp8_current", {}));
  Tensor3f two = Tensor3f::from_shape({1, 32, 32}), three = two;
  two.fill(2.0f);
  three.fill(3.0f);
  w.model = be->upload(two);
  QTensor scratch;
  const QuantizedTensor f0 = be->download(weight_for_fprop(*be, w, 0, 4, scratch));
  EXPECT_EQ(bits(f0.scale_inv(0, 0, 0)), bits(1.0f / 224.0f));
  w.invalidate();  // the optimizer step: new version
  w.model = be->upload(three);
  const QuantizedTensor d1 = be->download(weight_for_dgrad(*be, w, 1, 4, scratch));
  EXPECT_EQ(bits(d1.scale_inv(0, 0, 0)), bits(1.0f / (448.0f / 3.0f)));
  EXPECT_EQ(d1.code(0, 0, 0), 0x7Eu);
  EXPECT_EQ(bits(be->download(w.cache.q).scale_inv(0, 0, 0)), bits(1.0f / 224.0f)) << "the fprop cache is untouched";
  Weight m = w;
  m.recipe = LinearRecipe(make_recipe("mxfp8", {}));
  m.cache.valid = true;
  m.cache.version = m.version - 1;
  EXPECT_THROW(weight_for_dgrad(*be, m, 1, 4, scratch), MechanicsError);
}

// A non-finite step loss stops the run before the step's optimizer update (docs/simulator.md
// "Divergence"): counted through ProfilingBackend, the run made exactly one AdamW update per
// weight (embed, router, fc1, fc2, head) for each step before the diverging one, none for it;
// de-oscillation (the other writer of the masters) is off.
TEST(SimPromises, DivergenceLeavesTheWeightsUntouched) {
  const Config c = tiny({"optim.lr=1e30", "optim.warmup_steps=0", "deosc.enable=false"});
  ProfilingBackend prof(emu::make_emu_backend());
  TrainOptions o;
  o.threads = 1;
  o.evaluate = false;
  int bad = -1;
  try {
    train(c, prof, o);
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    const auto at = m.find("loss is");
    ASSERT_NE(at, std::string::npos) << m;
    bad = std::stoi(m.substr(m.find("at step ") + 8));
  }
  ASSERT_GT(bad, 1);
  std::istringstream rep(prof.report());
  std::string line;
  long long adamw = -1;
  while (std::getline(rep, line)) {
    std::istringstream ls(line);
    std::string op;
    long long calls = 0;
    if (ls >> op >> calls && op == "adamw") adamw = calls;
  }
  EXPECT_EQ(adamw, 5LL * (bad - 1)) << prof.report();
}

// Stochastic rounding of dy is keyed by (seed, layer/operand, (n - 1) x micro-batches +
// micro-batch) and the data order by (seed, epoch) (docs/simulator.md "Determinism"): neither
// holds state, so a run with mxfp4_sr_grad on, stopped at step 14 and resumed, crosses the epoch
// boundary at step 16 (2048 examples / 128) and ends on the uninterrupted run's bits. SR must be
// in effect: the same run with SR off ends elsewhere.
TEST(SimPromises, SrGradRunResumedAcrossAnEpochIsBitExact) {
  const Config c = tiny({"run.epochs=2", "run.max_steps=20", "recipe.mxfp4_sr_grad=true"});
  auto be = emu::make_emu_backend();
  TrainOptions full;
  full.threads = 1;
  full.evaluate = false;
  const TrainResult a = train(c, *be, full);
  ASSERT_EQ(a.steps, 20);
  TrainOptions first = full;
  first.checkpoint_path = tmp("srck.h5");
  first.stop_after = 14;
  train(c, *be, first);
  TrainOptions second = full;
  second.resume_path = first.checkpoint_path;
  const TrainResult b = train(c, *be, second);
  std::filesystem::remove(first.checkpoint_path);
  ASSERT_EQ(b.steps, 6);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(a.losses[14 + i], b.losses[i]) << "step " << 15 + i;
  ASSERT_EQ(a.final_masters.size(), b.final_masters.size());
  for (size_t l = 0; l < a.final_masters.size(); ++l) EXPECT_EQ(a.final_masters[l], b.final_masters[l]) << l;
  const TrainResult off = train(tiny({"run.epochs=2", "run.max_steps=20", "recipe.mxfp4_sr_grad=false"}), *be, full);
  EXPECT_NE(off.final_masters, a.final_masters) << "stochastic rounding changed nothing";
}

// The oscillation metrics (numerics §6 osc_update; Nagel et al. 2022) over a hand sequence of
// four steps, momentum 0.5, window end at step 4. Element A: w 0 -> 0.5 -> 0.75 -> 0.5 -> 0.75,
// q 0 -> 1 -> 1 -> 0 -> 1; element B never moves. A's changes dq = +1, 0, -1, +1:
//   step 1: first direction (+1), no earlier one: no flip; ema 0; dist_w 0.5, dist_q 1;
//   step 2: dq = 0: nothing, the last direction stays +1; ema 0; dist_w 0.75, dist_q 1;
//   step 3: -1 against +1: a flip; ema 0.5 * 1 + 0.5 * 0 = 0.5; dist_w 1, dist_q 2;
//   step 4: +1 against -1: a flip; ema 0.5 + 0.5 * 0.5 = 0.75; dist_w 1.25, dist_q 3.
// Per step over n = 2: flips, flips_total (A's running count), ema_mean = ema_A / 2,
// ema_frac_above = [ema_A > 0.01] / 2, dist_ratio_mean = dist_q / dist_w of A alone (B has
// dist_w = 0): 2, 1 / 0.75, 2, 2.4. After the window end both distance sums are 0.
TEST(SimPromises, OscillationMetricsOnAHandSequence) {
  auto be = emu::make_emu_backend();
  auto v = [&](std::vector<float> x) {
    Tensor t = be->alloc(DType::f32, {2});
    be->upload(t, std::span<const float>(x));
    return t;
  };
  Tensor last = be->alloc(DType::u8, {2}), flips = be->alloc(DType::u32, {2});
  be->upload(last, std::span<const uint8_t>(std::vector<uint8_t>{0, 0}));
  be->upload(flips, std::span<const uint32_t>(std::vector<uint32_t>{0, 0}));
  Backend::OscState s{v({0, 7}), v({0, 7}), v({0, 0}), v({0, 0}), v({0, 0}), last, flips};
  const float w[4] = {0.5f, 0.75f, 0.5f, 0.75f}, q[4] = {1, 1, 0, 1};
  const uint64_t want_flips[4] = {0, 0, 1, 1}, want_total[4] = {0, 0, 1, 2};
  const double want_ema[4] = {0, 0, 0.25, 0.375}, want_frac[4] = {0, 0, 0.5, 0.5};
  const double want_ratio[4] = {2.0, 1.0 / 0.75, 2.0, 3.0 / 1.25};
  for (int t = 0; t < 4; ++t) {
    const Backend::OscStep r = be->osc_update(v({w[t], 7}), v({q[t], 7}), s, 0.5f, t == 3);
    EXPECT_EQ(r.flips, want_flips[t]) << "step " << t + 1;
    EXPECT_EQ(r.flips_total, want_total[t]) << "step " << t + 1;
    EXPECT_EQ(r.ema_mean, want_ema[t]) << "step " << t + 1;
    EXPECT_EQ(r.ema_frac_above, want_frac[t]) << "step " << t + 1;
    EXPECT_EQ(r.dist_ratio_mean, want_ratio[t]) << "step " << t + 1;
  }
  EXPECT_EQ(be->download<float>(s.ema), (std::vector<float>{0.75f, 0}));
  EXPECT_EQ(be->download<uint32_t>(s.flips), (std::vector<uint32_t>{2, 0}));
  EXPECT_EQ(be->download<uint8_t>(s.last_dir), (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(be->download<float>(s.dist_w), (std::vector<float>{0, 0}));
  EXPECT_EQ(be->download<float>(s.dist_q), (std::vector<float>{0, 0}));
}
