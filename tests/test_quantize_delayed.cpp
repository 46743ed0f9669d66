// Delayed scaling (TransformerEngine DelayedScaling semantics,
// formats-and-scaling.md §9) on hand-computed sequences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <random>

#include "mxsim/delayed_scaling.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/quantize.hpp"

using namespace mxsim;

TEST(DelayedScaling, HistoryRollAndMaxAlgo) {
  DelayedScaling ds(Format::E4M3, 3, 0, AmaxAlgo::Max);
  EXPECT_EQ(ds.scale(), 1.0f);  // TE initial scale
  // step 1: two micro-batches record 2 and 7 -> slot 0 = 7
  ds.record(2.0f);
  ds.record(-7.0f);
  EXPECT_EQ(ds.history(), (std::vector<float>{7.0f, 0.0f, 0.0f}));
  ds.update();  // amax = max(7, 0, 0) = 7; roll: [0, 0, 7] with slot 0 zeroed
  EXPECT_EQ(ds.scale(), 448.0f / 7.0f);
  EXPECT_EQ(ds.history(), (std::vector<float>{0.0f, 0.0f, 7.0f}));
  // step 2: amax 3 -> history [3, 0, 7]; max 7 still in window
  ds.record(3.0f);
  ds.update();
  EXPECT_EQ(ds.scale(), 448.0f / 7.0f);
  EXPECT_EQ(ds.history(), (std::vector<float>{0.0f, 7.0f, 3.0f}));
  // step 3: amax 1 -> [1, 7, 3]; max 7; roll -> [7, 3, 1] then slot 0 = 0
  ds.record(1.0f);
  ds.update();
  EXPECT_EQ(ds.scale(), 448.0f / 7.0f);
  EXPECT_EQ(ds.history(), (std::vector<float>{0.0f, 3.0f, 1.0f}));
  // step 4: amax 2 -> [2, 3, 1]: 7 has left the window, max 3
  ds.record(2.0f);
  ds.update();
  EXPECT_EQ(ds.scale(), 448.0f / 3.0f);
  EXPECT_EQ(ds.history(), (std::vector<float>{0.0f, 1.0f, 2.0f}));
}

TEST(DelayedScaling, MostRecentAndMargin) {
  DelayedScaling ds(Format::E5M2, 4, 2, AmaxAlgo::MostRecent);
  ds.record(1000.0f);
  ds.update();
  EXPECT_EQ(ds.scale(), (57344.0f / 1000.0f) / 4.0f);
  ds.record(10.0f);
  ds.update();  // most recent = 10 although 1000 is still in the history
  EXPECT_EQ(ds.scale(), (57344.0f / 10.0f) / 4.0f);
  EXPECT_EQ(ds.scale_inv(), 1.0f / ((57344.0f / 10.0f) / 4.0f));
}

TEST(DelayedScaling, ZeroNanAndTinyAmax) {
  DelayedScaling ds(Format::E4M3, 2);
  ds.record(4.0f);
  ds.update();
  const float s = 448.0f / 4.0f;
  EXPECT_EQ(ds.scale(), s);
  ds.update();  // history [0, 4] -> max 4 (still in window)
  EXPECT_EQ(ds.scale(), s);
  ds.update();  // history all zero: amax 0 keeps the previous scale
  EXPECT_EQ(ds.scale(), s);
  ds.record(NAN);
  ds.record(1.0f);  // NaN sticks
  EXPECT_TRUE(std::isnan(ds.history()[0]));
  ds.update();  // non-finite amax keeps the previous scale
  EXPECT_EQ(ds.scale(), s);
  DelayedScaling t(Format::E4M3, 1);
  t.record(1e-45f);
  t.update();  // 448 / 1.4e-45 = +Inf -> FLT_MAX
  EXPECT_EQ(t.scale(), FLT_MAX);
  EXPECT_THROW(DelayedScaling(Format::E4M3, 0), std::invalid_argument);
  EXPECT_THROW(DelayedScaling(Format::E4M3, 4, -1), std::invalid_argument);
  EXPECT_THROW((void)DelayedScaling(Format::E8M0), std::invalid_argument);  // (void): not a declaration
  EXPECT_EQ(amax_algo_from_name("most_recent"), AmaxAlgo::MostRecent);
  EXPECT_THROW(amax_algo_from_name("mean"), std::invalid_argument);
}

TEST(DelayedScaling, DrivesTheQuantizer) {
  DelayedScaling ds(Format::E4M3, 16);
  ds.record(2.0f);
  ds.update();  // scale 224
  Tensor2f x = {{1.0f, -2.0f, 4.0f}};  // 4 * 224 = 896 > 448: clips (delayed scale is stale)
  const QuantSpec s = ds.spec(tensor_recipe("fp8_tensor"));
  EXPECT_EQ(s.fixed_scale, 224.0f);
  const auto q = emu::quantize(x, s);
  EXPECT_EQ(q.scale_inv(0, 0, 0), 1.0f / 224.0f);
  EXPECT_EQ(q.code(0, 0, 0), 0x76u);  // 224 = 1.75 * 2^7: exp field 14 (0x70), mant 6
  EXPECT_EQ(q.code(0, 0, 1), 0xFEu);  // -448
  EXPECT_EQ(q.code(0, 0, 2), 0x7Eu);  // 896 saturates to 448
  EXPECT_EQ(emu::quant_stats(x, q).saturated, 1u);
  EXPECT_THROW(ds.spec(tensor_recipe("mxfp8")), std::invalid_argument);
}

