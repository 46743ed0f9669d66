// The fast MX quantization kernels (emu/src/quantize_fast.cpp) against the
// reference quantizer (emu/src/quantize.cpp), bit for bit.
//
// The reference is reached by switching the fast path off
// (fast::set_enabled(false)); it is the oracle here only for equivalence:
// the reference itself is proved against Boost.Multiprecision elsewhere.
// A few golden values (OCP MX v1.0 §5.3.3 E2M1 table, ties from issue 2)
// guard against both sides being wrong in the same way.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "../emu/src/quantize_fast.hpp"
#include "mxsim/bits.hpp"
#include "mxsim/emu/cpu_path.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/scale_rule.hpp"

using namespace mxsim;
using emu::fast::set_enabled;
using emu::CpuPath;
using emu::cpu_path_name;

namespace {

const Format kFormats[] = {Format::E2M1, Format::E2M3, Format::E3M2, Format::E4M3, Format::E5M2};
const ScaleRule kRules[] = {ScaleRule::Floor, ScaleRule::Rceil, ScaleRule::Even, ScaleRule::Ceil};

QuantSpec mx(Format f, ScaleRule rule, bool tile) {
  QuantSpec s;
  s.elem = f;
  s.rule = rule;
  s.scale_kind = ScaleKind::E8M0;
  s.round = RoundMode::RNE;
  s.block_rows = tile ? 32 : 1;
  s.block_cols = 32;
  return s;
}

QuantizedTensor reference(const Tensor3f& x, const QuantSpec& s, Axis axis) {
  set_enabled(false);
  QuantizedTensor q = emu::quantize(x, s, axis);
  set_enabled(true);
  return q;
}

std::string where(const QuantSpec& s, Axis axis, const Tensor3f& x) {
  return s.describe() + (axis == Axis::Rows ? " axis=rows" : " axis=cols") + " shape=[" +
         std::to_string(x.shape(0)) + "," + std::to_string(x.shape(1)) + "," + std::to_string(x.shape(2)) + "]";
}

::testing::AssertionResult same(const QuantizedTensor& a, const QuantizedTensor& b) {
  if (a.groups != b.groups || a.rows != b.rows || a.cols != b.cols || a.transposed != b.transposed)
    return ::testing::AssertionFailure() << "shape/layout differs";
  if (a.data.shape() != b.data.shape() || a.scale_bytes.shape() != b.scale_bytes.shape())
    return ::testing::AssertionFailure() << "storage shape differs";
  for (size_t i = 0; i < a.scale_bytes.size(); ++i)
    if (a.scale_bytes.data()[i] != b.scale_bytes.data()[i])
      return ::testing::AssertionFailure() << "scale byte " << i << ": fast " << int(a.scale_bytes.data()[i])
                                           << " reference " << int(b.scale_bytes.data()[i]);
  for (size_t i = 0; i < a.data.size(); ++i)
    if (a.data.data()[i] != b.data.data()[i])
      return ::testing::AssertionFailure() << "data byte " << i << " (row " << i / a.data.shape(2) << ", byte "
                                           << i % a.data.shape(2) << "): fast 0x" << std::hex
                                           << int(a.data.data()[i]) << " reference 0x" << int(b.data.data()[i]);
  return ::testing::AssertionSuccess();
}

/// Fast (FP32 entry and BF16 entry where the values are BF16) vs reference.
void check(const Tensor3f& x, const QuantSpec& s, Axis axis) {
  SCOPED_TRACE(where(s, axis, x));
  ASSERT_TRUE(emu::fast::takes(s, axis)) << "the fast path must take this spec, or nothing is compared";
  const QuantizedTensor ref = reference(x, s, axis);
  EXPECT_TRUE(same(emu::quantize(x, s, axis), ref)) << "FP32 entry";
  bool bf16 = true;
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t b = f32_bits(x.data()[i]);
    bf16 = bf16 && (b & 0xFFFFu) == 0;
    h[i] = uint16_t(b >> 16);
  }
  if (bf16) {
    EXPECT_TRUE(same(emu::quantize_bf16(h.data(), x.shape(0), x.shape(1), x.shape(2), s, axis), ref)) << "BF16 entry";
  }
}

