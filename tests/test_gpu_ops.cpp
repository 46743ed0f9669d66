// The HIP backend's MoE and training-step ops (backends/hip/src/
// backend_hip_moe.hip, backend_hip_train.hip) against the emulator's
// (emu/src/backend_emu_moe.cpp, backend_emu_train.cpp), bit for bit: every
// output tensor byte, every returned value's bits, and the text of the
// std::invalid_argument both throw for bad indices. Both sides call
// hd/elementwise.hpp; inputs are seeded, with ties, signed zeros, NaN, Inf,
// subnormals and BF16 values where the ops meet them.
//
// Sums with a host result (l2_norm, cross_entropy's loss sum, count_correct,
// deosc_update's count, osc_update's sums) follow the fixed tree of
// docs/numerics.md §6 (chunks of 256, tree_sum.hpp). For n <= 256 that is
// the sequential sum; the GpuOpsTree.* cases (n > 256) need an emulator whose
// sums are the same tree.
//
// Skips, with the runtime's reason, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.hpp"
#include "mxsim/backend.hpp"
#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/rounding.hpp"

#ifdef MXSIM_HAVE_GPU
#include "mxsim/hip/backend_hip.hpp"
#endif

namespace {
using namespace mxsim;

#ifndef MXSIM_HAVE_GPU
TEST(GpuOps, SkippedWithoutBackend) { GTEST_SKIP() << "built without the GPU backend"; }
#else

/// One tensor on both backends.
struct Both {
  Tensor e, g;
};

struct Backends {
  std::unique_ptr<Backend> e = emu::make_emu_backend();
  std::unique_ptr<Backend> g = hip::make_backend();

  template <class T>
  Both up(DType dt, Shape s, const std::vector<T>& v) {
    Both b{e->alloc(dt, s), g->alloc(dt, s)};
    EXPECT_EQ(v.size() * sizeof(T), b.e.bytes());
    e->upload(b.e, v.data(), v.size() * sizeof(T));
    g->upload(b.g, v.data(), v.size() * sizeof(T));
    return b;
  }
  Both f32(Shape s, const std::vector<float>& v) { return up(DType::f32, s, v); }
  /// Outputs: both poisoned with 0xFF bytes, so an element the GPU leaves unwritten shows.
  Both out(DType dt, Shape s) {
    Both b{e->alloc(dt, s), g->alloc(dt, s)};
    std::vector<uint8_t> poison(b.e.bytes(), 0xFF);
    e->upload(b.e, poison.data(), poison.size());
    g->upload(b.g, poison.data(), poison.size());
    return b;
  }
  /// Every byte of the two copies equal.
  void same(const Both& b, const std::string& what) {
    std::vector<uint8_t> x(b.e.bytes()), y(b.g.bytes());
    ASSERT_EQ(x.size(), y.size()) << what;
    e->download(b.e, x.data(), x.size());
    g->download(b.g, y.data(), y.size());
    const size_t w = dtype_size(b.e.dtype());
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < x.size(); i += w)
      if (std::memcmp(&x[i], &y[i], w) != 0) {
        if (!bad) first = i / w;
        ++bad;
      }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << x.size() / w << " elements differ, first at " << first
                       << dump(b, first);
  }
  std::string dump(const Both& b, size_t i) {
    if (b.e.dtype() != DType::f32 || i >= b.e.numel()) return "";
    const std::vector<float> x = e->download<float>(b.e), y = g->download<float>(b.g);
    char s[160];
    std::snprintf(s, sizeof s, " (emu %a 0x%08x, gpu %a 0x%08x)", double(x[i]), std::bit_cast<uint32_t>(x[i]),
                  double(y[i]), std::bit_cast<uint32_t>(y[i]));
    return s;
  }
};

template <class F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& x) {
    return x.what();
  }
  return "(nothing thrown)";
}

uint64_t bits(double d) { return std::bit_cast<uint64_t>(d); }

/// Seeded values with the special cases mixed in (rate 1/16).
std::vector<float> values(std::mt19937& rng, size_t n, float scale, bool specials, bool bf16 = false) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::uniform_int_distribution<int> pick(0, 15), kind(0, 7);
  std::vector<float> v(n);
  for (float& x : v) {
    x = nd(rng);
    if (specials && pick(rng) == 0) {
      switch (kind(rng)) {
        case 0: x = 0.0f; break;
        case 1: x = -0.0f; break;
        case 2: x = std::numeric_limits<float>::denorm_min() * 37; break;
        case 3: x = -1e-39f; break;
        case 4: x = 88.5f; break;
        case 5: x = -100.0f; break;
        case 6: x = std::round(x); break;  // ties
        default: x = 1e30f; break;
      }
    }
    if (bf16) x = round_bf16(x);
  }
  return v;
}

/// Router probabilities with ties (quantized logits) and, optionally, NaN / -inf entries.
std::vector<float> router_logits(std::mt19937& rng, size_t T, size_t E, bool nan) {
  std::uniform_int_distribution<int> q(-8, 8), pick(0, 31);
  std::vector<float> v(T * E);
  for (float& x : v) {
    x = float(q(rng)) * 0.25f;
    if (nan && pick(rng) == 0) x = std::numeric_limits<float>::quiet_NaN();
    else if (nan && pick(rng) == 0) x = -INFINITY;
  }
  return v;
}

/// A top [T, k] of distinct experts per row.
std::vector<int32_t> random_top(std::mt19937& rng, size_t T, size_t E, size_t k) {
  std::vector<int32_t> top(T * k);
  std::vector<int32_t> perm(E);
  for (size_t t = 0; t < T; ++t) {
    for (size_t e = 0; e < E; ++e) perm[e] = int32_t(e);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (size_t s = 0; s < k; ++s) top[t * k + s] = perm[s];
  }
  return top;
}

