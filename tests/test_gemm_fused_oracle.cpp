// The fused-group block-dot classes (mx-f13, fp8-chunk128, bf16-f25) against an independent
// exact oracle: MMA-Sim's truncated fused dot product written here from the rule in
// docs/numerics.md §5.3 (alignment exponent E, truncation of every term toward zero to a
// multiple of 2^(E - F), exact sum, RZ to e8m13 or FP32, the special rule), with exact rationals
// (Boost.Multiprecision cpp_rational) and this file's own rounding -- nothing of the production
// GEMM code. The classes of §5.2 are built on it as written there (block scales, the k32 chain
// of a 128-chunk and its fmaf promotion, BF16 groups of 16 with the accumulator as C), and both
// GEMM implementations (Reference and Fast) must equal it bit for bit on operands holding
// NaN, Inf, -0, 0xFF (NaN) and extreme E8M0 scales, NaN/Inf FP32 scales, and overflowing sums.
#include <gtest/gtest.h>

#include <bit>
#include <boost/multiprecision/cpp_int.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/rounding.hpp"
#include "gemm_test_util.hpp"

using namespace mxsim;
using namespace mxsim::emu;
using boost::multiprecision::cpp_int;
using Q = boost::multiprecision::cpp_rational;

namespace {

// ---------------------------------------------------------------------------
// Exact arithmetic of the oracle.

Q pow2(int e) { return e >= 0 ? Q(cpp_int(1) << e) : Q(1) / Q(cpp_int(1) << -e); }

Q rat(float f) {  // exact value of a finite float
  int e;
  const double m = std::frexp(double(f), &e);  // f = m * 2^e, exact
  return Q(int64_t(std::ldexp(m, 30))) * pow2(e - 30);
}

// floor(log2 |x|) of a non-zero finite float, subnormals normalized.
int elog2(float x) {
  int e;
  std::frexp(x, &e);
  return e - 1;
}

// floor(log2 |r|) of a non-zero rational.
int elog2(const Q& r) {
  const cpp_int n = abs(numerator(r)), d = denominator(r);
  int e = int(msb(n)) - int(msb(d));  // 2^e within a factor 2 of |r|
  if (Q(n, d) < pow2(e)) --e;
  return e;
}

cpp_int trunc_div(const Q& r, const Q& q) {  // trunc(r / q), toward zero
  const Q t = r / q;
  return numerator(t) / denominator(t);  // cpp_int division truncates
}

enum class Rnd { RZ, RNE };

// r rounded to a binary format with p fraction bits and the FP32 exponent range (normal
// exponents -126..127, subnormal quantum 2^(-126 - p)). Overflow: RZ gives the largest finite
// value, RNE +-Inf. Returns the value as a float (exactly representable for p <= 23).
float round_to(const Q& r, int p, Rnd mode) {
  if (r == 0) return 0.0f;
  const bool neg = r < 0;
  const Q a = neg ? Q(-r) : r;
  const int e = std::max(elog2(a), -126);
  const Q quantum = pow2(e - p);
  cpp_int m = trunc_div(a, quantum);
  if (mode == Rnd::RNE) {
    const Q rest = a - Q(m) * quantum;
    const Q half = quantum / 2;
    if (rest > half || (rest == half && (m & 1) != 0)) m += 1;
  }
  const Q v = Q(m) * quantum;
  float out;
  if (v >= pow2(128)) {
    out = mode == Rnd::RZ ? std::ldexp(float((1 << (p + 1)) - 1), 127 - p) : INFINITY;
  } else {
    out = std::ldexp(float(m.convert_to<int64_t>()), e - p);  // m < 2^(p+2): exact
  }
  return neg ? -out : out;
}

float rne_fp32(const Q& r) { return round_to(r, 23, Rnd::RNE); }

// The edges of §5.3's group: MMA-Sim's reading (the FP8 classes), or the Hopper BF16 group
// as an H200 computes it (bf16-f25): a subnormal a, b or c aligns at -126, zeros take no part
// in E, RZ from 2^128 on gives +-Inf, a sum that truncates to zero gives +0.
enum class Edges { MmaSim, HopperBf16 };

// §5.3: the truncated fused dot product of products a[k] b[k] and C, F fraction bits of
// alignment, output RZ to p fraction bits (13: e8m13, 23: FP32).
float fused_group(const std::vector<float>& a, const std::vector<float>& b, float c, int F, int p,
                  Edges edges = Edges::MmaSim) {
  bool nan = std::isnan(c), pinf = false, ninf = false;
  auto inf = [&](bool negative) { (negative ? ninf : pinf) = true; };
  for (size_t k = 0; k < a.size(); ++k) {
    if (std::isnan(a[k]) || std::isnan(b[k])) nan = true;
    if (std::isinf(a[k]) || std::isinf(b[k])) {
      if (a[k] == 0 || b[k] == 0) nan = true;  // Inf x 0
      inf(std::signbit(a[k]) != std::signbit(b[k]));
    }
  }
  if (std::isinf(c)) inf(std::signbit(c));
  if (nan || (pinf && ninf)) return NAN;
  if (pinf) return INFINITY;
  if (ninf) return -INFINITY;
  const bool hopper = edges == Edges::HopperBf16;
  const auto align = [&](float x) { return hopper ? std::max(elog2(x), -126) : elog2(x); };
  bool seen = false;  // has any term taken part in E
  int E = 0;
  const auto take = [&](int e) {
    E = seen ? std::max(E, e) : e;
    seen = true;
  };
  if (c != 0) take(align(c));
  else if (!hopper) take(-126);  // a zero counts as -126 (MMA-Sim's placeholder)
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k] != 0 && b[k] != 0) take(align(a[k]) + align(b[k]));
    else if (!hopper) take(-126);
  }
  if (!seen) return 0.0f;  // every term zero
  if (hopper) E = std::max(E, -133);  // the window reaches no lower than 2^(-133 - F)
  const Q q = pow2(E - F);
  Q S = Q(trunc_div(rat(c), q)) * q;
  for (size_t k = 0; k < a.size(); ++k) S += Q(trunc_div(rat(a[k]) * rat(b[k]), q)) * q;
  if (hopper && abs(S) >= pow2(128)) return S < 0 ? -INFINITY : INFINITY;
  const float r = round_to(S, p, Rnd::RZ);  // exact zero: +0
  return hopper && r == 0 ? 0.0f : r;
}

