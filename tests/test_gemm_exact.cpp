// Grouped GEMM (docs/numerics.md §5): the fast implementation equals the
// reference bit for bit; the reference equals an independent rational oracle;
// the fp8 chunk contract reproduces published H200 observations; bad input
// throws; empty groups leave outputs unchanged.
#include <gtest/gtest.h>
#include <malloc.h>
#include <omp.h>
#include <sys/resource.h>

#include <bit>
#include <boost/multiprecision/cpp_int.hpp>
#include <cstdlib>
#include <cmath>
#include <optional>
#include <string>
#include <ostream>
#include <random>
#include <vector>

#include "mxsim/emu/cpu_path.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/quantize.hpp"
// Internal kernel entry points, to check that each path is actually taken.
#include "../emu/src/gemm_fused_avx2.hpp"
#include "../emu/src/gemm_fused_avx512.hpp"
#include "../emu/src/gemm_internal.hpp"
#include "test_asan.hpp"
#include "gemm_test_util.hpp"

using namespace mxsim;
using namespace mxsim::emu;

namespace {

template <class T>
size_t count_bit_diffs(const T& a, const T& b) {
  EXPECT_EQ(a.size(), b.size());
  size_t d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    d += std::bit_cast<uint32_t>(a.data()[i]) != std::bit_cast<uint32_t>(b.data()[i]);
  return d;
}

Tensor2f rand2(std::mt19937& g, size_t r, size_t c, int spread) {
  std::normal_distribution<float> n(0, 1);
  std::uniform_int_distribution<int> e(-spread, spread);
  Tensor2f t = Tensor2f::from_shape({r, c});
  for (auto& v : t) v = n(g) * std::ldexp(1.0f, e(g));
  return t;
}
Tensor3f rand3(std::mt19937& g, size_t G, size_t r, size_t c, int spread) {
  Tensor3f t = Tensor3f::from_shape({G, r, c});
  Tensor2f x = rand2(g, G * r, c, spread);
  std::copy(x.begin(), x.end(), t.begin());
  return t;
}
std::vector<int64_t> rand_splits(std::mt19937& g, size_t G, int maxm) {
  std::uniform_int_distribution<int> d(0, maxm);
  std::vector<int64_t> s(G);
  for (auto& v : s) v = (d(g) % 4 == 0) ? 0 : d(g);  // many empty groups
  return s;
}
int64_t sum(const std::vector<int64_t>& s) {
  int64_t t = 0;
  for (auto v : s) t += v;
  return t;
}

struct Pair {
  const char* a;
  const char* w;
};
// (token operand recipe, weight recipe); "bf16" means unscaled BF16.
const Pair kPairs[] = {{"mxfp4", "mxfp4_2d"}, {"mxfp4", "mxfp4"},       {"mxfp6_e2m3", "mxfp4"},
                       {"mxfp8", "mxfp8"},    {"mxfp8", "mxfp4_2d"},    {"mxfp6_e3m2", "mxfp8_e5m2"},
                       {"fp8_tensor", "fp8_tensor"}, {"fp8_row", "fp8_row"}, {"fp8_block", "fp8_block2d"},
                       {"bf16", "bf16"},      {"nvfp4", "nvfp4"},       {"nvfp4", "nvfp4_2d"}};

QuantSpec spec(const char* n) { return std::string(n) == "bf16" ? bf16_spec() : tensor_recipe(n); }

using gemmtest::opt;

}  // namespace
namespace mxsim::emu {
// gtest prints parameters with this (found by argument-dependent lookup).
inline void PrintTo(CpuPath p, std::ostream* os) { *os << cpu_path_name(p); }
}  // namespace mxsim::emu
namespace {

/// Forces a CPU path (cpu_path.hpp) for a scope, then restores the previous one.
struct PathGuard {
  CpuPath prev;
  explicit PathGuard(CpuPath p) : prev(cpu_path()) { set_cpu_path(p); }
  ~PathGuard() { set_cpu_path(prev); }
};

KernelSlot slot_of(const QuantSpec& a, const QuantSpec& b) {
  const std::string c = gemm_class_name(a, b);
  return c == "mx-exact" ? KernelSlot::MxExact : c == "mx-f13" ? KernelSlot::MxF13
       : c == "fp8-chunk128" ? KernelSlot::Fp8Chunk : c == "nvfp4-exact" ? KernelSlot::Nvfp4 : KernelSlot::Bf16;
}

/// Runs `call` (one fast GEMM) and checks that it ran the kernel path p names
/// for `slot`: a test that claims a path really ran it.
template <class F>
::testing::AssertionResult ran(KernelSlot slot, CpuPath p, F&& call) {
  clear_last_kernel(slot);
  call();
  const char* k = last_kernel(slot);
  const char* want = kernel_name(slot, p);
  if (!k || std::string(k) != want)
    return ::testing::AssertionFailure() << kernel_slot_name(slot) << " ran " << (k ? k : "(nothing)") << ", path "
                                         << cpu_path_name(p) << " should run " << want;
  return ::testing::AssertionSuccess();
}

/// Parameter of the per-path suites: each path runs where the CPU has it and
/// skips with the missing features where it does not.
class GemmPaths : public ::testing::TestWithParam<CpuPath> {
 protected:
  void SetUp() override {
    std::string why;
    if (!cpu_supports(GetParam(), &why)) GTEST_SKIP() << cpu_path_name(GetParam()) << " path: " << why;
    guard_.emplace(GetParam());
  }
  void TearDown() override { guard_.reset(); }
  std::optional<PathGuard> guard_;
};
std::string path_param_name(const ::testing::TestParamInfo<CpuPath>& i) { return cpu_path_name(i.param); }

/// Poke specials into a quantized tensor: NaN/Inf element codes where the format
/// has them and extreme scale bytes 0x00, 0xFE, 0xFF.
void poke(QuantizedTensor& q, std::mt19937& g) {
  if (q.data.size() == 0) return;
  std::uniform_int_distribution<size_t> pd(0, q.data.size() - 1);
  const FormatSpec f = spec_of(q.spec.elem);
  if (f.nan != NanKind::None && q.spec.elem != Format::E2M1) {
    q.data.data()[pd(g)] = uint8_t(f.nan_code(0));
    if (f.has_inf) q.data.data()[pd(g)] = uint8_t(f.inf_code());
    if (f.has_inf) q.data.data()[pd(g)] = uint8_t(f.inf_code() | f.sign_bit());
  }
  if (q.spec.scale_kind == ScaleKind::UE4M3 && q.scale_bytes.size()) {
    // zero, the smallest subnormal, 448 and NaN block scales; a subnormal tensor scale
    std::uniform_int_distribution<size_t> sd(0, q.scale_bytes.size() - 1);
    for (uint8_t b : {0x00, 0x01, 0x7E, 0x7E, 0x7F}) q.scale_bytes.data()[sd(g)] = b;
    if (g() % 2) q.tensor_scale_inv = std::ldexp(1.5f, -140);
  }
  if (q.spec.scale_kind == ScaleKind::E8M0 && q.scale_bytes.size()) {
    std::uniform_int_distribution<size_t> sd(0, q.scale_bytes.size() - 1);
    q.scale_bytes.data()[sd(g)] = 0x00;
    q.scale_bytes.data()[sd(g)] = 0xFE;
    q.scale_bytes.data()[sd(g)] = 0xFE;
    q.scale_bytes.data()[sd(g)] = 0xFF;
  }
}

}  // namespace

