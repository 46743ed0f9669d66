// Promises of docs/numerics.md that no other test pins, each with values derived by hand from
// the rule as the contract states it:
//   §2.4  RCEIL at amax = FLT_MAX overflows to Inf on dequantization; FLOOR does not.
//   §3.3  NVFP4: S_enc is taken over the whole tensor (every group); a NaN anywhere makes the
//         whole tensor NaN; a tiny global amax clamps S_enc at FLT_MAX.
//   §3.3  FP8 current scaling: amax_epsilon raises a small (or zero) amax before the scale.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
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
