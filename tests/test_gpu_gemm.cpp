// GPU grouped GEMM (backends/hip/src/gemm*.hip) against the emulator's
// reference (emu::GemmImpl::Reference), bit for bit, for every block-dot
// class of docs/numerics.md §5 (mx-exact, mx-f13, fp8-chunk128, bf16-f25),
// every form (fprop, dgrad, wgrad), both accumulate modes and both output
// types. Inputs are seeded adversarial: random shapes, ragged K (not a
// multiple of 32 / 128 / 16), empty groups, E8M0 scales 0x00 / 0xFE / 0xFF,
// extreme FP32 scale_inv (0, subnormal, FLT_MAX, Inf, NaN), NaN / Inf element
// codes, saturating blocks; overwrite outputs are prefilled with NaN bytes so
// an element left unwritten is a mismatch. Independent values too: RNE ties
// of the accumulator add, and the published H200 FP8 promotion values.
// Both sides call hd/gemm_block.hpp; test_gemm_block.cpp proves that against
// arbitrary-precision arithmetic and test_gemm_exact.cpp the reference
// against a rational oracle.
//
// Skips, with the runtime's reason, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bf16_h200_floor_groups.hpp"
#include "gpu_test_util.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/hd/gemm_block.hpp"

#ifdef MXSIM_HAVE_GPU
#include "mxsim/hip/gemm.hpp"
#include "mxsim/hip/gemm_testing.hpp"
#endif