/// Random FP32 bits: random sign and mantissa, exponent field drawn per block
/// around a block base (so blocks span from subnormal to huge amax), with
/// zeros, -0 and, when asked, NaN/Inf sprinkled in.
Tensor3f random_tensor(std::mt19937& rng, size_t G, size_t R, size_t C, bool specials, bool bf16) {
  Tensor3f x = Tensor3f::from_shape({G, R, C});
  std::uniform_int_distribution<int> base(0, 254), spread(0, 40), pick(0, 199);
  std::uniform_int_distribution<uint32_t> any;
  int b = base(rng);
  for (size_t i = 0; i < x.size(); ++i) {
    if (i % 32 == 0) b = base(rng);
    uint32_t bits = any(rng);
    const int e = std::max(0, b - spread(rng));
    bits = (bits & 0x807FFFFFu) | (uint32_t(e) << 23);
    const int p = pick(rng);
    if (p == 0) bits &= 0x80000000u;                       // +-0
    if (specials && p == 1) bits = 0x7FC00000u;            // NaN
    if (specials && p == 2) bits = (bits & 0x80000000u) | 0x7F800000u;  // +-Inf
    if (bf16) bits &= 0xFFFF0000u;
    x.data()[i] = f32_from_bits(bits);
  }
  return x;
}

/// Blocks of exact ties: an anchor sets the scale (s from the shared rule),
/// the other elements are (element value or midpoint of two neighbours,
/// or just above/below max) * 2^s, random signs, all <= the anchor.
Tensor3f tie_tensor(std::mt19937& rng, size_t G, size_t R, size_t C, Format f, ScaleRule rule) {
  const FormatSpec fs = spec_of(f);
  std::vector<float> pts;  // non-negative element values and midpoints
  float prev = 0;
  for (uint32_t c = 0; c <= fs.max_code(); ++c) {
    const float v = decode(fs, c);
    pts.push_back(v);
    if (c) pts.push_back((prev + v) * 0.5f);  // exact: both on a grid one bit finer
    prev = v;
  }
  const float maxe = prev;
  pts.push_back(maxe * 1.0625f);
  pts.push_back(maxe * 1.25f);
  Tensor3f x = Tensor3f::from_shape({G, R, C});
  std::uniform_int_distribution<int> ex(-150, 125), ip(0, int(pts.size()) - 1), coin(0, 1);
  const float anchors[] = {maxe, maxe * 1.25f, maxe * 0.75f, maxe * 1.5f, maxe * 1.75f, maxe * 1.9375f};
  std::uniform_int_distribution<int> ia(0, 5);
  // Anchor and scale per (group, row-band, block column): right for 1x32
  // rows and 32x32 tiles alike, since the anchor sits in every row.
  for (size_t g = 0; g < G; ++g)
    for (size_t r = 0; r < R; ++r)
      for (size_t c0 = 0; c0 < C; c0 += 32) {
        const float anchor = anchors[ia(rng)] * pow2f(ex(rng));
        const int s = int(e8m0_scale(rule, f32_bits(anchor), fs)) - 127;
        for (size_t c = c0; c < std::min(C, c0 + 32); ++c) {
          float v = c == c0 ? anchor : pts[ip(rng)] * pow2f(s);
          if (std::fabs(v) > anchor) v = anchor;
          x(g, r, c) = coin(rng) ? -v : v;
        }
      }
  return x;
}

}  // namespace