// acc (+) v * 2^sexp with one RNE, IEEE for non-finite operands (§5.4).
float add_scaled(float acc, float v, int sexp) {
  if (!std::isfinite(acc) || !std::isfinite(v)) return acc + v;  // the positive scale changes no special
  return rne_fp32(rat(acc) + rat(v) * pow2(sexp));
}

// fmaf(q, s, acc): one RNE of the exact q * s + acc; IEEE for non-finite operands.
float fma_oracle(float q, float s, float acc) {
  if (!std::isfinite(q) || !std::isfinite(s) || !std::isfinite(acc)) return std::fma(q, s, acc);
  return rne_fp32(rat(q) * rat(s) + rat(acc));
}

float out_value(float acc, Format out) {
  if (std::isnan(acc)) return std::bit_cast<float>(0x7FC00000u);  // canonical NaN (§5.4)
  if (out == Format::BF16) return std::isinf(acc) ? acc : round_to(rat(acc), 7, Rnd::RNE);
  return acc;
}

// ---------------------------------------------------------------------------
// The classes of §5.2 on fprop operands: X logical [M, K] (1 group, Axis::Cols), W [G, N, K].

// Element value of storage element (g, r, c) of a quantized operand (no scale applied).
float elem(const QuantizedTensor& q, size_t g, size_t r, size_t c) { return decode(q.spec.elem, q.code(g, r, c)); }