namespace {
using namespace mxsim;
using namespace mxsim::emu;

#ifndef MXSIM_HAVE_GPU
TEST(GpuGemm, SkippedWithoutBackend) { GTEST_SKIP() << "built without the GPU backend"; }
#else

struct Pair {
  const char* a;  // token operand (X, dY)
  const char* w;  // weight
};
const Pair kPairs[] = {
    // mx-exact
    {"mxfp4", "mxfp4_2d"}, {"mxfp4", "mxfp4"}, {"mxfp6_e2m3", "mxfp4"}, {"mxfp6_e2m3", "mxfp6_e2m3"},
    // mx-f13
    {"mxfp8", "mxfp8"}, {"mxfp8", "mxfp4_2d"}, {"mxfp6_e3m2", "mxfp8_e5m2"}, {"mxfp8_e5m2", "mxfp6_e2m3"},
    {"mxfp8", "mxfp8_2d"},
    // fp8-chunk128
    {"fp8_tensor", "fp8_tensor"}, {"fp8_row", "fp8_row"}, {"fp8_block", "fp8_block2d"},
    {"fp8_tensor_e5m2", "fp8_tensor"}, {"fp8_block", "fp8_block"},
    // bf16-f25
    {"bf16", "bf16"},
    // nvfp4-exact
    {"nvfp4", "nvfp4"}, {"nvfp4", "nvfp4_2d"}};

QuantSpec spec(const char* n) { return std::string(n) == "bf16" ? bf16_spec() : tensor_recipe(n); }
bool is_2d(const QuantSpec& s) { return s.is_2d_tile(); }
/// The 1-D recipe a 2-D weight recipe's wgrad operand uses (same elements and rule).
QuantSpec one_d(QuantSpec s) {
  if (s.is_2d_tile()) {
    s.block_rows = 1;
    if (s.scale_kind == ScaleKind::FP32) s.block_cols = 128;
  }
  return s;
}

GemmOptions ref_opt(bool acc, bool bf16) {
  GemmOptions o;
  o.impl = GemmImpl::Reference;
  o.accumulate = acc;
  o.out = bf16 ? Format::BF16 : Format::FP32;
  return o;
}

Tensor2f rand2(std::mt19937& g, size_t r, size_t c, int spread, int special_pct = 0) {
  const Tensor3f t = gputest::adversarial(g, 1, r, c, special_pct, spread);
  return xt::view(t, 0, xt::all(), xt::all());
}
Tensor3f rand3(std::mt19937& g, size_t G, size_t r, size_t c, int spread, int special_pct = 0) {
  return gputest::adversarial(g, G, r, c, special_pct, spread);
}
std::vector<int64_t> rand_splits(std::mt19937& g, size_t G, int maxm) {
  std::vector<int64_t> s(G);
  for (auto& v : s) v = (g() % 4 == 0) ? 0 : int64_t(g() % (maxm + 1));  // many empty groups
  return s;
}
size_t total(const std::vector<int64_t>& s) {
  size_t t = 0;
  for (auto v : s) t += size_t(v);
  return t;
}

/// Specials poked into quantized operands: NaN / Inf element codes where the
/// format has them, E8M0 bytes 0x00 / 0xFE / 0xFF, extreme FP32 scale_inv.
void poke(QuantizedTensor& q, std::mt19937& g) {
  if (q.data.size() == 0) return;
  std::uniform_int_distribution<size_t> pd(0, q.data.size() - 1);
  const FormatSpec f = spec_of(q.spec.elem);
  if (f.nan != NanKind::None) {
    q.data.data()[pd(g)] = uint8_t(f.nan_code(0));
    if (f.has_inf) q.data.data()[pd(g)] = uint8_t(f.inf_code());
    if (f.has_inf) q.data.data()[pd(g)] = uint8_t(f.inf_code() | f.sign_bit());
  }
  if (q.spec.scale_kind == ScaleKind::E8M0 && q.scale_bytes.size()) {
    std::uniform_int_distribution<size_t> sd(0, q.scale_bytes.size() - 1);
    for (uint8_t b : {0x00, 0xFE, 0xFE, 0xFF, 0x01, 0xFD}) q.scale_bytes.data()[sd(g)] = b;
  }
  if (q.spec.scale_kind == ScaleKind::UE4M3 && q.scale_bytes.size()) {
    // zero, the smallest subnormal, 448, NaN; a subnormal tensor scale half the time
    std::uniform_int_distribution<size_t> sd(0, q.scale_bytes.size() - 1);
    for (uint8_t b : {0x00, 0x01, 0x7E, 0x7F, 0x07}) q.scale_bytes.data()[sd(g)] = b;
    if (g() % 2) q.tensor_scale_inv = 0x1.8p-140f;
  }
  if (q.spec.scale_kind == ScaleKind::FP32 && q.scale_inv.size()) {
    std::uniform_int_distribution<size_t> sd(0, q.scale_inv.size() - 1);
    for (float v : {0.0f, 0x1p-140f, FLT_MAX, INFINITY, NAN, 0x1p-126f}) q.scale_inv.data()[sd(g)] = v;
  }
}

bool sm90() {
  const hip::DeviceInfo d = hip::device_info();
  return d.cc_major == 9 && d.cc_minor == 0;
}

struct ClassTally {
  size_t runs = 0, elements = 0, mismatches = 0;
};
std::map<std::string, ClassTally>& tallies() {
  static std::map<std::string, ClassTally> t;
  return t;
}

/// Runs the GPU GEMM into a device output holding `init` (accumulate) or NaN
/// bytes (overwrite), downloads it and compares it with `want`.
template <class Fn>
void check_gpu(const char* cls, const float* init, const float* want, size_t n, bool acc, const std::string& what,
               Fn&& run_gpu) {
  hip::DeviceBuffer out(n * sizeof(float), "GEMM output");
  if (acc) out.upload(init, n * sizeof(float));
  else out.fill(0xFF);  // NaN: an unwritten element cannot pass
  run_gpu(out.as<float>());
  hip::synchronize();
  std::vector<float> got(n);
  out.download(got.data(), n * sizeof(float));
  ClassTally& t = tallies()[cls];
  const size_t bad = gputest::count_bit_diffs(want, got.data(), n, what);
  t.runs++;
  t.elements += n;
  t.mismatches += bad;
  EXPECT_EQ(bad, 0u) << what;
}

struct BF16Dev {
  hip::DeviceBuffer src, codes;
};
BF16Dev bf16_codes(const float* p, size_t n, const char* name) {
  BF16Dev d{gputest::upload_floats(p, n, name), hip::DeviceBuffer(n * 2, name)};
  hip::round_bf16_device(d.src.as<float>(), d.codes.as<uint16_t>(), n);
  return d;
}

/// Per-group wgrad operands [1, m_splits[g], cols] viewing consecutive rows
/// of one BF16 code array [M, cols].
std::vector<hip::GemmOperand> bf16_group_operands(const BF16Dev& d, const std::vector<int64_t>& ms, size_t cols) {
  std::vector<hip::GemmOperand> ops;
  size_t m0 = 0;
  for (int64_t m : ms) {
    ops.push_back(hip::GemmOperand::from_bf16(d.codes.as<uint16_t>() + m0 * cols, 1, size_t(m), cols));
    m0 += size_t(m);
  }
  return ops;
}

void run_pair(const Pair& p, std::mt19937& g, int trial, bool specials) {
  const QuantSpec sa = spec(p.a), sw = spec(p.w);
  hd::GemmClass cls;
  ASSERT_TRUE(hd::gemm_class_of(sa, sw, cls));
  const char* cname = hd::gemm_class_name(cls);
  const bool bf16 = cls == hd::GemmClass::Bf16F25;
  const bool fp8 = cls == hd::GemmClass::Fp8Chunk128;
  // Trials: small groups; larger groups; many groups; many large groups with
  // 2^20 spreads; 2^40 spreads (overflow and underflow of blocks and sums).
  const size_t G = 1 + g() % (trial >= 2 ? 8 : 4);
  const std::vector<int64_t> ms = rand_splits(g, G, trial == 1 || trial == 3 ? 90 : 40);
  const size_t M = total(ms);
  const size_t N = (fp8 ? 100 : 1) + g() % 150, K = (fp8 ? 100 : 1) + g() % 300;
  const int spread = trial == 4 ? 40 : trial >= 2 ? 20 : 3;
  const int pct = specials ? 2 : 0;
  const Tensor2f x = rand2(g, M, K, spread, pct), dy = rand2(g, M, N, spread, pct);
  const Tensor3f w = rand3(g, G, N, K, spread, pct);
  for (int form = 0; form < 3; ++form)
    for (int acc = 0; acc < 2; ++acc) {
      const std::string what = std::string(p.a) + " x " + p.w + (form == 0 ? " fprop" : form == 1 ? " dgrad" : " wgrad") +
                               (acc ? " accumulate" : " overwrite") + " G " + std::to_string(G) + " M " +
                               std::to_string(M) + " N " + std::to_string(N) + " K " + std::to_string(K) +
                               (specials ? " specials" : "");
      SCOPED_TRACE(what);
      // The emulator's reference with FP32 output; the BF16-output reference
      // is that accumulator rounded once (hd::gemm_output), as the contract
      // defines it (numerics.md §5.4).
      // Elements the GEMM leaves alone (an empty wgrad group when
      // accumulating) keep their bits in either output type.
      auto both_outputs = [&](const float* init, const std::vector<float>& ref32, size_t n, auto&& run_gpu,
                              size_t group_elems = 0) {
        std::vector<float> ref16(n);
        for (size_t i = 0; i < n; ++i) {
          const bool untouched = group_elems && acc && ms[i / group_elems] == 0;
          ref16[i] = untouched ? ref32[i] : hd::gemm_output(ref32[i], true);
        }
        for (int ob = 0; ob < 2; ++ob) {
          hip::GemmParams gp;
          gp.accumulate = acc;
          gp.out_bf16 = ob;
          // The five kernel kinds rotate over the trials' four (output type,
          // specials) cases: over the five trials each case meets every kind.
          gp.kernel = hip::GemmKernel((trial + 2 * ob + (specials ? 1 : 0)) % 5);
          // (mx-exact has no lane form: Lanes runs its small tile.)
          const bool lanes_to_small = gp.kernel == hip::GemmKernel::Lanes && cls == hd::GemmClass::MxExact;
          static const char* const kKernel[] = {" auto", " large-tile", " small-tile", " lanes", " wgmma"};
          const hip::GemmLaunchCounts before = hip::gemm_launch_counts();
          check_gpu(cname, init, ob ? ref16.data() : ref32.data(), n, acc,
                    what + (ob ? " bf16-out" : " fp32-out") + (lanes_to_small ? " small-tile" : kKernel[int(gp.kernel)]),
                    [&](float* out) { run_gpu(out, gp); });
          // A forced Wgmma runs the tensor-core kernels wherever they meet
          // the contract (an H100/H200; mx-exact E2M1 x E2M1, bf16-f25), never
          // silently the tiled ones; every other pair runs the tiled kernels.
          const hip::GemmLaunchCounts after = hip::gemm_launch_counts();
          if (gp.kernel == hip::GemmKernel::Wgmma && after.tiled + after.wgmma > before.tiled + before.wgmma) {
            const bool e2m1 = sa.elem == Format::E2M1 && sw.elem == Format::E2M1;
            const bool eligible = sm90() && ((cls == hd::GemmClass::MxExact && e2m1) || bf16);
            EXPECT_EQ(after.wgmma > before.wgmma, eligible) << what << ": which kernel ran";
            EXPECT_EQ(after.tiled > before.tiled, !eligible) << what << ": which kernel ran";
          }
        }
      };
      if (form < 2) {
        const size_t J = form == 0 ? N : K;
        const Tensor2f& a = form == 0 ? x : dy;
        const Tensor2f init = rand2(g, M, J, 2, specials ? 3 : 0);
        Tensor2f ref = init;
        if (bf16) {
          if (form == 0) grouped_fprop(a, sa, w, sw, ms, ref, ref_opt(acc, false));
          else grouped_dgrad(a, sa, w, sw, ms, ref, ref_opt(acc, false));
          BF16Dev da = bf16_codes(a.data(), a.size(), "A bf16"), dw = bf16_codes(w.data(), w.size(), "W bf16");
          const hip::GemmOperand oa = hip::GemmOperand::from_bf16(da.codes.as<uint16_t>(), 1, M, a.shape(1));
          const hip::GemmOperand ow = hip::GemmOperand::from_bf16(dw.codes.as<uint16_t>(), G, N, K);
          both_outputs(init.data(), std::vector<float>(ref.begin(), ref.end()), M * J, [&](float* out, const hip::GemmParams& gp) {
            if (form == 0) hip::grouped_fprop(oa, ow, ms, out, gp);
            else hip::grouped_dgrad(oa, ow, ms, out, gp);
          });
        } else {
          QuantizedTensor qa = quantize(a, sa, Axis::Cols);
          QuantizedTensor qw = quantize(w, sw, form == 0 || is_2d(sw) ? Axis::Cols : Axis::Rows);
          if (specials) {
            poke(qa, g);
            poke(qw, g);
          }
          if (form == 0) grouped_fprop(qa, qw, ms, ref, ref_opt(acc, false));
          else grouped_dgrad(qa, qw, ms, ref, ref_opt(acc, false));
          const hip::DeviceQuantized da = gputest::upload(qa, "A"), dw = gputest::upload(qw, "W");
          const auto oa = hip::GemmOperand::from_quantized(da.t), ow = hip::GemmOperand::from_quantized(dw.t);
          both_outputs(init.data(), std::vector<float>(ref.begin(), ref.end()), M * J, [&](float* out, const hip::GemmParams& gp) {
            if (form == 0) hip::grouped_fprop(oa, ow, ms, out, gp);
            else hip::grouped_dgrad(oa, ow, ms, out, gp);
          });
        }
      } else {
        const QuantSpec swg = one_d(sw), sag = one_d(sa);
        const Tensor3f init = rand3(g, G, N, K, 2, specials ? 3 : 0);
        Tensor3f ref = init;
        std::vector<hip::GemmOperand> odys, oxs;
        std::vector<hip::DeviceQuantized> keep;
        BF16Dev bdy, bx;
        if (bf16) {
          grouped_wgrad(dy, sag, x, swg, ms, ref, ref_opt(acc, false));
          bdy = bf16_codes(dy.data(), dy.size(), "dY bf16");
          bx = bf16_codes(x.data(), x.size(), "X bf16");
          odys = bf16_group_operands(bdy, ms, N);
          oxs = bf16_group_operands(bx, ms, K);
        } else {
          std::vector<QuantizedTensor> qdy = quantize_grouped_colwise(dy, ms, sag);
          std::vector<QuantizedTensor> qx = quantize_grouped_colwise(x, ms, swg);
          if (specials)
            for (size_t gg = 0; gg < G; ++gg) {
              poke(qdy[gg], g);
              poke(qx[gg], g);
            }
          grouped_wgrad(qdy, qx, ms, ref, ref_opt(acc, false));
          for (size_t gg = 0; gg < G; ++gg) {
            keep.push_back(gputest::upload(qdy[gg], "dY group"));
            odys.push_back(hip::GemmOperand::from_quantized(keep.back().t));
            keep.push_back(gputest::upload(qx[gg], "X group"));
            oxs.push_back(hip::GemmOperand::from_quantized(keep.back().t));
          }
        }
        both_outputs(
            init.data(), std::vector<float>(ref.begin(), ref.end()), G * N * K,
            [&](float* out, const hip::GemmParams& gp) { hip::grouped_wgrad(odys, oxs, ms, out, gp); }, N * K);
      }
    }
}

// One test per (operand pair, trial), so shards can run in parallel
// (scripts/gpu-device-run.sh); each prints its counts as a "[gpu-tally]" line.
class GpuGemmPairs : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(GpuGemmPairs, EveryFormAndModeMatchesEmulatorReference) {
  REQUIRE_GPU();
  const auto [pi, trial] = GetParam();
  const Pair& p = kPairs[pi];
  std::mt19937 g(31337u + 1000u * unsigned(pi) + unsigned(trial));
  tallies().clear();
  for (bool specials : {false, true}) run_pair(p, g, trial, specials);
  for (const auto& [cls, t] : tallies())
    std::printf("[gpu-tally] class=%s pair=%s/%s trial=%d runs=%zu elements=%zu mismatches=%zu\n", cls.c_str(), p.a,
                p.w, trial, t.runs, t.elements, t.mismatches);
}

INSTANTIATE_TEST_SUITE_P(AllPairs, GpuGemmPairs,
                         ::testing::Combine(::testing::Range(0, int(sizeof(kPairs) / sizeof(kPairs[0]))),
                                            ::testing::Range(0, 5)));

// Independent values: the accumulator add is one RNE with ties to even.
// mx-exact: X = [0.5, 0, ...] and W = [0.5, 0, ...] (E2M1 code 0x1, image 1)
// with scale bytes 116 + 116 give the block value 1 * 2^(232 - 254 - 2) =
// 2^-24, half an ulp of 1.0: 1.0 stays 1.0 (even), 1 + 2^-23 goes to
// 1 + 2^-22. BF16 output (block value 2^-23): an accumulator of 1 + 2^-8 is
// halfway between BF16 1.0 and 1 + 2^-7 and rounds to 1.0; 1 + 3 * 2^-8
// rounds up to 1 + 2^-6.
TEST(GpuGemm, AccumulatorTiesRoundToEven) {
  REQUIRE_GPU();
  Tensor2f x0 = Tensor2f::from_shape({1, 32});
  x0.fill(0.0f);
  Tensor3f w0 = Tensor3f::from_shape({1, 1, 32});
  w0.fill(0.0f);
  QuantizedTensor qw = quantize(w0, tensor_recipe("mxfp4"), Axis::Cols);
  qw.set_code(0, 0, 0, 0x1);
  qw.scale_bytes(0, 0, 0) = 116;
  const int64_t ms[] = {1};
  const hip::DeviceQuantized dw = gputest::upload(qw, "W");
  const auto ow = hip::GemmOperand::from_quantized(dw.t);
  // X's scale byte sx makes the block value 2^(sx + 116 - 256).
  struct Case { uint8_t sx; float init; bool bf16; float want; };
  const Case cases[] = {{116, 1.0f, false, 1.0f},                              // 1 + 2^-24: tie -> even 1.0
                        {116, 1.0f + 0x1p-23f, false, 1.0f + 0x1p-22f},        // tie -> even 1 + 2^-22
                        {116, -1.0f, false, -1.0f + 0x1p-24f},                 // exact: -(1 - 2^-24)
                        {117, 1.0f + 0x1p-8f - 0x1p-23f, true, 1.0f},          // acc 1 + 2^-8: BF16 tie -> 1.0
                        {117, 1.0f + 3 * 0x1p-8f - 0x1p-23f, true, 1.0f + 0x1p-6f}};  // BF16 tie -> 1 + 2^-6
  for (const Case& c : cases) {
    QuantizedTensor qx = quantize(x0, tensor_recipe("mxfp4"), Axis::Cols);
    qx.set_code(0, 0, 0, 0x1);
    qx.scale_bytes(0, 0, 0) = c.sx;
    const hip::DeviceQuantized dx = gputest::upload(qx, "X");
    hip::DeviceBuffer out(sizeof(float), "y");
    out.upload(&c.init, sizeof(float));
    hip::GemmParams gp;
    gp.accumulate = true;
    gp.out_bf16 = c.bf16;
    hip::grouped_fprop(hip::GemmOperand::from_quantized(dx.t), ow, ms, out.as<float>(), gp);
    float got = 0;
    out.download(&got, sizeof got);
    Tensor2f y = Tensor2f::from_shape({1, 1});
    y(0, 0) = c.init;
    grouped_fprop(qx, qw, ms, y, ref_opt(true, c.bf16));
    EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(c.want)) << std::hexfloat << "init " << c.init;
    EXPECT_EQ(std::bit_cast<uint32_t>(y(0, 0)), std::bit_cast<uint32_t>(c.want)) << std::hexfloat << "emu, init " << c.init;
  }
}