// Fast == reference on random problems of every form, pair (every GEMM class),
// output type and accumulate mode, with ragged K, ragged/empty groups and
// thread counts 1, 2, 3, on every CPU path; each call ran the path's kernel.
TEST_P(GemmPaths, FastEqualsReferenceRandom) {
  const CpuPath path = GetParam();
  std::mt19937 g(12345);
  size_t cases = 0;
  for (const Pair& p : kPairs) {
    for (int trial = 0; trial < 3; ++trial) {
      const size_t G = 1 + g() % 4;
      std::vector<int64_t> ms = rand_splits(g, G, 40);
      const size_t M = size_t(sum(ms));
      const bool fp8blk = std::string(p.a) == "fp8_block";
      const size_t N = fp8blk ? 128 + g() % 150 : 1 + g() % 70;
      const size_t K = fp8blk ? 128 + g() % 200 : 1 + g() % 100;
      const int spread = trial == 2 ? 20 : 3;
      const Tensor2f x = rand2(g, M, K, spread), dy = rand2(g, M, N, spread);
      const Tensor3f w = rand3(g, G, N, K, spread);
      const QuantSpec sa = spec(p.a), sw = spec(p.w);
      for (int form = 0; form < 3; ++form)
        for (int acc = 0; acc < 2; ++acc)
          for (Format of : {Format::FP32, Format::BF16}) {
            SCOPED_TRACE(std::string(p.a) + " x " + p.w + " form " + std::to_string(form) + " acc " + std::to_string(acc) +
                         " M " + std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K));
            const bool tiles = std::string(p.w).ends_with("_2d");
            if (form == 2 && (tiles || fp8blk)) continue;  // wgrad takes 1-D along M
            auto go = [&](GemmImpl impl, int threads, auto& outv) {
              omp_set_num_threads(threads);
              if (form == 0) grouped_fprop(x, sa, w, sw, ms, outv, opt(impl, acc, of));
              else if (form == 1) grouped_dgrad(dy, sa, w, sw, ms, outv, opt(impl, acc, of));
            };
            if (form < 2) {
              Tensor2f init = form == 0 ? rand2(g, M, N, 2) : rand2(g, M, K, 2);
              Tensor2f r = init, f1 = init, f2 = init, f3 = init;
              go(GemmImpl::Reference, 1, r);
              if (M) EXPECT_TRUE(ran(slot_of(sa, sw), path, [&] { go(GemmImpl::Fast, 1, f1); }));
              else go(GemmImpl::Fast, 1, f1);
              go(GemmImpl::Fast, 2, f2);
              go(GemmImpl::Fast, 3, f3);
              EXPECT_EQ(count_bit_diffs(r, f1), 0u);
              EXPECT_EQ(count_bit_diffs(r, f2), 0u);
              EXPECT_EQ(count_bit_diffs(r, f3), 0u);
            } else {
              const Tensor2f xw = rand2(g, M, K, spread);
              Tensor3f init = rand3(g, G, N, K, 2);
              Tensor3f r = init, f1 = init, f3 = init;
              omp_set_num_threads(1);
              grouped_wgrad(dy, sa, xw, sw, ms, r, opt(GemmImpl::Reference, acc, of));
              auto fast1 = [&] { grouped_wgrad(dy, sa, xw, sw, ms, f1, opt(GemmImpl::Fast, acc, of)); };
              if (M) EXPECT_TRUE(ran(slot_of(sa, sw), path, fast1));
              else fast1();
              omp_set_num_threads(3);
              grouped_wgrad(dy, sa, xw, sw, ms, f3, opt(GemmImpl::Fast, acc, of));
              EXPECT_EQ(count_bit_diffs(r, f1), 0u);
              EXPECT_EQ(count_bit_diffs(r, f3), 0u);
            }
            ++cases;
          }
    }
  }
  omp_set_num_threads(2);
  EXPECT_GT(cases, 100u);
}

// Specials: NaN/Inf elements, scale bytes 0x00 / 0xFE / 0xFF, saturating blocks.
TEST(GemmExact, FastEqualsReferenceSpecials) {
  std::mt19937 g(777);
  for (const Pair& p : kPairs) {
    if (std::string(p.a) == "bf16" || std::string(p.a).rfind("fp8_", 0) == 0) continue;
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<int64_t> ms = {int64_t(g() % 20), 0, int64_t(1 + g() % 30)};
      const size_t M = size_t(sum(ms)), N = 1 + g() % 64, K = 1 + g() % 130;
      Tensor2f x = rand2(g, M, K, 30);
      if (M) x(0, 0) = 1e30f, x(M - 1, K - 1) = -3e38f;  // saturating blocks
      const Tensor3f w = rand3(g, 3, N, K, 30);
      QuantizedTensor qx = quantize(x, spec(p.a), Axis::Cols), qw = quantize(w, spec(p.w), Axis::Cols);
      poke(qx, g);
      poke(qw, g);
      for (int acc = 0; acc < 2; ++acc) {
        Tensor2f r = rand2(g, M, N, 1), f = r;
        grouped_fprop(qx, qw, ms, r, opt(GemmImpl::Reference, acc, Format::FP32));
        grouped_fprop(qx, qw, ms, f, opt(GemmImpl::Fast, acc, Format::FP32));
        EXPECT_EQ(count_bit_diffs(r, f), 0u) << p.a << " x " << p.w;
      }
    }
  }
}

