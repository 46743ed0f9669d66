// The swizzled ("blocked") E8M0 scale layout of cuBLAS / CUTLASS block-scaled
// GEMMs (layout::unswizzle_blocked_scales). The oracle builds the layout the
// way torchao's `to_blocked` defines it, as a sequence of reshapes and axis
// permutations (pad to [128 a, 4 b]; view [a, 128, b, 4]; permute to
// [a, b, 128, 4]; view [a b, 4, 32, 4]; swap axes 1 and 2; flatten), walked
// index by index here, not from the closed form the library uses. Padding
// bytes are poisoned (0xFF, a NaN scale) to show they are never read.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "mxsim/layouts.hpp"

using namespace mxsim;

namespace {

/// to_blocked of one [rows, cols] matrix, padding filled with `pad`.
std::vector<uint8_t> to_blocked_reference(const std::vector<uint8_t>& s, size_t rows, size_t cols, uint8_t pad) {
  const size_t a = (rows + 127) / 128, b = (cols + 3) / 4;
  // padded [128 a, 4 b]
  std::vector<uint8_t> p(a * 128 * b * 4, pad);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) p[r * b * 4 + c] = s[r * cols + c];
  // view [a, 128, b, 4] -> permute (0, 2, 1, 3): t1[i][j][k][l] = p[i][k][j][l], shape [a, b, 128, 4]
  // view [a b, 4, 32, 4]: the 128 axis k = 32 u + v  ->  t2[n][u][v][l], n = i b + j
  // transpose (1, 2): t3[n][v][u][l] = t2[n][u][v][l]; flatten t3 (shape [a b, 32, 4, 4]).
  std::vector<uint8_t> out(p.size());
  size_t o = 0;
  for (size_t n = 0; n < a * b; ++n)
    for (size_t v = 0; v < 32; ++v)
      for (size_t u = 0; u < 4; ++u)
        for (size_t l = 0; l < 4; ++l) {
          const size_t i = n / b, j = n % b, k = 32 * u + v;
          out[o++] = p[(i * 128 + k) * (b * 4) + j * 4 + l];
        }
  return out;
}

std::vector<uint8_t> random_scales(std::mt19937& g, size_t n) {
  std::vector<uint8_t> s(n);
  for (uint8_t& v : s) v = uint8_t(100 + g() % 55);  // finite E8M0 bytes, never the 0xFF poison
  return s;
}

}  // namespace

// cuBLAS's statement of the layout, one tile: scale (33, 2) of a 128 x 4 tile
// sits at byte (33 % 32) * 16 + (33 / 32) * 4 + 2 = 22, scale (127, 3) at 511.
TEST(BlockedScales, PublishedPositionsInOneTile) {
  std::vector<uint8_t> plain(128 * 4, 0);
  plain[33 * 4 + 2] = 7;
  plain[127 * 4 + 3] = 9;
  const std::vector<uint8_t> blocked = to_blocked_reference(plain, 128, 4, 0xFF);
  EXPECT_EQ(blocked[22], 7);
  EXPECT_EQ(blocked[511], 9);
  EXPECT_EQ(layout::unswizzle_blocked_scales(blocked, 1, 128, 4), plain);
}

// Ragged shapes (rows and cols not multiples of 128 and 4), several tiles in
// both directions, and groups one after another; poisoned padding.
TEST(BlockedScales, RoundTripsEveryShapeWithPoisonedPadding) {
  std::mt19937 g(5);
  for (const auto& [rows, cols] : {std::pair<size_t, size_t>{1, 1}, {5, 3}, {128, 4}, {129, 5}, {200, 7}, {300, 12}}) {
    for (size_t groups : {1u, 3u}) {
      std::vector<uint8_t> plain, blocked;
      for (size_t e = 0; e < groups; ++e) {
        const std::vector<uint8_t> s = random_scales(g, rows * cols);
        const std::vector<uint8_t> b = to_blocked_reference(s, rows, cols, 0xFF);
        plain.insert(plain.end(), s.begin(), s.end());
        blocked.insert(blocked.end(), b.begin(), b.end());
      }
      EXPECT_EQ(layout::unswizzle_blocked_scales(blocked, groups, rows, cols), plain)
          << groups << " x [" << rows << ", " << cols << "]";
    }
  }
}

// torchao's reader with blocked_scales gives the same QuantizedTensor as with the plain scales.
TEST(BlockedScales, FeedTheTorchaoReaderUnchanged) {
  std::mt19937 g(6);
  const size_t rows = 130, K = 96;  // 3 blocks of 32 per row
  std::vector<uint8_t> qdata(rows * K / 2);
  for (uint8_t& b : qdata) b = uint8_t(g());
  const std::vector<uint8_t> s = random_scales(g, rows * 3);
  const QuantizedTensor a = layout::from_torchao(Format::E2M1, 32, {rows, K / 2}, qdata, {rows, 3}, s);
  const std::vector<uint8_t> blocked = to_blocked_reference(s, rows, 3, 0xFF);
  const QuantizedTensor b = layout::from_torchao(Format::E2M1, 32, {rows, K / 2}, qdata, {blocked.size()}, blocked, true);
  ASSERT_EQ(a.scale_bytes.size(), b.scale_bytes.size());
  EXPECT_TRUE(std::equal(a.scale_bytes.begin(), a.scale_bytes.end(), b.scale_bytes.begin()));
}