// Published H200 observation (shared/reference/matrix-units-and-gpu.md §2,
// cuBLASLt FP8 with use_fast_accum=False): rows [256, 1, 1, ...], per-tensor
// scale 1: K = 64 -> 65536, 256 -> 65536 + 128, 1024 -> 65536 + 896,
// 4096 -> 65536 + 3968 under fp8-chunk128.
TEST(GpuGemm, Fp8ChunkMatchesPublishedH200Promotion) {
  REQUIRE_GPU();
  const std::pair<size_t, float> cases[] = {{64, 65536.0f}, {256, 65536.0f + 128}, {1024, 65536.0f + 896}, {4096, 65536.0f + 3968}};
  for (auto [K, want] : cases) {
    Tensor2f x = Tensor2f::from_shape({1, K});
    Tensor3f w = Tensor3f::from_shape({1, 1, K});
    for (size_t k = 0; k < K; ++k) x(0, k) = w(0, 0, k) = k == 0 ? 256.0f : 1.0f;
    QuantSpec s = tensor_recipe("fp8_tensor");
    s.fixed_scale = 1.0f;
    const int64_t ms[] = {1};
    const hip::DeviceQuantized dx = gputest::upload(quantize(x, s, Axis::Cols), "X"),
                               dw = gputest::upload(quantize(w, s, Axis::Cols), "W");
    hip::DeviceBuffer y(sizeof(float), "y");
    hip::grouped_fprop(hip::GemmOperand::from_quantized(dx.t), hip::GemmOperand::from_quantized(dw.t), ms, y.as<float>());
    float got = 0;
    y.download(&got, sizeof got);
    EXPECT_EQ(got, want) << "K " << K;
  }
}