TEST(QuantizeFast, TakesTheHotRecipes) {
  for (const char* name : {"mxfp4", "mxfp4_2d", "mxfp4_ocp", "mxfp8", "mxfp8_e5m2", "mxfp8_2d", "mxfp6_e2m3"})
    EXPECT_TRUE(emu::fast::takes(tensor_recipe(name), Axis::Cols)) << name;
  QuantSpec s = tensor_recipe("mxfp4");
  EXPECT_FALSE(emu::fast::takes(s, Axis::Rows)) << "columnwise 1-D is not the direct row kernel";
  EXPECT_TRUE(emu::fast::takes_staged(s, Axis::Rows)) << "columnwise 1-D goes through the staged copy";
  s.round = RoundMode::Stochastic;
  EXPECT_FALSE(emu::fast::takes(s, Axis::Cols));
  s = tensor_recipe("mxfp4");
  s.hadamard16 = true;
  EXPECT_FALSE(emu::fast::takes(s, Axis::Cols));
  EXPECT_TRUE(emu::fast::takes_staged(s, Axis::Cols));
  EXPECT_TRUE(emu::fast::takes_staged(s, Axis::Rows));
  s.round = RoundMode::Stochastic;
  EXPECT_FALSE(emu::fast::takes_staged(s, Axis::Rows));
  EXPECT_FALSE(emu::fast::takes(tensor_recipe("nvfp4"), Axis::Cols));
  EXPECT_FALSE(emu::fast::takes(tensor_recipe("fp8_block"), Axis::Cols));
  set_enabled(false);
  EXPECT_FALSE(emu::fast::takes(tensor_recipe("mxfp4"), Axis::Cols));
  set_enabled(true);
}

// E2M1 golden codes with scale 2^0 (amax 6 = 1.5 * 2^2: FLOOR, RCEIL and EVEN give
// s = 0; CEIL would give s = 1):
// OCP MX v1.0 §5.3.3 values 0, 0.5, 1, 1.5, 2, 3, 4, 6 are codes 0..7; ties go
// to the even code: 0.25 -> 0, 0.75 -> 1 (code 2), 1.25 -> 1, 1.75 -> 2,
// 2.5 -> 2, 3.5 -> 4, 5 -> 4 (code 6); -0 is code 8, -0.25 -> -0.
TEST(QuantizeFast, E2M1GoldenTies) {
  const float v[] = {6, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5, -0.0f, -0.25f, 0.5f, -6, 2.75f};
  const uint8_t want[] = {7, 0, 2, 2, 4, 4, 6, 6, 8, 8, 1, 15, 5};
  const size_t n = sizeof(v) / sizeof(v[0]);
  for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Rceil, ScaleRule::Even}) {
    for (bool tile : {false, true}) {
      Tensor3f x = Tensor3f::from_shape({1, 1, n});
      for (size_t i = 0; i < n; ++i) x(0, 0, i) = v[i];
      const QuantizedTensor q = emu::quantize(x, mx(Format::E2M1, rule, tile), Axis::Cols);
      ASSERT_EQ(q.scale_bytes(0, 0, 0), 127) << name_of(rule);
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(q.code(0, 0, i), want[i]) << name_of(rule) << " element " << i;
      EXPECT_EQ(q.data(0, 0, n / 2) >> 4, 0) << "odd row: last high nibble is padding 0";
    }
  }
}

TEST(QuantizeFast, RandomMagnitudesAllFormatsRulesLayouts) {
  std::mt19937 rng(20240601);
  for (Format f : kFormats)
    for (ScaleRule rule : kRules)
      for (bool tile : {false, true})
        for (bool bf16 : {false, true}) {
          check(random_tensor(rng, 2, 70, 96, false, bf16), mx(f, rule, tile), Axis::Cols);
          check(random_tensor(rng, 1, 33, 4096, false, bf16), mx(f, rule, tile), Axis::Cols);
        }
}

TEST(QuantizeFast, ExactTiesTimesPowersOfTwo) {
  std::mt19937 rng(7);
  for (Format f : kFormats)
    for (ScaleRule rule : kRules)
      for (bool tile : {false, true}) check(tie_tensor(rng, 2, 40, 160, f, rule), mx(f, rule, tile), Axis::Cols);
}