// mx-f13: per 32-block, fused group of the unscaled elements (C = 0, F = 13, RZ e8m13), then
// acc = RNE(acc + D * 2^(sa + sb - 254)); a 0xFF scale makes acc NaN.
float oracle_mx_f13(const QuantizedTensor& x, const QuantizedTensor& w, size_t i, size_t g, size_t j, float acc) {
  const size_t K = x.cols, wbr = w.block_rows();
  for (size_t b = 0; b * 32 < K; ++b) {
    std::vector<float> av, bv;
    for (size_t k = b * 32; k < std::min(K, b * 32 + 32); ++k) {
      av.push_back(elem(x, 0, i, k));
      bv.push_back(elem(w, g, j, k));
    }
    const int sa = x.scale_bytes(0, i, b), sb = w.scale_bytes(g, j / wbr, b);
    const float D = fused_group(av, bv, 0.0f, 13, 13);
    acc = (sa == 0xFF || sb == 0xFF) ? NAN : add_scaled(acc, D, sa + sb - 254);
  }
  return acc;
}

// fp8-chunk128: per 128-chunk, k32 fused groups chained through C (e8m13), the chunk value
// promoted as fmaf(Q, fl32(sa * sb), acc) with the operands' FP32 scale_inv of that chunk.
float oracle_fp8_chunk(const QuantizedTensor& x, const QuantizedTensor& w, size_t i, size_t g, size_t j, float acc) {
  const size_t K = x.cols;
  for (size_t c0 = 0; c0 < K; c0 += 128) {
    float C = 0.0f;
    for (size_t k0 = c0; k0 < std::min(K, c0 + 128); k0 += 32) {
      std::vector<float> av, bv;
      for (size_t k = k0; k < std::min({K, k0 + 32, c0 + 128}); ++k) {
        av.push_back(elem(x, 0, i, k));
        bv.push_back(elem(w, g, j, k));
      }
      C = fused_group(av, bv, C, 13, 13);
    }
    const float sa = x.scale_inv(0, i / x.block_rows(), c0 / x.block_cols());
    const float sb = w.scale_inv(g, j / w.block_rows(), c0 / w.block_cols());
    acc = fma_oracle(C, sa * sb, acc);  // fl32(sa * sb): one IEEE FP32 multiply
  }
  return acc;
}

// bf16-f25: groups of 16, each a fused group with the running accumulator as C, F = 25, RZ FP32.
float oracle_bf16(const Tensor2f& x, const Tensor3f& w, size_t i, size_t g, size_t j, float acc) {
  const size_t K = x.shape(1);
  for (size_t k0 = 0; k0 < K; k0 += 16) {
    std::vector<float> av, bv;
    for (size_t k = k0; k < std::min(K, k0 + 16); ++k) {
      av.push_back(x(i, k));
      bv.push_back(w(g, j, k));
    }
    acc = fused_group(av, bv, acc, 25, 23, Edges::HopperBf16);
  }
  return acc;
}

// ---------------------------------------------------------------------------

Tensor2f rand2(std::mt19937& rng, size_t r, size_t c, int spread) {
  std::normal_distribution<float> n(0, 1);
  std::uniform_int_distribution<int> e(-spread, spread);
  Tensor2f t = Tensor2f::from_shape({r, c});
  for (auto& v : t) v = n(rng) * std::ldexp(1.0f, e(rng));
  return t;
}
Tensor3f rand3(std::mt19937& rng, size_t G, size_t r, size_t c, int spread) {
  Tensor3f t = Tensor3f::from_shape({G, r, c});
  const Tensor2f x = rand2(rng, G * r, c, spread);
  std::copy(x.begin(), x.end(), t.begin());
  return t;
}

using gemmtest::opt;

const char* impl_name(GemmImpl i) { return i == GemmImpl::Fast ? "fast" : "reference"; }

