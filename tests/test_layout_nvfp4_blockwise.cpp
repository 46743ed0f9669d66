// NVFP4 and FP8-blockwise layouts of torchao and TransformerEngine
// (layout::from_torchao_nvfp4, from_te_nvfp4, from_te_fp8_blockwise), decoded
// through emu::dequantize3 and compared with values worked out by hand from
// the layout definitions (mxsim/layouts.hpp, with the peer source each one
// cites) and the dequantization rule of docs/numerics.md §2.4:
//   NVFP4:  fl32(fl32(e2m1(code) * e4m3(s_block)) * S_dec)
//   FP32:   fl32(e4m3(code) * scale_inv)
// Every padding byte or value is poisoned (0xFF = E4M3 NaN, FP32 NaN) to show
// that padding never reaches a result.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxsim/bits.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/layouts.hpp"

using namespace mxsim;

namespace {

// E2M1 codes 0..15 (OCP MX v1.0 Table 5): sign bit 3, then 0, 0.5, 1, 1.5, 2, 3, 4, 6.
constexpr float kE2M1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();


/// Two E2M1 codes per byte, element 2i in the low nibble.
std::vector<uint8_t> pack(const std::vector<uint8_t>& codes) {
  std::vector<uint8_t> p(codes.size() / 2);
  for (size_t i = 0; i < p.size(); ++i) p[i] = uint8_t(codes[2 * i] | codes[2 * i + 1] << 4);
  return p;
}

/// Byte offset of scale (r, c) in the 128 x 4 tile layout (cuBLAS "1D Block
/// Scaling Factors Layout"), for a matrix with `cols` scale columns.
size_t swizzled_at(size_t r, size_t c, size_t cols) {
  const size_t col_tiles = (cols + 3) / 4;
  return ((r / 128) * col_tiles + c / 4) * 512 + (r % 32) * 16 + (r % 128 / 32) * 4 + c % 4;
}

void expect_bits(const Tensor3f& v, size_t r, size_t c, float want, const std::string& what) {
  EXPECT_EQ(f32_bits(v(0, r, c)), f32_bits(want)) << what << " (" << r << ", " << c << "): " << v(0, r, c) << " vs " << want;
}

}  // namespace

// torchao NVFP4Tensor: one row of 32 E2M1 codes (codes 0..15, then 15..0),
// blocks of 16 with E4M3 scales 0x38 = 1.0 and 0x30 = 0.5, per_tensor_scale
// 0.25: element i = e2m1(code) * s * 0.25, all exact.
TEST(TorchaoNvfp4, HandValuesWithPerTensorScale) {
  std::vector<uint8_t> codes(32);
  for (size_t i = 0; i < 16; ++i) codes[i] = uint8_t(i), codes[16 + i] = uint8_t(15 - i);
  const std::vector<uint8_t> q = pack(codes), s = {0x38, 0x30};
  const QuantizedTensor t = layout::from_torchao_nvfp4({1, 16}, q, {1, 2}, s, 0.25f);
  EXPECT_EQ(t.spec.scale_kind, ScaleKind::UE4M3);
  EXPECT_EQ(t.spec.block_cols, 16);
  const Tensor3f v = emu::dequantize3(t);
  ASSERT_EQ(v.shape()[2], 32u);
  for (size_t i = 0; i < 32; ++i) {
    const float want = kE2M1[codes[i]] * (i < 16 ? 1.0f : 0.5f) * 0.25f;
    expect_bits(v, 0, i, want, "torchao nvfp4");
  }
  // The flattened scale bytes (torchao's slicing leaves them 1-D) read the same.
  const Tensor3f f = emu::dequantize3(layout::from_torchao_nvfp4({1, 16}, q, {2}, s, 0.25f));
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(f32_bits(f(0, 0, i)), f32_bits(v(0, 0, i))) << i;
  const std::vector<uint8_t> three = {0x38, 0x38, 0x38};
  EXPECT_THROW(layout::from_torchao_nvfp4({1, 16}, q, {1, 3}, three, 1.0f), std::invalid_argument);
}

// The two roundings of the contract, in its order: code 3.0 (E2M1 5), block
// scale 1.5 (E4M3 0x3C), tensor scale 1 + 2^-23. fl32(3 * 1.5) = 4.5 exactly;
// 4.5 * (1 + 2^-23) = 4.5 + 1.125 ulp(2^-21) -> 4.5 + 2^-21 (0x40900001).
// Multiplying the two scales first (torchao's to_dtype order) would give
// fl32(1.5 + 1.5 * 2^-23) = 1.5 + 2^-22 (tie to even), then 3 times that
// = 4.5 + 1.5 ulp -> 4.5 + 2^-20 (0x40900002): a different number.
TEST(TorchaoNvfp4, BlockScaleThenTensorScaleOrder) {
  std::vector<uint8_t> codes(16, 0);
  codes[0] = 5;
  const std::vector<uint8_t> s15 = {0x3C};
  const QuantizedTensor t = layout::from_torchao_nvfp4({1, 8}, pack(codes), {1, 1}, s15, f32_from_bits(0x3F800001));
  EXPECT_EQ(f32_bits(emu::dequantize3(t)(0, 0, 0)), 0x40900001u);
}