// ---------------------------------------------------------------- router

TEST(GpuOps, SoftmaxAndTopk) {
  REQUIRE_GPU();
  Backends b;
  std::mt19937 rng(11);
  for (size_t T : {1u, 37u, 300u})
    for (size_t E : {1u, 8u, 64u, 257u})
      for (bool nan : {false, true}) {
        const std::string what = "T " + std::to_string(T) + " E " + std::to_string(E) + (nan ? " nan" : "");
        const Both l = b.f32({T, E}, router_logits(rng, T, E, nan));
        Both p = b.out(DType::f32, {T, E});
        b.e->softmax_rows(l.e, p.e);
        b.g->softmax_rows(l.g, p.g);
        b.same(p, "softmax_rows " + what);
        // top-k on the same probabilities, NaNs and ties included
        const Both pin = b.f32({T, E}, b.e->download<float>(p.e));
        const Both praw = b.f32({T, E}, router_logits(rng, T, E, nan));
        for (int k : {1, 2, 8})
          if (size_t(k) <= E)
            for (const Both* src : {&pin, &praw}) {
              Both top = b.out(DType::i32, {T, size_t(k)});
              b.e->topk_rows(src->e, k, top.e);
              b.g->topk_rows(src->g, k, top.g);
              b.same(top, "topk_rows k " + std::to_string(k) + " " + what);
            }
      }
  const Both l = b.f32({2, 3}, std::vector<float>(6, 0.0f));
  Both bad = b.out(DType::f32, {3, 2});
  EXPECT_EQ(thrown([&] { b.e->softmax_rows(l.e, bad.e); }), thrown([&] { b.g->softmax_rows(l.g, bad.g); }));
  Both top = b.out(DType::i32, {2, 4});
  EXPECT_EQ(thrown([&] { b.e->topk_rows(l.e, 4, top.e); }), thrown([&] { b.g->topk_rows(l.g, 4, top.g); }));
}

// ---------------------------------------------------------------- dispatch

TEST(GpuOps, MoeRoutePermuteCombineAndBackward) {
  REQUIRE_GPU();
  Backends b;
  std::mt19937 rng(12);
  struct Case {
    size_t T, E, k, d;
    int64_t pad;
  };
  for (const Case c : {Case{1, 1, 1, 1, 16}, Case{5, 4, 2, 3, 16}, Case{64, 8, 2, 40, 16}, Case{300, 16, 4, 17, 16},
                       Case{4096, 64, 8, 8, 16}, Case{2000, 300, 2, 5, 1}, Case{33, 7, 7, 64, 4}}) {
    const std::string what = "T " + std::to_string(c.T) + " E " + std::to_string(c.E) + " k " + std::to_string(c.k) +
                             " d " + std::to_string(c.d);
    const Both top = b.up(DType::i32, {c.T, c.k}, random_top(rng, c.T, c.E, c.k));
    Both counts = b.out(DType::i64, {c.E}), row_of = b.out(DType::i64, {c.T * c.k});
    b.e->moe_route(top.e, c.E, c.pad, counts.e, row_of.e);
    b.g->moe_route(top.g, c.E, c.pad, counts.g, row_of.g);
    b.same(counts, "moe_route counts " + what);
    b.same(row_of, "moe_route row_of " + what);
    size_t M = 0;
    for (int64_t n : b.e->download<int64_t>(counts.e)) M += size_t((n + c.pad - 1) / c.pad * c.pad);
    M += 3;  // rows no assignment uses stay zero

    const Both h0 = b.f32({c.T, c.d}, values(rng, c.T * c.d, 1.0f, true, true));
    Both xp = b.out(DType::f32, {M, c.d});
    b.e->permute_rows(h0.e, row_of.e, c.k, xp.e);
    b.g->permute_rows(h0.g, row_of.g, c.k, xp.g);
    b.same(xp, "permute_rows " + what);

    const Both p = b.f32({c.T, c.E}, values(rng, c.T * c.E, 0.3f, false));
    const Both yp = b.f32({M, c.d}, values(rng, M * c.d, 2.0f, true, true));
    Both h1 = b.out(DType::f32, {c.T, c.d});
    b.e->unpermute_combine(yp.e, h0.e, p.e, top.e, row_of.e, c.k, h1.e);
    b.g->unpermute_combine(yp.g, h0.g, p.g, top.g, row_of.g, c.k, h1.g);
    b.same(h1, "unpermute_combine " + what);

    const Both dh1 = b.f32({c.T, c.d}, values(rng, c.T * c.d, 1e-3f, true, true));
    Both dyp = b.out(DType::f32, {M, c.d}), dgate = b.out(DType::f32, {c.T * c.k});
    b.e->combine_backward(dh1.e, yp.e, p.e, top.e, row_of.e, c.k, dyp.e, dgate.e);
    b.g->combine_backward(dh1.g, yp.g, p.g, top.g, row_of.g, c.k, dyp.g, dgate.g);
    b.same(dyp, "combine_backward dyp " + what);
    b.same(dgate, "combine_backward dgate " + what);

    Both f = b.out(DType::f32, {c.E});
    for (float coeff : {0.01f, 1.0f}) {
      const double ae = b.e->aux_loss(p.e, counts.e, c.k, coeff, f.e);
      const double ag = b.g->aux_loss(p.g, counts.g, c.k, coeff, f.g);
      EXPECT_EQ(bits(ae), bits(ag)) << "aux_loss " << what << ": emu " << ae << ", gpu " << ag;
      b.same(f, "aux_loss f " + what);
    }

    const Both dg = b.f32({c.T * c.k}, values(rng, c.T * c.k, 0.1f, true));
    Both dl = b.out(DType::f32, {c.T, c.E});
    b.e->router_backward(p.e, top.e, dg.e, f.e, 0.02f, c.k, dl.e);
    b.g->router_backward(p.g, top.g, dg.g, f.g, 0.02f, c.k, dl.g);
    b.same(dl, "router_backward " + what);

    const Both dh0r = b.f32({c.T, c.d}, values(rng, c.T * c.d, 1e-2f, true, true));
    const Both dxp = b.f32({M, c.d}, values(rng, M * c.d, 1e-2f, true, true));
    Both dh0 = b.out(DType::f32, {c.T, c.d});
    b.e->embed_grad_sum(dh1.e, dh0r.e, dxp.e, row_of.e, c.k, dh0.e);
    b.g->embed_grad_sum(dh1.g, dh0r.g, dxp.g, row_of.g, c.k, dh0.g);
    b.same(dh0, "embed_grad_sum " + what);
  }
}

