// hd::tree_sum (core/include/mxsim/hd/reduce.hpp, docs/numerics.md §6) and the
// emu ops whose whole-tensor FP64 sums use it (l2_norm, quant_stats,
// osc_update, cross_entropy), against an oracle written here from the rule's
// definition. Exact bits only. The inputs are chosen so that the sequential
// fold and the tree give different bits at the long lengths: each test checks
// that, so a backend that still folds sequentially fails it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "mxsim/backend.hpp"
#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/hd/elementwise.hpp"
#include "mxsim/hd/reduce.hpp"
#include "mxsim/quant_spec.hpp"

using namespace mxsim;

namespace {

// ------------------------------------------------------------------ oracle

/// The contract's sequential sum: s = +0.0, then s = s + t_i, i ascending.
double sequential(const std::vector<double>& t) {
  double s = +0.0;
  for (double v : t) s = s + v;
  return s;
}

/// The contract's tree, literally: n <= 256 sequential; otherwise the
/// sequential sums of the chunks [256 j, 256 (j + 1)), summed by the same rule.
double oracle_tree(const std::vector<double>& t) {
  constexpr size_t C = 256;
  if (t.size() <= C) return sequential(t);
  std::vector<double> partial;
  for (size_t lo = 0; lo < t.size(); lo += C)
    partial.push_back(sequential(std::vector<double>(t.begin() + lo, t.begin() + std::min(t.size(), lo + C))));
  return oracle_tree(partial);
}

uint64_t bits(double x) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

const std::vector<size_t> kLengths{0, 1, 255, 256, 257, 513, 65536, 65537, 300000};

/// The tree differs from the sequential fold only from n = 2 C + 1 on (for
/// n <= C + 1 it is the sequential fold: partial_0 + t_C). The inputs below
/// must tell the two apart at every length from 65536 on.
bool must_distinguish(size_t n) { return n >= 65536; }

/// SplitMix64: a seeded, platform-independent stream for the inputs.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// A positive float 2^e (1 + f), e uniform in [lo, hi], 23 random fraction bits.
  float wide(int lo, int hi) {
    const uint64_t r = next();
    const int e = lo + int(r % uint64_t(hi - lo + 1));
    return std::ldexp(1.0f + float((r >> 32) & 0x7FFFFF) * 0x1p-23f, e);
  }
};

/// Terms where order matters: 1e16 at every 97th index, 1.0 elsewhere. The
/// sequential fold loses every 1.0 after the first 1e16 (ulp(1e16) = 2, and
/// the ties round back to even); the tree's chunks keep most of them.
std::vector<double> big_and_ones(size_t n) {
  std::vector<double> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = i % 97 == 0 ? 1e16 : 1.0;
  return t;
}

Tensor upload_f32(Backend& be, const std::vector<float>& v) {
  Tensor t = be.alloc(DType::f32, {1, v.size()});
  be.upload(t, std::span<const float>(v));
  return t;
}

}  // namespace

TEST(TreeSum, OracleMatchesTheSequentialSumUpToOneChunkAndOne) {
  for (size_t n : {size_t(0), size_t(1), size_t(255), size_t(256), size_t(257)}) {
    const std::vector<double> t = big_and_ones(n);
    EXPECT_EQ(bits(oracle_tree(t)), bits(sequential(t))) << n;
  }
  EXPECT_EQ(bits(oracle_tree({})), bits(+0.0));
}

TEST(TreeSum, ArrayAndFunctorAndStreamingMatchTheOracle) {
  for (size_t n : kLengths) {
    const std::vector<double> t = big_and_ones(n);
    const double want = oracle_tree(t);
    if (must_distinguish(n)) {
      ASSERT_NE(bits(want), bits(sequential(t))) << n << ": the input does not test the order";
    }
    EXPECT_EQ(bits(hd::tree_sum(t.data(), n)), bits(want)) << n;
    EXPECT_EQ(bits(hd::tree_sum([&](size_t i) { return t[i]; }, n)), bits(want)) << n;
    hd::TreeSum acc;
    for (double v : t) acc.add(v);
    EXPECT_EQ(bits(acc.result()), bits(want)) << n;
  }
}