// Empty groups: wgrad writes +0 to dW[g] (overwrite) or leaves it bit for bit
// unchanged (accumulate); all groups empty is legal; K = 0 fprop writes +0.
TEST(GpuGemm, EmptyGroupsAndEmptyContraction) {
  REQUIRE_GPU();
  std::mt19937 g(5);
  const std::vector<int64_t> ms = {0, 64, 0};
  const QuantSpec s = tensor_recipe("mxfp4");
  const Tensor2f dy = rand2(g, 64, 48, 2), x = rand2(g, 64, 40, 2);
  std::vector<QuantizedTensor> qdy = quantize_grouped_colwise(dy, ms, s), qx = quantize_grouped_colwise(x, ms, s);
  std::vector<hip::DeviceQuantized> keep;
  std::vector<hip::GemmOperand> a, b;
  for (size_t i = 0; i < 3; ++i) {
    keep.push_back(gputest::upload(qdy[i], "dY"));
    a.push_back(hip::GemmOperand::from_quantized(keep.back().t));
    keep.push_back(gputest::upload(qx[i], "X"));
    b.push_back(hip::GemmOperand::from_quantized(keep.back().t));
  }
  const Tensor3f before = rand3(g, 3, 48, 40, 2);
  for (bool acc : {true, false}) {
    hip::DeviceBuffer dw = gputest::upload_floats(before.data(), before.size(), "dW");
    hip::GemmParams gp;
    gp.accumulate = acc;
    hip::grouped_wgrad(a, b, ms, dw.as<float>(), gp);
    std::vector<float> got(before.size());
    dw.download(got.data(), got.size() * 4);
    for (size_t gg : {0u, 2u})
      for (size_t i = 0; i < 48 * 40; ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(got[gg * 48 * 40 + i]), acc ? std::bit_cast<uint32_t>(before.data()[gg * 48 * 40 + i]) : 0u)
            << "group " << gg << " acc " << acc;
  }
  // All groups empty.
  const std::vector<int64_t> none = {0, 0};
  const QuantizedTensor q0 = quantize(Tensor2f::from_shape({0, 32}), s, Axis::Cols);
  const QuantizedTensor qw = quantize(rand3(g, 2, 8, 32, 1), s, Axis::Cols);
  const hip::DeviceQuantized d0 = gputest::upload(q0, "X"), dwq = gputest::upload(qw, "W");
  EXPECT_NO_THROW(hip::grouped_fprop(hip::GemmOperand::from_quantized(d0.t), hip::GemmOperand::from_quantized(dwq.t),
                                     none, nullptr));
  // K = 0: the sum over nothing is +0 (overwrite).
  const int64_t one[] = {3};
  const QuantizedTensor qk = quantize(Tensor2f::from_shape({3, 0}), s, Axis::Cols);
  const QuantizedTensor qwk = quantize(Tensor3f::from_shape({1, 5, 0}), s, Axis::Cols);
  const hip::DeviceQuantized dk = gputest::upload(qk, "X"), dwk = gputest::upload(qwk, "W");
  hip::DeviceBuffer y(15 * sizeof(float), "y");
  y.fill(0xFF);
  hip::grouped_fprop(hip::GemmOperand::from_quantized(dk.t), hip::GemmOperand::from_quantized(dwk.t), one, y.as<float>());
  std::vector<float> yk(15);
  y.download(yk.data(), 60);
  for (float v : yk) EXPECT_EQ(std::bit_cast<uint32_t>(v), 0u);
}

// More rows of A than the grid's y extent holds tiles of (65535 x 8 rows for
// the small tile): the blocks' own loop walks the rest. M = 65535 x 8 + 9,
// N = 3, K = 32, MXFP4 with random codes, every kernel kind forced; all
// outputs compared with the emulator, the last rows (past the grid) included.
TEST(GpuGemm, RowsBeyondTheGridAreWalked) {
  REQUIRE_GPU();
  std::mt19937 g(91);
  const size_t M = 65535 * 8 + 9, N = 3, K = 32;
  const Tensor2f x = rand2(g, M, K, 3);
  const Tensor3f w = rand3(g, 1, N, K, 3);
  const QuantizedTensor qx = quantize(x, tensor_recipe("mxfp4"), Axis::Cols);
  const QuantizedTensor qw = quantize(w, tensor_recipe("mxfp4"), Axis::Cols);
  const int64_t ms[] = {int64_t(M)};
  Tensor2f ref = Tensor2f::from_shape({M, N});
  grouped_fprop(qx, qw, ms, ref, ref_opt(false, false));
  const hip::DeviceQuantized dx = gputest::upload(qx, "X"), dw = gputest::upload(qw, "W");
  for (hip::GemmKernel k : {hip::GemmKernel::Auto, hip::GemmKernel::LargeTile, hip::GemmKernel::SmallTile}) {
    hip::DeviceBuffer out(M * N * sizeof(float), "y");
    hip::GemmParams gp;
    gp.kernel = k;
    hip::grouped_fprop(hip::GemmOperand::from_quantized(dx.t), hip::GemmOperand::from_quantized(dw.t), ms,
                       out.as<float>(), gp);
    std::vector<float> got(M * N);
    out.download(got.data(), got.size() * sizeof(float));
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(ref.data()[i]) && bad++ < 5)
        ADD_FAILURE() << "kernel " << int(k) << " output " << i << " (row " << i / N << ")";
    EXPECT_EQ(bad, 0u) << "kernel " << int(k);
  }
}

/// The emulator's fast kernels (tests/test_gemm_exact.cpp holds them to the
/// reference and a rational oracle bit for bit), for the larger shapes below.
GemmOptions fast_opt(bool acc) {
  GemmOptions o = ref_opt(acc, false);
  o.impl = GemmImpl::Fast;
  return o;
}