// The reference against an independent oracle: exact rational block sums of
// dequantized values, each added to the accumulator and rounded to nearest-even
// by searching the FP32 neighbours (no shared rounding code).
namespace {
using boost::multiprecision::cpp_rational;
cpp_rational rat(float f) {
  int e;
  const double m = std::frexp(double(f), &e);  // exact
  const int64_t im = int64_t(std::ldexp(m, 53));
  cpp_rational r(im);
  e -= 53;
  if (e >= 0) r *= cpp_rational(boost::multiprecision::cpp_int(1) << e);
  else r /= cpp_rational(boost::multiprecision::cpp_int(1) << -e);
  return r;
}
float rne_oracle(const cpp_rational& r) {
  float f = float(r.convert_to<double>());
  float best = f;
  for (int step = 0; step < 2; ++step) {
    for (float c : {std::nextafter(best, -INFINITY), best, std::nextafter(best, INFINITY)}) {
      const cpp_rational dc = abs(rat(c) - r), db = abs(rat(best) - r);
      if (dc < db || (dc == db && (std::bit_cast<uint32_t>(c) & 1) == 0)) best = c;
    }
  }
  return best == 0.0f ? 0.0f : best;
}
}  // namespace

TEST(GemmExact, ReferenceMatchesRationalOracle) {
  std::mt19937 g(99);
  for (const char* rec : {"mxfp4", "mxfp6_e2m3"}) {
    for (int trial = 0; trial < 3; ++trial) {
      const size_t M = 5, N = 7, K = 33 + g() % 90;  // ragged last block
      const Tensor2f x = rand2(g, M, K, 6);
      const Tensor3f w = rand3(g, 1, N, K, 6);
      const QuantizedTensor qx = quantize(x, tensor_recipe(rec), Axis::Cols);
      const QuantizedTensor qw = quantize(w, tensor_recipe("mxfp4_2d"), Axis::Cols);
      const Tensor2f dx = dequantize(qx);
      const Tensor3f dw = dequantize3(qw);
      const int64_t ms[] = {int64_t(M)};
      Tensor2f y;
      grouped_fprop(qx, qw, ms, y, opt(GemmImpl::Reference, false, Format::FP32));
      for (size_t i = 0; i < M; ++i)
        for (size_t j = 0; j < N; ++j) {
          float acc = 0.0f;
          for (size_t b = 0; b * 32 < K; ++b) {
            cpp_rational s = 0;
            for (size_t k = b * 32; k < std::min(K, b * 32 + 32); ++k) s += rat(dx(i, k)) * rat(dw(0, j, k));
            acc = rne_oracle(rat(acc) + s);
          }
          EXPECT_EQ(std::bit_cast<uint32_t>(acc), std::bit_cast<uint32_t>(y(i, j))) << rec << " " << i << "," << j;
        }
    }
  }
}

// Published H200 observation (shared/reference/matrix-units-and-gpu.md §2,
// cuBLASLt torch._scaled_mm, use_fast_accum=False): rows [256, 1, 1, ...] in
// both operands, per-tensor FP8 with scale 1: K = 64 -> 65536, 256 -> 65536 + 128,
// 1024 -> 65536 + 896, 4096 -> 65536 + 3968. The fp8 chunk contract (128-K
// chunks of chained F = 13 groups, promoted in FP32) gives exactly these.
TEST(GemmExact, Fp8ChunkMatchesPublishedH200Promotion) {
  const std::pair<size_t, float> cases[] = {{64, 65536.0f}, {256, 65536.0f + 128}, {1024, 65536.0f + 896}, {4096, 65536.0f + 3968}};
  for (auto [K, want] : cases) {
    Tensor2f x = Tensor2f::from_shape({1, K});
    Tensor3f w = Tensor3f::from_shape({1, 1, K});
    for (size_t k = 0; k < K; ++k) x(0, k) = w(0, 0, k) = k == 0 ? 256.0f : 1.0f;
    QuantSpec s = tensor_recipe("fp8_tensor");
    s.fixed_scale = 1.0f;  // scale 1, as the observation
    const int64_t ms[] = {1};
    for (GemmImpl impl : {GemmImpl::Reference, GemmImpl::Fast}) {
      Tensor2f y;
      grouped_fprop(x, s, w, s, ms, y, opt(impl, false, Format::FP32));
      EXPECT_EQ(y(0, 0), want) << "K " << K;
    }
  }
}

TEST(GemmExact, EmptyGroupsLeaveOutputUnchanged) {
  std::mt19937 g(5);
  const std::vector<int64_t> ms = {0, 64, 0};
  const Tensor2f dy = rand2(g, 64, 48, 2), x = rand2(g, 64, 40, 2);
  Tensor3f dw = rand3(g, 3, 48, 40, 2);
  const Tensor3f before = dw;
  grouped_wgrad(dy, tensor_recipe("mxfp4"), x, tensor_recipe("mxfp4"), ms, dw, opt(GemmImpl::Fast, true, Format::FP32));
  for (size_t g2 : {0u, 2u})
    for (size_t i = 0; i < 48 * 40; ++i)
      EXPECT_EQ(std::bit_cast<uint32_t>(dw.data()[g2 * 48 * 40 + i]), std::bit_cast<uint32_t>(before.data()[g2 * 48 * 40 + i]));
  // group 1 changed
  EXPECT_GT(count_bit_diffs(dw, before), 0u);
  // all-empty
  const std::vector<int64_t> none = {0, 0};
  Tensor2f y = Tensor2f::from_shape({0, 8});
  grouped_fprop(Tensor2f::from_shape({0, 32}), tensor_recipe("mxfp4"), rand3(g, 2, 8, 32, 1), tensor_recipe("mxfp4"), none, y);
  EXPECT_EQ(y.shape(0), 0u);
  Tensor3f dw2 = rand3(g, 2, 8, 32, 1);
  const Tensor3f b2 = dw2;
  grouped_wgrad(Tensor2f::from_shape({0, 8}), tensor_recipe("mxfp4"), Tensor2f::from_shape({0, 32}), tensor_recipe("mxfp4"), none,
                dw2, opt(GemmImpl::Fast, true, Format::FP32));
  EXPECT_EQ(count_bit_diffs(dw2, b2), 0u);
}


