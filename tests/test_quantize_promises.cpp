// Promises of docs/numerics.md that no other test pins, each with values derived by hand from
// the rule as the contract states it:
//   §2.4  RCEIL at amax = FLT_MAX overflows to Inf on dequantization; FLOOR does not.
//   §3.3  NVFP4: S_enc is taken over the whole tensor (every group); a NaN anywhere makes the
//         whole tensor NaN; a tiny global amax clamps S_enc at FLT_MAX.
//   §3.3  FP8 current scaling: amax_epsilon raises a small (or zero) amax before the scale.
//   §4.2  the scale rule of every named MX recipe.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <array>
#include <cmath>

#include "mxsim/emu/quantize.hpp"
#include "mxsim/rounding.hpp"

using namespace mxsim;

namespace {
uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
}  // namespace

// MXFP8 (E4M3, maxe 448 = 1.75 * 2^8, emax 8), one block of 32 holding +-FLT_MAX and 1s.
// RCEIL: FLT_MAX / 448 = 1.14.. * 2^119, so s = 120 (byte 247); FLT_MAX / 2^120 = 255.99..
//   rounds (RNE; E4M3 step 16 in [128, 256)) up to 256 = code 0x78, and 256 * 2^120 = 2^128:
//   +Inf (-Inf for -FLT_MAX); 1 / 2^120 underflows to code 0.
// FLOOR: s = 127 - 8 = 119 (byte 246); FLT_MAX / 2^119 = 511.99.. saturates to 448 = code
//   0x7E, and 448 * 2^119 = 1.75 * 2^127 is finite.
TEST(QuantizePromises, RceilAtFltMaxOverflowsToInfFloorDoesNot) {
  Tensor2f x = Tensor2f::from_shape({1, 32});
  x.fill(1.0f);
  x(0, 0) = FLT_MAX;
  x(0, 1) = -FLT_MAX;
  QuantSpec s = tensor_recipe("mxfp8");
  ASSERT_EQ(s.rule, ScaleRule::Rceil);
  const QuantizedTensor r = emu::quantize(x, s);
  EXPECT_EQ(r.scale_bytes(0, 0, 0), 247);
  EXPECT_EQ(r.code(0, 0, 0), 0x78u);
  EXPECT_EQ(r.code(0, 0, 1), 0xF8u);
  EXPECT_EQ(r.code(0, 0, 2), 0x00u);
  const Tensor2f dr = emu::dequantize(r);
  EXPECT_EQ(dr(0, 0), INFINITY);
  EXPECT_EQ(dr(0, 1), -INFINITY);
  EXPECT_EQ(bits(dr(0, 2)), 0u);
  s.rule = ScaleRule::Floor;
  const QuantizedTensor f = emu::quantize(x, s);
  EXPECT_EQ(f.scale_bytes(0, 0, 0), 246);
  EXPECT_EQ(f.code(0, 0, 0), 0x7Eu);
  EXPECT_EQ(f.code(0, 0, 1), 0xFEu);
  const Tensor2f df = emu::dequantize(f);
  EXPECT_EQ(df(0, 0), 0x1.cp127f);
  EXPECT_EQ(df(0, 1), -0x1.cp127f);
}

// NVFP4 (TE): S_enc = fl32(2688 / global_amax) over the whole [groups, rows, cols] tensor;
// S_dec = fl32(1 / S_enc) = tensor_scale_inv; block byte = encode_e4m3(fl32(block_amax *
// fl32(S_enc * fl32(1/6)))). Two groups whose amaxes are 6 and 600: group 0's block byte comes
// from the global S_enc (2688 / 600), not from its own (2688 / 6, which would give 448 = 0x7E).
TEST(QuantizePromises, Nvfp4TensorScaleIsOverAllGroups) {
  Tensor3f x = Tensor3f::from_shape({2, 1, 16});
  x.fill(0.0f);
  x(0, 0, 0) = 6.0f;
  x(1, 0, 0) = 600.0f;
  const QuantizedTensor q = emu::quantize(x, tensor_recipe("nvfp4"));
  const float s_enc = 2688.0f / 600.0f;  // one IEEE division
  EXPECT_EQ(bits(q.tensor_scale_inv), bits(1.0f / s_enc));
  const float f = s_enc * (1.0f / 6.0f);
  EXPECT_EQ(q.scale_bytes(0, 0, 0), encode_f32(Format::E4M3, 6.0f * f));
  EXPECT_EQ(q.scale_bytes(1, 0, 0), encode_f32(Format::E4M3, 600.0f * f));
  EXPECT_NE(q.scale_bytes(0, 0, 0), 0x7E) << "group 0 scaled on its own";
  // 6 * 4.48 / 6 = 4.48 -> E4M3 4.5 (0x49); 600 * 0.7466.. = 448 -> 0x7E.
  EXPECT_EQ(q.scale_bytes(0, 0, 0), 0x49);
  EXPECT_EQ(q.scale_bytes(1, 0, 0), 0x7E);
}

