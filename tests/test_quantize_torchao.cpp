// The torchao scale conventions of emu::quantize (QuantSpec::scale_convention,
// docs/numerics.md §3.4) against codes and scale bits derived by hand from
// torchao's formulas (torchao/quantization/quant_primitives.py
// _choose_scale_float8 / _quantize_affine_float8; torchao/float8/float8_utils.py
// amax_to_scale, float8_training_tensor.py _ToFloat8ConstrFunc), with inputs
// on which the conventions give different bytes. The same bytes came out of PyTorch 2.11 running
// those lines of torchao on a CPU and on CUDA (H200), except where a comment says PyTorch's CPU
// differs (the sign of NaN codes; the CUDA case is what mxsim writes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "mxsim/bits.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/layouts.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/torchao_scale.hpp"

using namespace mxsim;

namespace {

float f(uint32_t b) { return f32_from_bits(b); }

QuantSpec with(const char* recipe, ScaleConvention c) {
  QuantSpec s = named_spec(recipe);
  set_scale_convention(s, c, "test");
  return s;
}

QuantizedTensor quant(const std::vector<float>& v, size_t rows, size_t cols, const QuantSpec& s,
                      Axis axis = Axis::Cols) {
  Tensor3f x = Tensor3f::from_shape({1, rows, cols});
  std::copy(v.begin(), v.end(), x.begin());
  return emu::quantize(x, s, axis);
}

std::vector<uint32_t> codes(const QuantizedTensor& q) { return {q.data.begin(), q.data.end()}; }
std::vector<uint32_t> scale_bits(const QuantizedTensor& q) {
  std::vector<uint32_t> v;
  for (float s : q.scale_inv) v.push_back(f32_bits(s));
  return v;
}

// X = 0x3D392492 = 12133522 * 2^-28 (about 0.0452). The row [1.5, X, -X, 0] has amax 1.5.
//
// fp8_max = 448 = 7 * 2^6.
// torchao (CPU): scale = fl32(1.5 / 448) = fl32(12/7 * 2^-9); 12/7 * 2^23 = 14380470.86, so the
//   scale is 14380471 * 2^-32 = 0x3B5B6DB7.
// torchao_cuda: fl32(1 / 448) = fl32(1/7) * 2^-6 = 9586981 * 2^-32 (2^26 / 7 = 9586980.57 rounds
//   up); 1.5 * 9586981 = 14380471.5, a tie, to even 14380472: scale 0x3B5B6DB8.
// te: scale = fl32(448 / 1.5) = fl32(7/6 * 2^8) = 9786709 * 2^-15 = 0x43955555 (7/6 * 2^23 =
//   9786709.33); scale_inv = fl32(2^15 / 9786709) = 14380471 * 2^-32 = 0x3B5B6DB7.
// torchao_training: fl32(fl64(fl64(1 / 1.5) * 448)) = fl32(298.666...) = 0x43955555 (the FP64
//   quotient is within 2^-52 of 896/3, far from an FP32 rounding boundary).
//
// Element X (ulp of [8, 16) = 2^-20):
//   X / 0x3B5B6DB7 = 16 * 12133522 / 14380471 = 13.5 - 0.474 ulp -> fl32 13.5, the E4M3 midpoint of
//     13 (0x55) and 14 (0x56): ties to even, 0x56.
//   X / 0x3B5B6DB8 = 13.5 - 1.458 ulp -> 13.5 - 2^-20 -> 13 = 0x55.
//   X * 0x43955555 = 12133522 * 9786709 * 2^-43 = 13.5 - 0.816 ulp -> 13.5 - 2^-20 -> 0x55 (te, training).
//   X * fl32(1 / 0x3B5B6DB7) would be X * 0x43955555 again: 0x55, so the torchao code 0x56 holds only
//   for the RNE division X / scale (not a multiply by its reciprocal).
// Element 1.5 (ulp of [256, 512) = 2^-15): 1.5 / 0x3B5B6DB7 = 448 - 0.146 ulp -> 448 = 0x7E;
//   1.5 / 0x3B5B6DB8 = 448 - 1.167 ulp -> 448 - 2^-15, nearest E4M3 448 (416 below) = 0x7E;
//   1.5 * 0x43955555 = 14680063.5 * 2^-15, a tie, to even 448 = 0x7E.
// -X gives the codes with the sign bit (0xD6 / 0xD5), 0 gives 0x00.
const uint32_t kX = 0x3D392492u;

TEST(QuantizeTorchao, ConventionsDifferInScaleAndCodes) {
  const std::vector<float> row{1.5f, f(kX), -f(kX), 0.0f};
  const QuantizedTensor te = quant(row, 1, 4, named_spec("fp8_tensor"));
  const QuantizedTensor cpu = quant(row, 1, 4, with("fp8_tensor", ScaleConvention::Torchao));
  const QuantizedTensor cuda = quant(row, 1, 4, with("fp8_tensor", ScaleConvention::TorchaoCuda));
  const QuantizedTensor tr = quant(row, 1, 4, with("fp8_tensor", ScaleConvention::TorchaoTraining));
  EXPECT_EQ(codes(te), (std::vector<uint32_t>{0x7E, 0x55, 0xD5, 0x00}));
  EXPECT_EQ(scale_bits(te), (std::vector<uint32_t>{0x3B5B6DB7}));
  EXPECT_EQ(codes(cpu), (std::vector<uint32_t>{0x7E, 0x56, 0xD6, 0x00}));
  EXPECT_EQ(scale_bits(cpu), (std::vector<uint32_t>{0x3B5B6DB7}));
  EXPECT_EQ(codes(cuda), (std::vector<uint32_t>{0x7E, 0x55, 0xD5, 0x00}));
  EXPECT_EQ(scale_bits(cuda), (std::vector<uint32_t>{0x3B5B6DB8}));
  EXPECT_EQ(codes(tr), (std::vector<uint32_t>{0x7E, 0x55, 0xD5, 0x00}));
  EXPECT_EQ(scale_bits(tr), (std::vector<uint32_t>{0x43955555}));  // _scale, the quantization scale
  EXPECT_EQ(cpu.fp32_scale_use, Fp32ScaleUse::MultiplyScaleInv);
  EXPECT_EQ(tr.fp32_scale_use, Fp32ScaleUse::DivideByScale);

  // Dequantized as torchao does. Float8Tensor: code 14 * 14380471 * 2^-32 = 201326594 * 2^-32, 24
  // bits: 12582912.125 * 2^-28 -> 12582912 * 2^-28 = 0.046875 (0x3D400000); 448 * 0x3B5B6DB7 =
  // 6442450944 * 2^-32 = 1.5 - 0.4 * 2^-24 -> 1.5 (0x3FC00000).
  // Float8TrainingTensor: 13 / 0x43955555 = 425984 / 9786709 = 0.0435267...: 11684133.27 * 2^-28
  // -> 11684133 * 2^-28 = 0x3D324925; 448 / 0x43955555 = 1.5 * 9786709.33 / 9786709 = 1.5 + 5e-8
  // (ulp of [1, 2) = 1.2e-7) -> 1.5.
  const Tensor2f dc = emu::dequantize(cpu), dt = emu::dequantize(tr);
  EXPECT_EQ(f32_bits(dc(0, 0)), 0x3FC00000u);
  EXPECT_EQ(f32_bits(dc(0, 1)), 0x3D400000u);
  EXPECT_EQ(f32_bits(dc(0, 2)), 0xBD400000u);
  EXPECT_EQ(f32_bits(dt(0, 0)), 0x3FC00000u);
  EXPECT_EQ(f32_bits(dt(0, 1)), 0x3D324925u);

  // The layout readers of torchao's tensors give the same values from the same bytes.
  const std::vector<uint8_t> qd(cpu.data.begin(), cpu.data.end());
  const float sc = cpu.scale_inv(0, 0, 0), st = tr.scale_inv(0, 0, 0);
  const Tensor2f rc = emu::dequantize(layout::from_torchao_float8(Format::E4M3, {1, 4}, qd, {1, 1}, {&sc, 1}));
  const std::vector<uint8_t> td(tr.data.begin(), tr.data.end());
  const Tensor2f rt = emu::dequantize(layout::from_torchao_float8_training(Format::E4M3, {1, 4}, td, {}, {&st, 1}));
  for (size_t c = 0; c < 4; ++c) {
    EXPECT_EQ(f32_bits(rc(0, c)), f32_bits(dc(0, c))) << c;
    EXPECT_EQ(f32_bits(rt(0, c)), f32_bits(dt(0, c))) << c;
  }
}

// Per row: row 0 as above, row 1 all zeros (-0 included).
// torchao: amax 0 gives scale 0 / 448 = 0 and every code 0 / 0 = NaN, clamp keeps NaN, the cast
//   gives the NaN code, written as PyTorch on CUDA does: 0x7F (on an x86 CPU torchao gets 0xFF).
// torchao_training: a = max(0, 1e-12) in FP64; fl64(1 / fl64(1e-12)) = 10^12 exactly, * 448 =
//   4.48e14 exactly; fl32: 4.48e14 / 2^48 = 1.5916..., fraction * 2^23 = 4962832.43 -> 4962832:
//   0x57CBBA10 (= 4.48e14 - 14417920). Codes 0 * scale = +-0: 0x00 / 0x80.
// te: amax 0 gives scale 1, scale_inv 1, codes 0x00 / 0x80.
TEST(QuantizeTorchao, PerRowZeroRow) {
  const std::vector<float> x{1.5f, f(kX), -f(kX), 0.0f, 0.0f, 0.0f, 0.0f, -0.0f};
  const QuantizedTensor cpu = quant(x, 2, 4, with("fp8_row", ScaleConvention::Torchao));
  EXPECT_EQ(codes(cpu), (std::vector<uint32_t>{0x7E, 0x56, 0xD6, 0x00, 0x7F, 0x7F, 0x7F, 0x7F}));
  EXPECT_EQ(scale_bits(cpu), (std::vector<uint32_t>{0x3B5B6DB7, 0x00000000}));
  const QuantizedTensor cuda = quant(x, 2, 4, with("fp8_row", ScaleConvention::TorchaoCuda));
  EXPECT_EQ(codes(cuda), (std::vector<uint32_t>{0x7E, 0x55, 0xD5, 0x00, 0x7F, 0x7F, 0x7F, 0x7F}));
  EXPECT_EQ(scale_bits(cuda), (std::vector<uint32_t>{0x3B5B6DB8, 0x00000000}));
  const QuantizedTensor tr = quant(x, 2, 4, with("fp8_row", ScaleConvention::TorchaoTraining));
  EXPECT_EQ(codes(tr), (std::vector<uint32_t>{0x7E, 0x55, 0xD5, 0x00, 0x00, 0x00, 0x00, 0x80}));
  EXPECT_EQ(scale_bits(tr), (std::vector<uint32_t>{0x43955555, 0x57CBBA10}));
  const QuantizedTensor te = quant(x, 2, 4, named_spec("fp8_row"));
  EXPECT_EQ(codes(te), (std::vector<uint32_t>{0x7E, 0x55, 0xD5, 0x00, 0x00, 0x00, 0x00, 0x80}));
  EXPECT_EQ(scale_bits(te), (std::vector<uint32_t>{0x3B5B6DB7, 0x3F800000}));
  // torchao's zero row decodes to NaN (NaN code times 0), training's to +-0.
  const Tensor2f d = emu::dequantize(cpu);
  EXPECT_TRUE(std::isnan(d(1, 0)));
  // Per column (axis rows; torchao's axiswise_dim 0): the columns of x^T are the rows above.
  std::vector<float> xt(8);
  for (size_t r = 0; r < 2; ++r)
    for (size_t c = 0; c < 4; ++c) xt[c * 2 + r] = x[r * 4 + c];
  const QuantizedTensor col = quant(xt, 4, 2, with("fp8_row", ScaleConvention::TorchaoTraining), Axis::Rows);
  EXPECT_TRUE(col.transposed);
  EXPECT_EQ(codes(col), codes(tr));  // storage [cols, rows] = the rows of x
  EXPECT_EQ(scale_bits(col), scale_bits(tr));
}

// hp_value_lb (amax_epsilon 3): both rows get a = max(amax, 3) = 3 (row 0's amax is 1.5). scale =
// fl32(3 / 448) = 2 * fl32(1.5 / 448) = 0x3BDB6DB7 (doubling commutes with rounding). Row 0: 1.5 / it
// = 224 - 0.146 * 2^-16 -> 224 = 1.75 * 2^7 = 0x76; X / it = 6.75 - 0.474 * 2^-21 -> 6.75, the
// midpoint of 6.5 (0x4D) and 7 (0x4E): even, 0x4E. Row 1 (zeros): 0 / it = 0, no NaN.
TEST(QuantizeTorchao, AmaxEpsilonIsHpValueLb) {
  QuantSpec s = with("fp8_row", ScaleConvention::Torchao);
  set_amax_epsilon(s, 3.0, "test");
  const QuantizedTensor q = quant({1.5f, f(kX), -f(kX), 0.0f, 0.0f, 0.0f, 0.0f, -0.0f}, 2, 4, s);
  EXPECT_EQ(codes(q), (std::vector<uint32_t>{0x76, 0x4E, 0xCE, 0x00, 0x00, 0x00, 0x00, 0x80}));
  EXPECT_EQ(scale_bits(q), (std::vector<uint32_t>{0x3BDB6DB7, 0x3BDB6DB7}));
  // CUDA: fl32(3 * 9586981 * 2^-32) = 14380471.5 * 2^-31, a tie, to even 0x3BDB6DB8; X / it = 6.75 -
  // 1.458 * 2^-21 -> 6.75 - 2^-21 -> 6.5 = 0x4D.
  QuantSpec c = with("fp8_row", ScaleConvention::TorchaoCuda);
  set_amax_epsilon(c, 3.0, "test");
  const QuantizedTensor qc = quant({1.5f, f(kX), -f(kX), 0.0f, 0.0f, 0.0f, 0.0f, -0.0f}, 2, 4, c);
  EXPECT_EQ(codes(qc), (std::vector<uint32_t>{0x76, 0x4D, 0xCD, 0x00, 0x00, 0x00, 0x00, 0x80}));
  EXPECT_EQ(scale_bits(qc), (std::vector<uint32_t>{0x3BDB6DB8, 0x3BDB6DB8}));
}

// round_scales_to_power_of_2 (training): A = 0.875 + 2^-24 = 0x3F600001. 448 / A = 512 - 1.143 *
// 2^-15 -> 512 - 2^-15 = 0x43FFFFFF. torchao: log2 of it = 9 + log2(1 - 2^-24) = 9 - 8.6e-8, which
// rounds to 9.0 in FP32 (ulp of [8, 16) = 9.5e-7): floor 9, scale 2^9 = 512 = 0x44000000 (up to the
// power of two). te's pow2 clears the mantissa: 256, scale_inv 2^-8 = 0x3B800000.
// Codes: training A * 512 = 448.00003 -> clamp 448 = 0x7E; 0.5 * 512 = 256 = 0x78; -0.25 * 512 =
// -128 = 0xF0. te A * 256 = 224.00002 -> 224 = 1.75 * 2^7 = 0x76; 128 = 0x70; -64 = 0xE8.
// Without pow2: scale 0x43FFFFFF, A * it = 448 + 0.125 * 2^-15 -> 448 = 0x7E; 0.5 * it = 256 - 2^-16 -> 256.
TEST(QuantizeTorchao, TrainingPowerOfTwoRoundsItsLogarithm) {
  const std::vector<float> x{f(0x3F600001u), 0.5f, -0.25f, 0.0f};
  QuantSpec tr = with("fp8_tensor", ScaleConvention::TorchaoTraining);
  const QuantizedTensor plain = quant(x, 1, 4, tr);
  EXPECT_EQ(scale_bits(plain), (std::vector<uint32_t>{0x43FFFFFF}));
  EXPECT_EQ(codes(plain), (std::vector<uint32_t>{0x7E, 0x78, 0xF0, 0x00}));
  set_pow2_scale(tr, true, "test");
  const QuantizedTensor p2 = quant(x, 1, 4, tr);
  EXPECT_EQ(scale_bits(p2), (std::vector<uint32_t>{0x44000000}));
  EXPECT_EQ(codes(p2), (std::vector<uint32_t>{0x7E, 0x78, 0xF0, 0x00}));
  QuantSpec te = named_spec("fp8_tensor");
  set_pow2_scale(te, true, "test");
  const QuantizedTensor t2 = quant(x, 1, 4, te);
  EXPECT_EQ(scale_bits(t2), (std::vector<uint32_t>{0x3B800000}));
  EXPECT_EQ(codes(t2), (std::vector<uint32_t>{0x76, 0x70, 0xE8, 0x00}));
  // The rule itself: a power of two stays, the largest FP32 below 2 goes to 1 (log2 = 1 - 1.7e-7 is
  // representable near 1), 0 stays 0 (log2 -inf).
  EXPECT_EQ(torchao::round_scale_down_to_pow2(8.0f), 8.0f);
  EXPECT_EQ(torchao::round_scale_down_to_pow2(f(0x3FFFFFFFu)), 1.0f);
  EXPECT_EQ(torchao::round_scale_down_to_pow2(0.0f), 0.0f);
}

// NaN and Inf blocks follow IEEE, as torchao has no special case.
// [inf, 1, -2, 0]: torchao scale inf / 448 = +inf (CUDA: inf * fl32(1/448) = inf); codes inf / inf =
// NaN -> 0x7F, 1 / inf = +0, -2 / inf = -0 (0x80), 0. training: 1 / inf = 0, * 448 = 0: _scale 0,
// codes inf * 0 = NaN -> 0x7F, +0, -0, 0. E5M2: PyTorch's e5m2 NaN is 0x7F (c10 Float8_e5m2), not
// the canonical quiet NaN 0x7E mxsim's encoder writes. te: NaN scale_inv, codes 0.
TEST(QuantizeTorchao, NonFiniteBlocks) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x{inf, 1.0f, -2.0f, 0.0f};
  for (ScaleConvention c : {ScaleConvention::Torchao, ScaleConvention::TorchaoCuda}) {
    const QuantizedTensor q = quant(x, 1, 4, with("fp8_tensor", c));
    EXPECT_EQ(codes(q), (std::vector<uint32_t>{0x7F, 0x00, 0x80, 0x00})) << name_of(c);
    EXPECT_EQ(scale_bits(q), (std::vector<uint32_t>{0x7F800000})) << name_of(c);
  }
  const QuantizedTensor tr = quant(x, 1, 4, with("fp8_tensor", ScaleConvention::TorchaoTraining));
  EXPECT_EQ(codes(tr), (std::vector<uint32_t>{0x7F, 0x00, 0x80, 0x00}));
  EXPECT_EQ(scale_bits(tr), (std::vector<uint32_t>{0x00000000}));
  QuantSpec e5 = with("fp8_tensor_e5m2", ScaleConvention::Torchao);
  EXPECT_EQ(codes(quant(x, 1, 4, e5)), (std::vector<uint32_t>{0x7F, 0x00, 0x80, 0x00}));
  // A NaN amax: NaN scale (stored as 0x7FC00000) and every code NaN.
  const std::vector<float> n{std::numeric_limits<float>::quiet_NaN(), 1.0f};
  const QuantizedTensor qn = quant(n, 1, 2, with("fp8_tensor", ScaleConvention::Torchao));
  EXPECT_EQ(codes(qn), (std::vector<uint32_t>{0x7F, 0x7F}));
  EXPECT_EQ(scale_bits(qn), (std::vector<uint32_t>{0x7FC00000}));
  const QuantizedTensor tn = quant(n, 1, 2, with("fp8_tensor", ScaleConvention::TorchaoTraining));
  EXPECT_EQ(codes(tn), (std::vector<uint32_t>{0x7F, 0x7F}));
  // FNUZ's one NaN is 0x80.
  QuantSpec fz = with("fp8_tensor", ScaleConvention::Torchao);
  fz.elem = Format::E4M3FNUZ;
  EXPECT_EQ(codes(quant(x, 1, 4, fz)), (std::vector<uint32_t>{0x80, 0x00, 0x00, 0x00}));  // -0 does not exist
}