TEST(QuantizeFast, NaNInfZeroBlocks) {
  std::mt19937 rng(11);
  for (Format f : kFormats)
    for (ScaleRule rule : kRules)
      for (bool tile : {false, true}) {
        Tensor3f x = random_tensor(rng, 1, 64, 128, true, false);
        // Whole-zero and whole -0 blocks, and a block of only NaN.
        for (size_t c = 0; c < 32; ++c) {
          x(0, 0, c) = 0.0f;
          x(0, 1, 32 + c) = -0.0f;
          x(0, 2, 64 + c) = NAN;
        }
        check(x, mx(f, rule, tile), Axis::Cols);
        const QuantizedTensor q = emu::quantize(x, mx(f, rule, tile), Axis::Cols);
        size_t nan_scales = 0;
        for (uint8_t b : q.scale_bytes) nan_scales += b == kE8M0Nan;
        EXPECT_GT(nan_scales, 0u) << "the data must hold NaN/Inf blocks";
      }
}

TEST(QuantizeFast, EveryBf16PatternInBlocks) {
  // All 65536 BF16 patterns in order (32 consecutive mantissas per block, so
  // only exponent 0xFF blocks are NaN/Inf) and shuffled.
  std::vector<float> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = f32_from_bits(i << 16);
  std::mt19937 rng(3);
  for (bool shuffled : {false, true}) {
    if (shuffled) std::shuffle(all.begin(), all.end(), rng);
    Tensor3f x = Tensor3f::from_shape({1, 256, 256});
    std::copy(all.begin(), all.end(), x.data());
    for (Format f : kFormats)
      for (ScaleRule rule : kRules)
        for (bool tile : {false, true}) check(x, mx(f, rule, tile), Axis::Cols);
  }
}

TEST(QuantizeFast, RaggedShapesOddColsAndGroups) {
  std::mt19937 rng(5);
  const size_t dims[] = {1, 2, 7, 31, 32, 33, 63, 65, 97};
  for (Format f : {Format::E2M1, Format::E4M3, Format::E5M2})
    for (ScaleRule rule : {ScaleRule::Even, ScaleRule::Rceil})
      for (bool tile : {false, true})
        for (size_t r : dims)
          for (size_t c : dims) check(random_tensor(rng, 3, r, c, true, true), mx(f, rule, tile), Axis::Cols);
}

TEST(QuantizeFast, TilesIgnoreAxis) {
  std::mt19937 rng(9);
  for (Format f : {Format::E2M1, Format::E4M3})
    check(random_tensor(rng, 2, 45, 77, true, false), mx(f, ScaleRule::Floor, true), Axis::Rows);
}

TEST(QuantizeFast, Bf16EntryFallsBackToReference) {
  // Specs the fast path does not take: quantize_bf16 equals quantize() of the
  // widened values (columnwise, stochastic rounding, FP32 block scales).
  std::mt19937 rng(13);
  const Tensor3f x = random_tensor(rng, 2, 40, 64, false, true);
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = uint16_t(f32_bits(x.data()[i]) >> 16);
  QuantSpec sr = tensor_recipe("mxfp4");
  sr.round = RoundMode::Stochastic;
  for (auto [spec, axis] : {std::pair{tensor_recipe("mxfp4"), Axis::Rows}, std::pair{sr, Axis::Cols},
                            std::pair{tensor_recipe("fp8_block"), Axis::Cols}}) {
    SCOPED_TRACE(spec.describe());
    const QuantizedTensor a = emu::quantize_bf16(h.data(), 2, 40, 64, spec, axis);
    const QuantizedTensor b = reference(x, spec, axis);
    EXPECT_TRUE(same(a, b));
    EXPECT_EQ(a.scale_inv, b.scale_inv);
  }
}

TEST(QuantizeFast, Bf16EntryRejectsNullData) {
  EXPECT_THROW(emu::quantize_bf16(nullptr, 1, 2, 32, tensor_recipe("mxfp4")), std::invalid_argument);
  EXPECT_NO_THROW(emu::quantize_bf16(nullptr, 1, 0, 32, tensor_recipe("mxfp4")));
}