// Current scaling with one scale for a whole grouped tensor (QuantSpec::whole_tensor_scale, the
// simulator's fp8_current): groups of amax 3.5 and 7 share 448 / 7 = 64 (scale_inv 2^-6), where
// a per-tensor spec alone gives group 0 its own 448 / 3.5 = 128. Codes by hand (E4M3, bias 7):
// 3.5 * 64 = 224 = 1.75 * 2^7 is 0x76; 7 * 64 = 448 (the max) 0x7E; -64 = -2^6 0xE8.
TEST(CurrentScaling, WholeTensorScaleSpansGroupsAndSlices) {
  QuantSpec s = tensor_recipe("fp8_tensor");
  Tensor3f x = Tensor3f::from_shape({2, 1, 2});
  x(0, 0, 0) = 3.5f, x(0, 0, 1) = -1.0f, x(1, 0, 0) = 7.0f, x(1, 0, 1) = 0.0f;
  const auto own = emu::quantize(x, s);
  EXPECT_EQ(own.scale_inv(0, 0, 0), 1.0f / 128.0f);
  EXPECT_EQ(own.code(0, 0, 0), 0x7Eu);
  s.whole_tensor_scale = true;
  const auto q = emu::quantize(x, s);
  for (size_t g = 0; g < 2; ++g) EXPECT_EQ(q.scale_inv(g, 0, 0), 0x1p-6f) << g;
  EXPECT_EQ(q.code(0, 0, 0), 0x76u);
  EXPECT_EQ(q.code(0, 0, 1), 0xE8u);
  EXPECT_EQ(q.code(1, 0, 0), 0x7Eu);
  EXPECT_EQ(q.code(1, 0, 1), 0x00u);
  // The wgrad operand's row slices: rows {3.5, -1} | {7, 0}, {1, 1} (m_splits 1, 2) share 64 too.
  const Tensor2f m = {{3.5f, -1.0f}, {7.0f, 0.0f}, {1.0f, 1.0f}};
  const std::vector<int64_t> ms = {1, 2};
  const auto sl = emu::quantize_grouped_colwise(m, ms, s);
  ASSERT_EQ(sl.size(), 2u);
  for (const auto& t : sl) EXPECT_EQ(t.scale_inv(0, 0, 0), 0x1p-6f);
  EXPECT_EQ(sl[0].code(0, 0, 0), 0x76u);
  EXPECT_EQ(sl[1].code(0, 1, 0), 0x68u);  // 1 * 64 = 2^6
  s.whole_tensor_scale = false;
  EXPECT_EQ(emu::quantize_grouped_colwise(m, ms, s)[0].scale_inv(0, 0, 0), 1.0f / 128.0f);
  // A non-finite amax anywhere: every group's scale_inv is NaN and its codes 0 (the caller refuses it).
  s.whole_tensor_scale = true;
  x(1, 0, 1) = INFINITY;
  const auto bad = emu::quantize(x, s);
  for (size_t g = 0; g < 2; ++g) {
    EXPECT_TRUE(std::isnan(bad.scale_inv(g, 0, 0))) << g;
    EXPECT_EQ(bad.code(g, 0, 0), 0x00u) << g;
  }
}

TEST(CurrentScaling, WholeTensorScaleNeedsPerTensorCurrentScaling) {
  QuantSpec s = tensor_recipe("fp8_tensor");
  s.whole_tensor_scale = true;
  const Tensor2f x = {{1.0f, 2.0f}};
  QuantSpec fixed = s;
  fixed.fixed_scale = 2.0f;
  EXPECT_THROW(emu::quantize(x, fixed), std::invalid_argument);
  QuantSpec blocks = tensor_recipe("mxfp8");
  blocks.whole_tensor_scale = true;
  EXPECT_THROW(emu::quantize(x, blocks), std::invalid_argument);
  QuantSpec torchao = s;
  torchao.scale_convention = ScaleConvention::Torchao;
  EXPECT_THROW(emu::quantize(x, torchao), std::invalid_argument);
  EXPECT_NO_THROW(emu::quantize(x, s));
}

// The contract of whole_tensor_scale (docs/numerics.md §3.3): the bits of with_current_scale on the
// amax of the whole tensor, for random tensors of several groups, amax_epsilon above and below
// the amax, pow2_scale, E4M3 and E5M2, and amaxes small enough to reach the FLT_MAX cap.
TEST(CurrentScaling, WholeTensorScaleIsWithCurrentScaleOfTheTensorAmax) {
  std::mt19937 gen(20261207);
  for (int trial = 0; trial < 60; ++trial) {
    QuantSpec s = tensor_recipe(trial % 2 ? "fp8_tensor" : "fp8_tensor_e5m2");
    s.pow2_scale = trial % 3 == 0;
    s.amax_epsilon = trial % 5 == 0 ? 1e-3f : trial % 5 == 1 ? 1e-12f : 0.0f;
    const size_t G = 1 + gen() % 4, R = 1 + gen() % 9, C = 1 + gen() % 40;
    const int e = trial % 7 == 0 ? -140 : int(gen() % 40) - 20;  // -140: subnormal amax, the scale caps
    Tensor3f x = Tensor3f::from_shape({G, R, C});
    float amax = 0;
    for (float& v : x) {
      v = std::ldexp(float(int(gen() % 2001) - 1000) / 1000.0f, e - int(gen() % 12));
      amax = std::max(amax, std::fabs(v));
    }
    QuantSpec w = s;
    w.whole_tensor_scale = true;
    const auto got = emu::quantize(x, w);
    const auto want = emu::quantize(x, *with_current_scale(s, amax));
    SCOPED_TRACE("trial " + std::to_string(trial));
    ASSERT_EQ(got.data.size(), want.data.size());
    EXPECT_TRUE(std::equal(got.data.begin(), got.data.end(), want.data.begin()));
    for (size_t g = 0; g < G; ++g) EXPECT_EQ(f32_bits(got.scale_inv(g, 0, 0)), f32_bits(want.scale_inv(g, 0, 0)));
  }
}