// hp_dtype BF16 (torchao given a bfloat16 tensor): the scale is computed in BF16. Row [1.5, y] with
// y = 0x3C100000 = 9 * 2^-10 (both BF16 values). FP32: scale 0x3B5B6DB7 (above); BF16: 0x3B5B6DB7
// rounded to BF16, low half 0x6DB7 < 0x8000: 0x3B5B0000 = 219 * 2^-16 (CUDA's 0x3B5B6DB8 alike).
// y / 0x3B5B6DB7 = 9 * 2^22 / 14380471 = 2.625 - 2.6e-8 -> fl32 2.625, the midpoint of 2.5 (0x42)
// and 2.75 (0x43): even, 0x42. y / 0x3B5B0000 = 576 / 219 = 2.630 -> 2.75 = 0x43.
// 1.5 / 0x3B5B0000 = 98304 / 219 = 448.88 -> clamp 448 = 0x7E.
TEST(QuantizeTorchao, Bf16ScaleForABf16Tensor) {
  const std::vector<float> x{1.5f, f(0x3C100000u)};
  QuantSpec s = with("fp8_tensor", ScaleConvention::Torchao);
  EXPECT_EQ(codes(quant(x, 1, 2, s)), (std::vector<uint32_t>{0x7E, 0x42}));
  set_hp_dtype(s, Format::BF16, "test");
  const QuantizedTensor q = quant(x, 1, 2, s);
  EXPECT_EQ(codes(q), (std::vector<uint32_t>{0x7E, 0x43}));
  EXPECT_EQ(scale_bits(q), (std::vector<uint32_t>{0x3B5B0000}));
  QuantSpec c = with("fp8_tensor", ScaleConvention::TorchaoCuda);
  set_hp_dtype(c, Format::BF16, "test");
  EXPECT_EQ(scale_bits(quant(x, 1, 2, c)), (std::vector<uint32_t>{0x3B5B0000}));
}

