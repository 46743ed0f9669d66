// nvfp4-exact (docs/numerics.md §5.2.5) against an independent oracle: the
// E2M1 and E4M3 values from their bit fields by ldexp (not the format table),
// each block's exact rational value, the accumulator rounded to nearest-even
// by comparing FP32 neighbours, alpha = fl32(ta * tb) and the final
// alpha * acc + c rounded the same way (no shared rounding code). Inputs are
// built code by code: designed ties (to even, both ways), blocks that round,
// subnormal and zero block scales, NaN scales, 448 scales, subnormal and huge
// tensor scales, accumulation into -0 and into large values, BF16 output,
// ragged K. The reference, every CPU path and both grouped forms (fprop with
// 1x16 and 16x16 weights, wgrad) are compared with it.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <boost/multiprecision/cpp_int.hpp>
#include <cfloat>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "mxsim/emu/cpu_path.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/quantize.hpp"
#include "gemm_test_util.hpp"

using namespace mxsim;
using namespace mxsim::emu;
using boost::multiprecision::cpp_rational;

namespace {

cpp_rational rat(double v) {  // v exact in double
  int e;
  const double m = std::frexp(v, &e);
  cpp_rational r(int64_t(std::ldexp(m, 53)));
  e -= 53;
  const boost::multiprecision::cpp_int p = boost::multiprecision::cpp_int(1) << std::abs(e);
  return e >= 0 ? r * cpp_rational(p) : r / cpp_rational(p);
}

/// RNE of an exact rational into FP32 by comparing neighbours; beyond the
/// overflow threshold (FLT_MAX + half its ulp) +-Inf; a non-zero value that
/// rounds to zero keeps its sign (IEEE 754).
struct Rounded {
  float v;
  bool rounded, tie;
};
Rounded rne(const cpp_rational& r) {
  const cpp_rational thr = rat(FLT_MAX) + rat(std::ldexp(1.0, 103));
  if (abs(r) >= thr) return {r > 0 ? INFINITY : -INFINITY, true, abs(r) == thr};
  float best = float(r.convert_to<double>());
  if (std::isinf(best)) best = std::copysign(FLT_MAX, best);
  for (int step = 0; step < 3; ++step)
    for (float c : {std::nextafter(best, -INFINITY), std::nextafter(best, INFINITY)}) {
      if (std::isinf(c)) continue;
      const cpp_rational dc = abs(rat(c) - r), db = abs(rat(best) - r);
      if (dc < db || (dc == db && (std::bit_cast<uint32_t>(c) & 1) == 0 && (std::bit_cast<uint32_t>(best) & 1)))
        best = c;
    }
  const cpp_rational d = abs(rat(best) - r);
  bool tie = false;
  if (d != 0)
    for (float c : {std::nextafter(best, -INFINITY), std::nextafter(best, INFINITY)}) tie |= abs(rat(c) - r) == d;
  if (best == 0.0f) best = r < 0 ? -0.0f : 0.0f;
  return {best, d != 0, tie};
}

/// E2M1 code -> value from its fields (sign, 2 exponent bits, 1 mantissa bit).
double e2m1(uint32_t c) {
  const int e = (c >> 1) & 3, m = c & 1;
  const double v = e == 0 ? m * 0.5 : std::ldexp(1.0 + m * 0.5, e - 1);
  return (c & 8) ? -v : v;
}
/// E4M3 byte -> value (bias 7, 0x7F / 0xFF NaN).
double e4m3(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  if ((b & 0x7F) == 0x7F) return NAN;
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (b & 0x80) ? -v : v;
}

/// An NVFP4 operand [rows, cols] built code by code, blocks of 16 along cols (1x16) or 16x16 tiles.
QuantizedTensor make(size_t rows, size_t cols, bool tiles) {
  QuantizedTensor q;
  q.spec = tensor_recipe(tiles ? "nvfp4_2d" : "nvfp4");
  q.rows = rows;
  q.cols = cols;
  q.data = Bytes3::from_shape({1, rows, (cols + 1) / 2});
  q.data.fill(0);
  q.scale_bytes = Bytes3::from_shape({1, (rows + q.block_rows() - 1) / q.block_rows(), (cols + 15) / 16});
  q.scale_bytes.fill(0x38);  // 1.0
  return q;
}
uint8_t& scale_at(QuantizedTensor& q, size_t r, size_t k) { return q.scale_bytes(0, r / q.block_rows(), k / 16); }
/// The scale of element (r, k)'s block, where the tensor has that element.
void set_scale(QuantizedTensor& q, size_t r, size_t k, uint8_t v) {
  if (r < q.rows && k < q.cols) scale_at(q, r, k) = v;
}

/// RNE to BF16 by the bit pattern (the carry into the exponent gives Inf past BF16's largest value).
float to_bf16(float x) {
  if (std::isnan(x)) return x;
  const uint32_t b = std::bit_cast<uint32_t>(x);
  return std::bit_cast<float>((b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u);
}

/// The oracle's output element (i, j) of A [M, K] . B [N, K]^T.
float oracle(const QuantizedTensor& A, size_t i, const QuantizedTensor& B, size_t j, float c, bool bf16, int& ties,
             int& roundings) {
  const size_t K = A.cols;
  float accf = 0.0f;
  bool nan = false;
  for (size_t k0 = 0; k0 < K; k0 += 16) {
    const double sa = e4m3(A.scale_bytes(0, i / A.block_rows(), k0 / 16));
    const double sb = e4m3(B.scale_bytes(0, j / B.block_rows(), k0 / 16));
    if (std::isnan(sa) || std::isnan(sb)) nan = true;
    if (nan) continue;
    cpp_rational blk = 0;
    for (size_t k = k0; k < std::min(K, k0 + 16); ++k) blk += rat(e2m1(A.code(0, i, k))) * rat(e2m1(B.code(0, j, k)));
    const Rounded r = rne(rat(accf) + blk * rat(sa) * rat(sb));
    ties += r.tie;
    roundings += r.rounded;
    accf = r.v;
  }
  if (nan) return std::bit_cast<float>(0x7FC00000u);
  if (K == 0) return bf16 ? to_bf16(c) : c;  // nothing is added; the output cast still applies
  const float alpha = rne(rat(A.tensor_scale_inv) * rat(B.tensor_scale_inv)).v;
  const cpp_rational exact = rat(accf) * rat(alpha) + rat(c);
  float out = rne(exact).v;
  if (exact == 0)  // IEEE 754 §6.3: an exact zero sum is +0, unless both addends are -0
    out = (accf == 0.0f && (std::signbit(accf) != std::signbit(alpha)) && std::signbit(c)) ? -0.0f : 0.0f;
  return bf16 ? to_bf16(out) : out;
}

/// Designed operands: row/column 0 holds ties, 1 ties away to even up, 2 a rounding
/// block after a large one, 3 subnormal scales, 4 a zero-scale block, 5 a NaN scale
/// (tiles: the whole tile's rows), the rest random codes under random scales.
void fill(QuantizedTensor& q, std::mt19937& g, bool allow_nan) {
  std::uniform_int_distribution<uint32_t> code(0, 15);
  std::uniform_int_distribution<int> sbyte(0x01, 0x7E);
  for (size_t r = 0; r < q.rows; ++r)
    for (size_t k = 0; k < q.cols; ++k) q.set_code(0, r, k, code(g));
  for (auto& s : q.scale_bytes) s = uint8_t(sbyte(g));
  if (q.block_rows() != 1) return;  // tiles: random only (their scales are shared by 16 rows)
  auto row = [&](size_t r, std::initializer_list<std::pair<size_t, uint32_t>> codes, std::initializer_list<uint8_t> sc) {
    if (r >= q.rows) return;
    for (size_t k = 0; k < q.cols; ++k) q.set_code(0, r, k, 0);
    for (auto [k, c] : codes)
      if (k < q.cols) q.set_code(0, r, k, c);
    size_t b = 0;
    for (uint8_t s : sc) set_scale(q, r, 16 * b++, s);
  };
  // 6 x 6 = 36 (x 448^2) per product, 16 of them in block 0; block 1 adds 2 x 2 = 4:
  // 16 * 36 * 448 * 448 = 115605504 = 2^26 * 1.72..., ulp 8: + 4 is a tie.
  row(0, {}, {});
  for (size_t k = 0; k < 16 && k < q.cols; ++k) q.set_code(0, 0, k, 7);  // 6.0
  if (q.cols > 16) q.set_code(0, 0, 16, 4);                               // 2.0
  set_scale(q, 0, 0, 0x7E), set_scale(q, 0, 16, 0x38);                  // 448, 1
  // one more product of 1 x 6 x 448^2 in block 0 makes the multiple of 8 odd: the tie rounds up
  row(1, {}, {});
  for (size_t k = 0; k < 16 && k < q.cols; ++k) q.set_code(0, 1, k, k == 15 ? 6 : 7);  // 4.0 at k = 15
  if (q.cols > 16) q.set_code(0, 1, 16, 4);
  set_scale(q, 1, 0, 0x7E), set_scale(q, 1, 16, 0x38);
  row(2, {{0, 7}, {16, 1}, {17, 9}}, {0x7E, 0x01});  // 2688 then tiny values under a subnormal scale
  row(3, {{0, 7}, {5, 15}, {16, 3}}, {0x01, 0x07});  // subnormal scales only
  row(4, {{0, 5}, {16, 6}}, {0x00, 0x40});           // a zero-scale block, then 2 x 4
  if (allow_nan) row(5, {{0, 2}}, {0x38, 0x7F});     // NaN scale in block 1
}

struct PathGuard {
  CpuPath prev;
  explicit PathGuard(CpuPath p) : prev(cpu_path()) { set_cpu_path(p); }
  ~PathGuard() { set_cpu_path(prev); }
};

using gemmtest::opt;

}  // namespace

TEST(GemmNvfp4, OracleEveryPathFpropWithDesignedAndRandomOperands) {
  std::mt19937 g(4242);
  int ties = 0, roundings = 0, compared = 0;
  const float tscales[][2] = {{1.0f, 1.0f}, {0.75f, 3.0e-3f}, {std::ldexp(1.5f, -140), 2.0f}, {1.0e18f, 3.0e19f}};
  for (bool tiles : {false, true})
    for (size_t K : {size_t(0), size_t(16), size_t(45), size_t(64), size_t(100)})
      for (const auto& ts : tscales) {
        const size_t M = 7, N = tiles ? 33 : 9;
        QuantizedTensor a = make(M, K, false), w = make(N, K, tiles);
        fill(a, g, true);
        fill(w, g, false);
        a.tensor_scale_inv = ts[0];
        w.tensor_scale_inv = ts[1];
        for (int acc = 0; acc < 2; ++acc)
          for (Format of : {Format::FP32, Format::BF16}) {
            Tensor2f init = Tensor2f::from_shape({M, N});
            for (size_t t = 0; t < init.size(); ++t)
              init.data()[t] = t % 5 == 0 ? -0.0f : t % 5 == 1 ? 3.0e7f : std::ldexp(float(int(g() % 2001) - 1000), -7);
            Tensor2f want = init;
            for (size_t i = 0; i < M; ++i)
              for (size_t j = 0; j < N; ++j)
                want(i, j) = oracle(a, i, w, j, acc ? init(i, j) : 0.0f, of == Format::BF16, ties, roundings);
            const int64_t ms[] = {int64_t(M)};
            std::vector<std::pair<std::string, Tensor2f>> got;
            Tensor2f r = init;
            grouped_fprop(a, w, ms, r, opt(GemmImpl::Reference, acc, of));
            got.emplace_back("reference", r);
            for (CpuPath p : {CpuPath::Avx512, CpuPath::Avx2, CpuPath::Scalar}) {
              if (!cpu_supports(p)) continue;
              PathGuard guard(p);
              Tensor2f f = init;
              clear_last_kernel(KernelSlot::Nvfp4);
              grouped_fprop(a, w, ms, f, opt(GemmImpl::Fast, acc, of));
              if (K) {
                EXPECT_STREQ(last_kernel(KernelSlot::Nvfp4), kernel_name(KernelSlot::Nvfp4, p));
              }
              got.emplace_back(cpu_path_name(p), f);
            }
            for (const auto& [name, t] : got)
              for (size_t i = 0; i < M; ++i)
                for (size_t j = 0; j < N; ++j, ++compared)
                  ASSERT_EQ(std::bit_cast<uint32_t>(t(i, j)), std::bit_cast<uint32_t>(want(i, j)))
                      << name << " tiles " << tiles << " K " << K << " ts " << ts[0] << "," << ts[1] << " acc " << acc
                      << " out " << short_name(of) << " at (" << i << ", " << j << ")";
          }
      }
  // The designed inputs did reach the edges they are there for.
  EXPECT_GT(ties, 20);
  EXPECT_GT(roundings, 200);
  EXPECT_GT(compared, 20000);
}

// One rounding per block, to even, by hand: block 0 = 16 x (4 x 4) x 256 x 256 = 2^24
// (ulp 2 above it); then blocks of 2, 1 and 1 (codes under unit scales).
//   2^24 + 2 = 16777218 exact; + 1 is a tie between 16777218 (odd significand)
//   and 16777220: up, to 16777220.
//   2^24 + 1 is a tie: it stays at 2^24 (even); + 1 again stays: 16777216,
//   where one rounding of the exact sum would give 16777218.
TEST(GemmNvfp4, DesignedTiesRoundToEvenOncePerBlock) {
  auto run = [](std::vector<uint32_t> tail_a, std::vector<uint32_t> tail_b) {
    const size_t K = 16 * (1 + tail_a.size());
    QuantizedTensor a = make(1, K, false), b = make(1, K, false);
    for (size_t k = 0; k < 16; ++k) a.set_code(0, 0, k, 6), b.set_code(0, 0, k, 6);  // 4.0
    scale_at(a, 0, 0) = scale_at(b, 0, 0) = 0x78;                                     // 256
    for (size_t t = 0; t < tail_a.size(); ++t) {
      a.set_code(0, 0, 16 * (t + 1), tail_a[t]);
      b.set_code(0, 0, 16 * (t + 1), tail_b[t]);
    }
    const int64_t ms[] = {1};
    Tensor2f y;
    grouped_fprop(a, b, ms, y, opt(GemmImpl::Reference, false, Format::FP32));
    Tensor2f f;
    grouped_fprop(a, b, ms, f, opt(GemmImpl::Fast, false, Format::FP32));
    EXPECT_EQ(std::bit_cast<uint32_t>(y(0, 0)), std::bit_cast<uint32_t>(f(0, 0)));
    return y(0, 0);
  };
  // codes: 2 = 1.0, 4 = 2.0
  EXPECT_EQ(run({2}, {4}), 16777218.0f);            // 2^24 + 2: exact
  EXPECT_EQ(run({2, 2}, {4, 2}), 16777220.0f);      // + 1: tie, up to the even significand
  EXPECT_EQ(run({2, 2}, {2, 2}), 16777216.0f);      // + 1, + 1: two ties that stay
  EXPECT_EQ(run({2}, {2}), 16777216.0f);            // + 1 alone: the tie stays
}

TEST(GemmNvfp4, WgradIntoMainGradEqualsOracle) {
  std::mt19937 g(99);
  const std::vector<int64_t> ms = {0, 37, 16, 5};
  const size_t M = 58, N = 11, K = 13;
  Tensor2f dy = Tensor2f::from_shape({M, N}), x = Tensor2f::from_shape({M, K});
  std::normal_distribution<float> n(0, 1);
  for (auto& v : dy) v = n(g) * 1e-3f;
  for (auto& v : x) v = n(g) * 30.0f;
  Tensor3f init = Tensor3f::from_shape({4, N, K});
  for (auto& v : init) v = n(g);
  const QuantSpec s = tensor_recipe("nvfp4");
  const std::vector<QuantizedTensor> qdy = quantize_grouped_colwise(dy, ms, s), qx = quantize_grouped_colwise(x, ms, s);
  Tensor3f r = init;
  grouped_wgrad(qdy, qx, ms, r, opt(GemmImpl::Reference, true, Format::FP32));
  Tensor3f f = init;
  grouped_wgrad(qdy, qx, ms, f, opt(GemmImpl::Fast, true, Format::FP32));
  int ties = 0, roundings = 0;
  for (size_t grp = 0; grp < 4; ++grp) {
    if (ms[grp] == 0) {
      for (size_t t = 0; t < N * K; ++t) {
        EXPECT_EQ(r.data()[grp * N * K + t], init.data()[grp * N * K + t]);
      }
      continue;
    }
    // wgrad's operands are dy_g^T [N, M_g] and x_g^T [K, M_g]: the colwise tensors' storage rows.
    for (size_t i = 0; i < N; ++i)
      for (size_t j = 0; j < K; ++j) {
        // the transposed views store [N, M_g] rows with blocks of 16 along M_g: the oracle reads them as 1x16
        QuantizedTensor a1 = make(1, size_t(ms[grp]), false), b1 = make(1, size_t(ms[grp]), false);
        for (size_t k = 0; k < size_t(ms[grp]); ++k) {
          a1.set_code(0, 0, k, qdy[grp].code(0, i, k));
          b1.set_code(0, 0, k, qx[grp].code(0, j, k));
        }
        for (size_t b = 0; b * 16 < size_t(ms[grp]); ++b) {
          a1.scale_bytes(0, 0, b) = qdy[grp].scale_bytes(0, i, b);
          b1.scale_bytes(0, 0, b) = qx[grp].scale_bytes(0, j, b);
        }
        a1.tensor_scale_inv = qdy[grp].tensor_scale_inv;
        b1.tensor_scale_inv = qx[grp].tensor_scale_inv;
        const float want = oracle(a1, 0, b1, 0, init(grp, i, j), false, ties, roundings);
        EXPECT_EQ(std::bit_cast<uint32_t>(r(grp, i, j)), std::bit_cast<uint32_t>(want)) << grp << " " << i << " " << j;
        EXPECT_EQ(std::bit_cast<uint32_t>(f(grp, i, j)), std::bit_cast<uint32_t>(want)) << grp << " " << i << " " << j;
      }
  }
}

TEST(GemmNvfp4, PairsAndBlocksOutsideTheClassAreRefused) {
  const Tensor2f x = Tensor2f::from_shape({4, 32});
  const Tensor3f w = Tensor3f::from_shape({1, 8, 32});
  const int64_t ms[] = {4};
  Tensor2f y;
  auto msg = [&](const QuantSpec& a, const QuantSpec& b) {
    try {
      grouped_fprop(x, a, w, b, ms, y);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  EXPECT_NE(msg(tensor_recipe("nvfp4"), tensor_recipe("mxfp4")).find("NVFP4 operands (UE4M3 scales) pair only with NVFP4"),
            std::string::npos);
  EXPECT_NE(msg(bf16_spec(), tensor_recipe("nvfp4")).find("BF16"), std::string::npos);
  QuantSpec wide = tensor_recipe("nvfp4");
  wide.block_cols = 32;
  EXPECT_NE(msg(tensor_recipe("nvfp4"), wide).find("blocks of 16 along the contraction"), std::string::npos);
  // (the quantizer makes no such tensor: a hand-made one with E4M3 codes under UE4M3 scales)
  QuantizedTensor a = make(4, 32, false), b = make(8, 32, false);
  b.spec.elem = Format::E4M3;
  std::string m = "no throw";
  try {
    grouped_fprop(a, b, ms, y, {});
  } catch (const std::invalid_argument& e) {
    m = e.what();
  }
  EXPECT_NE(m.find("must be E2M1"), std::string::npos) << m;
}
