#include <gtest/gtest.h>

#include "mxsim/emu/quantize.hpp"
#include "mxsim/rounding.hpp"

using namespace mxsim;

// Published E2M1 ties (OCP MX v1.0 §5.3.3 grid; PyTorch fp4e2m1_from_fp32_value):
// 0.25 -> 0, 0.75 -> 1.0, 5.0 -> 4.0 under RNE.
TEST(Smoke, E2M1Ties) {
  EXPECT_EQ(encode_f32(Format::E2M1, 0.25f), 0x0u);
  EXPECT_EQ(encode_f32(Format::E2M1, 0.75f), 0x2u);
  EXPECT_EQ(encode_f32(Format::E2M1, 5.0f), 0x6u);
  EXPECT_EQ(encode_f32(Format::E2M1, -6.5f), 0xFu);
}

TEST(Smoke, E4M3Boundary) {
  // OCP OFP8: 464 is the tie between 448 (0x7E) and the NaN code; RNE picks 448.
  EXPECT_EQ(encode_f32(Format::E4M3, 464.0f, RoundMode::RNE, Overflow::Ieee), 0x7Eu);
  EXPECT_EQ(encode_f32(Format::E4M3, 465.0f, RoundMode::RNE, Overflow::Ieee), 0x7Fu);
  EXPECT_EQ(encode_f32(Format::E5M2, 61440.0f, RoundMode::RNE, Overflow::Ieee), 0x7Cu);
  EXPECT_EQ(decode(Format::E8M0, 0x00), 0x1p-127f);
}

TEST(Smoke, MxRoundTrip) {
  Tensor2f x = {{1.0f, 2.0f, 3.0f, 6.0f}};
  auto q = emu::quantize(x, tensor_recipe("mxfp4"));
  auto d = emu::dequantize(q);
  EXPECT_EQ(d(0, 3), 6.0f);
}