/// Smallest and largest E8M0 byte (0xFF left out, and 0x00 with skip_zero:
/// on data whose non-zero blocks all sit near 2^0, the bytes of the blocks
/// that hold a non-zero element) over operands.
std::pair<int, int> e8m0_span(std::initializer_list<const QuantizedTensor*> qs, bool skip_zero = false) {
  int lo = 255, hi = 0;
  for (const QuantizedTensor* q : qs)
    for (size_t i = 0; i < q->scale_bytes.size(); ++i) {
      const int b = q->scale_bytes.data()[i];
      if (b != 0xFF && !(skip_zero && b == 0)) lo = std::min(lo, b), hi = std::max(hi, b);
    }
  return {lo, hi};
}
/// Whether the tensor-core kernel promotes by fmaf (every scale product an
/// exact FP32 value clear of -0 rounding, gemm_sm90.hip) or by the exact steps.
bool fmaf_range(std::pair<int, int> a, std::pair<int, int> b) {
  return a.first + b.first >= 254 - 147 && a.second + b.second <= 254 + 127;
}

// The tensor-core kernels (GemmKernel::Wgmma, an H100/H200 only) on shapes
// that fill many 128 x 128 tiles and several 128-K stages, with ragged edges
// (M, N, K not multiples of 128, K not of 32), every form, both accumulate
// modes, FP32 output: MXFP4 x MXFP4 (weights 32 x 32 tiles and 1 x 32) bit
// for bit against the emulator. The scale bytes are checked to put every
// call on the fmaf promotion, or, with `extreme` (sources near 2^-127 and
// 2^120), every call outside it, where the kernels must take the contract's
// exact steps (a fast path there gives 0 or Inf scale products). With
// `zero_blocks`, ordinary data with whole rows and columns of zeros (dead
// features, masked gradients): blocks of zeros carry scale byte 0x00, which
// must not take the launch off the fmaf kernel (a zero block adds an exact
// zero whatever its scale), asserted by the exact-steps twin's count.
enum class ScaleCase { Ordinary, Extreme, ZeroBlocks };
// Caps the Hopper kernels' persistent CTAs for one test (0: one per SM),
// so that each CTA runs several tiles; the cap is lifted on scope exit.
struct CapCtas {
  explicit CapCtas(unsigned n) { hip::set_wgmma_max_ctas(n); }
  ~CapCtas() { hip::set_wgmma_max_ctas(0); }
  CapCtas(const CapCtas&) = delete;
  CapCtas& operator=(const CapCtas&) = delete;
};
void run_wgmma_large(ScaleCase sc, unsigned max_ctas = 0) {
  const CapCtas cap(max_ctas);
  const bool extreme = sc == ScaleCase::Extreme, zero_blocks = sc == ScaleCase::ZeroBlocks;
  std::mt19937 g(7000 + unsigned(sc));
  const std::vector<int64_t> ms = {300, 0, 129, 1000, 77};
  const size_t M = total(ms), N = 333, K = 1000, G = ms.size();
  Tensor2f x = rand2(g, M, K, 3), dy = rand2(g, M, N, 3);
  Tensor3f w = rand3(g, G, N, K, 3);
  if (zero_blocks) {
    for (size_t i = 0; i < M; ++i)
      for (size_t k = 0; k < K; ++k)
        if (i % 9 == 0 || k % 5 == 0) x(i, k) = 0.0f;
    for (size_t i = 0; i < M; ++i)
      for (size_t n = 0; n < N; ++n)
        if (i % 9 == 4 || n % 5 == 2) dy(i, n) = i % 2 ? 0.0f : -0.0f;
    for (size_t gg = 0; gg < G; ++gg)
      for (size_t n = 0; n < N; n += 7)
        for (size_t k = 0; k < K; ++k) w(gg, n, k) = 0.0f;
  }
  if (extreme) {
    // Rows of x near 2^-126 and 2^120 (scale bytes near 0x00 and 0xF8), W's
    // group 0 at 2^-30 and group 3 at 2^10, dy at 2^8 with every fifth row
    // near 2^-127 (subnormal sources, scale bytes near 0): some pair of scales
    // in every form sums below 2^-149 or above 2^127, so each launch takes
    // the exact steps; the products that do fit FP32 must still come out right.
    for (size_t i = 0; i < M; i += 7)
      for (size_t k = 0; k < K; ++k) x(i, k) *= (i % 2) ? 0x1p-126f : 0x1p+120f;
    for (size_t n = 0; n < N; ++n)
      for (size_t k = 0; k < K; ++k) w(0, n, k) *= 0x1p-30f, w(3, n, k) *= 0x1p+10f;
    for (size_t i = 0; i < M; ++i)
      for (size_t n = 0; n < N; ++n) dy(i, n) *= i % 5 ? 0x1p+8f : 0x1p-127f;
  }
  const QuantSpec s4 = tensor_recipe("mxfp4"), s42 = tensor_recipe("mxfp4_2d");
  for (const QuantSpec& sw : {s42, s4})
    for (int form = 0; form < 3; ++form)
      for (int acc = 0; acc < 2; ++acc) {
        const std::string what = std::string(form == 0 ? "fprop" : form == 1 ? "dgrad" : "wgrad") +
                                 (sw.is_2d_tile() ? " W 32x32" : " W 1x32") + (acc ? " accumulate" : " overwrite") +
                                 (extreme ? " extreme scales" : zero_blocks ? " zero blocks" : "");
        SCOPED_TRACE(what);
        hip::GemmParams gp;
        gp.kernel = hip::GemmKernel::Wgmma;
        gp.accumulate = acc;
        const hip::GemmLaunchCounts before = hip::gemm_launch_counts();
        if (form < 2) {
          const size_t J = form == 0 ? N : K;
          const Tensor2f init = rand2(g, M, J, 2);
          Tensor2f ref = init;
          const QuantizedTensor qa = quantize(form == 0 ? x : dy, s4, Axis::Cols);
          const QuantizedTensor qw = quantize(w, sw, form == 0 || sw.is_2d_tile() ? Axis::Cols : Axis::Rows);
          ASSERT_EQ(fmaf_range(e8m0_span({&qa}, zero_blocks), e8m0_span({&qw}, zero_blocks)), !extreme)
              << "the data's scale bytes";
          if (zero_blocks) {
            ASSERT_EQ(e8m0_span({&qa, &qw}).first, 0) << "zero blocks at scale byte 0x00";
          }
          if (form == 0) grouped_fprop(qa, qw, ms, ref, fast_opt(acc));
          else grouped_dgrad(qa, qw, ms, ref, fast_opt(acc));
          const hip::DeviceQuantized da = gputest::upload(qa, "A"), dw = gputest::upload(qw, "W");
          check_gpu("mx-exact", init.data(), ref.data(), M * J, acc, what, [&](float* out) {
            const auto oa = hip::GemmOperand::from_quantized(da.t), ow = hip::GemmOperand::from_quantized(dw.t);
            if (form == 0) hip::grouped_fprop(oa, ow, ms, out, gp);
            else hip::grouped_dgrad(oa, ow, ms, out, gp);
          });
        } else {
          const Tensor3f init = rand3(g, G, N, K, 2);
          Tensor3f ref = init;
          const std::vector<QuantizedTensor> qdy = quantize_grouped_colwise(dy, ms, s4), qx = quantize_grouped_colwise(x, ms, s4);
          std::pair<int, int> sdy{255, 0}, sx{255, 0};
          int lowest = 255;
          for (size_t gg = 0; gg < G; ++gg) {
            const auto a = e8m0_span({&qdy[gg]}, zero_blocks), b = e8m0_span({&qx[gg]}, zero_blocks);
            sdy = {std::min(sdy.first, a.first), std::max(sdy.second, a.second)};
            sx = {std::min(sx.first, b.first), std::max(sx.second, b.second)};
            lowest = std::min(lowest, e8m0_span({&qdy[gg], &qx[gg]}).first);
          }
          ASSERT_EQ(fmaf_range(sdy, sx), !extreme) << "the data's scale bytes";
          if (zero_blocks) {
            ASSERT_EQ(lowest, 0) << "zero blocks at scale byte 0x00";
          }
          grouped_wgrad(qdy, qx, ms, ref, fast_opt(acc));
          std::vector<hip::DeviceQuantized> keep;
          std::vector<hip::GemmOperand> odys, oxs;
          for (size_t gg = 0; gg < G; ++gg) {
            keep.push_back(gputest::upload(qdy[gg], "dY group"));
            odys.push_back(hip::GemmOperand::from_quantized(keep.back().t));
            keep.push_back(gputest::upload(qx[gg], "X group"));
            oxs.push_back(hip::GemmOperand::from_quantized(keep.back().t));
          }
          check_gpu("mx-exact", init.data(), ref.data(), G * N * K, acc, what,
                    [&](float* out) { hip::grouped_wgrad(odys, oxs, ms, out, gp); });
        }
        if (sm90()) {
          const hip::GemmLaunchCounts after = hip::gemm_launch_counts();
          EXPECT_GT(after.wgmma, before.wgmma) << what << ": the tensor-core kernel ran";
          EXPECT_EQ(after.wgmma_exact_steps > before.wgmma_exact_steps, extreme)
              << what << ": which twin did the work (exact steps or fmaf)";
        }
      }
}