TEST(GpuOps, DispatchErrors) {
  REQUIRE_GPU();
  Backends b;
  // moe_route: the first entry outside [0, E) is named (here the second bad one is larger).
  // A GPU reports bad device-resident indices at its next synchronisation
  // (Backend: the download of counts that follows a moe_route), hence the
  // synchronize() in each call below.
  for (const std::vector<int32_t>& v : {std::vector<int32_t>{0, 1, 7, 2, -1, 9}, std::vector<int32_t>{-3, 0, 0, 0},
                                        std::vector<int32_t>(5000, 2)}) {
    std::vector<int32_t> t = v;
    if (t.size() == 5000) t[4321] = 4;
    const Both top = b.up(DType::i32, {t.size()}, t);
    Both counts = b.out(DType::i64, {4}), row_of = b.out(DType::i64, {t.size()});
    const std::string me = thrown([&] { b.e->moe_route(top.e, 4, 16, counts.e, row_of.e); b.e->synchronize(); });
    EXPECT_EQ(me, thrown([&] { b.g->moe_route(top.g, 4, 16, counts.g, row_of.g); b.g->synchronize(); }));
    EXPECT_NE(me.find("moe_route: expert index"), std::string::npos) << me;
  }
  // permute_rows: an entry outside dst; a row_of that does not fit k
  const Both src = b.f32({2, 3}, std::vector<float>(6, 1.0f));
  const Both r = b.up(DType::i64, {4}, std::vector<int64_t>{0, 1, 2, 16});
  Both dst = b.out(DType::f32, {16, 3});
  EXPECT_EQ(thrown([&] { b.e->permute_rows(src.e, r.e, 2, dst.e); b.e->synchronize(); }),
            thrown([&] { b.g->permute_rows(src.g, r.g, 2, dst.g); b.g->synchronize(); }));
  EXPECT_EQ(thrown([&] { b.e->permute_rows(src.e, r.e, 3, dst.e); b.e->synchronize(); }),
            thrown([&] { b.g->permute_rows(src.g, r.g, 3, dst.g); b.g->synchronize(); }));
  // empty routing
  const Both none = b.up(DType::i32, {0}, std::vector<int32_t>{});
  Both counts = b.out(DType::i64, {5}), row_of = b.out(DType::i64, {0});
  b.e->moe_route(none.e, 5, 16, counts.e, row_of.e);
  b.g->moe_route(none.g, 5, 16, counts.g, row_of.g);
  b.same(counts, "moe_route of nothing");
}

// ---------------------------------------------------------------- activations

TEST(GpuOps, ActivationAndGradient) {
  REQUIRE_GPU();
  Backends b;
  std::mt19937 rng(13);
  for (size_t n : {1u, 1000u, 100003u}) {
    std::vector<float> u = values(rng, n, 4.0f, true, true);
    if (n > 8) {
      u[0] = INFINITY, u[1] = -INFINITY, u[2] = std::numeric_limits<float>::quiet_NaN(), u[3] = -0.0f;
      u[4] = 1e-45f, u[5] = -20.0f, u[6] = 20.0f, u[7] = 3.4e38f;
    }
    const Both ub = b.f32({n}, u), da = b.f32({n}, values(rng, n, 1e-3f, true, true));
    for (Activation k : {Activation::Relu, Activation::Gelu, Activation::Silu}) {
      Both a = b.out(DType::f32, {n}), du = b.out(DType::f32, {n});
      b.e->activation(k, ub.e, a.e);
      b.g->activation(k, ub.g, a.g);
      b.same(a, std::string("activation ") + name_of(k) + " n " + std::to_string(n));
      b.e->activation_grad(k, ub.e, da.e, du.e);
      b.g->activation_grad(k, ub.g, da.g, du.g);
      b.same(du, std::string("activation_grad ") + name_of(k) + " n " + std::to_string(n));
    }
  }
}

// ---------------------------------------------------------------- loss, metrics, norms