// Stochastic rounding of wgrad operands (docs/numerics.md §2.5): each element
// draws the word of its logical index in the whole [M, C] tensor, so experts
// never share random words. (1) Groups starting on 32-row block boundaries
// (one of them empty) equal, byte for byte, the whole tensor quantized with
// Axis::Rows restricted to the group's rows (same blocks, same words).
// (2) A group starting mid-block: every code is encode() of its element with
// the group's own scale and the word sr((m0 + r) * C + c).
TEST(GemmExact, GroupedColwiseStochasticRoundingKeysWholeTensorIndex) {
  std::mt19937 gen(17);
  const size_t M = 96, C = 40;
  const Tensor2f x = rand2(gen, M, C, 3);
  QuantSpec s = tensor_recipe("mxfp4");
  s.round = RoundMode::Stochastic;
  s.sr = PhiloxStream{0x0123456789ABCDEFull, make_stream(5, 9)};
  const QuantizedTensor full = quantize(x, s, Axis::Rows);  // storage [C, M]
  const std::vector<int64_t> ms = {32, 0, 64};
  const auto qs = quantize_grouped_colwise(x, ms, s);
  ASSERT_EQ(qs.size(), 3u);
  size_t m0 = 0, checked = 0;
  for (size_t g = 0; g < 3; ++g) {
    const size_t mg = size_t(ms[g]);
    ASSERT_EQ(qs[g].rows, mg);
    for (size_t c = 0; c < C; ++c) {
      for (size_t r = 0; r < mg; ++r, ++checked)
        ASSERT_EQ(qs[g].code(0, c, r), full.code(0, c, m0 + r)) << "group " << g << " row " << r << " col " << c;
      for (size_t b = 0; b < mg / 32; ++b) ASSERT_EQ(qs[g].scale_bytes(0, c, b), full.scale_bytes(0, c, m0 / 32 + b));
    }
    m0 += mg;
  }
  EXPECT_EQ(checked, M * C);

  const std::vector<int64_t> odd = {20, 76};
  const auto qo = quantize_grouped_colwise(x, odd, s);
  const FormatSpec e2m1 = spec_of(Format::E2M1);
  size_t differs_from_restart = 0;
  for (size_t c = 0; c < C; ++c)
    for (size_t r = 0; r < 76; ++r) {
      const int se = int(qo[1].scale_bytes(0, c, r / 32)) - 127;
      const uint32_t b = f32_bits(x(20 + r, c));
      ASSERT_EQ(qo[1].code(0, c, r), encode(e2m1, b, se, RoundMode::Stochastic, Overflow::Saturate, s.sr((20 + r) * C + c)))
          << "row " << r << " col " << c;
      differs_from_restart +=
          qo[1].code(0, c, r) != encode(e2m1, b, se, RoundMode::Stochastic, Overflow::Saturate, s.sr(r * C + c));
    }
  EXPECT_GT(differs_from_restart, 0u);  // the words matter: index restarting at 0 would give other codes
}
TEST(GemmExact, BadInputThrows) {
  std::mt19937 g(1);
  const Tensor2f x = rand2(g, 10, 64, 1);
  const Tensor3f w = rand3(g, 2, 16, 64, 1);
  Tensor2f y;
  const QuantSpec m = tensor_recipe("mxfp4");
  auto msg = [&](auto fn) {
    try { fn(); } catch (const std::invalid_argument& e) { return std::string(e.what()); }
    return std::string("no throw");
  };
  const std::vector<int64_t> bad_sum = {3, 4}, neg = {12, -2}, three = {5, 5, 0};
  EXPECT_NE(msg([&] { grouped_fprop(x, m, w, m, bad_sum, y); }).find("sum to 7"), std::string::npos);
  EXPECT_NE(msg([&] { grouped_fprop(x, m, w, m, neg, y); }).find("negative"), std::string::npos);
  // Three splits summing to 2^64 + 10 wrapped to M = 10 and passed the sum check (signed overflow
  // in the old int64 sum); the checked sum stops at INT64_MAX before the group count is looked at.
  const std::vector<int64_t> wraps = {INT64_MAX, INT64_MAX, 12};
  EXPECT_NE(msg([&] { grouped_fprop(x, m, w, m, wraps, y); }).find("m_splits sum to more than 9223372036854775807"),
            std::string::npos);
  EXPECT_NE(msg([&] { grouped_fprop(x, m, w, m, three, y); }).find("groups"), std::string::npos);
  const std::vector<int64_t> ok = {5, 5};
  EXPECT_NE(msg([&] { grouped_fprop(x, m, w, tensor_recipe("fp8_tensor"), ok, y); }).find("pair"), std::string::npos);
  EXPECT_NE(msg([&] { grouped_fprop(x, m, w, tensor_recipe("nvfp4"), ok, y); }).find("NVFP4"), std::string::npos);
  const Tensor3f w2 = rand3(g, 2, 16, 48, 1);
  EXPECT_NE(msg([&] { grouped_fprop(x, m, w2, m, ok, y); }).find("contraction"), std::string::npos);
  // A wgrad operand quantized along K instead of M.
  std::vector<QuantizedTensor> dyq, xq;
  dyq.push_back(quantize(Tensor2f(xt::view(x, xt::range(0, 5), xt::all())), m, Axis::Cols));
  dyq.push_back(quantize(Tensor2f(xt::view(x, xt::range(5, 10), xt::all())), m, Axis::Cols));
  xq = dyq;
  Tensor3f dw;
  EXPECT_NE(msg([&] { grouped_wgrad(dyq, xq, ok, dw); }).find("Axis::Rows"), std::string::npos);
  // The output is untouched on error.
  Tensor2f keep = rand2(g, 10, 16, 1);
  const Tensor2f k0 = keep;
  EXPECT_THROW(grouped_fprop(x, m, w, m, bad_sum, keep, opt(GemmImpl::Fast, true, Format::FP32)), std::invalid_argument);
  EXPECT_EQ(count_bit_diffs(keep, k0), 0u);
}

// ------------------------------------------------------------------------
// Kernel paths of the fast implementation (docs/numerics.md §5.6), each CPU
// path forced through set_cpu_path (GemmPaths): the AVX-512 and AVX2
// fused-group kernels and their per-lane fallbacks (exponent ranges, subnormal
// or huge group results, int32 overflow of a BF16 group sum, NaN/Inf elements
// and accumulators, unsafe E8M0 scales), the MX-exact integer kernels, and the
// portable scalar code, each compared bit for bit with the reference.
namespace {

// BF16 values at the edges of what the AVX-512 kernel can prove exact.
float edge_value(std::mt19937& g) {
  static const float kEdges[] = {0.0f, -0.0f, 1.9921875f, -1.9921875f, 0x1p-60f, -0x1p-70f, 0x1p-100f,
                                 0x1p-130f /* BF16 subnormal */, 0x1p60f, -0x1p63f, 0x1.fep126f, 3e38f,
                                 INFINITY, -INFINITY, NAN, 1.0f, 0x1p-126f};
  return kEdges[g() % (sizeof(kEdges) / sizeof(kEdges[0]))];
}

Tensor2f edgy2(std::mt19937& g, size_t r, size_t c, int pct) {
  Tensor2f t = rand2(g, r, c, 4);
  for (auto& v : t)
    if (int(g() % 100) < pct) v = edge_value(g);
  return t;
}

}  // namespace

