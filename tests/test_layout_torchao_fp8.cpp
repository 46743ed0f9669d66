// torchao's two FP8 tensor layouts (layout::from_torchao_float8,
// from_torchao_float8_training; mxsim/layouts.hpp cites the torchao sources),
// decoded through emu::dequantize3 and compared with values worked out by hand:
//   Float8Tensor         fl32(code * scale)   (torchao _dequantize_affine_float8)
//   Float8TrainingTensor fl32(code / _scale)  (torchao _FromFloat8ConstrFunc), one
//                        RNE division, never code * fl32(1 / _scale)
// (docs/numerics.md §2.4). Code bytes used below, E4M3 (bias 7, 3 fraction bits):
//   0x38 = 0.0111.000 = 1     0x40 = 0.1000.000 = 2     0x44 = 0.1000.100 = 3
//   0x4A = 0.1001.010 = 5     0x4C = 0.1001.100 = 6     0x30 = 0.0110.000 = 0.5
//   0x01 = 2^-6 * 1/8 = 2^-9  0x7E = 2^8 * 1.75 = 448   0x7F NaN   0x80 -0
//   0xB8 = -1                 0xC4 = -3
// E5M2 (bias 15, 2 fraction bits): 0x3C = 1, 0x42 = 0.10000.10 = 3, 0x7C +Inf,
//   0x7E NaN, 0x01 = 2^-14 * 1/4 = 2^-16, 0xBC = -1.
// FP32 constants: fl32(0.1) = 13421773 * 2^-27 (bits 0x3DCCCCCD); fl32(1/3) =
//   round(2^25 / 3) * 2^-25 = 11184811 * 2^-25 (bits 0x3EAAAAAB: exponent 125,
//   fraction 0xAAAAAB - 2^23 = 0x2AAAAB).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxsim/bits.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/layouts.hpp"

using namespace mxsim;

namespace {

using Bytes = std::vector<uint8_t>;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();


/// The values of q in logical row-major order as FP32 bit patterns.
std::vector<uint32_t> value_bits(const QuantizedTensor& q) {
  const Tensor3f v = emu::dequantize3(q);
  std::vector<uint32_t> out;
  for (float x : v) out.push_back(f32_bits(x));
  return out;
}
std::vector<uint32_t> as_bits(const std::vector<float>& v) {
  std::vector<uint32_t> out;
  for (float x : v) out.push_back(f32_bits(x));
  return out;
}

/// The message of the std::invalid_argument f throws ("" if none).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}
bool has(const std::string& s, const std::string& w) { return s.find(w) != std::string::npos; }

constexpr uint32_t kPoint1 = 0x3DCCCCCDu;  // fl32(0.1)
constexpr uint32_t kThird = 0x3EAAAAABu;   // fl32(1/3)

}  // namespace