// One NaN anywhere: S_dec NaN, every block byte the E4M3 NaN 0x7F, the whole tensor (every
// group) dequantizes to NaN.
TEST(QuantizePromises, Nvfp4NanAnywhereMakesTheWholeTensorNan) {
  Tensor3f x = Tensor3f::from_shape({2, 3, 32});
  for (size_t i = 0; i < x.size(); ++i) x.data()[i] = float(int(i % 7) - 3);
  x(1, 2, 31) = NAN;
  const QuantizedTensor q = emu::quantize(x, tensor_recipe("nvfp4"));
  EXPECT_TRUE(std::isnan(q.tensor_scale_inv));
  for (uint8_t b : q.scale_bytes) EXPECT_EQ(b, 0x7F);
  const Tensor3f d = emu::dequantize3(q);
  for (float v : d) EXPECT_TRUE(std::isnan(v));
}

// global_amax below 2688 / FLT_MAX: 2688 / a overflows FP32, S_enc clamps at FLT_MAX and S_dec
// = fl32(1 / FLT_MAX) = 2^-128 (an FP32 subnormal: 1/FLT_MAX = 2^-128 / (1 - 2^-24) rounds to
// 2^-128). Block byte for amax a: encode_e4m3(fl32(a * fl32(FLT_MAX * fl32(1/6)))).
TEST(QuantizePromises, Nvfp4SmallGlobalAmaxClampsTheTensorScale) {
  Tensor2f x = Tensor2f::from_shape({1, 16});
  x.fill(0.0f);
  x(0, 0) = 1e-37f;
  x(0, 1) = -5e-38f;
  const QuantizedTensor q = emu::quantize(x, tensor_recipe("nvfp4"));
  EXPECT_EQ(bits(q.tensor_scale_inv), bits(0x1p-128f));
  const float f = FLT_MAX * (1.0f / 6.0f);
  EXPECT_EQ(q.scale_bytes(0, 0, 0), encode_f32(Format::E4M3, 1e-37f * f));
  const Tensor2f d = emu::dequantize(q);
  for (float v : d) EXPECT_TRUE(std::isfinite(v));
}

// FP8 current scaling with amax_epsilon (Primus-Turbo): a = max(amax, eps); scale =
// fl32(448 / a); scale_inv = fl32(1 / scale). amax 1e-6 below eps 1e-4 takes eps; amax 1 above
// it is kept; an all-zero block with eps takes eps too (without eps: scale 1).
TEST(QuantizePromises, Fp8AmaxEpsilonRaisesSmallAmax) {
  QuantSpec s = tensor_recipe("fp8_block");
  s.pow2_scale = false;
  s.amax_epsilon = 1e-4f;
  Tensor2f x = Tensor2f::from_shape({3, 128});
  x.fill(0.0f);
  x(0, 0) = 1e-6f;
  x(1, 0) = 1.0f;
  const QuantizedTensor q = emu::quantize(x, s);
  const float se = 448.0f / 1e-4f;
  EXPECT_EQ(bits(q.scale_inv(0, 0, 0)), bits(1.0f / se));
  EXPECT_EQ(bits(q.scale_inv(0, 1, 0)), bits(1.0f / 448.0f));
  EXPECT_EQ(bits(q.scale_inv(0, 2, 0)), bits(1.0f / se));
  EXPECT_EQ(q.code(0, 0, 0), encode_f32(Format::E4M3, 1e-6f * se));
  s.amax_epsilon = 0.0f;
  const QuantizedTensor z = emu::quantize(x, s);
  EXPECT_EQ(bits(z.scale_inv(0, 2, 0)), bits(1.0f)) << "a = 0 gives scale 1";
  EXPECT_EQ(bits(z.scale_inv(0, 0, 0)), bits(1.0f / (448.0f / 1e-6f)));
}