// Runs fprop with both implementations, with and without accumulate, FP32 and BF16 output, and
// compares every element with oracle(i, g, j, acc0).
template <class Run, class Oracle>
void expect_oracle(const std::string& what, size_t M, size_t N, const std::vector<int64_t>& ms, const Run& run,
                   const Oracle& oracle, std::mt19937& rng) {
  Tensor2f start = rand2(rng, M, N, 20);
  start(0, 0) = -0.0f;
  if (M > 1 && N > 1) {
    start(1, 1) = INFINITY;
    start(M - 1, N - 1) = std::bit_cast<float>(0x7F7FFFFFu);  // FLT_MAX: an add may overflow
  }
  // The oracle's FP32 accumulator per element, without and with accumulate (computed once).
  std::vector<float> want[2];
  for (int acc = 0; acc < 2; ++acc) {
    size_t row = 0, g = 0;
    for (size_t i = 0; i < M; ++i, ++row) {
      while (row >= size_t(ms[g])) row -= size_t(ms[g++]);
      for (size_t j = 0; j < N; ++j) want[acc].push_back(oracle(i, g, j, acc ? start(i, j) : 0.0f));
    }
  }
  size_t nan = 0, inf = 0, zero = 0;
  for (float v : want[0]) {
    nan += std::isnan(v);
    inf += std::isinf(v) || v == std::bit_cast<float>(0x7F7FFFFFu);
    zero += v == 0;
  }
  EXPECT_GT(nan, 0u) << what << ": the operands must produce NaN outputs";
  EXPECT_GT(inf, 0u) << what << ": and overflowing (Inf or, under RZ, FLT_MAX) ones";
  for (GemmImpl impl : {GemmImpl::Reference, GemmImpl::Fast})
    for (bool acc : {false, true})
      for (Format out : {Format::FP32, Format::BF16}) {
        Tensor2f y = start;
        run(y, opt(impl, acc, out));
        size_t bad = 0;
        for (size_t i = 0; i < M; ++i)
          for (size_t j = 0; j < N; ++j) {
            const float w = out_value(want[acc][i * N + j], out);
            if (std::bit_cast<uint32_t>(y(i, j)) != std::bit_cast<uint32_t>(w) && ++bad <= 5)
              ADD_FAILURE() << what << " " << impl_name(impl) << (acc ? " accumulate" : "")
                            << (out == Format::BF16 ? " bf16" : " fp32") << " y(" << i << "," << j << "): got "
                            << std::hexfloat << y(i, j) << " oracle " << w;
          }
        EXPECT_EQ(bad, 0u) << what << " " << impl_name(impl);
      }
}

}  // namespace

// The oracle itself on hand-computed groups (§5.3 and the H200 facts of
// shared/reference/matrix-units-and-gpu.md §2: inside one F = 13 group 2^16 + 8 survives and
// 2^16 + 4 does not).
TEST(FusedOracle, HandComputedGroups) {
  EXPECT_EQ(fused_group({256, 8}, {256, 1}, 0, 13, 13), 65536.0f + 8);
  EXPECT_EQ(fused_group({256, 4}, {256, 1}, 0, 13, 13), 65536.0f);
  EXPECT_EQ(fused_group({256, -4}, {256, 1}, 0, 13, 13), 65536.0f);  // -4 truncates to -0
  EXPECT_EQ(fused_group({256, -8}, {256, 1}, 0, 13, 13), 65536.0f - 8);
  EXPECT_EQ(std::bit_cast<uint32_t>(fused_group({1, -1}, {2, 2}, 0, 13, 13)), 0u);  // exact zero: +0
  EXPECT_EQ(std::bit_cast<uint32_t>(fused_group({-0.0f}, {1}, -0.0f, 13, 13)), 0u);
  EXPECT_TRUE(std::isnan(fused_group({INFINITY}, {0}, 0, 13, 13)));
  EXPECT_TRUE(std::isnan(fused_group({INFINITY, 1}, {1, -INFINITY}, 0, 13, 13)));
  EXPECT_EQ(fused_group({INFINITY, 1}, {-1, 1}, 0, 13, 13), -INFINITY);
  EXPECT_TRUE(std::isnan(fused_group({1}, {1}, NAN, 25, 23)));
  // RZ to e8m13: 1 + 2^-13 + 2^-14 keeps 13 fraction bits.
  EXPECT_EQ(fused_group({1, 0x1p-13f, 0x1p-14f}, {1, 1, 1}, 0, 25, 13), 1.0f + 0x1p-13f);
  // RZ overflow: the largest finite value.
  EXPECT_EQ(fused_group({0x1p127f, 0x1p127f}, {1.5f, 1.5f}, 0, 13, 23), std::bit_cast<float>(0x7F7FFFFFu));
  EXPECT_EQ(fused_group({0x1p127f, 0x1p127f}, {1.5f, 1.5f}, 0, 13, 13), std::ldexp(float((1 << 14) - 1), 114));
  // The accumulator as C (F = 25, RZ to FP32): 2^23 + 1 is exact; 2^24 + 3 is summed exactly
  // (quantum 2^-1) and then truncated to 2^24 + 2 (RNE of the exact sum would give 2^24 + 4);
  // against C = 2^26 a product of 1.5 is below the quantum 2 and truncated away.
  EXPECT_EQ(fused_group({1}, {1}, 0x1p23f, 25, 23), 0x1p23f + 1);
  EXPECT_EQ(fused_group({3}, {1}, 0x1p24f, 25, 23), 0x1p24f + 2);
  EXPECT_EQ(fused_group({1.5f}, {1}, 0x1p26f, 25, 23), 0x1p26f);
}