// Per tensor, E4M3, scale fl32(0.1) in shapes [1, 1] (what torchao's
// _choose_scale_float8 returns), [] and [1]:
//   1 * s = s = 0x3DCCCCCD; -1 * s = 0xBDCCCCCD; 0 * s = +0; NaN code: NaN.
//   5 * s = 5 * 13421773 * 2^-27 = (2^26 + 1) * 2^-27 = 0.5 + 2^-27; in [0.5, 1)
//     the spacing is 2^-24, so 2^-27 is 1/8 of it: rounds to 0.5 = 0x3F000000.
//   6 * s = 80530638 * 2^-27 = 10066329.75 * 2^-24 -> 10066330 * 2^-24: exponent
//     126, fraction 10066330 - 2^23 = 1677722 = 0x19999A: 0x3F19999A.
TEST(TorchaoFloat8, PerTensorMultipliesByScale) {
  const Bytes q = {0x38, 0xB8, 0x4A, 0x4C, 0x00, 0x7F};
  const std::vector<float> s = {f32_from_bits(kPoint1)};
  const std::vector<uint32_t> want = {kPoint1, 0xBDCCCCCDu, 0x3F000000u, 0x3F19999Au, 0x00000000u, 0x7FC00000u};
  for (const std::vector<size_t>& ss : {std::vector<size_t>{1, 1}, std::vector<size_t>{}, std::vector<size_t>{1}}) {
    const QuantizedTensor t = layout::from_torchao_float8(Format::E4M3, {2, 3}, q, ss, s);
    EXPECT_TRUE(t.spec.per_tensor());
    EXPECT_FALSE(t.transposed);
    EXPECT_EQ(t.fp32_scale_use, Fp32ScaleUse::MultiplyScaleInv);
    EXPECT_EQ(value_bits(t), want) << ss.size();
  }
  // torchao's block_size: [] (per tensor) and the whole shape both mean one scale.
  EXPECT_EQ(value_bits(layout::from_torchao_float8(Format::E4M3, {2, 3}, q, {1, 1}, s, std::vector<size_t>{})), want);
  EXPECT_EQ(value_bits(layout::from_torchao_float8(Format::E4M3, {2, 3}, q, {1, 1}, s, std::vector<size_t>{2, 3})), want);
  const std::string e = error_of([&] { layout::from_torchao_float8(Format::E4M3, {2, 3}, q, {1, 1}, s, std::vector<size_t>{1, 3}); });
  EXPECT_TRUE(has(e, "torchao's is [2, 1]")) << e;
}

// Per row (PerRow: scale [2, 1] = 2, 0.5): row 0 codes 1, 2, 5, -3 times 2 ->
// 2, 4, 10, -6; row 1 codes 0.5, 2^-9, 448, -0 times 0.5 -> 0.25, 2^-10, 224,
// -0. Every product is exact (a power-of-two scale).
TEST(TorchaoFloat8, PerRow) {
  const Bytes q = {0x38, 0x40, 0x4A, 0xC4, 0x30, 0x01, 0x7E, 0x80};
  const QuantizedTensor t = layout::from_torchao_float8(Format::E4M3, {2, 4}, q, {2, 1}, std::vector<float>{2, 0.5f});
  EXPECT_EQ(t.spec.block_rows, 1);
  EXPECT_EQ(t.spec.block_cols, 0);  // the whole row
  EXPECT_FALSE(t.transposed);
  EXPECT_EQ(value_bits(t), as_bits({2, 4, 10, -6, 0.25f, std::ldexp(1.0f, -10), 224, -0.0f}));
}

// Blockwise (PerBlock). 1 x 128: qdata [2, 256] all 1.0, scale [2, 2] = 1, 2;
// 4, 8: element (r, c) = scale[r][c / 128]. Tiles: qdata [4, 8] all 3.0, scale
// [2, 2] = 0.5, 0.25; 2, 4 (blocks 2 x 4): 1.5, 0.75; 6, 12. Blocks down the
// columns: qdata [4, 2] codes 1, 2; 3, 5; 6, 0.5; -1, -3 with scale [2, 2] =
// 1, 2; 4, 8 (blocks 2 x 1, one per column per row pair): 1, 4; 3, 10; 24, 4;
// -4, -24, stored transposed as mxsim stores columnwise blocks.
TEST(TorchaoFloat8, Blockwise) {
  const QuantizedTensor a = layout::from_torchao_float8(Format::E4M3, {2, 256}, std::vector<uint8_t>(512, 0x38), {2, 2},
                                                        std::vector<float>{1, 2, 4, 8}, std::vector<size_t>{1, 128});
  EXPECT_EQ(a.spec.block_rows, 1);
  EXPECT_EQ(a.spec.block_cols, 128);
  const Tensor3f va = emu::dequantize3(a);
  const float sa[2][2] = {{1, 2}, {4, 8}};
  for (size_t r = 0; r < 2; ++r)
    for (size_t c = 0; c < 256; ++c) EXPECT_EQ(f32_bits(va(0, r, c)), f32_bits(sa[r][c / 128])) << r << ", " << c;

  const QuantizedTensor b = layout::from_torchao_float8(Format::E4M3, {4, 8}, std::vector<uint8_t>(32, 0x44), {2, 2},
                                                        std::vector<float>{0.5f, 0.25f, 2, 4});
  EXPECT_EQ(b.spec.block_rows, 2);
  EXPECT_EQ(b.spec.block_cols, 4);
  const Tensor3f vb = emu::dequantize3(b);
  const float wb[2][2] = {{1.5f, 0.75f}, {6, 12}};
  for (size_t r = 0; r < 4; ++r)
    for (size_t c = 0; c < 8; ++c) EXPECT_EQ(f32_bits(vb(0, r, c)), f32_bits(wb[r / 2][c / 4])) << r << ", " << c;

  const QuantizedTensor c = layout::from_torchao_float8(Format::E4M3, {4, 2}, Bytes{0x38, 0x40, 0x44, 0x4A, 0x4C, 0x30, 0xB8, 0xC4},
                                                        {2, 2}, std::vector<float>{1, 2, 4, 8});
  EXPECT_TRUE(c.transposed);
  EXPECT_EQ(c.spec.block_cols, 2);  // storage rows are the columns, blocks of 2 along them
  EXPECT_EQ(value_bits(c), as_bits({1, 4, 3, 10, 24, 4, -4, -24}));
}