void loss_and_metrics(size_t T, size_t C, uint32_t seed) {
  Backends b;
  std::mt19937 rng(seed);
  const std::string what = "T " + std::to_string(T) + " C " + std::to_string(C);
  std::vector<float> l = values(rng, T * C, 3.0f, false);
  std::uniform_int_distribution<int> q(-2, 2), pick(0, 63);
  for (size_t i = 0; i < l.size(); i += 3) l[i] = float(q(rng));  // ties for the argmax
  std::vector<uint8_t> y(T);
  std::uniform_int_distribution<int> cls(0, int(C) - 1);
  for (uint8_t& v : y) v = uint8_t(cls(rng));
  const Both lb = b.f32({T, C}, l), yb = b.up(DType::u8, {T}, y);
  Both dl = b.out(DType::f32, {T, C});
  const double se = b.e->cross_entropy(lb.e, yb.e, 1.0f / float(T), dl.e);
  const double sg = b.g->cross_entropy(lb.g, yb.g, 1.0f / float(T), dl.g);
  EXPECT_EQ(bits(se), bits(sg)) << "cross_entropy " << what << ": emu " << se << ", gpu " << sg;
  b.same(dl, "cross_entropy dlogits " + what);
  // NaN rows for the argmax
  for (size_t i = 0; i < l.size(); ++i)
    if (pick(rng) == 0) l[i] = std::numeric_limits<float>::quiet_NaN();
  const Both ln = b.f32({T, C}, l);
  Both pred = b.out(DType::i32, {T});
  b.e->argmax_rows(ln.e, pred.e);
  b.g->argmax_rows(ln.g, pred.g);
  b.same(pred, "argmax_rows " + what);
  EXPECT_EQ(b.e->count_correct(ln.e, yb.e), b.g->count_correct(ln.g, yb.g)) << "count_correct " << what;
  EXPECT_EQ(b.e->count_correct(lb.e, yb.e), b.g->count_correct(lb.g, yb.g)) << "count_correct " << what;
}

double l2_case(Backends& b, const std::vector<float>& x, const std::string& what) {
  const Both xb = b.f32({x.size()}, x);
  const double ne = b.e->l2_norm(xb.e), ng = b.g->l2_norm(xb.g);
  EXPECT_EQ(bits(ne), bits(ng)) << "l2_norm " << what << ": emu " << ne << ", gpu " << ng;
  return ng;
}

TEST(GpuOps, LossMetricsNormSmall) {
  REQUIRE_GPU();
  for (size_t T : {1u, 7u, 256u}) loss_and_metrics(T, 10, 14 + uint32_t(T));
  loss_and_metrics(100, 1, 15);
  Backends b;
  std::mt19937 rng(16);
  for (size_t n : {0u, 1u, 100u, 256u}) l2_case(b, values(rng, n, 1.0f, true), "n " + std::to_string(n));
  // a bad label: the emulator's message
  const Both l = b.f32({3, 4}, std::vector<float>(12, 0.0f)), y = b.up(DType::u8, {3}, std::vector<uint8_t>{1, 4, 9});
  Both dl = b.out(DType::f32, {3, 4});
  const std::string m = thrown([&] { b.e->cross_entropy(l.e, y.e, 1.0f, dl.e); });
  EXPECT_EQ(m, thrown([&] { b.g->cross_entropy(l.g, y.g, 1.0f, dl.g); }));
  EXPECT_NE(m.find("label 4"), std::string::npos) << m;
}

// Deferred host values: several queued, one resolve delivers them all with
// the emulator's bits; a bad label found by a deferred op is thrown by the
// resolve, after the other values were delivered.
TEST(GpuOps, DeferredValuesResolveTogether) {
  REQUIRE_GPU();
  Backends b;
  std::mt19937 rng(61);
  const size_t T = 300, C = 10;
  const std::vector<float> l = values(rng, T * C, 3.0f, false);
  std::vector<uint8_t> y(T);
  for (uint8_t& v : y) v = uint8_t(rng() % C);
  const Both lb = b.f32({T, C}, l), yb = b.up(DType::u8, {T}, y);
  const Both x1 = b.f32({1000}, values(rng, 1000, 1.0f, true)), x2 = b.f32({70001}, values(rng, 70001, 0.1f, true));
  Both dle = b.out(DType::f32, {T, C}), dlg = b.out(DType::f32, {T, C});
  double n1 = -1, n2 = -1, ce = -1;
  int64_t correct = -1;
  b.g->l2_norm_deferred(x1.g, &n1);
  b.g->cross_entropy_deferred(lb.g, yb.g, 0.5f, dlg.g, &ce);
  b.g->count_correct_deferred(lb.g, yb.g, &correct);
  b.g->l2_norm_deferred(x2.g, &n2);
  EXPECT_EQ(n1, -1.0) << "a GPU delivers deferred values at the resolve, not before";
  EXPECT_EQ(correct, -1);
  b.g->resolve_deferred();
  EXPECT_EQ(bits(n1), bits(b.e->l2_norm(x1.e)));
  EXPECT_EQ(bits(n2), bits(b.e->l2_norm(x2.e)));
  EXPECT_EQ(bits(ce), bits(b.e->cross_entropy(lb.e, yb.e, 0.5f, dle.e)));
  EXPECT_EQ(correct, b.e->count_correct(lb.e, yb.e));
  // an error: delivered by the resolve; the value queued after it still arrives.
  // The first bad row holds the larger label: the message names the row's
  // label (the emulator's rule), not the smallest bad one.
  std::vector<uint8_t> bad = y;
  bad[7] = 200;
  bad[9] = 12;
  const Both yb2 = b.up(DType::u8, {T}, bad);
  double after = -1;
  b.g->cross_entropy_deferred(lb.g, yb2.g, 0.5f, dlg.g, &ce);
  b.g->l2_norm_deferred(x1.g, &after);
  const std::string m = thrown([&] { b.g->resolve_deferred(); });
  EXPECT_EQ(m, thrown([&] { b.e->cross_entropy(lb.e, yb2.e, 0.5f, dle.e); }));
  EXPECT_NE(m.find("label 200"), std::string::npos) << m;
  EXPECT_EQ(bits(after), bits(n1));
}