// The Hopper BF16 edges (numerics.md §5.3) on hand-computed groups, each beside MMA-Sim's reading.
TEST(FusedOracle, HopperBf16EdgesOnHandComputedGroups) {
  constexpr Edges H = Edges::HopperBf16;
  // A subnormal 2^-130 aligns at -126: times 2^20 it sets E = -106 (MMA-Sim: -110), so a
  // second product 2^-132 falls below the quantum 2^-131 and is truncated away.
  EXPECT_EQ(fused_group({0x1p-130f, 0x1p-66f}, {0x1p20f, 0x1p-66f}, 0, 25, 23, H), 0x1p-110f);
  EXPECT_EQ(fused_group({0x1p-130f, 0x1p-66f}, {0x1p20f, 0x1p-66f}, 0, 25, 23), 0x1p-110f + 0x1p-132f);
  // Zeros take no part in E: a product 2^-140 and eight of 2^-152 with C = 0 give E = -140
  // (quantum 2^-165) and the eight sum to 2^-149, FP32's smallest step; MMA-Sim's -126 for the
  // zero C sets the quantum 2^-151 and truncates each of them away.
  const std::vector<float> a9 = {0x1p-70f, 0x1p-76f, 0x1p-76f, 0x1p-76f, 0x1p-76f, 0x1p-76f, 0x1p-76f, 0x1p-76f, 0x1p-76f};
  EXPECT_EQ(fused_group(a9, a9, 0, 25, 23, H), 0x1p-140f + 0x1p-149f);
  EXPECT_EQ(fused_group(a9, a9, 0, 25, 23), 0x1p-140f);
  // A sum that truncates to zero is +0; MMA-Sim keeps its sign (-2^-150 is two units of its
  // quantum 2^-151, then below FP32's 2^-149: -0).
  EXPECT_EQ(std::bit_cast<uint32_t>(fused_group({-0x1p-75f}, {0x1p-75f}, 0, 25, 23, H)), 0u);
  EXPECT_EQ(std::bit_cast<uint32_t>(fused_group({-0x1p-75f}, {0x1p-75f}, 0, 25, 23)), 0x80000000u);
  // RZ overflow: +-Inf (MMA-Sim: the largest finite value), and later groups see an Inf C.
  EXPECT_EQ(fused_group({0x1p127f, 0x1p127f}, {1.5f, 1.5f}, 0, 25, 23, H), INFINITY);
  EXPECT_EQ(fused_group({-0x1p127f, -0x1p127f}, {1.5f, 1.5f}, 0, 25, 23, H), -INFINITY);
  EXPECT_EQ(fused_group({0x1p127f, 0x1p127f}, {1.5f, 1.5f}, 0, 25, 23), std::bit_cast<float>(0x7F7FFFFFu));
  // A subnormal C aligns at -126 too: C = 2^-130 beside sixteen products 2^-153 sets the
  // quantum 2^-151 and truncates them away; MMA-Sim's E = -130 (quantum 2^-155) keeps them
  // and their sum 2^-149 lands on FP32's grid.
  const std::vector<float> a16(16, 0x1p-76f), b16(16, 0x1p-77f);
  EXPECT_EQ(fused_group(a16, b16, 0x1p-130f, 25, 23, H), 0x1p-130f);
  EXPECT_EQ(fused_group(a16, b16, 0x1p-130f, 25, 23), 0x1p-130f + 0x1p-149f);
  // All terms zero, C = -0: +0.
  EXPECT_EQ(std::bit_cast<uint32_t>(fused_group({0.0f, -0.0f}, {1, 1}, -0.0f, 25, 23, H)), 0u);
}