TEST_P(GemmPaths, Bf16EdgesEqualReference) {
  const CpuPath path = GetParam();
  std::mt19937 g(4242);
  size_t cases = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const int pct = trial % 3 == 0 ? 0 : (trial % 3 == 1 ? 2 : 15);
    std::vector<int64_t> ms = {int64_t(g() % 23), 0, int64_t(1 + g() % 37)};
    const size_t M = size_t(sum(ms)), N = 1 + g() % 40, K = 1 + g() % 70;
    const Tensor2f x = edgy2(g, M, K, pct), dy = edgy2(g, M, N, pct);
    Tensor3f w = Tensor3f::from_shape({3, N, K});
    const Tensor2f wf = edgy2(g, 3 * N, K, pct);
    std::copy(wf.begin(), wf.end(), w.begin());
    for (int form = 0; form < 3; ++form)
      for (int acc = 0; acc < 2; ++acc)
        for (Format of : {Format::FP32, Format::BF16}) {
          SCOPED_TRACE("trial " + std::to_string(trial) + " form " + std::to_string(form) + " acc " + std::to_string(acc));
          auto go = [&](GemmImpl impl, int threads, auto& o) {
            omp_set_num_threads(threads);
            const GemmOptions op = opt(impl, acc, of);
            if (form == 0) grouped_fprop(x, bf16_spec(), w, bf16_spec(), ms, o, op);
            else if (form == 1) grouped_dgrad(dy, bf16_spec(), w, bf16_spec(), ms, o, op);
          };
          if (form < 2) {
            const Tensor2f init = edgy2(g, M, form == 0 ? N : K, pct);
            Tensor2f r = init, a1 = init, a3 = init;
            go(GemmImpl::Reference, 1, r);
            EXPECT_TRUE(ran(KernelSlot::Bf16, path, [&] { go(GemmImpl::Fast, 1, a1); }));
            go(GemmImpl::Fast, 3, a3);
            EXPECT_EQ(count_bit_diffs(r, a1), 0u);
            EXPECT_EQ(count_bit_diffs(r, a3), 0u);
          } else {
            const Tensor2f xw = edgy2(g, M, K, pct);
            Tensor3f init = Tensor3f::from_shape({3, N, K});
            const Tensor2f i2 = edgy2(g, 3 * N, K, pct);
            std::copy(i2.begin(), i2.end(), init.begin());
            Tensor3f r = init, a2 = init;
            omp_set_num_threads(1);
            grouped_wgrad(dy, bf16_spec(), xw, bf16_spec(), ms, r, opt(GemmImpl::Reference, acc, of));
            omp_set_num_threads(2);
            EXPECT_TRUE(ran(KernelSlot::Bf16, path,
                            [&] { grouped_wgrad(dy, bf16_spec(), xw, bf16_spec(), ms, a2, opt(GemmImpl::Fast, acc, of)); }));
            EXPECT_EQ(count_bit_diffs(r, a2), 0u);
          }
          ++cases;
        }
  }
  omp_set_num_threads(2);
  EXPECT_EQ(cases, 12u * 12u);
}

// FP8 classes (mx-f13, fp8-chunk128) with NaN/Inf elements, extreme E8M0 scale
// bytes and non-finite / tiny / huge FP32 scale_inv, FP32 and BF16 output.
TEST_P(GemmPaths, Fp8SpecialsEqualReference) {
  const CpuPath path = GetParam();
  std::mt19937 g(909);
  const Pair pairs[] = {{"mxfp8", "mxfp8"}, {"mxfp8", "mxfp4_2d"}, {"mxfp6_e3m2", "mxfp8_e5m2"}, {"mxfp4", "mxfp8_e5m2"},
                        {"fp8_tensor", "fp8_tensor"}, {"fp8_row", "fp8_row"}, {"fp8_block", "fp8_block2d"}};
  for (const Pair& p : pairs) {
    const bool blk = std::string(p.a) == "fp8_block";
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<int64_t> ms = {int64_t(g() % 20), 0, int64_t(1 + g() % 30)};
      const size_t M = size_t(sum(ms)), N = blk ? 128 + g() % 40 : 1 + g() % 50, K = blk ? 128 + g() % 200 : 1 + g() % 150;
      Tensor2f x = rand2(g, M, K, trial * 8);
      const Tensor3f w = rand3(g, 3, N, K, trial * 8);
      QuantizedTensor qx = quantize(x, spec(p.a), Axis::Cols), qw = quantize(w, spec(p.w), Axis::Cols);
      if (trial >= 2) {
        poke(qx, g);
        poke(qw, g);
        const float fs[] = {NAN, INFINITY, 0.0f, 0x1p-140f, 0x1p100f, -2.0f};
        for (QuantizedTensor* q : {&qx, &qw})
          if (q->spec.scale_kind == ScaleKind::FP32 && q->scale_inv.size())
            q->scale_inv.data()[g() % q->scale_inv.size()] = fs[g() % 6];
      }
      for (int acc = 0; acc < 2; ++acc) {
        const Tensor2f init = edgy2(g, M, N, trial == 3 ? 10 : 0);
        Tensor2f r = init, a1 = init, a3 = init, pt = init, rb = init;
        omp_set_num_threads(1);
        grouped_fprop(qx, qw, ms, r, opt(GemmImpl::Reference, acc, Format::FP32));
        EXPECT_TRUE(ran(slot_of(spec(p.a), spec(p.w)), path,
                        [&] { grouped_fprop(qx, qw, ms, a1, opt(GemmImpl::Fast, acc, Format::FP32)); }));
        omp_set_num_threads(3);
        grouped_fprop(qx, qw, ms, a3, opt(GemmImpl::Fast, acc, Format::FP32));
        grouped_fprop(qx, qw, ms, pt, opt(GemmImpl::Fast, acc, Format::BF16));
        grouped_fprop(qx, qw, ms, rb, opt(GemmImpl::Reference, acc, Format::BF16));
        EXPECT_EQ(count_bit_diffs(rb, pt), 0u) << p.a << " x " << p.w << " bf16 out";
        EXPECT_EQ(count_bit_diffs(r, a1), 0u) << p.a << " x " << p.w;
        EXPECT_EQ(count_bit_diffs(r, a3), 0u) << p.a << " x " << p.w;
      }
    }
  }
  omp_set_num_threads(2);
}