// E5M2 per tensor, scale 3: codes 1, 3, +Inf, NaN, 2^-16, -1 -> 3, 9, +Inf,
// NaN, 3 * 2^-16 (exact: 1.5 * 2^-15), -3.
TEST(TorchaoFloat8, E5m2) {
  const Bytes q = {0x3C, 0x42, 0x7C, 0x7E, 0x01, 0xBC};
  const QuantizedTensor t = layout::from_torchao_float8(Format::E5M2, {1, 6}, q, {1, 1}, std::vector<float>{3});
  EXPECT_EQ(value_bits(t), as_bits({3, 9, kInf, kNaN, 3 * std::ldexp(1.0f, -16), -3}));
}

// 3-D [G, R, K] = [2, 2, 2], all codes 1.0: per row (scale [2, 2, 1] = 1, 2;
// 4, 8) each row its own; per tensor ([1, 1, 1] = 0.5) every group the same;
// [1, 2, 1] = 2, 4: one scale per row index shared by both groups.
TEST(TorchaoFloat8, ThreeDGroups) {
  const std::vector<uint8_t> q(8, 0x38);
  const QuantizedTensor a = layout::from_torchao_float8(Format::E4M3, {2, 2, 2}, q, {2, 2, 1}, std::vector<float>{1, 2, 4, 8});
  EXPECT_EQ(a.groups, 2u);
  EXPECT_EQ(value_bits(a), as_bits({1, 1, 2, 2, 4, 4, 8, 8}));
  const QuantizedTensor b = layout::from_torchao_float8(Format::E4M3, {2, 2, 2}, q, {1, 1, 1}, std::vector<float>{0.5f});
  EXPECT_EQ(value_bits(b), as_bits(std::vector<float>(8, 0.5f)));
  const QuantizedTensor c = layout::from_torchao_float8(Format::E4M3, {2, 2, 2}, q, {1, 2, 1}, std::vector<float>{2, 4});
  EXPECT_EQ(value_bits(c), as_bits({2, 2, 4, 4, 2, 2, 4, 4}));
}