// Swizzled scales (NVFP4Tensor with _is_swizzled_scales): 130 rows x 2 blocks,
// scale (r, c) = E4M3 with exponent field 4 + r % 5 + c (2^(r % 5 + c - 3)),
// every other byte of the padded [256, 4] tiles 0xFF (E4M3 NaN): no NaN out.
TEST(TorchaoNvfp4, SwizzledScalesIgnorePoisonedPadding) {
  const size_t R = 130, K = 32;
  std::vector<uint8_t> codes(R * K, 2);  // 1.0
  std::vector<uint8_t> sw(256 * 4, 0xFF);
  for (size_t r = 0; r < R; ++r)
    for (size_t c = 0; c < 2; ++c) sw[swizzled_at(r, c, 2)] = uint8_t((4 + r % 5 + c) << 3);
  const Tensor3f v = emu::dequantize3(layout::from_torchao_nvfp4({R, K / 2}, pack(codes), {sw.size()}, sw, 1.0f, true));
  for (size_t r = 0; r < R; ++r)
    for (size_t k = 0; k < K; ++k) ASSERT_EQ(v(0, r, k), std::ldexp(1.0f, int(r % 5 + k / 16) - 3)) << r << " " << k;
}

// TE NVFP4Tensor rowwise: data [3, 16] bytes (K = 32), scale_inv [128, 4] with
// rows 3.. and columns 2, 3 poisoned 0xFF. amax = 10752 = 2688 * 4 gives
// S_enc = 0.25 and S_dec = 4 exactly: element = e2m1(code) * s * 4.
TEST(TeNvfp4, RowwiseHandValuesPoisonedPadding) {
  const size_t M = 3, K = 32;
  std::vector<uint8_t> codes(M * K);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t(i % 16);
  std::vector<uint8_t> sc(128 * 4, 0xFF);
  const uint8_t blk[3][2] = {{0x38, 0x30}, {0x40, 0x01}, {0x3C, 0x38}};  // 1, 0.5; 2, 2^-9; 1.5, 1
  for (size_t r = 0; r < M; ++r)
    for (size_t b = 0; b < 2; ++b) sc[r * 4 + b] = blk[r][b];
  const float s_val[3][2] = {{1, 0.5f}, {2, 0x1p-9f}, {1.5f, 1}};
  const QuantizedTensor t = layout::from_te_nvfp4(false, {M, K / 2}, pack(codes), {128, 4}, sc, 10752.0f);
  EXPECT_EQ(t.tensor_scale_inv, 4.0f);
  const Tensor3f v = emu::dequantize3(t);
  for (size_t r = 0; r < M; ++r)
    for (size_t k = 0; k < K; ++k) expect_bits(v, r, k, kE2M1[codes[r * K + k]] * s_val[r][k / 16] * 4.0f, "te nvfp4");
  // The padded shape is required exactly.
  EXPECT_THROW(layout::from_te_nvfp4(false, {M, K / 2}, pack(codes), {3, 2}, std::vector<uint8_t>(6, 0x38), 1.0f),
               std::invalid_argument);
}

// The decode scale from an amax that is not a power of two: amax = 3,
// S_enc = fl32(2688 / 3) = 896 exactly, S_dec = fl32(1 / 896) = 0x3A924925
// (1/7 = 0x3E124925 times 2^-7). Code 6.0 with block scale 1.0:
// 6 * 0x3A924925 = 6 * 9586981 * 2^-30 = 57521886 * 2^-30, whose 24-bit
// significand is 14380471.5: a tie, to even 14380472 -> 0x3BDB6DB8.
// NaN amax: S_dec NaN, every element NaN. Negative amax: refused.
TEST(TeNvfp4, DecodeScaleFromAmaxAndSpecials) {
  std::vector<uint8_t> codes(16, 7);
  std::vector<uint8_t> sc(128 * 4, 0xFF);
  sc[0] = 0x38;
  const QuantizedTensor t = layout::from_te_nvfp4(false, {1, 8}, pack(codes), {128, 4}, sc, 3.0f);
  EXPECT_EQ(f32_bits(t.tensor_scale_inv), 0x3A924925u);
  EXPECT_EQ(f32_bits(emu::dequantize3(t)(0, 0, 5)), 0x3BDB6DB8u);
  const Tensor3f n = emu::dequantize3(layout::from_te_nvfp4(false, {1, 8}, pack(codes), {128, 4}, sc, kNaN));
  for (size_t k = 0; k < 16; ++k) EXPECT_TRUE(std::isnan(n(0, 0, k))) << k;
  EXPECT_THROW(layout::from_te_nvfp4(false, {1, 8}, pack(codes), {128, 4}, sc, -1.0f), std::invalid_argument);
}