// The vector fused kernels (AVX-512, AVX2) take the vector path for ordinary
// data and hand back exactly the lanes they cannot prove exact; checked through
// the internal entries.
TEST_P(GemmPaths, FusedFallbackLanes) {
  if (GetParam() == CpuPath::Scalar) GTEST_SKIP() << "the scalar path has no vector lanes to hand back";
  using gemm::GemmClass;
  auto bf16_panel = [](size_t R, size_t K, auto val) {
    gemm::Panel p;
    p.elem = Format::BF16;
    p.R = R;
    p.K = K;
    p.code.resize(R * K);
    for (size_t r = 0; r < R; ++r)
      for (size_t k = 0; k < K; ++k) p.code[r * K + k] = std::bit_cast<uint32_t>(round_bf16(val(r, k))) >> 16;
    return p;
  };
  const size_t K = 16;
  // Row 0 x col 0: 16 products 1.9921875^2 with C = 1.5 -> the group's int32 sum
  // 65 * 2^25 overflows (overflow fallback). Row 1 (2^-110) with cols 0 and 2:
  // E = -110 < 25 - 126, the scaled sum could land below the normal range.
  // Row 3 (2^60) with col 1 (2^62): E = 122 > 119. Everything else: vector path.
  auto av = [](size_t r, size_t) { return r == 0 ? 1.9921875f : r == 1 ? 0x1p-110f : r == 3 ? 0x1p60f : 0.75f; };
  auto bv = [](size_t j, size_t) { return j == 0 ? 1.9921875f : j == 1 ? 0x1p62f : 1.25f; };
  const gemm::Panel A = bf16_panel(4, K, av), B = bf16_panel(3, K, bv);
  std::vector<float> o(4 * 3, 0.0f);
  for (size_t j = 0; j < 3; ++j) o[j] = 1.5f;  // row 0's accumulator
  std::vector<float> r = o;
  const std::vector<float> o0 = o;
  std::vector<std::pair<uint32_t, uint32_t>> bad;
  if (GetParam() == CpuPath::Avx512) gemm::run_fused_avx512(GemmClass::Bf16F25, A, B, {o.data(), 3}, true, Format::FP32, bad);
  else gemm::run_fused_avx2(GemmClass::Bf16F25, A, B, {o.data(), 3}, true, Format::FP32, bad);
  std::sort(bad.begin(), bad.end());
  const std::vector<std::pair<uint32_t, uint32_t>> want = {{0, 0}, {1, 0}, {1, 2}, {3, 1}};
  EXPECT_EQ(bad, want);
  // Lanes not handed back are written and equal the reference; handed-back ones are untouched.
  gemm::run_reference(GemmClass::Bf16F25, A, B, {r.data(), 3}, true, Format::FP32);
  for (size_t i = 0; i < 4; ++i)
    for (size_t j = 0; j < 3; ++j) {
      const bool is_bad = std::find(want.begin(), want.end(), std::make_pair(uint32_t(i), uint32_t(j))) != want.end();
      if (is_bad) EXPECT_EQ(o[i * 3 + j], o0[i * 3 + j]) << i << "," << j;
      else EXPECT_EQ(std::bit_cast<uint32_t>(o[i * 3 + j]), std::bit_cast<uint32_t>(r[i * 3 + j])) << i << "," << j;
    }
  // Through the public API every lane equals the reference (fallbacks included).
  Tensor2f x = Tensor2f::from_shape({4, K}), y = Tensor2f::from_shape({4, 3});
  Tensor3f w = Tensor3f::from_shape({1, 3, K});
  for (size_t i = 0; i < 4; ++i)
    for (size_t k = 0; k < K; ++k) x(i, k) = av(i, k);
  for (size_t j = 0; j < 3; ++j)
    for (size_t k = 0; k < K; ++k) w(0, j, k) = bv(j, k);
  std::copy(o0.begin(), o0.end(), y.begin());
  Tensor2f yr = y;
  const int64_t ms[] = {4};
  EXPECT_TRUE(ran(KernelSlot::Bf16, GetParam(),
                  [&] { grouped_fprop(x, bf16_spec(), w, bf16_spec(), ms, y, opt(GemmImpl::Fast, true, Format::FP32)); }));
  grouped_fprop(x, bf16_spec(), w, bf16_spec(), ms, yr, opt(GemmImpl::Reference, true, Format::FP32));
  EXPECT_EQ(count_bit_diffs(y, yr), 0u);
}

TEST_P(GemmPaths, MxExactAllFormsEqualReference) {
  const CpuPath path = GetParam();
  std::mt19937 g(31337);
  const Pair pairs[] = {{"mxfp4", "mxfp4_2d"}, {"mxfp4", "mxfp4"}, {"mxfp6_e2m3", "mxfp4"}, {"mxfp4", "mxfp6_e2m3"}};
  size_t cases = 0;
  for (const Pair& p : pairs)
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<int64_t> ms = {int64_t(g() % 45), 0, int64_t(1 + g() % 70), int64_t(g() % 9)};
      const size_t M = size_t(sum(ms)), N = 1 + g() % 90, K = 1 + g() % 140, G = ms.size();
      const Tensor2f x = rand2(g, M, K, 6), dy = rand2(g, M, N, 6);
      const Tensor3f w = rand3(g, G, N, K, 6);
      const bool specials = trial >= 2;
      for (int form = 0; form < 3; ++form) {
        if (form == 2 && std::string(p.w) == "mxfp4_2d") continue;
        for (int acc = 0; acc < 2; ++acc) {
          const Format of = trial % 2 ? Format::BF16 : Format::FP32;
          SCOPED_TRACE(std::string(p.a) + " x " + p.w + " form " + std::to_string(form) + " trial " + std::to_string(trial));
          if (form < 2) {
            QuantizedTensor qa = form == 0 ? quantize(x, spec(p.a), Axis::Cols) : quantize(dy, spec(p.a), Axis::Cols);
            const bool tiles = std::string(p.w) == "mxfp4_2d";
            QuantizedTensor qw = quantize(w, spec(p.w), form == 0 || tiles ? Axis::Cols : Axis::Rows);
            if (specials) poke(qa, g), poke(qw, g);
            const Tensor2f init = rand2(g, M, form == 0 ? N : K, 3);
            Tensor2f r = init, f1 = init, f3 = init;
            auto go = [&](GemmImpl impl, Tensor2f& o) {
              if (form == 0) grouped_fprop(qa, qw, ms, o, opt(impl, acc, of));
              else grouped_dgrad(qa, qw, ms, o, opt(impl, acc, of));
            };
            omp_set_num_threads(1);
            go(GemmImpl::Reference, r);
            EXPECT_TRUE(ran(KernelSlot::MxExact, path, [&] { go(GemmImpl::Fast, f1); }));
            omp_set_num_threads(3);
            go(GemmImpl::Fast, f3);
            EXPECT_EQ(count_bit_diffs(r, f1), 0u);
            EXPECT_EQ(count_bit_diffs(r, f3), 0u);
          } else {
            auto qa = quantize_grouped_colwise(dy, ms, spec(p.a));
            auto qb = quantize_grouped_colwise(x, ms, spec(p.w));
            if (specials)
              for (auto& q : qa) poke(q, g);
            Tensor3f init = rand3(g, G, N, K, 3);
            Tensor3f r = init, f1 = init, f3 = init;
            omp_set_num_threads(1);
            grouped_wgrad(qa, qb, ms, r, opt(GemmImpl::Reference, acc, of));
            EXPECT_TRUE(ran(KernelSlot::MxExact, path, [&] { grouped_wgrad(qa, qb, ms, f1, opt(GemmImpl::Fast, acc, of)); }));
            omp_set_num_threads(3);
            grouped_wgrad(qa, qb, ms, f3, opt(GemmImpl::Fast, acc, of));
            EXPECT_EQ(count_bit_diffs(r, f1), 0u);
            EXPECT_EQ(count_bit_diffs(r, f3), 0u);
          }
          ++cases;
        }
      }
    }
  omp_set_num_threads(2);
  EXPECT_GT(cases, 80u);
}