// mx-f13: FP8 and FP6 pairs (E2M1 enters as its E4M3 image), ragged K, two groups; NaN and Inf
// elements, -0 codes, a 0xFF scale, scales 0x00 and 0xFE, a block that overflows FP32.
TEST(FusedOracle, MxF13EqualsOracleWithSpecials) {
  std::mt19937 rng(20251201);
  const std::pair<const char*, const char*> pairs[] = {
      {"mxfp8", "mxfp8"}, {"mxfp8_e5m2", "mxfp8"}, {"mxfp6_e3m2", "mxfp4"}, {"mxfp4", "mxfp8_e5m2"}, {"mxfp8", "mxfp8_2d"}};
  for (auto [xr, wr] : pairs) {
    const size_t M = 6, N = 35, K = 100, G = 2;
    const std::vector<int64_t> ms = {2, 4};
    QuantizedTensor qx = quantize(rand2(rng, M, K, 12), tensor_recipe(xr), Axis::Cols);
    QuantizedTensor qw = quantize(rand3(rng, G, N, K, 12), tensor_recipe(wr), Axis::Cols);
    ASSERT_STREQ(gemm_class_name(qx.spec, qw.spec), "mx-f13") << xr << " x " << wr;
    const FormatSpec fx = spec_of(qx.spec.elem), fw = spec_of(qw.spec.elem);
    // Specials where the element format has them.
    if (fx.nan != NanKind::None) qx.set_code(0, 0, 3, fx.nan_code(0));          // NaN in row 0, block 0
    if (fx.has_inf) qx.set_code(0, 1, 40, fx.inf_code());                       // +Inf in row 1, block 1
    if (fw.has_inf) qw.set_code(1, 5, 70, fw.sign_bit() | fw.inf_code());       // -Inf in W[1] row 5
    for (size_t k = 64; k < 96; ++k) qx.set_code(0, 2, k, fx.sign_bit());       // a block of -0 codes
    qx.scale_bytes(0, 3, 1) = 0xFF;                                             // NaN scale
    qx.scale_bytes(0, 4, 0) = 0x00;                                             // 2^-127: subnormal results
    // Row 5: every element at +max with scale 2^127 against W blocks at 2^127: overflow to Inf.
    for (size_t k = 0; k < 32; ++k) qx.set_code(0, 5, k, fx.max_code());
    qx.scale_bytes(0, 5, 0) = 0xFE;
    if (qw.block_rows() == 1) {
      for (size_t j = 0; j < 4; ++j) qw.scale_bytes(1, j, 0) = 0xFE;
    } else {
      qw.scale_bytes(1, 0, 0) = 0xFE;
    }
    expect_oracle(std::string("mx-f13 ") + xr + " x " + wr, M, N, ms,
                  [&](Tensor2f& y, const GemmOptions& o) { grouped_fprop(qx, qw, ms, y, o); },
                  [&](size_t i, size_t g, size_t j, float a0) { return oracle_mx_f13(qx, qw, i, g, j, a0); }, rng);
  }
}