// The division, exactly: _data 5.0 (0x4A), tensorwise _scale 3 (torchao's 0-D tensor).
//   fl32(5 / 3): 5/3 lies in [1, 2), spacing 2^-23; 5 * 2^23 / 3 = 13981013.33...
//     -> 13981013 = 0xD55555, fraction 0x555555: bits 0x3FD55555.
//   fl32(5 * fl32(1/3)) = fl32(5 * 11184811 * 2^-25) = fl32(55924055 * 2^-25)
//     = fl32(13981013.75 * 2^-23) -> 13981014: bits 0x3FD55556.
// They differ in the last bit, so the first proves a division rounded once.
// (Cross-check: long double 5/3 has 64 significant bits, not a float midpoint.)
// Codes 1 and 3: 1/3 = fl32(1/3) = 0x3EAAAAAB, 3/3 = 1.
TEST(TorchaoFloat8Training, DivisionIsRoundedOnceNotAReciprocalProduct) {
  ASSERT_EQ(f32_bits(float(5.0L / 3.0L)), 0x3FD55555u);
  ASSERT_EQ(f32_bits(1.0f / 3.0f), kThird);
  const QuantizedTensor t =
      layout::from_torchao_float8_training(Format::E4M3, {1, 3}, Bytes{0x4A, 0x38, 0x44}, {}, std::vector<float>{3});
  EXPECT_EQ(t.fp32_scale_use, Fp32ScaleUse::DivideByScale);
  EXPECT_TRUE(t.spec.per_tensor());
  EXPECT_EQ(value_bits(t), (std::vector<uint32_t>{0x3FD55555u, kThird, 0x3F800000u}));
  // The same code times fl32(1/3) as a Float8Tensor scale (a multiply): the other bit.
  const QuantizedTensor m =
      layout::from_torchao_float8(Format::E4M3, {1, 1}, Bytes{0x4A}, {1, 1}, std::vector<float>{f32_from_bits(kThird)});
  EXPECT_EQ(value_bits(m), std::vector<uint32_t>{0x3FD55556u});
}

// E5M2 divided by 3: 1/3 = 0x3EAAAAAB; 3/3 = 1; Inf/3 = Inf; NaN; 2^-16/3 has
// the significand of 1/3 and exponent 125 - 16 = 109: (109 << 23) | 0x2AAAAB =
// 0x36AAAAAB; -1/3 = 0xBEAAAAAB.
TEST(TorchaoFloat8Training, E5m2) {
  const Bytes q = {0x3C, 0x42, 0x7C, 0x7E, 0x01, 0xBC};
  const QuantizedTensor t = layout::from_torchao_float8_training(Format::E5M2, {1, 6}, q, {}, std::vector<float>{3});
  EXPECT_EQ(value_bits(t),
            (std::vector<uint32_t>{kThird, 0x3F800000u, 0x7F800000u, 0x7FC00000u, 0x36AAAAABu, 0xBEAAAAABu}));
}

// Axiswise. Rowwise (axiswise_dim -1, _scale [2, 1] = 3, fl32(0.1)): row 0
// codes 1, -1 -> +-fl32(1/3); row 1 codes 1, 5 over 13421773 * 2^-27:
//   1 / s = 2^27 / 13421773 = 9.99999985...; in [8, 16) the spacing is 2^-20 and
//   2^47 / 13421773 = 10485759.84 -> 10485760 = 10 * 2^20: 10.0 (0x41200000);
//   5 / s = 49.9999992...; spacing 2^-18, 5 * 2^45 / 13421773 = 13107199.80
//   -> 13107200 = 50 * 2^18: 50.0 (0x42480000).
// Columnwise (axiswise_dim 0, _scale [1, 3] = 2, 4, 0.5): codes 1, 2, 3; 5, 6,
// 0.5 -> 0.5, 0.5, 6; 2.5, 1.5, 1 (exact), stored transposed (one scale per column).
TEST(TorchaoFloat8Training, AxiswiseRowsAndColumns) {
  const QuantizedTensor r = layout::from_torchao_float8_training(Format::E4M3, {2, 2}, Bytes{0x38, 0xB8, 0x38, 0x4A}, {2, 1},
                                                                 std::vector<float>{3, f32_from_bits(kPoint1)});
  EXPECT_FALSE(r.transposed);
  EXPECT_EQ(value_bits(r), (std::vector<uint32_t>{kThird, kThird | 0x80000000u, 0x41200000u, 0x42480000u}));
  const QuantizedTensor c = layout::from_torchao_float8_training(Format::E4M3, {2, 3}, Bytes{0x38, 0x40, 0x44, 0x4A, 0x4C, 0x30},
                                                                 {1, 3}, std::vector<float>{2, 4, 0.5f});
  EXPECT_TRUE(c.transposed);
  EXPECT_EQ(c.spec.block_cols, 0);  // storage rows are the columns: one scale each
  EXPECT_EQ(value_bits(c), as_bits({0.5f, 0.5f, 6, 2.5f, 1.5f, 1}));
}