// K = 0 (numerics §5.4: the output is unchanged with accumulate, else +0; the
// output cast still applies) in every class and path.
TEST_P(GemmPaths, EmptyContractionEveryClass) {
  std::mt19937 g(8);
  const Pair pairs[] = {{"mxfp4", "mxfp4"}, {"mxfp8", "mxfp8"}, {"fp8_row", "fp8_row"}, {"bf16", "bf16"}, {"nvfp4", "nvfp4"}};
  for (const Pair& p : pairs)
    for (int acc = 0; acc < 2; ++acc)
      for (Format of : {Format::FP32, Format::BF16}) {
        const std::vector<int64_t> ms = {3, 0, 2};
        const Tensor2f x = Tensor2f::from_shape({5, 0});
        const Tensor3f w = Tensor3f::from_shape({3, 7, 0});
        const Tensor2f init = rand2(g, 5, 7, 3);
        Tensor2f r = init, f = init;
        grouped_fprop(x, spec(p.a), w, spec(p.w), ms, r, opt(GemmImpl::Reference, acc, of));
        EXPECT_TRUE(ran(slot_of(spec(p.a), spec(p.w)), GetParam(),
                        [&] { grouped_fprop(x, spec(p.a), w, spec(p.w), ms, f, opt(GemmImpl::Fast, acc, of)); }));
        EXPECT_EQ(count_bit_diffs(r, f), 0u) << p.a;
        for (size_t i = 0; i < r.size(); ++i) {
          const float want = acc ? (of == Format::BF16 ? round_bf16(init.data()[i]) : init.data()[i]) : 0.0f;
          EXPECT_EQ(std::bit_cast<uint32_t>(r.data()[i]), std::bit_cast<uint32_t>(want)) << p.a << " " << i;
        }
      }
}

// The MX-specials test above runs the default path; the same on every path.
TEST_P(GemmPaths, MxSpecialsEqualReference) {
  std::mt19937 g(778);
  for (const Pair& p : kPairs) {
    if (std::string(p.a) == "bf16" || std::string(p.a).rfind("fp8_", 0) == 0) continue;
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<int64_t> ms = {int64_t(g() % 20), 0, int64_t(1 + g() % 30)};
      const size_t M = size_t(sum(ms)), N = 1 + g() % 64, K = 1 + g() % 130;
      Tensor2f x = rand2(g, M, K, 30);
      if (M) x(0, 0) = 1e30f, x(M - 1, K - 1) = -3e38f;
      const Tensor3f w = rand3(g, 3, N, K, 30);
      QuantizedTensor qx = quantize(x, spec(p.a), Axis::Cols), qw = quantize(w, spec(p.w), Axis::Cols);
      poke(qx, g);
      poke(qw, g);
      for (int acc = 0; acc < 2; ++acc) {
        Tensor2f r = rand2(g, M, N, 1), f = r;
        grouped_fprop(qx, qw, ms, r, opt(GemmImpl::Reference, acc, Format::FP32));
        EXPECT_TRUE(ran(slot_of(spec(p.a), spec(p.w)), GetParam(),
                        [&] { grouped_fprop(qx, qw, ms, f, opt(GemmImpl::Fast, acc, Format::FP32)); }));
        EXPECT_EQ(count_bit_diffs(r, f), 0u) << p.a << " x " << p.w;
      }
    }
  }
}