TEST(GpuOpsTree, LossMetricsNormLarge) {
  REQUIRE_GPU();
  for (size_t T : {257u, 1000u, 70000u}) loss_and_metrics(T, 10, 17 + uint32_t(T));
  Backends b;
  std::mt19937 rng(18);
  for (size_t n : {257u, 65536u, 65537u, 3000001u}) l2_case(b, values(rng, n, 1.0f, true), "n " + std::to_string(n));
}

// ---------------------------------------------------------------- optimizer

TEST(GpuOps, AdamW) {
  REQUIRE_GPU();
  Backends b;
  std::mt19937 rng(19);
  const size_t n = 50001;
  Both w = b.f32({n}, values(rng, n, 0.05f, true)), m = b.f32({n}, values(rng, n, 1e-3f, true));
  std::vector<float> v0 = values(rng, n, 1e-6f, true);
  for (float& x : v0) x = std::fabs(x);
  Both v = b.f32({n}, v0);
  Both model = b.out(DType::f32, {n});
  for (int64_t t : {1, 2, 10, 1000}) {
    const Both g = b.f32({n}, values(rng, n, 1e-2f, true));
    const Backend::AdamW h{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, t};
    b.e->adamw(w.e, m.e, v.e, g.e, h, model.e);
    b.g->adamw(w.g, m.g, v.g, g.g, h, model.g);
    const std::string what = "step " + std::to_string(t);
    b.same(w, "adamw master " + what);
    b.same(m, "adamw m " + what);
    b.same(v, "adamw v " + what);
    b.same(model, "adamw model " + what);
  }
}

// ---------------------------------------------------------------- de-oscillation, oscillation metrics

/// A master weight that moves a little and a "quantized" value on a coarse grid, so q oscillates.
struct Walk {
  std::vector<float> w, q;
  void step(std::mt19937& rng, float grid) {
    std::normal_distribution<float> nd(0.0f, grid * 0.3f);
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] = w[i] + nd(rng);
      q[i] = std::round(w[i] / grid) * grid;
    }
  }
};

void deosc_case(size_t n, uint32_t seed) {
  Backends b;
  std::mt19937 rng(seed);
  Walk wk{values(rng, n, 0.1f, false), std::vector<float>(n)};
  wk.step(rng, 1.0f / 64);
  Both w = b.f32({n}, wk.w), prev = b.f32({n}, wk.w), prev_q = b.f32({n}, wk.q);
  Both dw = b.f32({n}, std::vector<float>(n, 0.0f)), dq = b.f32({n}, std::vector<float>(n, 0.0f));
  Both snaps = b.out(DType::u32, {n});  // per-element counts from 0xFFFFFFFF: the first snap wraps to 0
  for (int s = 0; s < 12; ++s) {
    std::vector<float> cur = b.e->download<float>(w.e);
    wk.w = cur;
    wk.step(rng, 1.0f / 64);
    const Both wn = b.f32({n}, wk.w), q = b.f32({n}, wk.q);
    b.e->copy(wn.e, w.e);
    b.g->copy(wn.g, w.g);
    const bool end = s % 4 == 3;
    const int64_t ce = b.e->deosc_update(w.e, q.e, prev.e, prev_q.e, dw.e, dq.e, end, 0.5f, &snaps.e);
    const int64_t cg = b.g->deosc_update(w.g, q.g, prev.g, prev_q.g, dw.g, dq.g, end, 0.5f, &snaps.g);
    const std::string what = "n " + std::to_string(n) + " step " + std::to_string(s);
    EXPECT_EQ(ce, cg) << "deosc_update count " << what;
    b.same(w, "deosc_update w " + what);
    b.same(prev, "deosc_update prev " + what);
    b.same(prev_q, "deosc_update prev_q " + what);
    b.same(dw, "deosc_update dist_w " + what);
    b.same(dq, "deosc_update dist_q " + what);
    b.same(snaps, "deosc_update snaps " + what);
  }
}

void osc_case(size_t n, uint32_t seed) {
  Backends b;
  std::mt19937 rng(seed);
  Walk wk{values(rng, n, 0.1f, false), std::vector<float>(n)};
  wk.step(rng, 1.0f / 32);
  const Shape s = n % 2 ? Shape{1, 1, n} : Shape{1, 2, n / 2};
  const std::vector<float> zero(n, 0.0f);
  Both prev_w = b.f32(s, wk.w), prev_q = b.f32(s, wk.q), dist_w = b.f32(s, zero), dist_q = b.f32(s, zero),
       ema = b.f32(s, zero);
  Both last_dir = b.up(DType::u8, s, std::vector<uint8_t>(n, 0)), flips = b.up(DType::u32, s, std::vector<uint32_t>(n, 0));
  Backend::OscState se{prev_w.e, prev_q.e, dist_w.e, dist_q.e, ema.e, last_dir.e, flips.e};
  Backend::OscState sg{prev_w.g, prev_q.g, dist_w.g, dist_q.g, ema.g, last_dir.g, flips.g};
  for (int st = 0; st < 10; ++st) {
    wk.step(rng, 1.0f / 32);
    const Both w = b.f32(s, wk.w), q = b.f32(s, wk.q);
    const bool end = st % 3 == 2;
    const Backend::OscStep re = b.e->osc_update(w.e, q.e, se, 0.1f, end);
    const Backend::OscStep rg = b.g->osc_update(w.g, q.g, sg, 0.1f, end);
    const std::string what = "n " + std::to_string(n) + " step " + std::to_string(st);
    EXPECT_EQ(re.flips, rg.flips) << "osc_update flips " << what;
    EXPECT_EQ(re.flips_total, rg.flips_total) << "osc_update flips_total " << what;
    EXPECT_EQ(bits(re.ema_mean), bits(rg.ema_mean)) << "osc_update ema_mean " << what;
    EXPECT_EQ(bits(re.ema_frac_above), bits(rg.ema_frac_above)) << "osc_update ema_frac_above " << what;
    EXPECT_EQ(bits(re.dist_ratio_mean), bits(rg.dist_ratio_mean)) << "osc_update dist_ratio_mean " << what;
    for (auto [t, name] : std::initializer_list<std::pair<Both*, const char*>>{
             {&prev_w, "prev_w"}, {&prev_q, "prev_q"}, {&dist_w, "dist_w"}, {&dist_q, "dist_q"}, {&ema, "ema"},
             {&last_dir, "last_dir"}, {&flips, "flips"}})
      b.same(*t, std::string("osc_update ") + name + " " + what);
  }
}