// fp8-chunk128: per-tensor, per-row, 1x128 and 128x128 FP32 scales, K = 300 (a ragged chunk
// and a ragged k32 group), E4M3 and E5M2; NaN and Inf elements, a NaN and an Inf scale_inv,
// and scales whose product overflows FP32.
TEST(FusedOracle, Fp8Chunk128EqualsOracleWithSpecials) {
  std::mt19937 rng(7);
  const std::pair<const char*, const char*> pairs[] = {{"fp8_tensor", "fp8_tensor"},
                                                       {"fp8_row", "fp8_tensor_e5m2"},
                                                       {"fp8_block", "fp8_block2d"},
                                                       {"fp8_tensor_e5m2", "fp8_block"}};
  for (auto [xr, wr] : pairs) {
    const size_t M = 5, N = 9, K = 300, G = 2;
    const std::vector<int64_t> ms = {3, 2};
    QuantizedTensor qx = quantize(rand2(rng, M, K, 30), tensor_recipe(xr), Axis::Cols);
    QuantizedTensor qw = quantize(rand3(rng, G, N, K, 30), tensor_recipe(wr), Axis::Cols);
    ASSERT_STREQ(gemm_class_name(qx.spec, qw.spec), "fp8-chunk128") << xr << " x " << wr;
    const FormatSpec fx = spec_of(qx.spec.elem), fw = spec_of(qw.spec.elem);
    qx.set_code(0, 0, 5, fx.nan_code(1));
    if (fx.has_inf) qx.set_code(0, 4, 10, fx.inf_code());
    if (fw.has_inf) qw.set_code(0, 2, 200, fw.inf_code());
    qx.set_code(0, 1, 130, fx.sign_bit());  // -0
    // Scales: X's last scale_inv NaN (unless it is the only one), W[1]'s Inf or huge.
    if (qx.scale_inv.size() > 1) qx.scale_inv(0, qx.scale_inv.shape(1) - 1, qx.scale_inv.shape(2) - 1) = NAN;
    qw.scale_inv(1, 0, 0) = qw.scale_inv.size() > 2 ? INFINITY : 0x1p120f;  // fl32(sa * 2^120) overflows
    if (qx.scale_inv.shape(1) > 1) qx.scale_inv(0, 3, 0) = 0x1p100f;  // row 3 (group 1): x 2^100 of W[1] overflows
    expect_oracle(std::string("fp8-chunk128 ") + xr + " x " + wr, M, N, ms,
                  [&](Tensor2f& y, const GemmOptions& o) { grouped_fprop(qx, qw, ms, y, o); },
                  [&](size_t i, size_t g, size_t j, float a0) { return oracle_fp8_chunk(qx, qw, i, g, j, a0); }, rng);
  }
}

// bf16-f25: BF16 values over a wide exponent range (products up to 2^+-120), K = 70 (a ragged
// group), NaN, +-Inf, -0 and a cancellation to exact zero; the accumulate start values include
// -0, Inf and FLT_MAX.
TEST(FusedOracle, Bf16F25EqualsOracleWithSpecials) {
  std::mt19937 rng(3);
  const size_t M = 7, N = 11, K = 70, G = 3;
  const std::vector<int64_t> ms = {2, 0, 5};
  auto bf = [](Tensor2f t) {
    for (auto& v : t) v = std::bit_cast<float>(std::bit_cast<uint32_t>(v) & 0xFFFF0000u);  // BF16 values
    return t;
  };
  Tensor2f x = bf(rand2(rng, M, K, 60));
  const Tensor2f w2 = bf(rand2(rng, G * N, K, 60));
  Tensor3f w = Tensor3f::from_shape({G, N, K});
  std::copy(w2.begin(), w2.end(), w.begin());
  x(0, 1) = NAN;
  x(1, 17) = INFINITY;
  w(2, 3, 40) = -INFINITY;
  x(2, 5) = -0.0f;
  for (size_t k = 0; k < K; ++k) x(3, k) = k < 16 ? (k % 2 ? -1.0f : 1.0f) : 0.0f;  // row 3 . W[2] row 0:
  for (size_t k = 0; k < K; ++k) w(2, 0, k) = k < 16 ? 3.0f : 0.0f;                   // exact zero
  for (size_t k = 0; k < K; ++k) x(4, k) = 0x1p120f;                                   // overflows
  ASSERT_STREQ(gemm_class_name(bf16_spec(), bf16_spec()), "bf16-f25");
  expect_oracle("bf16-f25", M, N, ms,
                [&](Tensor2f& y, const GemmOptions& o) { grouped_fprop(x, bf16_spec(), w, bf16_spec(), ms, y, o); },
                [&](size_t i, size_t g, size_t j, float a0) { return oracle_bf16(x, w, i, g, j, a0); }, rng);
}