// Special scales follow IEEE division (rowwise _scale 0, +Inf, NaN, -2):
//   1 / 0 = +Inf, 0 / 0 = NaN; -1 / Inf = -0, 1 / Inf = +0; x / NaN = NaN;
//   1 / -2 = -0.5, -1 / -2 = 0.5.
// And multiplication for Float8Tensor (per-row scale +Inf, NaN): 1 * Inf = Inf,
// 0 * Inf = NaN; x * NaN = NaN. Every NaN is the canonical 0x7FC00000.
TEST(TorchaoFloat8Training, ZeroInfNanAndNegativeScales) {
  const QuantizedTensor t = layout::from_torchao_float8_training(
      Format::E4M3, {4, 2}, Bytes{0x38, 0x00, 0xB8, 0x38, 0x38, 0x38, 0x38, 0xB8}, {4, 1}, std::vector<float>{0, kInf, kNaN, -2});
  EXPECT_EQ(value_bits(t), (std::vector<uint32_t>{0x7F800000u, 0x7FC00000u, 0x80000000u, 0x00000000u, 0x7FC00000u,
                                                  0x7FC00000u, 0xBF000000u, 0x3F000000u}));
  const QuantizedTensor m =
      layout::from_torchao_float8(Format::E4M3, {2, 2}, Bytes{0x38, 0x00, 0x38, 0x38}, {2, 1}, std::vector<float>{kInf, kNaN});
  EXPECT_EQ(value_bits(m), (std::vector<uint32_t>{0x7F800000u, 0x7FC00000u, 0x7FC00000u, 0x7FC00000u}));
}

// Shapes that fit no granularity are refused naming both shapes (and the axis).
TEST(TorchaoFloat8, ShapeErrorsNameBothShapes) {
  const std::vector<uint8_t> q24(24, 0x38);
  std::string e = error_of([&] { layout::from_torchao_float8(Format::E4M3, {4, 6}, q24, {3, 4}, std::vector<float>(12, 1)); });
  EXPECT_TRUE(has(e, "scale shape [3, 4]") && has(e, "qdata shape [4, 6]") && has(e, "axis 0")) << e;
  e = error_of([&] { layout::from_torchao_float8(Format::E4M3, {4, 6}, q24, {4}, std::vector<float>(4, 1)); });
  EXPECT_TRUE(has(e, "[4]") && has(e, "[4, 6]") && has(e, "ranks differ")) << e;
  e = error_of([&] { layout::from_torchao_float8(Format::E4M3, {4, 6}, q24, {2, 1}, std::vector<float>(3, 1)); });
  EXPECT_TRUE(has(e, "scale holds 3 values for shape [2, 1]")) << e;
  e = error_of([&] { layout::from_torchao_float8(Format::E4M3, {4, 6}, std::vector<uint8_t>(23), {1}, std::vector<float>{1}); });
  EXPECT_TRUE(has(e, "qdata holds 23 bytes for shape [4, 6]")) << e;
  e = error_of([&] { layout::from_torchao_float8(Format::E2M1, {4, 6}, q24, {1}, std::vector<float>{1}); });
  EXPECT_TRUE(has(e, "elements are FP8")) << e;
  e = error_of([&] { layout::from_torchao_float8(Format::E4M3, {1, 2, 3, 4}, q24, {1}, std::vector<float>{1}); });
  EXPECT_TRUE(has(e, "1-D to 3-D")) << e;
  e = error_of([&] { layout::from_torchao_float8(Format::E4M3, {4, 8}, std::vector<uint8_t>(32), {2, 2},
                                                 std::vector<float>(4, 1), std::vector<size_t>{1, 4}); });
  EXPECT_TRUE(has(e, "block_size [1, 4]") && has(e, "torchao's is [4, 2]")) << e;
  e = error_of([&] { layout::from_torchao_float8(Format::E4M3, {4, 8}, std::vector<uint8_t>(32), {2, 2},
                                                 std::vector<float>(4, 1), std::vector<size_t>{3, 4}); });
  EXPECT_TRUE(has(e, "does not divide")) << e;
  // Float8TrainingTensor has no blocks: a scale [1, 2] for data [2, 4] (a divisor) is refused.
  e = error_of([&] { layout::from_torchao_float8_training(Format::E4M3, {2, 4}, std::vector<uint8_t>(8), {1, 2},
                                                          std::vector<float>(2, 1)); });
  EXPECT_TRUE(has(e, "_scale shape [1, 2]") && has(e, "_data shape [2, 4]") && has(e, "Float8TrainingTensor")) << e;
}