TEST(GpuGemm, WgmmaMxExactLargeShapesMatchEmulator) {
  REQUIRE_GPU();
  if (!sm90()) GTEST_SKIP() << "the tensor-core kernels need an H100/H200 (sm_90); this GPU is cc "
                            << hip::device_info().cc_major << "." << hip::device_info().cc_minor;
  run_wgmma_large(ScaleCase::Ordinary);
}

// At most 3 CTAs: each runs many tiles, of several groups and (wgrad) of
// several K, with the stages and their barrier phases carried across tiles.
TEST(GpuGemm, WgmmaMxExactSeveralTilesPerCtaMatchEmulator) {
  REQUIRE_GPU();
  if (!sm90()) GTEST_SKIP() << "the tensor-core kernels need an H100/H200 (sm_90)";
  run_wgmma_large(ScaleCase::Ordinary, 3);
}

TEST(GpuGemm, WgmmaMxExactExtremeScalesTakeTheExactSteps) {
  REQUIRE_GPU();
  if (!sm90()) GTEST_SKIP() << "the tensor-core kernels need an H100/H200 (sm_90)";
  run_wgmma_large(ScaleCase::Extreme);
}

TEST(GpuGemm, WgmmaMxExactZeroBlocksKeepTheFmafKernel) {
  REQUIRE_GPU();
  if (!sm90()) GTEST_SKIP() << "the tensor-core kernels need an H100/H200 (sm_90)";
  run_wgmma_large(ScaleCase::ZeroBlocks);
}

// A caller's workspace (GemmParams::workspace; a HipBackend's own) takes the tensor-core
// kernels' operand images of its calls: empty before, grown by the first call, reused (not
// grown) by a smaller one; the bits are the emulator's either way.
TEST(GpuGemm, WgmmaImagesGoToTheCallersWorkspace) {
  REQUIRE_GPU();
  if (!sm90()) GTEST_SKIP() << "the tensor-core kernels need an H100/H200 (sm_90)";
  std::mt19937 g(9100);
  hip::StreamWorkspace ws;
  EXPECT_EQ(ws.bytes(), 0u);
  size_t grown = 0;
  for (const std::vector<int64_t>& ms : {std::vector<int64_t>{200, 56}, std::vector<int64_t>{64}}) {
    const size_t M = total(ms), N = 160, K = 256, G = ms.size();
    const Tensor2f x = rand2(g, M, K, 3);
    const Tensor3f w = rand3(g, G, N, K, 3);
    const QuantizedTensor qa = quantize(x, tensor_recipe("mxfp4"), Axis::Cols);
    const QuantizedTensor qw = quantize(w, tensor_recipe("mxfp4_2d"), Axis::Cols);
    Tensor2f ref = Tensor2f::from_shape({M, N});
    grouped_fprop(qa, qw, ms, ref, fast_opt(false));
    const hip::DeviceQuantized da = gputest::upload(qa, "A"), dw = gputest::upload(qw, "W");
    hip::GemmParams gp;
    gp.kernel = hip::GemmKernel::Wgmma;
    gp.workspace = &ws;
    const hip::GemmLaunchCounts before = hip::gemm_launch_counts();
    check_gpu("mx-exact", nullptr, ref.data(), M * N, false, "caller's workspace", [&](float* out) {
      hip::grouped_fprop(hip::GemmOperand::from_quantized(da.t), hip::GemmOperand::from_quantized(dw.t), ms, out, gp);
    });
    EXPECT_GT(hip::gemm_launch_counts().wgmma, before.wgmma) << "the call ran on the tensor cores";
    if (grown == 0) {
      EXPECT_GT(ws.bytes(), 0u) << "the first call grew the caller's workspace";
      grown = ws.bytes();
    } else {
      EXPECT_EQ(ws.bytes(), grown) << "a smaller call reuses it";
    }
  }
}