TEST(TreeSum, ChunkSumIsTheSequentialSumOfOneChunk) {
  const std::vector<double> t = big_and_ones(700);
  const auto term = [&](size_t i) { return t[i]; };
  EXPECT_EQ(hd::tree_sum_chunks(0), 0u);
  EXPECT_EQ(hd::tree_sum_chunks(256), 1u);
  EXPECT_EQ(hd::tree_sum_chunks(257), 2u);
  EXPECT_EQ(hd::tree_sum_chunks(700), 3u);
  for (size_t j = 0; j < 3; ++j) {
    const std::vector<double> chunk(t.begin() + 256 * j, t.begin() + std::min<size_t>(700, 256 * (j + 1)));
    EXPECT_EQ(bits(hd::chunk_sum(term, 700, j)), bits(sequential(chunk))) << j;
  }
}

TEST(TreeSum, L2NormIsTheSqrtOfTheTreeOfSquares) {
  auto be = emu::make_emu_backend();
  for (size_t n : kLengths) {
    std::vector<float> x(n);
    std::vector<double> sq(n);
    for (size_t i = 0; i < n; ++i) {
      x[i] = i % 97 == 0 ? 1e8f : (i % 2 ? -1.0f : 1.0f);  // 1e8^2 = 1e16 exactly in FP64
      sq[i] = double(x[i]) * double(x[i]);
    }
    const double want = std::sqrt(oracle_tree(sq));
    if (must_distinguish(n)) {
      ASSERT_NE(bits(want), bits(std::sqrt(sequential(sq)))) << n;
    }
    EXPECT_EQ(bits(be->l2_norm(upload_f32(*be, x))), bits(want)) << n;
  }
}

TEST(TreeSum, QuantStatsSumsAreTrees) {
  const QuantSpec spec = named_spec("mxfp8");
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t n : kLengths) {
    Rng rng{n};
    Tensor2f x = Tensor2f::from_shape({1, n});
    for (size_t i = 0; i < n; ++i) {
      const float v = rng.wide(-20, 20);
      x(0, i) = (rng.next() & 1) ? -v : v;
    }
    // excluded pairs: a non-finite source (its block's scale is NaN, so the
    // whole block's d is NaN and drops out too)
    if (n > 1000) {
      x(0, 500) = inf;
      x(0, 900) = nan;
    }
    const QuantizedTensor q = emu::quantize(x, spec);
    const Tensor2f d = emu::dequantize(q);
    std::vector<double> se(n), sx(n);
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      const float xv = x(0, i), dv = d(0, i);
      if (std::isfinite(xv) && !std::isnan(dv)) {  // the pairs numerics.md §4.6 takes
        const double e = double(xv) - double(dv);
        se[i] = e * e;
        sx[i] = double(xv) * double(xv);
        ++kept;
      }  // else both terms +0.0 at their index
    }
    const emu::QuantStats s = emu::quant_stats(x, q);
    if (kept == 0) {
      EXPECT_TRUE(std::isnan(s.mse) && std::isnan(s.signal_power)) << n;
      continue;
    }
    if (must_distinguish(n)) {
      ASSERT_NE(bits(oracle_tree(se)), bits(sequential(se))) << n;
      ASSERT_NE(bits(oracle_tree(sx)), bits(sequential(sx))) << n;
    }
    EXPECT_EQ(bits(s.mse), bits(oracle_tree(se) / double(kept))) << n;
    EXPECT_EQ(bits(s.signal_power), bits(oracle_tree(sx) / double(kept))) << n;
    EXPECT_EQ(bits(s.sqnr_db), bits(10.0 * std::log10(oracle_tree(sx) / oracle_tree(se)))) << n;
  }
}