// TE NVFP4Tensor columnwise: data [K = 4, M / 2 = 16] (the transpose, packed
// along M = 32), scale_inv [roundup(4, 128), roundup(2, 4)] = [128, 4], scale
// of (k, m) at [k, m / 16]. Logical (m, k) = e2m1(code(k, m)) * s[k][m / 16] * S_dec.
// Swizzled copy of the same scales: the same values.
TEST(TeNvfp4, ColumnwiseIsTheTransposeAndSwizzledEqualsPlain) {
  const size_t K = 4, M = 32;
  std::vector<uint8_t> codes(K * M);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t((i * 7) % 16);
  std::vector<uint8_t> sc(128 * 4, 0xFF), sw(128 * 4, 0xFF);
  for (size_t k = 0; k < K; ++k)
    for (size_t b = 0; b < 2; ++b) {
      const uint8_t e = uint8_t((5 + k + b) << 3);  // 2^(k + b - 2)
      sc[k * 4 + b] = e;
      sw[swizzled_at(k, b, 2)] = e;
    }
  const QuantizedTensor t = layout::from_te_nvfp4(true, {K, M / 2}, pack(codes), {128, 4}, sc, 10752.0f);
  EXPECT_EQ(t.rows, M);
  EXPECT_EQ(t.cols, K);
  const Tensor3f v = emu::dequantize3(t);
  const Tensor3f w = emu::dequantize3(layout::from_te_nvfp4(true, {K, M / 2}, pack(codes), {128, 4}, sw, 10752.0f, true));
  for (size_t m = 0; m < M; ++m)
    for (size_t k = 0; k < K; ++k) {
      const float want = kE2M1[codes[k * M + m]] * std::ldexp(1.0f, int(k + m / 16) - 2) * 4.0f;
      expect_bits(v, m, k, want, "columnwise");
      expect_bits(w, m, k, want, "columnwise swizzled");
    }
}

// Float8BlockwiseQTensor, 1 x 128 blocks, rowwise: data [3, 200] (two blocks
// per row, the second partial), scale_inv [ceil(200/128), roundup(3, 4)] =
// [2, 4], scale of (m, kb) at [kb, m] = 2^(m - kb); column 3 is padding (NaN).
// Codes: 0x38 = 1.0, 0xC0 = -2, 0x7E = 448 by position.
TEST(TeFp8Blockwise, Rowwise1x128HandValues) {
  const size_t M = 3, K = 200;
  const uint8_t cyc[3] = {0x38, 0xC0, 0x7E};
  const float val[3] = {1.0f, -2.0f, 448.0f};
  std::vector<uint8_t> d(M * K);
  for (size_t i = 0; i < d.size(); ++i) d[i] = cyc[i % 3];
  std::vector<float> si(2 * 4, kNaN);
  for (size_t kb = 0; kb < 2; ++kb)
    for (size_t m = 0; m < M; ++m) si[kb * 4 + m] = std::ldexp(1.0f, int(m) - int(kb));
  const QuantizedTensor t = layout::from_te_fp8_blockwise(Format::E4M3, false, 0, {M, K}, d, {2, 4}, si);
  EXPECT_EQ(t.spec.block_cols, 128);
  EXPECT_EQ(t.spec.block_rows, 1);
  const Tensor3f v = emu::dequantize3(t);
  for (size_t m = 0; m < M; ++m)
    for (size_t k = 0; k < K; ++k)
      expect_bits(v, m, k, val[(m * K + k) % 3] * std::ldexp(1.0f, int(m) - int(k / 128)), "1x128 rowwise");
}

// 128 x 128 tiles, rowwise: data [130, 200], scale_inv [ceil(130/128),
// roundup(ceil(200/128), 4)] = [2, 4], tile (mb, kb) at [mb, kb] = 2^(2 mb + kb);
// columns 2, 3 padding (NaN). All codes 0x38 = 1.0.
TEST(TeFp8Blockwise, Rowwise128x128HandValues) {
  const size_t M = 130, K = 200;
  const std::vector<uint8_t> d(M * K, 0x38);
  std::vector<float> si(2 * 4, kNaN);
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 2; ++j) si[i * 4 + j] = std::ldexp(1.0f, int(2 * i + j));
  const QuantizedTensor t = layout::from_te_fp8_blockwise(Format::E4M3, false, 0, {M, K}, d, {2, 4}, si);
  EXPECT_EQ(t.spec.block_rows, 128);
  const Tensor3f v = emu::dequantize3(t);
  for (size_t m = 0; m < M; ++m)
    for (size_t k = 0; k < K; ++k) ASSERT_EQ(v(0, m, k), std::ldexp(1.0f, int(2 * (m / 128) + k / 128))) << m << " " << k;
}