TEST(GpuOps, DeOscAndOscSmall) {
  REQUIRE_GPU();
  for (size_t n : {2u, 64u, 256u}) {
    deosc_case(n, 20 + uint32_t(n));
    osc_case(n, 21 + uint32_t(n));
  }
}

// Level 0 is one warp per chunk of 256 (tree_sum.hpp's tree_warps_kernel), and
// more than 256 chunks take an upper level: sizes below and above one level
// and past 4096 chunks, each with a ragged last chunk and a ragged last round
// of 32 elements.
TEST(GpuOpsTree, DeOscAndOscLarge) {
  REQUIRE_GPU();
  for (size_t n : {size_t(258), size_t(100001), (size_t(1) << 20) + 514}) {
    deosc_case(n, 22 + uint32_t(n));
    osc_case(n, 23 + uint32_t(n));
  }
}

// The watched elements of the trace (gather_deferred, quant_elements_deferred):
// the GPU's element-by-element copies against the emulator's download, for
// nibble-packed E2M1 (even and odd columns), E8M0, FP32 and UE4M3 scales
// with NVFP4's tensor scale, logical and transposed storage; a bad index is
// refused with the emulator's message before anything is queued.
TEST(GpuOps, WatchedElementsMatchEmulator) {
  REQUIRE_GPU();
  Backends b;
  std::mt19937 rng(25);
  const Shape s{3, 40, 70};
  const Both x = b.f32(s, values(rng, s.numel(), 3.0f, true));
  const std::vector<int64_t> idx = {0, 1, 69, 70, 2799, 2800, 5000, 8399, 4321, 1};
  for (const char* recipe : {"mxfp4", "mxfp8", "fp8_block", "nvfp4", "fp8_tensor"})
    for (Axis axis : {Axis::Cols, Axis::Rows}) {
      const QuantSpec spec = tensor_recipe(recipe);
      const std::string what = std::string(recipe) + (axis == Axis::Rows ? " rows" : " cols");
      const QTensor qe = b.e->quantize(x.e, spec, axis), qg = b.g->quantize(x.g, spec, axis);
      Backend::QuantElements e, g;
      b.e->quant_elements_deferred(qe, idx, &e);
      b.g->quant_elements_deferred(qg, idx, &g);
      b.g->resolve_deferred();
      EXPECT_EQ(e.code, g.code) << what;
      EXPECT_EQ(e.scale_bytes, g.scale_bytes) << what;
      ASSERT_EQ(e.value.size(), idx.size()) << what;
      ASSERT_EQ(g.value.size(), idx.size()) << what;
      for (size_t j = 0; j < idx.size(); ++j) {
        EXPECT_EQ(std::bit_cast<uint32_t>(e.scale_inv[j]), std::bit_cast<uint32_t>(g.scale_inv[j])) << what << " " << j;
        EXPECT_EQ(std::bit_cast<uint32_t>(e.value[j]), std::bit_cast<uint32_t>(g.value[j])) << what << " " << j;
      }
      // The values are the dequantized tensor's (an independent path: dequantize).
      const std::vector<float> d = [&] {
        Tensor out = b.e->alloc(DType::f32, s);
        b.e->dequantize(qe, out);
        return b.e->download<float>(out);
      }();
      for (size_t j = 0; j < idx.size(); ++j)
        EXPECT_EQ(std::bit_cast<uint32_t>(d[size_t(idx[j])]), std::bit_cast<uint32_t>(g.value[j])) << what << " " << j;
    }
  std::vector<float> ge(idx.size()), gg(idx.size());
  b.e->gather_deferred(x.e, idx, ge.data());
  b.g->gather_deferred(x.g, idx, gg.data());
  b.g->resolve_deferred();
  for (size_t j = 0; j < idx.size(); ++j) EXPECT_EQ(std::bit_cast<uint32_t>(ge[j]), std::bit_cast<uint32_t>(gg[j])) << j;
  const std::vector<int64_t> bad = {3, 8400};
  std::vector<float> sink(2);
  const std::string m = thrown([&] { b.e->gather_deferred(x.e, bad, sink.data()); });
  EXPECT_EQ(m, thrown([&] { b.g->gather_deferred(x.g, bad, sink.data()); }));
  EXPECT_NE(m.find("index 8400"), std::string::npos) << m;
  const QTensor q4 = b.g->quantize(x.g, tensor_recipe("mxfp4"), Axis::Cols);
  Backend::QuantElements none;
  const std::string mq = thrown([&] { b.g->quant_elements_deferred(q4, bad, &none); });
  EXPECT_NE(mq.find("index 8400"), std::string::npos) << mq;
}