// The scale rule of every named MX recipe (numerics §4.2), read off the scale bytes of three
// blocks whose amaxes make the four rules (§3.1) disagree. With emax the element format's
// largest binade exponent and amax = m * 2^emax (so E = emax, and byte = 127 + s - 0):
//   m = 1.125:  FLOOR 0; CEIL 1 (amax > 2^emax); RCEIL 0 (amax / maxe = 1.125 / m_max <= 1, > 1/2);
//               EVEN 0 (m rounded to the element's mantissa bits stays below 2).
//   m = m2, just above maxe's m_max but below EVEN's bump at 2 - 2^-(m_elem + 1):
//               FLOOR 0, EVEN 0, RCEIL 1 (amax > maxe), CEIL 1.
//   m = 1.96875 (above every format's bump): FLOOR 0, EVEN 1, RCEIL 1, CEIL 1.
// So the bytes read FLOOR (127,127,127), EVEN (127,127,128), RCEIL (127,128,128), CEIL
// (128,128,128). m2: E2M1 1.625 (maxe 6 = 1.5 * 4, bump 1.75), E2M3 1.90625 (7.5 = 1.875 * 4,
// bump 1.9375), E3M2 / E4M3 / E5M2 1.8125 (28, 448, 57344 = 1.75 * 2^emax; bumps 1.875, 1.9375,
// 1.875).
namespace {
struct RuleCase {
  int emax;
  float m2;
};
RuleCase rule_case(Format f) {
  switch (f) {
    case Format::E2M1: return {2, 1.625f};
    case Format::E2M3: return {2, 1.90625f};
    case Format::E3M2: return {4, 1.8125f};
    case Format::E4M3: return {8, 1.8125f};
    case Format::E5M2: return {15, 1.8125f};
    default: ADD_FAILURE() << "no case for " << spec_of(f).name; return {0, 0};
  }
}
std::array<int, 3> signature(ScaleRule r) {
  switch (r) {
    case ScaleRule::Floor: return {127, 127, 127};
    case ScaleRule::Even: return {127, 127, 128};
    case ScaleRule::Rceil: return {127, 128, 128};
    case ScaleRule::Ceil: return {128, 128, 128};
  }
  return {};
}
/// The scale bytes of the three blocks (one amax each, in row 0 at columns 0, 32, 64; zeros
/// elsewhere) quantized by s: 1x32 blocks and 32x32 tiles alike have them at scale (0, 0, k).
std::array<int, 3> bytes_of(const QuantSpec& s) {
  const RuleCase c = rule_case(s.elem);
  Tensor3f x = Tensor3f::from_shape({1, 32, 96});
  x.fill(0.0f);
  const float m[3] = {1.125f, c.m2, 1.96875f};
  for (int k = 0; k < 3; ++k) x(0, 0, size_t(32 * k)) = std::ldexp(m[k], c.emax) * (k == 1 ? -1.0f : 1.0f);
  const QuantizedTensor q = emu::quantize(x, s);
  return {q.scale_bytes(0, 0, 0), q.scale_bytes(0, 0, 1), q.scale_bytes(0, 0, 2)};
}
}  // namespace

TEST(QuantizePromises, NamedMxRecipeDefaultsTellTheScaleRulesApart) {
  // The signature table itself must separate the rules, or a wrong default could pass.
  for (ScaleRule a : {ScaleRule::Floor, ScaleRule::Even, ScaleRule::Rceil, ScaleRule::Ceil})
    for (ScaleRule b : {ScaleRule::Floor, ScaleRule::Even, ScaleRule::Rceil, ScaleRule::Ceil}) {
      if (a == b) continue;
      for (Format f : {Format::E2M1, Format::E2M3, Format::E3M2, Format::E4M3, Format::E5M2}) {
        QuantSpec s = tensor_recipe("mxfp8");
        s.elem = f;
        s.rule = a;
        QuantSpec t = s;
        t.rule = b;
        EXPECT_NE(bytes_of(s), bytes_of(t)) << spec_of(f).name << " " << name_of(a) << " vs " << name_of(b);
        EXPECT_EQ(bytes_of(s), signature(a)) << spec_of(f).name << " " << name_of(a);
      }
    }
  // numerics §4.2: name, elements, block rows x cols, rule.
  struct Want {
    const char* name;
    Format elem;
    size_t br, bc;
    ScaleRule rule;
  };
  const Want want[] = {
      {"mxfp4", Format::E2M1, 1, 32, ScaleRule::Even},       {"mxfp4_2d", Format::E2M1, 32, 32, ScaleRule::Even},
      {"mxfp4_ocp", Format::E2M1, 1, 32, ScaleRule::Floor},  {"mxfp6_e2m3", Format::E2M3, 1, 32, ScaleRule::Rceil},
      {"mxfp6_e3m2", Format::E3M2, 1, 32, ScaleRule::Rceil}, {"mxfp8", Format::E4M3, 1, 32, ScaleRule::Rceil},
      {"mxfp8_e5m2", Format::E5M2, 1, 32, ScaleRule::Rceil}, {"mxfp8_2d", Format::E4M3, 32, 32, ScaleRule::Rceil},
  };
  for (const Want& w : want) {
    const QuantSpec s = tensor_recipe(w.name);
    EXPECT_EQ(s.elem, w.elem) << w.name;
    EXPECT_EQ(s.scale_kind, ScaleKind::E8M0) << w.name;
    EXPECT_EQ(s.block_rows, w.br) << w.name;
    EXPECT_EQ(s.block_cols, w.bc) << w.name;
    EXPECT_EQ(s.round, RoundMode::RNE) << w.name;
    EXPECT_FALSE(s.hadamard16) << w.name;
    EXPECT_EQ(bytes_of(s), signature(w.rule)) << w.name << " should use " << name_of(w.rule);
  }
}