// Columnwise copies (data [K, M], the transpose). 1 x 128: data [5, 130],
// scale_inv [ceil(130/128), roundup(5, 4)] = [2, 8], scale of column k's block
// mb at [mb, k] = 2^(k - mb), columns 5..7 NaN. 128 x 128: data [200, 130],
// scale_inv [ceil(200/128), roundup(ceil(130/128), 4)] = [2, 4], tile (kb, mb)
// at [kb, mb] = 2^(kb - 2 mb). Codes: E5M2 0x3C = 1.0, 0xC4 = -4 by parity of
// the storage index. Logical (m, k) takes storage (k, m).
TEST(TeFp8Blockwise, ColumnwiseCopiesAreTransposes) {
  {
    const size_t K = 5, M = 130;
    std::vector<uint8_t> d(K * M);
    for (size_t i = 0; i < d.size(); ++i) d[i] = i % 2 ? 0xC4 : 0x3C;
    std::vector<float> si(2 * 8, kNaN);
    for (size_t mb = 0; mb < 2; ++mb)
      for (size_t k = 0; k < K; ++k) si[mb * 8 + k] = std::ldexp(1.0f, int(k) - int(mb));
    const QuantizedTensor t = layout::from_te_fp8_blockwise(Format::E5M2, true, 0, {K, M}, d, {2, 8}, si);
    ASSERT_EQ(t.rows, M);
    const Tensor3f v = emu::dequantize3(t);
    for (size_t m = 0; m < M; ++m)
      for (size_t k = 0; k < K; ++k)
        expect_bits(v, m, k, ((k * M + m) % 2 ? -4.0f : 1.0f) * std::ldexp(1.0f, int(k) - int(m / 128)), "1x128 col");
  }
  {
    const size_t K = 200, M = 130;
    std::vector<uint8_t> d(K * M);
    for (size_t i = 0; i < d.size(); ++i) d[i] = i % 2 ? 0xC4 : 0x3C;
    std::vector<float> si(2 * 4, kNaN);
    for (size_t kb = 0; kb < 2; ++kb)
      for (size_t mb = 0; mb < 2; ++mb) si[kb * 4 + mb] = std::ldexp(1.0f, int(kb) - 2 * int(mb));
    const QuantizedTensor t = layout::from_te_fp8_blockwise(Format::E5M2, true, 0, {K, M}, d, {2, 4}, si);
    ASSERT_EQ(t.rows, M);
    const Tensor3f v = emu::dequantize3(t);
    for (size_t m = 0; m < M; ++m)
      for (size_t k = 0; k < K; ++k)
        expect_bits(v, m, k, ((k * M + m) % 2 ? -4.0f : 1.0f) * std::ldexp(1.0f, int(k / 128) - 2 * int(m / 128)),
                    "128x128 col");
  }
}

// A scale_inv shape both block shapes give (data [4, 128]: [1, 4] either way)
// is refused unless block_scaling_dim says which; the two readings differ:
// 1 x 128 takes scale [0, m] for row m, 128 x 128 takes [0, 0] for all.
TEST(TeFp8Blockwise, AmbiguousShapeNeedsTheBlockDim) {
  const std::vector<uint8_t> d(4 * 128, 0x38);
  const std::vector<float> si = {1, 2, 4, 8};
  try {
    layout::from_te_fp8_blockwise(Format::E4M3, false, 0, {4, 128}, d, {1, 4}, si);
    ADD_FAILURE() << "ambiguous shape accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("block_scaling_dim"), std::string::npos) << e.what();
  }
  const Tensor3f a = emu::dequantize3(layout::from_te_fp8_blockwise(Format::E4M3, false, 1, {4, 128}, d, {1, 4}, si));
  const Tensor3f b = emu::dequantize3(layout::from_te_fp8_blockwise(Format::E4M3, false, 2, {4, 128}, d, {1, 4}, si));
  for (size_t m = 0; m < 4; ++m) {
    EXPECT_EQ(a(0, m, 100), si[m]) << m;
    EXPECT_EQ(b(0, m, 100), 1.0f) << m;
  }
  // Neither shape: both candidates named.
  try {
    layout::from_te_fp8_blockwise(Format::E4M3, false, 0, {4, 128}, d, {2, 2}, si);
    ADD_FAILURE() << "wrong shape accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[1, 4] for 1 x 128 blocks"), std::string::npos) << e.what();
  }
}