// bf16-f25 on the tensor cores (GemmKernel::Wgmma: the k16 wgmma chain is
// the class, hd::hopper_bf16_edges) on shapes of many tiles and K stages,
// ragged edges, every form, both accumulate modes, against the emulator.
// `tiny`: finite data where the edges decide: rows spread over 2^+-40 and
// every fifth row of X and dY near 2^-120 (BF16 subnormals after rounding,
// products far below 2^-126), at least half the outputs asserted finite.
// Otherwise rows spread over 2^+-40 with 1 % specials (zeros, NaN, +-Inf,
// subnormals, FLT_MAX: overflow to Inf inside a group, then Inf - Inf); most
// of those outputs are NaN or Inf.
// The kernel reads a K-major side in place when its groups lie one after
// another with 16-byte aligned rows, so tiles past a group read the next
// group's rows, specials included. X (K = 1000) always; W only without an
// empty group (the empty expert is skipped, which leaves a gap); dY only
// when N % 8 == 0. The sides read in place are asserted exactly
// (bf16_in_place_sides). `max_ctas` caps the persistent CTAs, so that each
// runs several tiles, with the stage counter carried across them.
void run_wgmma_bf16(bool tiny, size_t N = 333, std::vector<int64_t> ms = {300, 0, 129, 1000, 77},
                    unsigned max_ctas = 0) {
  std::mt19937 g(tiny ? 7401 : 7400);
  const size_t M = total(ms), K = 1000, G = ms.size();
  const bool no_empty = std::find(ms.begin(), ms.end(), 0) == ms.end();
  const CapCtas cap(max_ctas);
  Tensor2f x = rand2(g, M, K, 40, tiny ? 0 : 1), dy = rand2(g, M, N, 40, tiny ? 0 : 1);
  const Tensor3f w = rand3(g, G, N, K, tiny ? 20 : 40, tiny ? 0 : 1);
  if (tiny) {
    for (size_t i = 0; i < M; i += 5)
      for (size_t k = 0; k < K; ++k) x(i, k) = std::ldexp(x(i, k), -80 - int(i % 40));
    for (size_t i = 2; i < M; i += 5)
      for (size_t n = 0; n < N; ++n) dy(i, n) = std::ldexp(dy(i, n), -80 - int(i % 40));
  }
  const QuantSpec b = bf16_spec();
  BF16Dev bx = bf16_codes(x.data(), x.size(), "X"), bdy = bf16_codes(dy.data(), dy.size(), "dY"),
          bw = bf16_codes(w.data(), w.size(), "W");
  for (int form = 0; form < 3; ++form)
    for (int acc = 0; acc < 2; ++acc) {
      const std::string what = std::string(form == 0 ? "fprop" : form == 1 ? "dgrad" : "wgrad") +
                               (acc ? " accumulate" : " overwrite");
      SCOPED_TRACE(what);
      hip::GemmParams gp;
      gp.kernel = hip::GemmKernel::Wgmma;
      gp.accumulate = acc;
      const hip::GemmLaunchCounts before = hip::gemm_launch_counts();
      const auto finite_share = [&](const float* p, size_t n) {
        size_t f = 0;
        for (size_t i = 0; i < n; ++i) f += std::isfinite(p[i]);
        return double(f) / double(n);
      };
      if (form < 2) {
        const size_t J = form == 0 ? N : K;
        const Tensor2f init = rand2(g, M, J, 2, tiny ? 0 : 1);
        Tensor2f ref = init;
        if (form == 0) grouped_fprop(x, b, w, b, ms, ref, fast_opt(acc));
        else grouped_dgrad(dy, b, w, b, ms, ref, fast_opt(acc));
        if (tiny) {
          EXPECT_GT(finite_share(ref.data(), ref.size()), 0.5) << "outputs the edges decide";
        }
        check_gpu("bf16-f25", init.data(), ref.data(), M * J, acc, what, [&](float* out) {
          const auto ow = hip::GemmOperand::from_bf16(bw.codes.as<uint16_t>(), G, N, K);
          if (form == 0) hip::grouped_fprop(hip::GemmOperand::from_bf16(bx.codes.as<uint16_t>(), 1, M, K), ow, ms, out, gp);
          else hip::grouped_dgrad(hip::GemmOperand::from_bf16(bdy.codes.as<uint16_t>(), 1, M, N), ow, ms, out, gp);
        });
      } else {
        const Tensor3f init = rand3(g, G, N, K, 2, tiny ? 0 : 1);
        Tensor3f ref = init;
        grouped_wgrad(dy, b, x, b, ms, ref, fast_opt(acc));
        if (tiny) {
          EXPECT_GT(finite_share(ref.data(), ref.size()), 0.5) << "outputs the edges decide";
        }
        const std::vector<hip::GemmOperand> odys = bf16_group_operands(bdy, ms, N);
        const std::vector<hip::GemmOperand> oxs = bf16_group_operands(bx, ms, K);
        check_gpu("bf16-f25", init.data(), ref.data(), G * N * K, acc, what,
                  [&](float* out) { hip::grouped_wgrad(odys, oxs, ms, out, gp); });
      }
      const hip::GemmLaunchCounts after = hip::gemm_launch_counts();
      EXPECT_GT(after.wgmma, before.wgmma) << what << ": the tensor-core kernel ran";
      EXPECT_EQ(after.tiled, before.tiled) << what << ": and no tiled kernel";
      const size_t want_in_place = form == 0 ? 1 + no_empty : form == 1 ? size_t(N % 8 == 0) : 0;
      EXPECT_EQ(after.bf16_in_place_sides - before.bf16_in_place_sides, want_in_place)
          << what << ": operand sides read in place (the rest through images)";
    }
}

TEST(GpuGemm, WgmmaBf16LargeShapesMatchEmulator) {
  REQUIRE_GPU();
  if (!sm90()) GTEST_SKIP() << "the tensor-core kernels need an H100/H200 (sm_90)";
  run_wgmma_bf16(false);
}

// X, W and dY read in place (no empty group, N % 8 == 0), and at most 5
// CTAs, so each runs several tiles of different groups.
TEST(GpuGemm, WgmmaBf16InPlaceOperandsAndSeveralTilesPerCtaMatchEmulator) {
  REQUIRE_GPU();
  if (!sm90()) GTEST_SKIP() << "the tensor-core kernels need an H100/H200 (sm_90)";
  run_wgmma_bf16(false, 336, {300, 129, 1000, 77}, 5);
}

// The groups the window floor decides (measured on the H200; the emulator's
// side is test_gemm_bf16_h200) on every GPU kernel of bf16-f25: the
// CUDA-core large-tile, small-tile and lanes kernels and, on an sm_90 GPU,
// the wgmma chain. One output, K = 16, C = +0.
TEST(GpuGemm, Bf16WindowFloorGroupsGiveTheH200BitsOnEveryKernel) {
  REQUIRE_GPU();
  std::vector<hip::GemmKernel> kinds = {hip::GemmKernel::LargeTile, hip::GemmKernel::SmallTile, hip::GemmKernel::Lanes};
  if (sm90()) kinds.push_back(hip::GemmKernel::Wgmma);
  const std::vector<int64_t> ms = {1};
  for (const testdata::FloorGroup& m : testdata::kFloorGroups) {
    hip::DeviceBuffer a(32, "a"), b(32, "b");
    a.upload(m.a, 32);
    b.upload(m.b, 32);
    for (hip::GemmKernel k : kinds) {
      hip::GemmParams gp;
      gp.kernel = k;
      const uint32_t want = m.h200;
      check_gpu("bf16-f25", nullptr, reinterpret_cast<const float*>(&want), 1, false,
                "kernel " + std::to_string(int(k)), [&](float* out) {
                  hip::grouped_fprop(hip::GemmOperand::from_bf16(a.as<uint16_t>(), 1, 1, 16),
                                     hip::GemmOperand::from_bf16(b.as<uint16_t>(), 1, 1, 16), ms, out, gp);
                });
    }
  }
}

TEST(GpuGemm, WgmmaBf16SubnormalAndTinyValuesMatchEmulator) {
  REQUIRE_GPU();
  if (!sm90()) GTEST_SKIP() << "the tensor-core kernels need an H100/H200 (sm_90)";
  run_wgmma_bf16(true);
}