// The kernels a path names are distinct, so ran() tells the paths apart.
TEST(GemmPathNames, KernelNamesDifferBetweenPaths) {
  for (int s = 0; s < kNumKernelSlots; ++s) {
    const KernelSlot slot = KernelSlot(s);
    EXPECT_STRNE(kernel_name(slot, CpuPath::Avx2), kernel_name(slot, CpuPath::Scalar)) << kernel_slot_name(slot);
    if (slot != KernelSlot::MxExact) {  // AVX-512 without VNNI runs the AVX2 MX kernel
      EXPECT_STRNE(kernel_name(slot, CpuPath::Avx512), kernel_name(slot, CpuPath::Avx2)) << kernel_slot_name(slot);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CpuPaths, GemmPaths, ::testing::Values(CpuPath::Avx512, CpuPath::Avx2, CpuPath::Scalar),
                         path_param_name);

// Scale edges the vector tiles take since they reason per side: all-zero
// blocks (scale byte 0x00) on either operand, A-side scales far below 2^-50
// (gradients), and B-side factors outside [2^-126, 2^110] (left to the
// scalar walk), in every form, on every path.
TEST_P(GemmPaths, ZeroBlocksAndExtremeScalesEqualReference) {
  std::mt19937 g(2718);
  const Pair pairs[] = {{"mxfp4", "mxfp4"}, {"mxfp4", "mxfp4_2d"}, {"mxfp8", "mxfp8"}, {"mxfp8", "mxfp4_2d"}};
  for (const Pair& p : pairs)
    for (int trial = 0; trial < 3; ++trial) {
      std::vector<int64_t> ms = {int64_t(1 + g() % 40), 0, int64_t(1 + g() % 50)};
      const size_t M = size_t(sum(ms)), N = 8 + g() % 60, K = 8 + g() % 100, G = ms.size();
      const float sa = trial == 0 ? 1.0f : 0x1p-110f, sw = trial == 2 ? 0x1p-120f : 1.0f;
      Tensor2f x = rand2(g, M, K, 4), dy = rand2(g, M, N, 4);
      Tensor3f w = rand3(g, G, N, K, 4);
      for (auto& v : x) v *= sa;
      for (auto& v : dy) v *= sa;
      for (auto& v : w) v *= sw;
      for (size_t k = 0; k < K; ++k) x(0, k) = dy(0, std::min(k, N - 1)) = 0.0f;  // zero rows
      for (size_t i = 0; i < M; ++i)
        for (size_t k = 0; k < std::min<size_t>(32, K); ++k) x(i, k) = 0.0f;  // a zero block column
      for (size_t gi = 0; gi < G; ++gi)
        for (size_t k = 0; k < K; ++k) w(gi, 0, k) = 0.0f;
      const bool tiles = std::string(p.w) == "mxfp4_2d";
      for (int form = 0; form < 3; ++form) {
        if (form == 2 && tiles) continue;
        SCOPED_TRACE(std::string(p.a) + " x " + p.w + " form " + std::to_string(form) + " trial " + std::to_string(trial));
        const KernelSlot slot = slot_of(spec(p.a), spec(p.w));
        if (form < 2) {
          const QuantizedTensor qa = quantize(form == 0 ? x : dy, spec(p.a), Axis::Cols);
          const QuantizedTensor qw = quantize(w, spec(p.w), form == 0 || tiles ? Axis::Cols : Axis::Rows);
          Tensor2f r, f;
          auto go = [&](GemmImpl impl, Tensor2f& o) {
            if (form == 0) grouped_fprop(qa, qw, ms, o, opt(impl, false, Format::FP32));
            else grouped_dgrad(qa, qw, ms, o, opt(impl, false, Format::FP32));
          };
          go(GemmImpl::Reference, r);
          EXPECT_TRUE(ran(slot, GetParam(), [&] { go(GemmImpl::Fast, f); }));
          EXPECT_EQ(count_bit_diffs(r, f), 0u);
        } else {
          const auto qa = quantize_grouped_colwise(dy, ms, spec(p.a));
          const auto qb = quantize_grouped_colwise(x, ms, spec(p.w));
          Tensor3f r, f;
          grouped_wgrad(qa, qb, ms, r, opt(GemmImpl::Reference, false, Format::FP32));
          EXPECT_TRUE(ran(slot, GetParam(), [&] { grouped_wgrad(qa, qb, ms, f, opt(GemmImpl::Fast, false, Format::FP32)); }));
          EXPECT_EQ(count_bit_diffs(r, f), 0u);
        }
      }
    }
}

// The direct MX-exact kernel packs its operands into a per-thread scratch
// arena kept between calls (emu/src/gemm_scratch.hpp): buffers allocated per
// call were page-faulted again on every call (glibc returns large freed
// blocks to the kernel), about 2,000 faults per bench_gemm wgrad call. A
// steady-state call faults (almost) nothing, and a smaller call after a larger
// one, reading an arena full of the larger call's bytes, still gives the
// reference's bits.
TEST_P(GemmPaths, MxExactSteadyCallsReuseScratch) {
  if (GetParam() == CpuPath::Scalar) GTEST_SKIP() << "the scalar path has no direct MX kernel (it builds operand panels)";
  // A fixed mmap threshold maps every block over 256 KiB at allocation and
  // unmaps it at free, whatever glibc's dynamic threshold has become in this
  // process: a per-call buffer of that size would fault on every call. The
  // setting lasts for the process; ctest runs each test in a process of its
  // own (gtest_discover_tests), and no other test's bits depend on it.
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  auto minflt = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return long(u.ru_minflt);
  };
  std::mt19937 g(4242);
  const QuantSpec s = tensor_recipe("mxfp4");
  omp_set_num_threads(2);
  {  // wgrad, 2 x 512 tokens, N = K = 512: 512 KiB of packed A and of packed B per call
    const std::vector<int64_t> ms = {512, 512};
    const Tensor2f dy = rand2(g, 1024, 512, 3), x = rand2(g, 1024, 512, 3);
    const auto qa = quantize_grouped_colwise(dy, ms, s), qb = quantize_grouped_colwise(x, ms, s);
    Tensor3f dw = rand3(g, 2, 512, 512, 2);
    grouped_wgrad(qa, qb, ms, dw, opt(GemmImpl::Fast, true, Format::FP32));  // first call: the arena grows
    const long f0 = minflt();
    EXPECT_TRUE(ran(KernelSlot::MxExact, GetParam(),
                    [&] { grouped_wgrad(qa, qb, ms, dw, opt(GemmImpl::Fast, true, Format::FP32)); }));
#ifndef MXSIM_TEST_ASAN  // ASan's allocator and shadow memory fault on their own; the bits below still count
    EXPECT_LT(minflt() - f0, 32) << "page faults in a steady-state wgrad call";
#else
    (void)f0;
#endif
  }
  {  // then smaller ragged calls on the used arena: ragged groups, an empty one, accumulate
    const std::vector<int64_t> ms = {37, 0, 70, 5};
    const size_t M = 112, N = 45, K = 77;
    const Tensor2f dy = rand2(g, M, N, 6), x = rand2(g, M, K, 6);
    const auto qa = quantize_grouped_colwise(dy, ms, s), qb = quantize_grouped_colwise(x, ms, s);
    const Tensor3f init = rand3(g, ms.size(), N, K, 3);
    Tensor3f r = init, f = init;
    grouped_wgrad(qa, qb, ms, r, opt(GemmImpl::Reference, true, Format::FP32));
    grouped_wgrad(qa, qb, ms, f, opt(GemmImpl::Fast, true, Format::FP32));
    EXPECT_EQ(count_bit_diffs(r, f), 0u);
    const Tensor3f w = rand3(g, ms.size(), N, K, 6);
    const QuantizedTensor qx = quantize(x, s, Axis::Cols), qw = quantize(w, s, Axis::Cols);
    Tensor2f yr, yf;
    grouped_fprop(qx, qw, ms, yr, opt(GemmImpl::Reference, false, Format::FP32));
    grouped_fprop(qx, qw, ms, yf, opt(GemmImpl::Fast, false, Format::FP32));
    EXPECT_EQ(count_bit_diffs(yr, yf), 0u);
  }
}