// The statistics apply a divisor s as 1 / s. _data 448 (0x7E), 3 (0x44) over
// _scale 3 against the source 150, 1: the block's largest value is fl32(448 / 3)
// = 149.33.., so 150 saturates (a multiply by 3 would give 1344 and none); the
// scale exponent is floor(log2(fl32(1/3))) = -2 (not floor(log2 3) = 1).
TEST(TorchaoFloat8Training, StatisticsUseTheDivision) {
  const QuantizedTensor t = layout::from_torchao_float8_training(Format::E4M3, {1, 2}, Bytes{0x7E, 0x44}, {}, std::vector<float>{3});
  Tensor3f x = Tensor3f::from_shape({1, 1, 2});
  x(0, 0, 0) = 150;
  x(0, 0, 1) = 1;
  EXPECT_EQ(emu::quant_stats(x, t).saturated, 1u);
  const auto bs = emu::block_stats(x, t);
  ASSERT_EQ(bs.size(), 1u);
  EXPECT_EQ(bs[0].scale_exp, -2);
  EXPECT_EQ(bs[0].saturated, 1u);
}

// GEMM (fp8-chunk128, numerics.md §5.2) takes a Float8TrainingTensor's _scale
// as scale_inv = fl32(1 / _scale), as torchao's matmul does. X = _data 5 over
// _scale 3, W = Float8Tensor code 1 with scale 1, K = 1: Q = 5, acc =
// fmaf(5, fl32(fl32(1/3) * 1), 0) = fl32(5 * fl32(1/3)) = 0x3FD55556 (derived
// above), one bit above dequantize's fl32(5 / 3) = 0x3FD55555.
// Per-row Float8Tensor operands: X [2, 2] codes 1 with scales 2, 3; W [1, 2]
// codes 1, 2 with scale 0.5: Q = 1 + 2 = 3 per row; 3 * (2 * 0.5) = 3 and
// 3 * (3 * 0.5) = 4.5, exact.
TEST(TorchaoFloat8Training, GemmTakesTheReciprocalAsTorchaoDoes) {
  const QuantizedTensor x = layout::from_torchao_float8_training(Format::E4M3, {1, 1}, Bytes{0x4A}, {}, std::vector<float>{3});
  const QuantizedTensor w = layout::from_torchao_float8(Format::E4M3, {1, 1}, Bytes{0x38}, {1, 1}, std::vector<float>{1});
  Tensor2f y;
  const std::vector<int64_t> one = {1};
  emu::grouped_fprop(x, w, one, y, emu::GemmOptions{});
  EXPECT_EQ(f32_bits(y(0, 0)), 0x3FD55556u);

  const QuantizedTensor xr = layout::from_torchao_float8(Format::E4M3, {2, 2}, std::vector<uint8_t>(4, 0x38), {2, 1},
                                                         std::vector<float>{2, 3});
  const QuantizedTensor wr = layout::from_torchao_float8(Format::E4M3, {1, 2}, Bytes{0x38, 0x40}, {1, 1}, std::vector<float>{0.5f});
  Tensor2f yr;
  const std::vector<int64_t> two = {2};
  emu::grouped_fprop(xr, wr, two, yr, emu::GemmOptions{});
  EXPECT_EQ(f32_bits(yr(0, 0)), f32_bits(3.0f));
  EXPECT_EQ(f32_bits(yr(1, 0)), f32_bits(4.5f));
}

