// Delayed scaling (TransformerEngine DelayedScaling semantics,
// formats-and-scaling.md §9) on hand-computed sequences.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "mxsim/delayed_scaling.hpp"
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
