// GPU quantization (backends/hip/src/quantize.hip) against emu::quantize, bit
// for bit: codes, scale bytes, FP32 scale_inv bit patterns and NVFP4's
// tensor_scale_inv, for every named recipe and its variants (scale rules,
// RNE / RZ / stochastic rounding, Hadamard16, delayed scaling, amax_epsilon,
// pow2 off), both axes, grouped tensors, per-group columnwise quantization
// with sr_index_base, and both orientations from one read. Inputs are seeded
// adversarial tensors (ragged shapes, NaN, Inf, zeros, subnormals, FP32's
// largest values, halfway points). Both sides call hd/quant_block.hpp; the
// emulator's quantizer is itself proven by the exact-oracle and published-
// value tests (test_formats_exhaustive, test_scale_rules, test_quantize_*).
//
// Skips, with the runtime's reason, without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/quantize.hpp"

namespace {
using namespace mxsim;

#ifndef MXSIM_HAVE_GPU
TEST(GpuQuantize, SkippedWithoutBackend) { GTEST_SKIP() << "built without the GPU backend"; }
#else

struct Tally {
  size_t cases = 0, bytes = 0, mismatches = 0;
};

/// Every stored byte of q (device) equals emu's e: data, scales, tensor scale.
void expect_same(const QuantizedTensor& e, const hip::DeviceQTensor& d, const std::string& what, Tally& t) {
  const QuantizedTensor g = gputest::download(d);
  auto cmp = [&](const void* a, const void* b, size_t n, const char* part) {
    size_t bad = 0;
    const auto* x = static_cast<const uint8_t*>(a);
    const auto* y = static_cast<const uint8_t*>(b);
    for (size_t i = 0; i < n; ++i)
      if (x[i] != y[i] && bad++ < 3)
        ADD_FAILURE() << what << " " << part << " byte " << i << ": emu 0x" << std::hex << int(x[i]) << " gpu 0x" << int(y[i]);
    t.bytes += n;
    t.mismatches += bad;
  };
  if (e.rows * e.cols * e.groups == 0) return;  // nothing stored (emu marks empty groups transposed regardless)
  ASSERT_EQ(g.transposed, e.transposed) << what;
  ASSERT_EQ(g.data.size(), e.data.size()) << what;
  cmp(e.data.data(), g.data.data(), e.data.size(), "data");
  if (e.spec.scale_kind == ScaleKind::FP32) {
    ASSERT_EQ(g.scale_inv.size(), e.scale_inv.size()) << what;
    cmp(e.scale_inv.data(), g.scale_inv.data(), e.scale_inv.size() * 4, "scale_inv");
  } else {
    ASSERT_EQ(g.scale_bytes.size(), e.scale_bytes.size()) << what;
    cmp(e.scale_bytes.data(), g.scale_bytes.data(), e.scale_bytes.size(), "scale_bytes");
  }
  cmp(&e.tensor_scale_inv, &g.tensor_scale_inv, 4, "tensor_scale_inv");
  ++t.cases;
}

struct Variant {
  std::string name;
  QuantSpec spec;
};

/// The named recipes and the variants the simulator uses or the contract
/// defines: every E8M0 rule, Hadamard16 (MXFP4 / NVFP4 wgrad operands),
/// delayed scaling, Primus-Turbo's amax_epsilon with general FP32 scales.
std::vector<Variant> variants() {
  std::vector<Variant> v;
  for (const std::string& n : tensor_recipe_names()) {
    const QuantSpec s = tensor_recipe(n);
    if (s.scale_kind == ScaleKind::E8M0) {
      for (ScaleRule r : {ScaleRule::Floor, ScaleRule::Rceil, ScaleRule::Even, ScaleRule::Ceil}) {
        QuantSpec t = s;
        t.rule = r;
        v.push_back({n + "/" + name_of(r), t});
      }
    } else {
      v.push_back({n, s});
    }
  }
  QuantSpec h = tensor_recipe("mxfp4");
  h.hadamard16 = true;
  v.push_back({"mxfp4+h16", h});
  h = tensor_recipe("nvfp4");
  h.hadamard16 = true;
  v.push_back({"nvfp4+h16", h});
  h = tensor_recipe("mxfp8");
  h.hadamard16 = true;
  v.push_back({"mxfp8+h16", h});
  QuantSpec d = tensor_recipe("fp8_tensor");
  d.fixed_scale = 3.25f;
  v.push_back({"fp8_tensor/delayed", d});
  QuantSpec e = tensor_recipe("fp8_block");
  e.pow2_scale = false;
  e.amax_epsilon = 1e-4f;
  v.push_back({"fp8_block/eps", e});
  // Block widths of the columnwise tile kernel other than 32 (16 and 64).
  QuantSpec b16 = tensor_recipe("mxfp8");
  b16.block_cols = 16;
  v.push_back({"mxfp8/1x16", b16});
  QuantSpec b64 = tensor_recipe("mxfp4");
  b64.block_cols = 64;
  v.push_back({"mxfp4/1x64", b64});
  QuantSpec f32b = tensor_recipe("fp8_block");  // FP32 scales on 1 x 32 blocks
  f32b.block_rows = 1;
  f32b.block_cols = 32;
  f32b.pow2_scale = false;
  v.push_back({"fp8/1x32 fp32 scales", f32b});
  QuantSpec w = tensor_recipe("fp8_tensor");  // one scale over every group (the simulator's fp8_current)
  w.whole_tensor_scale = true;
  v.push_back({"fp8_tensor/whole", w});
  QuantSpec p4 = tensor_recipe("fp8_tensor");  // packed E2M1 codes under one FP32 scale per group
  p4.elem = Format::E2M1;
  p4.pow2_scale = true;
  p4.amax_epsilon = 1e-3f;
  v.push_back({"e2m1 per-tensor fp32/pow2/eps", p4});
  QuantSpec f = tensor_recipe("mxfp4");
  f.elem = Format::E4M3FNUZ;
  f.rule = ScaleRule::Rceil;
  v.push_back({"mx_e4m3fnuz", f});
  return v;
}

TEST(GpuQuantize, EveryRecipeMatchesEmulator) {
  REQUIRE_GPU();
  struct Shape { size_t g, r, c; };
  const Shape shapes[] = {{1, 37, 200}, {3, 33, 97}, {2, 64, 256}, {1, 130, 160}, {1, 1, 1}};
  std::mt19937 gen(20261201);
  Tally t;
  for (const Variant& v : variants())
    for (const Shape& sh : shapes)
      for (Axis axis : {Axis::Cols, Axis::Rows})
        for (RoundMode m : {RoundMode::RNE, RoundMode::RZ, RoundMode::Stochastic})
          for (int pct : {0, 3}) {
            QuantSpec s = v.spec;
            s.round = m;
            s.sr = PhiloxStream{0x9E3779B97F4A7C15ull ^ gen(), make_stream(3, 5)};
            s.sr_index_base = m == RoundMode::Stochastic ? gen() % 7 : 0;
            const hd::QuantLayout L = hd::quant_layout(s, sh.g, sh.r, sh.c, axis);
            if (s.hadamard16 && L.scols % 16) continue;  // the emulator refuses it too (ErrorsAreNamed)
            const Tensor3f x = gputest::adversarial(gen, sh.g, sh.r, sh.c, pct);
            const std::string what = v.name + " " + std::to_string(sh.g) + "x" + std::to_string(sh.r) + "x" +
                                     std::to_string(sh.c) + (axis == Axis::Rows ? " rows " : " cols ") + name_of(m) +
                                     " specials " + std::to_string(pct) + "%";
            SCOPED_TRACE(what);
            const QuantizedTensor e = emu::quantize(x, s, axis);
            hip::DeviceBuffer dx = gputest::upload_floats(x.data(), x.size(), "source");
            hip::DeviceQuantized d = hip::alloc_quantized(s, sh.g, sh.r, sh.c, axis, "q");
            d.data.fill(0xAB);  // poison: every byte must be written
            d.scales.fill(0xAB);
            hip::quantize_device(dx.as<float>(), d.t);
            hip::synchronize();
            expect_same(e, d.t, what, t);
          }
  std::printf("[gpu] quantize: %zu cases, %zu bytes compared, %zu mismatches\n", t.cases, t.bytes, t.mismatches);
  EXPECT_EQ(t.mismatches, 0u);
  EXPECT_GT(t.cases, 1500u);
}

// wgrad operands: each group's slice quantized alone along M, SR words keyed
// by the whole tensor's index (sr_index_base + m0 * C), empty groups.
TEST(GpuQuantize, GroupedColwiseMatchesEmulator) {
  REQUIRE_GPU();
  std::mt19937 gen(77);
  Tally t;
  const char* recipes[] = {"mxfp4",      "mxfp8", "mxfp6_e3m2", "fp8_block",       "fp8_row",
                           "fp8_tensor", "nvfp4", "mxfp4+h16",  "fp8_tensor/whole"};
  for (const char* rn : recipes)
    for (RoundMode m : {RoundMode::RNE, RoundMode::Stochastic})
      for (int trial = 0; trial < 3; ++trial) {
        const bool h16 = std::string(rn) == "mxfp4+h16", whole = std::string(rn) == "fp8_tensor/whole";
        QuantSpec s = tensor_recipe(h16 ? "mxfp4" : whole ? "fp8_tensor" : rn);
        s.hadamard16 = h16;
        s.whole_tensor_scale = whole;  // one scale from the amax of all of x, every slice
        s.round = m;
        s.sr = PhiloxStream{0xC0FFEEull + uint64_t(trial), make_stream(9, 2)};
        s.sr_index_base = 40;
        std::vector<int64_t> ms;
        for (int g = 0; g < 5; ++g) {
          int64_t mg = gen() % 4 == 0 ? 0 : int64_t(1 + gen() % 150);
          if (h16) mg = 16 * (mg / 16);
          ms.push_back(mg);
        }
        size_t M = 0;
        for (auto v : ms) M += size_t(v);
        const size_t C = h16 ? 48 : 1 + gen() % 90;
        const Tensor3f x3 = gputest::adversarial(gen, 1, M, C, trial);
        const Tensor2f x = xt::view(x3, 0, xt::all(), xt::all());
        const std::string what = std::string(rn) + " " + name_of(m) + " trial " + std::to_string(trial);
        SCOPED_TRACE(what);
        const std::vector<QuantizedTensor> e = emu::quantize_grouped_colwise(x, ms, s);
        hip::DeviceBuffer dx = gputest::upload_floats(x.data(), x.size(), "source");
        // Also as views without the quantizer's amax words (the C interface's: its scratch path).
        for (bool own_words : {true, false}) {
          std::vector<hip::DeviceQuantized> d = hip::alloc_grouped_colwise(s, C, ms, "wgrad operand");
          std::vector<hip::DeviceQTensor> views;
          for (auto& q : d) views.push_back(q.t);
          if (!own_words)
            for (auto& v : views) v.amax = nullptr;
          hip::quantize_grouped_colwise_device(dx.as<float>(), M, C, ms, views);
          hip::synchronize();
          for (size_t g = 0; g < ms.size(); ++g) {
            EXPECT_EQ(d[g].t.spec.sr_index_base, e[g].spec.sr_index_base) << "group " << g;
            expect_same(e[g], d[g].t, what + (own_words ? "" : " (views without words)") + " group " + std::to_string(g), t);
          }
        }
      }
  std::printf("[gpu] grouped colwise quantize: %zu group tensors, %zu bytes compared, %zu mismatches\n", t.cases,
              t.bytes, t.mismatches);
  EXPECT_EQ(t.mismatches, 0u);
}

// Per-tensor FP32 scales over the whole GPU (amax_groups_kernel's atomic fold, then one element per
// thread), at sizes where many thread blocks share a group; NVFP4's tensor amax the same way. Also
// through a view without the quantizer's amax words (the C interface's): its scratch path.
TEST(GpuQuantize, TensorAmaxOverManyBlocksMatchesEmulator) {
  REQUIRE_GPU();
  std::mt19937 gen(1207);
  Tally t;
  struct Case { const char* name; bool whole; size_t g, r, c; int pct; };
  const Case cases[] = {{"fp8_tensor", false, 8, 512, 1024, 0}, {"fp8_tensor", true, 8, 512, 1024, 0},
                        {"fp8_tensor", true, 1, 4096, 2048, 0}, {"fp8_tensor", false, 4, 300, 777, 1},
                        {"nvfp4", false, 1, 2048, 2048, 0},     {"nvfp4", false, 2, 1000, 512, 1}};
  for (const Case& c : cases)
    for (RoundMode m : {RoundMode::RNE, RoundMode::Stochastic})
      for (bool own_words : {true, false}) {
        QuantSpec s = tensor_recipe(c.name);
        s.whole_tensor_scale = c.whole;
        s.round = m;
        s.sr = PhiloxStream{0x5EEDull + gen(), make_stream(4, 1)};
        const std::string what = std::string(c.name) + (c.whole ? "/whole " : " ") + std::to_string(c.g) + "x" +
                                 std::to_string(c.r) + "x" + std::to_string(c.c) + " " + name_of(m) +
                                 (own_words ? "" : " (view without amax words)");
        SCOPED_TRACE(what);
        const Tensor3f x = gputest::adversarial(gen, c.g, c.r, c.c, c.pct);
        const QuantizedTensor e = emu::quantize(x, s, Axis::Cols);
        hip::DeviceBuffer dx = gputest::upload_floats(x.data(), x.size(), "source");
        hip::DeviceQuantized d = hip::alloc_quantized(s, c.g, c.r, c.c, Axis::Cols, "q");
        d.data.fill(0xAB);
        d.scales.fill(0xAB);
        ASSERT_NE(d.t.amax, nullptr);
        hip::DeviceQTensor view = d.t;
        if (!own_words) view.amax = nullptr;
        hip::quantize_device(dx.as<float>(), view);
        hip::synchronize();
        expect_same(e, d.t, what, t);
      }
  std::printf("[gpu] tensor-amax quantize: %zu cases, %zu bytes compared, %zu mismatches\n", t.cases, t.bytes,
              t.mismatches);
  EXPECT_EQ(t.mismatches, 0u);
}

// Views without amax words take them from the stream's workspace, reused in stream order: calls
// queued back to back on one side stream, with no wait between them, each give the emulator's
// bytes. Each source's amax is below the one before (a word the next call failed to clear would
// keep the larger stale value and give other bytes); a grouped call grows the words between.
TEST(GpuQuantize, ViewsWithoutWordsQueuedBackToBackOnAStream) {
  REQUIRE_GPU();
  std::mt19937 gen(4242);
  Tally t;
  hip::Stream st;
  struct One { QuantizedTensor e; hip::DeviceBuffer dx; hip::DeviceQuantized d; std::string what; };
  std::vector<One> ones;
  const char* names[] = {"fp8_tensor", "nvfp4", "fp8_tensor/whole", "fp8_tensor", "nvfp4", "fp8_tensor/whole"};
  for (size_t i = 0; i < 6; ++i) {
    const bool whole = std::string(names[i]) == "fp8_tensor/whole";
    QuantSpec s = tensor_recipe(whole ? "fp8_tensor" : names[i]);
    s.whole_tensor_scale = whole;
    const size_t g = 1 + i % 3, r = 64 + 32 * i, c = 256;
    Tensor3f x = gputest::adversarial(gen, g, r, c, 0, 4);  // finite (no specials), amax near 2^4
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    x *= std::ldexp(1.0f, 3 * (5 - int(i)) + 4) / amax;  // amax about 2^(19 - 3i): smaller each call
    One o{emu::quantize(x, s, Axis::Cols), gputest::upload_floats(x.data(), x.size(), "source"),
          hip::alloc_quantized(s, g, r, c, Axis::Cols, "q"), std::string(names[i]) + " call " + std::to_string(i)};
    ones.push_back(std::move(o));
  }
  // a grouped call in the middle: more words than any single call (the workspace grows)
  const std::vector<int64_t> ms = {40, 0, 70, 33, 90, 12, 64, 5};
  const size_t M = 314, C = 96;
  const Tensor3f xg3 = gputest::adversarial(gen, 1, M, C, 0, 4);  // amax near 2^4: below the call before it
  const Tensor2f xg = xt::view(xg3, 0, xt::all(), xt::all());
  const QuantSpec sg = tensor_recipe("fp8_tensor");
  const std::vector<QuantizedTensor> eg = emu::quantize_grouped_colwise(xg, ms, sg);
  hip::DeviceBuffer dxg = gputest::upload_floats(xg.data(), xg.size(), "grouped source");
  std::vector<hip::DeviceQuantized> dg = hip::alloc_grouped_colwise(sg, C, ms, "wgrad operand");
  for (size_t i = 0; i < ones.size(); ++i) {
    hip::DeviceQTensor view = ones[i].d.t;
    view.amax = nullptr;
    hip::quantize_device(ones[i].dx.as<float>(), view, st.get());
    if (i == 2) {
      std::vector<hip::DeviceQTensor> views;
      for (auto& q : dg) views.push_back(q.t);
      for (auto& v : views) v.amax = nullptr;
      hip::quantize_grouped_colwise_device(dxg.as<float>(), M, C, ms, views, st.get());
    }
  }
  st.synchronize();
  for (const One& o : ones) expect_same(o.e, o.d.t, o.what, t);
  for (size_t g = 0; g < ms.size(); ++g) expect_same(eg[g], dg[g].t, "grouped group " + std::to_string(g), t);
  EXPECT_EQ(t.mismatches, 0u);
}

// Both orientations from one read (1 x 32 E8M0: quantize_both_lanes_kernel;
// otherwise quantize_both_kernel, tiles of L x L):
// the rowwise [M, C] copy and the per-group columnwise copies, against the
// emulator quantizing each on its own.
TEST(GpuQuantize, BothOrientationsFromOneReadMatchEmulator) {
  REQUIRE_GPU();
  std::mt19937 gen(4096);
  Tally t;
  std::vector<Variant> specs = {{"mxfp4", tensor_recipe("mxfp4")},
                                {"mxfp8", tensor_recipe("mxfp8")},
                                {"mxfp6_e3m2", tensor_recipe("mxfp6_e3m2")},
                                {"fp8_block", tensor_recipe("fp8_block")}};
  QuantSpec s16 = tensor_recipe("mxfp4");
  s16.block_cols = 16;
  specs.push_back({"e2m1 1x16 e8m0", s16});
  QuantSpec s64 = tensor_recipe("fp8_block");
  s64.block_cols = 64;
  s64.pow2_scale = false;
  specs.push_back({"fp8 1x64", s64});
  for (const Variant& v : specs)
    for (RoundMode m : {RoundMode::RNE, RoundMode::Stochastic})
      for (int trial = 0; trial < 3; ++trial) {
        QuantSpec s = v.spec;
        s.round = m;
        s.sr = PhiloxStream{0xBADC0DEull + uint64_t(trial), make_stream(1, 8)};
        s.sr_index_base = trial * 3;
        std::vector<int64_t> ms = {int64_t(gen() % 200), 0, int64_t(1 + gen() % 300), int64_t(gen() % 40)};
        size_t M = 0;
        for (auto x : ms) M += size_t(x);
        const size_t C = 1 + gen() % 300;
        const Tensor3f x3 = gputest::adversarial(gen, 1, M, C, 2);
        const Tensor2f x = xt::view(x3, 0, xt::all(), xt::all());
        const std::string what = v.name + " " + name_of(m) + " M " + std::to_string(M) + " C " + std::to_string(C);
        SCOPED_TRACE(what);
        const QuantizedTensor er = emu::quantize(x, s, Axis::Cols);
        const std::vector<QuantizedTensor> ec = emu::quantize_grouped_colwise(x, ms, s);
        hip::DeviceBuffer dx = gputest::upload_floats(x.data(), x.size(), "source");
        hip::DeviceQuantized dr = hip::alloc_quantized(s, 1, M, C, Axis::Cols, "rowwise");
        std::vector<hip::DeviceQuantized> dc = hip::alloc_grouped_colwise(s, C, ms, "colwise");
        dr.data.fill(0xCD);
        std::vector<hip::DeviceQTensor> views;
        for (auto& q : dc) {
          q.data.fill(0xCD);
          views.push_back(q.t);
        }
        hip::quantize_both_device(dx.as<float>(), M, C, ms, dr.t, views);
        hip::synchronize();
        expect_same(er, dr.t, what + " rowwise", t);
        for (size_t g = 0; g < ms.size(); ++g) expect_same(ec[g], dc[g].t, what + " colwise group " + std::to_string(g), t);
      }
  std::printf("[gpu] both orientations: %zu tensors, %zu bytes compared, %zu mismatches\n", t.cases, t.bytes,
              t.mismatches);
  EXPECT_EQ(t.mismatches, 0u);
}

TEST(GpuQuantize, ErrorsAreNamed) {
  REQUIRE_GPU();
  auto msg = [](auto fn) {
    try {
      fn();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  hip::DeviceBuffer dx(64 * 40 * sizeof(float), "source");
  QuantSpec h = tensor_recipe("mxfp4");
  h.hadamard16 = true;
  EXPECT_NE(msg([&] { hip::alloc_quantized(h, 1, 64, 40, Axis::Cols, "x"); }).find("Hadamard"), std::string::npos);
  QuantSpec odd = tensor_recipe("mxfp4");
  odd.block_cols = 17;
  hip::DeviceQuantized q = hip::alloc_quantized(odd, 1, 64, 40, Axis::Cols, "x");
  EXPECT_NE(msg([&] { hip::quantize_device(dx.as<float>(), q.t); }).find("odd width"), std::string::npos);
  QuantSpec bf = tensor_recipe("mxfp4");
  bf.elem = Format::BF16;
  hip::DeviceQuantized qb = hip::alloc_quantized(bf, 1, 64, 40, Axis::Cols, "x");
  EXPECT_NE(msg([&] { hip::quantize_device(dx.as<float>(), qb.t); }).find("one code per byte"), std::string::npos);
  // torchao's scale conventions are the CPU quantizer's only (docs/numerics.md §3.4).
  QuantSpec ao = tensor_recipe("fp8_row");
  set_scale_convention(ao, ScaleConvention::Torchao, "test");
  hip::DeviceQuantized qa = hip::alloc_quantized(ao, 1, 64, 40, Axis::Cols, "x");
  EXPECT_NE(msg([&] { hip::quantize_device(dx.as<float>(), qa.t); }).find("not supported by the GPU quantizer"),
            std::string::npos);
  // Both orientations need a 1-D spec without Hadamard, and matching outputs.
  const std::vector<int64_t> ms = {64};
  hip::DeviceQuantized r = hip::alloc_quantized(tensor_recipe("mxfp4_2d"), 1, 64, 40, Axis::Cols, "r");
  std::vector<hip::DeviceQuantized> c = hip::alloc_grouped_colwise(tensor_recipe("mxfp4"), 40, ms, "c");
  const std::vector<hip::DeviceQTensor> cv = {c[0].t};
  EXPECT_NE(msg([&] { hip::quantize_both_device(dx.as<float>(), 64, 40, ms, r.t, cv); }).find("1 x L"), std::string::npos);
  hip::DeviceQuantized r2 = hip::alloc_quantized(tensor_recipe("mxfp8"), 1, 64, 40, Axis::Cols, "r");
  EXPECT_NE(msg([&] { hip::quantize_both_device(dx.as<float>(), 64, 40, ms, r2.t, cv); }).find("spec differs"),
            std::string::npos);
  const std::vector<int64_t> bad = {30};
  EXPECT_NE(msg([&] { hip::quantize_grouped_colwise_device(dx.as<float>(), 64, 40, bad, cv); }).find("group 0"),
            std::string::npos);
}

// Out of memory names the tensor and the bytes asked for.
TEST(GpuQuantize, OutOfMemoryNamesTheTensor) {
  REQUIRE_GPU();
  const size_t huge = size_t(1) << 50;  // 1 PiB
  try {
    hip::DeviceBuffer b(huge, "expert weights W1");
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const hip::OutOfMemory& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("expert weights W1"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(huge)), std::string::npos) << m;
    EXPECT_EQ(e.bytes, huge);
  }
  hip::DeviceBuffer ok(16, "after");  // the runtime is still usable
  EXPECT_NO_THROW(hip::synchronize());
}
#endif

}  // namespace