// Backend::borrow_native: a view of a caller's device memory (a torch tensor's), no copy. Its reads
// are ordered after the caller's stream's work (here the copy that writes the values), and
// release_native orders the caller's later work (an overwrite of the same memory) after them: the
// statistics are the emulator's of the values the caller's stream had written when borrowing.
TEST(GpuOps, BorrowedMemoryIsReadInPlaceBeforeTheCallersLaterWrites) {
  REQUIRE_GPU();
  Backends b;
  std::mt19937 rng(77);
  const size_t rows = 300, cols = 256, n = rows * cols;
  const std::vector<float> x = values(rng, n, 3.0f, true);
  const Both xb = b.f32({rows, cols}, x);
  const QuantSpec spec = tensor_recipe("mxfp4");
  const QTensor qe = b.e->quantize(xb.e, spec, Axis::Cols);
  const QuantizedTensor hq = b.e->download(qe);
  // The caller's x holds NaNs until a copy queued on its side stream writes the values: the
  // borrow must order our reads after that copy, and release_native the overwrite below after them.
  hip::DeviceBuffer staged(n * sizeof(float), "staged x"), dx(n * sizeof(float), "caller's x");
  staged.upload(x.data(), n * sizeof(float));
  dx.fill(0xFF);
  hip::DeviceQuantized dq = gputest::upload(hq, "caller's q");
  const hip::Stream caller;  // a side stream: nothing orders it with the backend's but borrow / release
  caller.copy_async(dx.get(), staged.get(), n * sizeof(float));
  Backend::NativeQuantized nq;
  nq.spec = spec;
  nq.rows = rows, nq.cols = cols;
  nq.data = dq.t.data;
  nq.scales = dq.t.scale_bytes;  // no tensor scale: the backend's unit one
  double norm = -1;
  QuantStats st;
  {
    const Tensor bx = b.g->borrow_native(DType::f32, Shape{rows, cols}, dx.get(), caller.get());
    const QTensor bq = b.g->borrow_native(nq, caller.get());
    b.g->l2_norm_deferred(bx, &norm);
    b.g->quant_stats_deferred(bx, bq, &st);
    b.g->release_native(caller.get());
  }
  caller.fill_async(dx.get(), 0xFF, n * sizeof(float));  // NaNs, after our reads
  caller.fill_async(dq.t.data, 0, hq.data.size());
  b.g->resolve_deferred();
  caller.synchronize();
  EXPECT_EQ(bits(norm), bits(b.e->l2_norm(xb.e)));
  const QuantStats e = b.e->quant_stats(xb.e, qe);
  EXPECT_EQ(st.count, e.count);
  EXPECT_EQ(st.nan_out, 0u);
  EXPECT_EQ(bits(st.mse), bits(e.mse));
  EXPECT_EQ(bits(st.sqnr_db), bits(e.sqnr_db));
  EXPECT_EQ(st.rounded_up, e.rounded_up);
}

// amax_deferred (fp8_delayed's history, queued without a synchronisation) gives amax's bits,
// the first NaN as it is, and reads its input on the device before the call returns: the input
// may be freed, and its memory taken by another tensor, before the value resolves.
TEST(GpuOps, DeferredAmaxIsAmaxAndOutlivesItsInput) {
  REQUIRE_GPU();
  Backends b;
  const size_t n = 70000;  // several chunks of the tree and a second level
  for (int variant = 0; variant < 3; ++variant) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = float(int(i * 7919 % 2001) - 1000) / 64.0f;
    if (variant >= 1) x[n / 3] = f32_from_bits(0x7F800000u);  // +Inf: not a NaN, the largest magnitude
    if (variant == 2) x[n / 2] = f32_from_bits(0xFFC01234u), x[n - 5] = f32_from_bits(0x7FC00001u);  // first NaN wins
    const Both t = b.f32({n}, x);
    const float want = b.e->amax(t.e);
    float got = 0;
    {
      Tensor g = b.g->alloc(DType::f32, {n});
      b.g->upload(g, x.data(), n * sizeof(float));
      b.g->amax_deferred(g, &got);
    }  // freed: the next allocation of this size takes its block
    Tensor other = b.g->alloc(DType::f32, {n});
    const std::vector<float> zeros(n, 0.0f);
    b.g->upload(other, zeros.data(), n * sizeof(float));
    b.g->resolve_deferred();
    EXPECT_EQ(f32_bits(got), f32_bits(want)) << "variant " << variant;
    EXPECT_EQ(f32_bits(b.g->amax(t.g)), f32_bits(want)) << "variant " << variant;  // the immediate op too
  }
}