// The lanes kernel shares one warp between two BF16 outputs (16 lanes each,
// one per product of a 16-group). Where one output's group is all zeros and
// its neighbour's is not, the two half-warps reduce different E; every lane
// must still reach the full-warp shuffles (an early return for the all-zero
// group hung the warp: the bug class of a shuffle skipped by some lanes).
// Rows of X and W alternate zero and ordinary, so zero groups sit beside
// non-zero ones in every pairing of outputs; overwrite (C = +0) and
// accumulate into zeros, both against the emulator.
TEST(GpuGemm, LanesZeroGroupBesideNonZeroGroupMatchesEmulator) {
  REQUIRE_GPU();
  std::mt19937 g(7500);
  const std::vector<int64_t> ms = {37, 0, 20};
  const size_t M = total(ms), N = 9, K = 200, G = ms.size();
  Tensor2f x = rand2(g, M, K, 3);
  Tensor3f w = rand3(g, G, N, K, 3);
  for (size_t i = 0; i < M; i += 2)
    for (size_t k = 0; k < K; ++k) x(i, k) = 0.0f;
  for (size_t gg = 0; gg < G; ++gg)
    for (size_t n = 1; n < N; n += 2)
      for (size_t k = 0; k < K; ++k) w(gg, n, k) = 0.0f;
  BF16Dev bx = bf16_codes(x.data(), x.size(), "X"), bw = bf16_codes(w.data(), w.size(), "W");
  for (int acc = 0; acc < 2; ++acc) {
    Tensor2f init = Tensor2f::from_shape({M, N});
    init.fill(0.0f);  // C = +0 either way
    Tensor2f ref = init;
    grouped_fprop(x, bf16_spec(), w, bf16_spec(), ms, ref, ref_opt(acc, false));
    hip::GemmParams gp;
    gp.kernel = hip::GemmKernel::Lanes;
    gp.accumulate = acc;
    check_gpu("bf16-f25", init.data(), ref.data(), M * N, acc, acc ? "lanes accumulate" : "lanes overwrite",
              [&](float* out) {
                hip::grouped_fprop(hip::GemmOperand::from_bf16(bx.codes.as<uint16_t>(), 1, M, K),
                                   hip::GemmOperand::from_bf16(bw.codes.as<uint16_t>(), G, N, K), ms, out, gp);
              });
  }
}

// GemmKernel::WgmmaHardware runs mx-f13, fp8-chunk128 and bf16-f25 on the
// tensor cores' own FP8 / BF16 arithmetic, which those classes model
// (MMA-Sim: F = 13 for FP8; for BF16, F = 25 with the H200's measured edges,
// where Wgmma and Auto take it too). On ordinary data (normal values within
// 2^+-3 of each other, no NaN / Inf) it gives the contract's bits on an
// H200; for the FP8 classes wider spreads and specials are where the
// hardware and MMA-Sim's reading part (docs/gpu.md), so this test claims
// only the former.
TEST(GpuGemm, HardwareWgmmaMatchesTheFusedClassesOnOrdinaryData) {
  REQUIRE_GPU();
  if (!sm90()) GTEST_SKIP() << "the tensor-core kernels need an H100/H200 (sm_90)";
  std::mt19937 g(7100);
  const std::vector<int64_t> ms = {200, 57, 0, 260};
  const size_t M = total(ms), N = 200, K = 420, G = ms.size();
  const Tensor2f x = rand2(g, M, K, 3);
  const Tensor3f w = rand3(g, G, N, K, 3);
  for (const Pair& p : {Pair{"mxfp8", "mxfp8"}, Pair{"mxfp8", "mxfp4_2d"}, Pair{"mxfp6_e3m2", "mxfp8_e5m2"},
                        Pair{"fp8_row", "fp8_row"}, Pair{"fp8_block", "fp8_block2d"}, Pair{"bf16", "bf16"}}) {
    SCOPED_TRACE(std::string(p.a) + " x " + p.w);
    const QuantSpec sa = spec(p.a), sw = spec(p.w);
    hd::GemmClass cls;
    ASSERT_TRUE(hd::gemm_class_of(sa, sw, cls));
    Tensor2f ref = Tensor2f::from_shape({M, N});
    hip::GemmParams gp;
    gp.kernel = hip::GemmKernel::WgmmaHardware;
    const hip::GemmLaunchCounts before = hip::gemm_launch_counts();
    if (cls == hd::GemmClass::Bf16F25) {
      grouped_fprop(x, sa, w, sw, ms, ref, ref_opt(false, false));
      BF16Dev da = bf16_codes(x.data(), x.size(), "A bf16"), dw = bf16_codes(w.data(), w.size(), "W bf16");
      check_gpu(hd::gemm_class_name(cls), nullptr, ref.data(), M * N, false, "fprop", [&](float* out) {
        hip::grouped_fprop(hip::GemmOperand::from_bf16(da.codes.as<uint16_t>(), 1, M, K),
                           hip::GemmOperand::from_bf16(dw.codes.as<uint16_t>(), G, N, K), ms, out, gp);
      });
    } else {
      const QuantizedTensor qa = quantize(x, sa, Axis::Cols), qw = quantize(w, sw, Axis::Cols);
      grouped_fprop(qa, qw, ms, ref, ref_opt(false, false));
      const hip::DeviceQuantized da = gputest::upload(qa, "A"), dw = gputest::upload(qw, "W");
      check_gpu(hd::gemm_class_name(cls), nullptr, ref.data(), M * N, false, "fprop", [&](float* out) {
        hip::grouped_fprop(hip::GemmOperand::from_quantized(da.t), hip::GemmOperand::from_quantized(dw.t), ms, out, gp);
      });
    }
    EXPECT_GT(hip::gemm_launch_counts().wgmma, before.wgmma) << "the tensor-core kernel ran";
  }
}

TEST(GpuGemm, BadInputThrowsAndLaunchesNothing) {
  REQUIRE_GPU();
  std::mt19937 g(1);
  const QuantSpec m = tensor_recipe("mxfp4");
  const hip::DeviceQuantized dx = gputest::upload(quantize(rand2(g, 10, 64, 1), m, Axis::Cols), "X");
  const hip::DeviceQuantized dw = gputest::upload(quantize(rand3(g, 2, 16, 64, 1), m, Axis::Cols), "W");
  const hip::DeviceQuantized dw8 = gputest::upload(quantize(rand3(g, 2, 16, 64, 1), tensor_recipe("fp8_tensor"), Axis::Cols), "W8");
  const hip::DeviceQuantized dwr = gputest::upload(quantize(rand3(g, 2, 16, 64, 1), m, Axis::Rows), "Wrows");
  const auto x = hip::GemmOperand::from_quantized(dx.t), w = hip::GemmOperand::from_quantized(dw.t);
  hip::DeviceBuffer y(10 * 16 * sizeof(float), "y");
  y.fill(0x5A);
  auto msg = [](auto fn) {
    try {
      fn();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  const std::vector<int64_t> bad_sum = {3, 4}, neg = {12, -2}, three = {5, 5, 0}, ok = {5, 5};
  EXPECT_NE(msg([&] { hip::grouped_fprop(x, w, bad_sum, y.as<float>()); }).find("sum to 7"), std::string::npos);
  EXPECT_NE(msg([&] { hip::grouped_fprop(x, w, neg, y.as<float>()); }).find("negative"), std::string::npos);
  EXPECT_NE(msg([&] { hip::grouped_fprop(x, w, three, y.as<float>()); }).find("groups"), std::string::npos);
  EXPECT_NE(msg([&] { hip::grouped_fprop(x, hip::GemmOperand::from_quantized(dw8.t), ok, y.as<float>()); }).find("pair"),
            std::string::npos);
  EXPECT_NE(msg([&] { hip::grouped_fprop(x, hip::GemmOperand::from_quantized(dwr.t), ok, y.as<float>()); }).find("blocks of 32"),
            std::string::npos);
  hip::synchronize();
  std::vector<uint8_t> bytes(10 * 16 * 4);
  y.download(bytes.data(), bytes.size());
  for (uint8_t b : bytes) ASSERT_EQ(b, 0x5A);  // untouched
}
#endif

}  // namespace