// Not a scale layout, but the same reader: 6-bit codes one per byte with bits above the width
// are refused by every layout (from_mxsim, also the Python bindings' path), naming the first such
// index, its byte and the format; packed E2M1 and 8-bit codes take every byte value.
TEST(TorchaoCodes, SixBitBytesWithBitsAboveTheWidthAreRefused) {
  const std::vector<uint8_t> one(1, 127);
  std::vector<uint8_t> q(32, 0x3F);  // the largest 6-bit code
  EXPECT_NO_THROW(layout::from_torchao(Format::E2M3, 32, {1, 32}, q, {1, 1}, one));
  q[7] = 0x40;
  q[9] = 0xC5;
  for (Format f : {Format::E2M3, Format::E3M2}) {
    try {
      layout::from_torchao(f, 32, {1, 32}, q, {1, 1}, one);
      FAIL() << "no error";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("code 7 is the byte 0x40, which is no " + std::string(short_name(f))),
                std::string::npos)
          << e.what();
    }
  }
  std::vector<uint8_t> every(256);
  for (size_t b = 0; b < 256; ++b) every[b] = uint8_t(b);
  EXPECT_NO_THROW(layout::from_torchao(Format::E2M1, 32, {1, 256}, every, {1, 16}, std::vector<uint8_t>(16, 127)));
  EXPECT_NO_THROW(layout::from_torchao(Format::E4M3, 32, {1, 256}, every, {1, 8}, std::vector<uint8_t>(8, 127)));
}

TEST(BlockedScales, WrongSizeIsRefusedNamingTheShapes) {
  const std::vector<uint8_t> short_by_one(128 * 4 - 1);
  try {
    layout::unswizzle_blocked_scales(short_by_one, 1, 100, 3);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("padded to [128, 4] need 512"), std::string::npos) << e.what();
  }
}

// TransformerEngine's padded MXFP8 scale_inv (rowwise [roundup(M, 128),
// roundup(ceil(K/32), 4)], columnwise [roundup(ceil(M/32), 4), roundup(K, 128)]):
// padding poisoned with 0xFF (a NaN scale) never reaches the tensor read.
TEST(TePaddedScales, PoisonedPaddingNeverReachesTheTensor) {
  const size_t M = 3, K = 64;  // rowwise: 2 blocks per row; columnwise: 1 block per column
  const std::vector<uint8_t> data(M * K, 0x38);  // E4M3 1.0
  std::vector<uint8_t> row(128 * 4, 0xFF), col(4 * 128, 0xFF);
  for (size_t r = 0; r < M; ++r)
    for (size_t b = 0; b < 2; ++b) row[r * 4 + b] = uint8_t(120 + r * 2 + b);
  for (size_t c = 0; c < K; ++c) col[c] = uint8_t(100 + c % 50);
  const QuantizedTensor qr = layout::from_te_mxfp8(Format::E4M3, false, {M, K}, data, {128, 4}, row);
  ASSERT_EQ(qr.scale_bytes.size(), M * 2);
  for (size_t r = 0; r < M; ++r)
    for (size_t b = 0; b < 2; ++b) EXPECT_EQ(qr.scale_bytes(0, r, b), 120 + r * 2 + b);
  const QuantizedTensor qc = layout::from_te_mxfp8(Format::E4M3, true, {M, K}, data, {4, 128}, col);
  ASSERT_EQ(qc.scale_bytes.size(), K);  // transposed storage [K, 1]
  for (size_t c = 0; c < K; ++c) EXPECT_EQ(qc.scale_bytes(0, c, 0), 100 + c % 50) << c;
}

// layout::transpose_groups, hand-written: two groups of [2, 3]
//   g0 = [[1 2 3] [4 5 6]], g1 = [[7 8 9] [10 11 12]]
// become [3, 2] each: [[1 4] [2 5] [3 6]], [[7 10] [8 11] [9 12]]; twice is the identity;
// a size that is not groups x rows x cols is refused.
TEST(TransposeGroups, TwoGroupsByHandAndWrongSizes) {
  const std::vector<uint8_t> src = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<uint8_t> want = {1, 4, 2, 5, 3, 6, 7, 10, 8, 11, 9, 12};
  const std::vector<uint8_t> t = layout::transpose_groups<uint8_t>(src, 2, 2, 3);
  EXPECT_EQ(t, want);
  EXPECT_EQ(layout::transpose_groups<uint8_t>(t, 2, 3, 2), src);
  EXPECT_THROW(layout::transpose_groups<uint8_t>(src, 2, 3, 3), std::invalid_argument);
  EXPECT_THROW(layout::transpose_groups<uint8_t>(src, size_t(1) << 62, 4, 4), std::invalid_argument);  // overflows
}