// ------------------------------------------------------------------------
// The staged copy (1x32 blocks along Axis::Rows, the Hadamard transform) and
// every CPU path (cpu_path.hpp) against the reference, asserting that the
// fast kernel of the path ran.
namespace {

}  // namespace
namespace mxsim::emu {
// gtest prints parameters with this (found by argument-dependent lookup).
inline void PrintTo(CpuPath p, std::ostream* os) { *os << cpu_path_name(p); }
}  // namespace mxsim::emu
namespace {

/// quantize(x, s, axis) ran the quantize kernel of `path` and equals the reference.
void check_ran(const Tensor3f& x, const QuantSpec& s, Axis axis, CpuPath path) {
  SCOPED_TRACE(where(s, axis, x) + " path " + cpu_path_name(path));
  const QuantizedTensor ref = reference(x, s, axis);
  emu::clear_last_kernel(emu::KernelSlot::Quantize);
  const QuantizedTensor q = emu::quantize(x, s, axis);
  const char* k = emu::last_kernel(emu::KernelSlot::Quantize);
  ASSERT_NE(k, nullptr) << "no fast quantize kernel ran";
  EXPECT_STREQ(k, emu::kernel_name(emu::KernelSlot::Quantize, path));
  EXPECT_TRUE(same(q, ref));
}

class QuantizePaths : public ::testing::TestWithParam<CpuPath> {
 protected:
  void SetUp() override {
    std::string why;
    if (!emu::cpu_supports(GetParam(), &why)) GTEST_SKIP() << cpu_path_name(GetParam()) << " path: " << why;
    prev_ = emu::cpu_path();
    emu::set_cpu_path(GetParam());
  }
  void TearDown() override {
    if (emu::cpu_supports(GetParam())) emu::set_cpu_path(prev_);
  }
  CpuPath prev_ = CpuPath::Scalar;
};

}  // namespace

TEST_P(QuantizePaths, RowsColsTilesHadamardEqualReference) {
  std::mt19937 rng(424242);
  for (Format f : kFormats)
    for (ScaleRule rule : kRules) {
      for (bool tile : {false, true})
        for (bool bf16 : {false, true}) {
          check_ran(random_tensor(rng, 2, 70, 96, true, bf16), mx(f, rule, tile), Axis::Cols, GetParam());
          check_ran(tie_tensor(rng, 1, 40, 160, f, rule), mx(f, rule, tile), Axis::Cols, GetParam());
        }
      // 1x32 along the logical rows (storage transposed), ragged both ways.
      check_ran(random_tensor(rng, 2, 77, 45, true, false), mx(f, rule, false), Axis::Rows, GetParam());
      // Hadamard along storage rows of 16 (both axes).
      QuantSpec h = mx(f, rule, false);
      h.hadamard16 = true;
      check_ran(random_tensor(rng, 2, 48, 80, true, false), h, Axis::Cols, GetParam());
      check_ran(random_tensor(rng, 1, 64, 33, true, false), h, Axis::Rows, GetParam());
    }
}

TEST_P(QuantizePaths, Bf16EntryEqualsReference) {
  std::mt19937 rng(99);
  for (Format f : kFormats)
    for (bool tile : {false, true}) {
      const Tensor3f x = random_tensor(rng, 2, 50, 130, true, true);
      const QuantSpec s = mx(f, ScaleRule::Even, tile);
      std::vector<uint16_t> h(x.size());
      for (size_t i = 0; i < x.size(); ++i) h[i] = uint16_t(f32_bits(x.data()[i]) >> 16);
      emu::clear_last_kernel(emu::KernelSlot::Quantize);
      const QuantizedTensor q = emu::quantize_bf16(h.data(), 2, 50, 130, s, Axis::Cols);
      EXPECT_STREQ(emu::last_kernel(emu::KernelSlot::Quantize), emu::kernel_name(emu::KernelSlot::Quantize, GetParam()));
      EXPECT_TRUE(same(q, reference(x, s, Axis::Cols)));
    }
}

INSTANTIATE_TEST_SUITE_P(CpuPaths, QuantizePaths, ::testing::Values(CpuPath::Avx512, CpuPath::Avx2, CpuPath::Scalar),
                         [](const ::testing::TestParamInfo<CpuPath>& i) { return std::string(emu::cpu_path_name(i.param)); });