TEST(TreeSum, OscUpdateMeansAreTrees) {
  auto be = emu::make_emu_backend();
  for (size_t n : kLengths) {
    if (n == 0) continue;  // a weight has elements
    Rng rng{n + 7};
    // A step in which nothing moves (w = prev_w, q = prev_q) with momentum 0:
    // ema stays as set and the window sums as set, so the terms are known
    // exactly: ema_i and dist_q_i / dist_w_i where dist_w_i > 0 (else +0.0).
    std::vector<float> w(n), ema(n), dw(n), dq(n);
    std::vector<double> ema_t(n), ratio_t(n);
    uint64_t moved = 0;
    for (size_t i = 0; i < n; ++i) {
      w[i] = float(i % 13);
      ema[i] = rng.wide(-60, -1);
      dw[i] = i % 7 == 3 ? 0.0f : rng.wide(-12, 0);
      dq[i] = rng.wide(-4, 30);
      ema_t[i] = double(ema[i]);
      if (dw[i] > 0) {
        ratio_t[i] = double(dq[i]) / double(dw[i]);
        ++moved;
      }
    }
    Backend::OscState s{upload_f32(*be, w), upload_f32(*be, w), upload_f32(*be, dw), upload_f32(*be, dq),
                        upload_f32(*be, ema), be->alloc(DType::u8, {1, n}), be->alloc(DType::u32, {1, n})};
    be->upload(s.last_dir, std::span<const uint8_t>(std::vector<uint8_t>(n, 0)));
    be->upload(s.flips, std::span<const uint32_t>(std::vector<uint32_t>(n, 0)));
    if (must_distinguish(n)) {
      ASSERT_NE(bits(oracle_tree(ema_t)), bits(sequential(ema_t))) << n;
      ASSERT_NE(bits(oracle_tree(ratio_t)), bits(sequential(ratio_t))) << n;
    }
    const Tensor wt = upload_f32(*be, w);
    const Backend::OscStep r = be->osc_update(wt, wt, s, 0.0f, false);
    EXPECT_EQ(bits(r.ema_mean), bits(oracle_tree(ema_t) / double(n))) << n;
    EXPECT_EQ(bits(r.dist_ratio_mean), bits(oracle_tree(ratio_t) / double(moved))) << n;
    EXPECT_EQ(be->download<float>(s.ema), ema) << n;  // the terms were what the test assumed
  }
}

TEST(TreeSum, CrossEntropySumOverRowsIsATree) {
  auto be = emu::make_emu_backend();
  constexpr size_t C = 2;
  for (size_t n : kLengths) {
    if (n == 0) continue;
    Rng rng{n + 11};
    // label 1 against a larger logit 0: the row loss grows with the gap, which
    // spans 2^-10 .. 2^20, so the order of the row sum matters
    std::vector<float> l(n * C);
    std::vector<uint8_t> y(n, 1);
    for (size_t t = 0; t < n; ++t) {
      l[t * C] = rng.wide(-10, 20);
      l[t * C + 1] = 0.0f;
    }
    std::vector<float> dl_want(n * C);
    std::vector<double> loss(n);
    for (size_t t = 0; t < n; ++t) loss[t] = hd::cross_entropy_row(&l[t * C], C, y[t], 1.0f, &dl_want[t * C]);
    if (must_distinguish(n)) {
      ASSERT_NE(bits(oracle_tree(loss)), bits(sequential(loss))) << n;
    }
    Tensor lt = be->alloc(DType::f32, {n, C}), yt = be->alloc(DType::u8, {n}), dl = be->alloc(DType::f32, {n, C});
    be->upload(lt, std::span<const float>(l));
    be->upload(yt, std::span<const uint8_t>(y));
    EXPECT_EQ(bits(be->cross_entropy(lt, yt, 1.0f, dl)), bits(oracle_tree(loss))) << n;
  }
}