// Blockwise Float8Tensor (PerBlock [1, 128]): a [1, 256] row of two blocks, block 0 holding the row
// of the first test at columns 0..3 (amax 1.5), block 1 zeros: scales [0x3B5B6DB7, 0], block 1's
// codes all NaN. A ragged block (K = 200) has no torchao form and is refused.
TEST(QuantizeTorchao, BlockwiseFloat8Tensor) {
  std::vector<float> x(256, 0.0f);
  x[0] = 1.5f;
  x[1] = f(kX);
  const QuantizedTensor q = quant(x, 1, 256, with("fp8_block", ScaleConvention::Torchao));
  EXPECT_FALSE(q.spec.pow2_scale);  // fp8_block's TE default dropped
  EXPECT_EQ(scale_bits(q), (std::vector<uint32_t>{0x3B5B6DB7, 0x00000000}));
  EXPECT_EQ(q.data(0, 0, 1), 0x56);
  EXPECT_EQ(q.data(0, 0, 127), 0x00);
  EXPECT_EQ(q.data(0, 0, 128), 0x7F);
  EXPECT_EQ(q.data(0, 0, 255), 0x7F);
  std::vector<float> y(200, 1.0f);
  EXPECT_THROW(quant(y, 1, 200, with("fp8_block", ScaleConvention::Torchao)), std::invalid_argument);
  EXPECT_NO_THROW(quant(y, 1, 200, named_spec("fp8_block")));  // te takes ragged blocks
}