// Backward operands as torchao's rowwise float8 training hands them to
// torch.mm (torchao/float8/float8_linear.py): a scale per column is read as
// blocks down the columns, so dgrad's W [N, K] with _scale [1, K] is quantized
// along N, wgrad's dY [M, N] and X [M, K] with _scale [1, N], [1, K] along M.
// Every _scale s enters as scale_inv 1 / s (exact here: powers of two).
// dgrad: dY [1, 2] codes 1, 2 over 0.5 (scale_inv 2); W [2, 2] codes 1, 3; 2, 1
//   over [1, 2] = 4, 0.25 (scale_inv 0.25, 4): Q_k = sum_n dY_n W_nk = 5, 5;
//   dX = 5 * 2 * 0.25, 5 * 2 * 4 = 2.5, 40 (= dequantized 2 * 0.25 + 4 * 0.5, 2 * 12 + 4 * 4).
// wgrad: dY [2, 2] codes 1, 2; 3, 1 over [1, 2] = 0.5, 2 (scale_inv 2, 0.5); X
//   [2, 2] codes 1, 1; 2, 1 over [1, 2] = 1, 0.25 (scale_inv 1, 4): Q_nk =
//   sum_m dY_mn X_mk = 7, 4; 4, 3; dW = 7 * 2 * 1, 4 * 2 * 4; 4 * 0.5 * 1, 3 * 0.5 * 4
//   = 14, 32; 2, 6.
TEST(TorchaoFloat8Training, BackwardOperandsTakeTheirAxisFromTheScale) {
  const QuantizedTensor dy = layout::from_torchao_float8_training(Format::E4M3, {1, 2}, Bytes{0x38, 0x40}, {1, 1},
                                                                  std::vector<float>{0.5f});
  const QuantizedTensor w = layout::from_torchao_float8_training(Format::E4M3, {2, 2}, Bytes{0x38, 0x44, 0x40, 0x38}, {1, 2},
                                                                 std::vector<float>{4, 0.25f});
  Tensor2f dx;
  const std::vector<int64_t> one = {1};
  emu::grouped_dgrad(dy, w, one, dx, emu::GemmOptions{});
  EXPECT_EQ(f32_bits(dx(0, 0)), f32_bits(2.5f));
  EXPECT_EQ(f32_bits(dx(0, 1)), f32_bits(40.0f));

  const std::vector<QuantizedTensor> gy = {layout::from_torchao_float8_training(
      Format::E4M3, {2, 2}, Bytes{0x38, 0x40, 0x44, 0x38}, {1, 2}, std::vector<float>{0.5f, 2})};
  const std::vector<QuantizedTensor> gx = {layout::from_torchao_float8_training(
      Format::E4M3, {2, 2}, Bytes{0x38, 0x38, 0x40, 0x38}, {1, 2}, std::vector<float>{1, 0.25f})};
  Tensor3f dw;
  const std::vector<int64_t> two = {2};
  emu::grouped_wgrad(gy, gx, two, dw, emu::GemmOptions{});
  EXPECT_EQ(f32_bits(dw(0, 0, 0)), f32_bits(14.0f));
  EXPECT_EQ(f32_bits(dw(0, 0, 1)), f32_bits(32.0f));
  EXPECT_EQ(f32_bits(dw(0, 1, 0)), f32_bits(2.0f));
  EXPECT_EQ(f32_bits(dw(0, 1, 1)), f32_bits(6.0f));
}