TEST(GpuOps, DeferredOscUpdateEqualsTheImmediateOne) {
  REQUIRE_GPU();
  Backends b;
  std::mt19937 rng(78);
  const size_t n = 70001;  // past one tree chunk level
  const Shape s{n};
  const std::vector<float> w0 = values(rng, n, 1.0f, false), w1 = values(rng, n, 1.0f, false);
  std::vector<float> q0(n), q1(n);
  for (size_t i = 0; i < n; ++i) q0[i] = std::round(w0[i] * 4) / 4, q1[i] = std::round(w1[i] * 4) / 4;
  auto state = [&](Backend& be) {
    Backend::OscState st{be.alloc(DType::f32, s), be.alloc(DType::f32, s), be.alloc(DType::f32, s),
                         be.alloc(DType::f32, s), be.alloc(DType::f32, s), be.alloc(DType::u8, s),
                         be.alloc(DType::u32, s)};
    for (Tensor* t : {&st.prev_w, &st.prev_q, &st.dist_w, &st.dist_q, &st.ema, &st.last_dir, &st.flips})
      be.fill_zero(*t);
    return st;
  };
  Backend::OscState se = state(*b.e), sg = state(*b.g);
  const Both W0 = b.f32(s, w0), Q0 = b.f32(s, q0), W1 = b.f32(s, w1), Q1 = b.f32(s, q1);
  for (int step = 0; step < 2; ++step) {
    const Both& W = step ? W1 : W0;
    const Both& Q = step ? Q1 : Q0;
    const Backend::OscStep e = b.e->osc_update(W.e, Q.e, se, 0.1f, step == 1);
    Backend::OscStep g;
    g.flips = 12345;
    b.g->osc_update_deferred(W.g, Q.g, sg, 0.1f, step == 1, &g);
    EXPECT_EQ(g.flips, 12345u) << "delivered at the resolve, not before";
    b.g->resolve_deferred();
    EXPECT_EQ(g.flips, e.flips) << step;
    EXPECT_EQ(g.flips_total, e.flips_total) << step;
    EXPECT_EQ(bits(g.ema_mean), bits(e.ema_mean)) << step;
    EXPECT_EQ(bits(g.ema_frac_above), bits(e.ema_frac_above)) << step;
    EXPECT_EQ(bits(g.dist_ratio_mean), bits(e.dist_ratio_mean)) << step;
  }
  // the state the fused fold wrote, element for element
  for (auto [te, tg] : {std::pair{&se.prev_w, &sg.prev_w}, {&se.prev_q, &sg.prev_q}, {&se.dist_w, &sg.dist_w},
                        {&se.dist_q, &sg.dist_q}, {&se.ema, &sg.ema}, {&se.last_dir, &sg.last_dir},
                        {&se.flips, &sg.flips}}) {
    std::vector<uint8_t> a(te->bytes()), c(tg->bytes());
    b.e->download(*te, a.data(), a.size());
    b.g->download(*tg, c.data(), c.size());
    EXPECT_EQ(a, c);
  }
}

// quant_stats' twelve-component fold over thousands of chunks (1,047,552 elements: 4092 chunks;
// 1,500,000: 5860, the last ragged), with an upper level of the tree.
TEST(GpuOpsTree, QuantStatsLargeMatchesEmulator) {
  REQUIRE_GPU();
  Backends b;
  std::mt19937 rng(24);
  // mxfp4 with stochastic rounding and the Hadamard transform, nvfp4: the rounding choices of
  // every scale kind that records them (numerics.md §4.6), against the emulator's, bit for bit
  for (const char* recipe : {"mxfp4", "fp8_block", "mxfp4_sr_h", "nvfp4"})
    for (Shape s : {Shape{1023, 1024}, Shape{1500, 1000}}) {
      const size_t n = s[0] * s[1];
      const std::vector<float> x = values(rng, n, 2.0f, true);
      const Both xb = b.f32(s, x);
      const bool sr_h = std::string(recipe) == "mxfp4_sr_h";
      if (sr_h && s[1] % 16 != 0) continue;  // the Hadamard transform runs on 16 columns at a time
      QuantSpec spec = tensor_recipe(sr_h ? "mxfp4" : recipe);
      if (sr_h) {
        spec.round = RoundMode::Stochastic;
        spec.sr = PhiloxStream{5, 9};
        spec.hadamard16 = true;
      }
      const QTensor qe = b.e->quantize(xb.e, spec, Axis::Cols), qg = b.g->quantize(xb.g, spec, Axis::Cols);
      const QuantStats e = b.e->quant_stats(xb.e, qe), g = b.g->quant_stats(xb.g, qg);
      const std::string what = std::string(recipe) + " n " + std::to_string(n);
      EXPECT_EQ(e.count, g.count) << what;
      EXPECT_EQ(e.nonfinite_in, g.nonfinite_in) << what;
      EXPECT_EQ(e.nan_out, g.nan_out) << what;
      EXPECT_EQ(e.underflow, g.underflow) << what;
      EXPECT_EQ(e.saturated, g.saturated) << what;
      EXPECT_GT(e.underflow + e.saturated, 0u) << what << ": the data meets neither edge";
      EXPECT_EQ(bits(e.mse), bits(g.mse)) << what;
      EXPECT_EQ(bits(e.max_abs_err), bits(g.max_abs_err)) << what;
      EXPECT_EQ(bits(e.signal_power), bits(g.signal_power)) << what;
      EXPECT_EQ(bits(e.sqnr_db), bits(g.sqnr_db)) << what;
      EXPECT_EQ(bits(e.mean_err), bits(g.mean_err)) << what;
      EXPECT_EQ(e.rounded, g.rounded) << what;
      EXPECT_EQ(e.rounded_up, g.rounded_up) << what;
      EXPECT_EQ(bits(e.expected_up), bits(g.expected_up)) << what;
      EXPECT_EQ(f32_bits(e.tensor_scale_inv), f32_bits(g.tensor_scale_inv)) << what;  // copied after the sums
      EXPECT_EQ(e.tensor_scale_inv != 1.0f, std::string(recipe) == "nvfp4") << what;
      if (std::string(recipe) != "fp8_block") {  // the choices are there to compare (nvfp4: ~12 % of these)
        EXPECT_GT(e.rounded, n / 20) << what << ": few rounding choices";
      }
    }
}

#endif  // MXSIM_HAVE_GPU
}  // namespace