// What torchao has no counterpart for is refused, naming the setting.
TEST(QuantizeTorchao, Refusals) {
  QuantSpec mx = named_spec("mxfp8");
  EXPECT_THROW(set_scale_convention(mx, ScaleConvention::Torchao, "t"), std::invalid_argument);
  QuantSpec a = with("fp8_tensor", ScaleConvention::Torchao);
  EXPECT_THROW(set_pow2_scale(a, true, "t"), std::invalid_argument);
  QuantSpec t = with("fp8_tensor", ScaleConvention::TorchaoTraining);
  EXPECT_THROW(set_amax_epsilon(t, 1e-4, "t"), std::invalid_argument);
  EXPECT_THROW(set_hp_dtype(t, Format::BF16, "t"), std::invalid_argument);
  EXPECT_THROW(set_hp_dtype(a, Format::E4M3, "t"), std::invalid_argument);
  QuantSpec b = with("fp8_block", ScaleConvention::TorchaoTraining);  // Float8TrainingTensor is tensor/axiswise
  EXPECT_THROW(quant(std::vector<float>(128, 1.0f), 1, 128, b), std::invalid_argument);
  QuantSpec rz = with("fp8_tensor", ScaleConvention::Torchao);
  rz.round = RoundMode::RZ;
  EXPECT_THROW(quant({1.0f}, 1, 1, rz), std::invalid_argument);
  QuantSpec h = with("fp8_row", ScaleConvention::Torchao);
  h.hadamard16 = true;
  EXPECT_THROW(quant(std::vector<float>(16, 1.0f), 1, 16, h), std::invalid_argument);
  const double d[2] = {1.0, 2.0};
  EXPECT_THROW(emu::quantize_f64(d, 1, 1, 2, a), std::invalid_argument);
  EXPECT_EQ(scale_convention_from_name("torchao-training"), ScaleConvention::TorchaoTraining);
  EXPECT_THROW(scale_convention_from_name("ao"), std::invalid_argument);
  EXPECT_NE(a.describe().find("convention=torchao"), std::string::npos) << a.describe();
  EXPECT_FALSE(a == named_spec("fp8_tensor"));
}

}  // namespace
