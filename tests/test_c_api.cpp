// The C interface (capi/include/mxsim/c_api.h) from C++ as a foreign caller
// sees it: statuses and messages instead of exceptions (long ones truncated,
// NUL-terminated), layouts worked out by hand, the emulator's bytes in the
// caller's memory, and refused calls leaving that memory as it was.
#include "mxsim/c_api.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxsim/emu/quantize.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/trace/reader.hpp"

namespace {

/// A spec from alternating keys and values, released at scope end.
struct Spec {
  mxsim_spec* p = nullptr;
  Spec(std::initializer_list<const char*> kv) {
    std::vector<const char*> k, v;
    for (auto it = kv.begin(); it != kv.end(); it += 2) {
      k.push_back(it[0]);
      v.push_back(it[1]);
    }
    mxsim_error e;
    if (mxsim_spec_create(k.data(), v.data(), k.size(), &p, &e) != MXSIM_OK) throw std::runtime_error(e.message);
  }
  Spec(const Spec&) = delete;
  Spec& operator=(const Spec&) = delete;
  ~Spec() { mxsim_spec_destroy(p); }
};

DLTensor view(void* data, std::vector<int64_t>& shape, DLDataType dt, DLDeviceType dev = kDLCPU) {
  DLTensor t{};
  t.data = data;
  t.device = {dev, 0};
  t.ndim = int32_t(shape.size());
  t.dtype = dt;
  t.shape = shape.data();
  return t;
}
constexpr DLDataType kF32{kDLFloat, 32, 1}, kU8{kDLUInt, 8, 1};

}  // namespace

TEST(CApi, VersionAndGpu) {
  EXPECT_EQ(mxsim_abi_version(), MXSIM_C_ABI_VERSION);
  EXPECT_NE(std::string(mxsim_version()).find('('), std::string::npos);
#ifdef MXSIM_HAVE_GPU
  EXPECT_EQ(mxsim_has_gpu(), 1);  // this suite is linked beside the GPU backend: so is the library
#else
  EXPECT_EQ(mxsim_has_gpu(), 0);
#endif
}

TEST(CApi, SpecErrorsAreStatusesWithMessages) {
  const char* k[] = {"recipe"};
  const char* v[] = {"mxfp9"};
  mxsim_spec* s = reinterpret_cast<mxsim_spec*>(0x1);
  mxsim_error e;
  EXPECT_EQ(mxsim_spec_create(k, v, 1, &s, &e), MXSIM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(std::string(e.message).find("mxfp9"), std::string::npos) << e.message;
  const char* k2[] = {"block_size"};
  const char* v2[] = {"thirty-two"};
  EXPECT_EQ(mxsim_spec_create(k2, v2, 1, &s, &e), MXSIM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.message).find("block_size"), std::string::npos) << e.message;
  EXPECT_EQ(mxsim_spec_create(k, v, 1, nullptr, nullptr), MXSIM_ERR_INVALID_ARGUMENT);  // err may be NULL
}

TEST(CApi, LongMessagesAreTruncatedAndTerminated) {
  const std::string name(3000, 'x');
  const char* k[] = {"recipe"};
  const char* v[] = {name.c_str()};
  mxsim_spec* s = nullptr;
  mxsim_error e;
  std::memset(e.message, 'Z', sizeof e.message);
  ASSERT_EQ(mxsim_spec_create(k, v, 1, &s, &e), MXSIM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::strlen(e.message), sizeof e.message - 1);
}

TEST(CApi, LayoutsByHand) {
  Spec mx{"recipe", "mxfp4"};
  mxsim_qlayout L;
  mxsim_error e;
  // [2, 64, 96] rowwise: 48 bytes of packed E2M1 per row, 96 / 32 = 3 E8M0 scales per row.
  ASSERT_EQ(mxsim_quant_layout(mx.p, 2, 64, 96, MXSIM_AXIS_COLS, &L, &e), MXSIM_OK) << e.message;
  EXPECT_EQ(L.transposed, 0);
  EXPECT_EQ(L.srows, 64);
  EXPECT_EQ(L.row_bytes, 48);
  EXPECT_EQ(L.scale_rows, 64);
  EXPECT_EQ(L.scale_cols, 3);
  EXPECT_EQ(L.elem_bits, 4);
  EXPECT_EQ(L.scale_kind, MXSIM_SCALE_E8M0);
  // columnwise: each group's transpose [96, 64], 32 bytes a row, 2 blocks down each column.
  ASSERT_EQ(mxsim_quant_layout(mx.p, 2, 64, 96, MXSIM_AXIS_ROWS, &L, &e), MXSIM_OK) << e.message;
  EXPECT_EQ(L.transposed, 1);
  EXPECT_EQ(L.srows, 96);
  EXPECT_EQ(L.row_bytes, 32);
  EXPECT_EQ(L.scale_rows, 96);
  EXPECT_EQ(L.scale_cols, 2);
  Spec nv{"recipe", "nvfp4"};  // blocks of 16, UE4M3 scales and a float32 tensor scale
  ASSERT_EQ(mxsim_quant_layout(nv.p, 1, 8, 96, MXSIM_AXIS_COLS, &L, &e), MXSIM_OK) << e.message;
  EXPECT_EQ(L.scale_cols, 6);
  EXPECT_EQ(L.scale_kind, MXSIM_SCALE_UE4M3);
  EXPECT_EQ(L.has_tensor_scale, 1);
  EXPECT_EQ(mxsim_quant_layout(mx.p, 1, -1, 32, MXSIM_AXIS_COLS, &L, &e), MXSIM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(mxsim_quant_layout(mx.p, 1, 8, 32, 7, &L, &e), MXSIM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.message).find("axis 7"), std::string::npos) << e.message;
  mxsim_spec_info i;
  ASSERT_EQ(mxsim_spec_get_info(nv.p, &i, &e), MXSIM_OK);
  EXPECT_STREQ(i.elem, "e2m1");
  EXPECT_EQ(i.block_cols, 16);
  EXPECT_EQ(i.stochastic, 0);
  EXPECT_EQ(i.hadamard_signs, 0u);
  Spec signed_h{"recipe", "nvfp4", "hadamard", "true", "hadamard_signs", "55272"};  // 0xD7E8: TE's NVFP4 wgrad vector
  ASSERT_EQ(mxsim_spec_get_info(signed_h.p, &i, &e), MXSIM_OK) << e.message;
  EXPECT_EQ(i.hadamard, 1);
  EXPECT_EQ(i.hadamard_signs, 0xD7E8u);
}

TEST(CApi, QuantizeWritesTheEmulatorsBytesIntoCallerMemory) {
  for (const char* recipe : {"mxfp4", "mxfp8", "fp8_row", "nvfp4"}) {
    SCOPED_TRACE(recipe);
    Spec s{"recipe", recipe, "rounding", "sr", "seed", "5"};
    mxsim::Tensor3f x = mxsim::Tensor3f::from_shape({1, 8, 64});
    for (size_t i = 0; i < x.size(); ++i) x.data()[i] = float(int(i * 37 % 101) - 50) / 7.0f;
    mxsim::QuantSpec qs = mxsim::named_spec(recipe);
    qs.round = mxsim::RoundMode::Stochastic;
    qs.sr.seed = 5;
    const mxsim::QuantizedTensor want = mxsim::emu::quantize(x, qs, mxsim::Axis::Cols);

    mxsim_qtensor q{};
    mxsim_error e;
    ASSERT_EQ(mxsim_quant_layout(s.p, 1, 8, 64, MXSIM_AXIS_COLS, &q.layout, &e), MXSIM_OK);
    const bool fp32 = q.layout.scale_kind == MXSIM_SCALE_FP32;
    std::vector<uint8_t> codes(size_t(q.layout.srows * q.layout.row_bytes), 0xAB);
    std::vector<uint8_t> scales(size_t(q.layout.scale_rows * q.layout.scale_cols) * (fp32 ? 4 : 1), 0xAB);
    float ts = -1;
    std::vector<int64_t> xs{8, 64}, cs{int64_t(codes.size())}, ss{q.layout.scale_rows * q.layout.scale_cols}, one{1};
    DLTensor dx = view(x.data(), xs, kF32), dts = view(&ts, one, kF32);
    q.data = view(codes.data(), cs, kU8);
    q.scale = view(scales.data(), ss, fp32 ? kF32 : kU8);
    q.tensor_scale = q.layout.has_tensor_scale ? &dts : nullptr;

    // a wrong scale buffer: refused, nothing written
    std::vector<int64_t> bad{ss[0] + 1};
    DLTensor keep = q.scale;
    q.scale.shape = bad.data();
    ASSERT_EQ(mxsim_quantize(&dx, s.p, MXSIM_AXIS_COLS, &q, nullptr, &e), MXSIM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.message).find("scales (scale)"), std::string::npos) << e.message;
    for (uint8_t b : codes) ASSERT_EQ(b, 0xAB);
    q.scale = keep;

    ASSERT_EQ(mxsim_quantize(&dx, s.p, MXSIM_AXIS_COLS, &q, nullptr, &e), MXSIM_OK) << e.message;
    EXPECT_EQ(0, std::memcmp(codes.data(), want.data.data(), codes.size()));
    if (fp32) {
      EXPECT_EQ(0, std::memcmp(scales.data(), want.scale_inv.data(), scales.size()));
    } else {
      EXPECT_EQ(0, std::memcmp(scales.data(), want.scale_bytes.data(), scales.size()));
    }
    if (q.tensor_scale) {
      EXPECT_EQ(0, std::memcmp(&ts, &want.tensor_scale_inv, 4));
    }

    // dequantize: the emulator's values
    std::vector<float> d(8 * 64, 0);
    DLTensor dd = view(d.data(), xs, kF32);
    ASSERT_EQ(mxsim_dequantize(&q, &dd, nullptr, &e), MXSIM_OK) << e.message;
    const mxsim::Tensor3f wd = mxsim::emu::dequantize3(want);
    EXPECT_EQ(0, std::memcmp(d.data(), wd.data(), d.size() * 4));
  }
}

TEST(CApi, CudaTensorsWithoutAGpuBackendAreUnsupported) {
  if (mxsim_has_gpu()) GTEST_SKIP() << "this build has a GPU backend";
  Spec s{"recipe", "mxfp8"};
  float x[64] = {};
  uint8_t codes[64], scales[2];
  std::vector<int64_t> xs{1, 64}, cs{64}, ss{2};
  mxsim_qtensor q{};
  mxsim_error e;
  ASSERT_EQ(mxsim_quant_layout(s.p, 1, 1, 64, MXSIM_AXIS_COLS, &q.layout, &e), MXSIM_OK);
  DLTensor dx = view(x, xs, kF32, kDLCUDA);
  q.data = view(codes, cs, kU8, kDLCUDA);
  q.scale = view(scales, ss, kU8, kDLCUDA);
  EXPECT_EQ(mxsim_quantize(&dx, s.p, MXSIM_AXIS_COLS, &q, nullptr, &e), MXSIM_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(e.message).find("no GPU backend"), std::string::npos) << e.message;
  q.data.device.device_type = kDLCPU;  // mixed devices: refused before any device question
  EXPECT_EQ(mxsim_quantize(&dx, s.p, MXSIM_AXIS_COLS, &q, nullptr, &e), MXSIM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.message).find("codes (data) is on cpu"), std::string::npos) << e.message;
}

TEST(CApi, GroupedGemmRefusesBeforeWriting) {
  float out[4] = {1, 2, 3, 4};
  std::vector<int64_t> os{2, 2};
  DLTensor dout = view(out, os, kF32);
  const int64_t ms[] = {2};
  mxsim_error e;
  EXPECT_EQ(mxsim_grouped_gemm(9, nullptr, 0, nullptr, 0, ms, 1, &dout, 0, 0, nullptr, &e), MXSIM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.message).find("form 9"), std::string::npos) << e.message;
  mxsim_gemm_operand none{};
  EXPECT_EQ(mxsim_grouped_gemm(MXSIM_FPROP, &none, 1, &none, 1, ms, 1, &dout, 0, 0, nullptr, &e),
            MXSIM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.message).find("exactly one of q and bf16"), std::string::npos) << e.message;
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[3], 4.0f);
}

TEST(CApi, LinearRecipesCurrentScalingAndDerivedSpecs) {
  mxsim_linear_recipe* r = nullptr;
  mxsim_error e;
  const char* k[] = {"fp8_current_amax_epsilon"};
  const char* v[] = {"0"};
  ASSERT_EQ(mxsim_linear_recipe_create("fp8_tensor", k, v, 1, &r, &e), MXSIM_OK) << e.message;
  mxsim_linear_recipe_info info;
  ASSERT_EQ(mxsim_linear_recipe_get_info(r, &info, &e), MXSIM_OK);
  EXPECT_STREQ(info.name, "fp8_current");  // the alias's recipe
  EXPECT_EQ(info.fused_wgrad_accum, 1);
  EXPECT_EQ(info.transposed_cache_allowed, 0);
  EXPECT_EQ(info.deosc_eligible, 0);
  mxsim_spec* w = nullptr;
  ASSERT_EQ(mxsim_linear_recipe_spec(r, MXSIM_ROLE_W, &w, &e), MXSIM_OK) << e.message;
  // amax 2 -> scale 448 / 2: 2.0 becomes E4M3's largest normal 448 = 1.75 * 2^8, code 0x7E;
  // 1.0 becomes 224 = 1.75 * 2^7, code 0x76.
  mxsim_spec* cur = nullptr;
  ASSERT_EQ(mxsim_spec_with_amax(w, 2.0f, &cur, &e), MXSIM_OK) << e.message;
  float x[2] = {2.0f, -1.0f};
  uint8_t codes[2] = {0, 0};
  float scale_inv = 0;
  std::vector<int64_t> xs{1, 2}, cs{2}, ss{1};
  mxsim_qtensor q{};
  ASSERT_EQ(mxsim_quant_layout(cur, 1, 1, 2, MXSIM_AXIS_COLS, &q.layout, &e), MXSIM_OK);
  DLTensor dx = view(x, xs, kF32);
  q.data = view(codes, cs, kU8);
  q.scale = view(&scale_inv, ss, kF32);
  ASSERT_EQ(mxsim_quantize(&dx, cur, MXSIM_AXIS_COLS, &q, nullptr, &e), MXSIM_OK) << e.message;
  EXPECT_EQ(codes[0], 0x7E);
  EXPECT_EQ(codes[1], 0xF6);
  mxsim_spec_destroy(cur);
  EXPECT_EQ(mxsim_spec_with_amax(w, std::nanf(""), &cur, &e), MXSIM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(cur, nullptr);
  // the spec derived with a seed: refused without rounding = sr, named
  mxsim_spec* d = nullptr;
  const char* dk[] = {"seed"};
  const char* dv[] = {"3"};
  EXPECT_EQ(mxsim_spec_derive(w, dk, dv, 1, &d, &e), MXSIM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.message).find("seed applies to rounding='sr' only"), std::string::npos) << e.message;
  mxsim_linear_recipe* b = nullptr;
  ASSERT_EQ(mxsim_linear_recipe_create("bf16", nullptr, nullptr, 0, &b, &e), MXSIM_OK);
  EXPECT_EQ(mxsim_linear_recipe_spec(b, MXSIM_ROLE_W, &d, &e), MXSIM_ERR_INVALID_ARGUMENT);
  mxsim_linear_recipe_destroy(b);
  EXPECT_EQ(mxsim_linear_recipe_create("mxfp4", k, v, 1, &b, &e), MXSIM_OK);  // options of other recipes are inert
  mxsim_linear_recipe_destroy(b);
  mxsim_spec_destroy(w);
  mxsim_linear_recipe_destroy(r);
}

TEST(CApi, ByteOffsetAndRowMajorStridesAreHonoured) {
  // x sits 64 floats into a buffer (DLPack's byte_offset), with explicit row-major strides;
  // a column-major stride is refused naming the tensor.
  Spec s{"recipe", "mxfp8"};
  std::vector<float> buf(64 + 2 * 64, 1.0f);
  for (size_t i = 0; i < 128; ++i) buf[64 + i] = float(int(i % 13) - 6);
  std::vector<int64_t> xs{2, 64}, strides{64, 1}, cs{128}, ss{4};
  DLTensor dx = view(buf.data(), xs, kF32);
  dx.byte_offset = 64 * sizeof(float);
  dx.strides = strides.data();
  uint8_t codes[128], scales[4];
  mxsim_qtensor q{};
  mxsim_error e;
  ASSERT_EQ(mxsim_quant_layout(s.p, 1, 2, 64, MXSIM_AXIS_COLS, &q.layout, &e), MXSIM_OK);
  q.data = view(codes, cs, kU8);
  q.scale = view(scales, ss, kU8);
  ASSERT_EQ(mxsim_quantize(&dx, s.p, MXSIM_AXIS_COLS, &q, nullptr, &e), MXSIM_OK) << e.message;
  mxsim::Tensor3f x = mxsim::Tensor3f::from_shape({1, 2, 64});
  std::copy(buf.begin() + 64, buf.end(), x.begin());
  const mxsim::QuantizedTensor want = mxsim::emu::quantize(x, mxsim::named_spec("mxfp8"), mxsim::Axis::Cols);
  EXPECT_EQ(0, std::memcmp(codes, want.data.data(), sizeof codes));
  EXPECT_EQ(0, std::memcmp(scales, want.scale_bytes.data(), sizeof scales));
  std::vector<int64_t> colmajor{1, 2};
  dx.strides = colmajor.data();
  EXPECT_EQ(mxsim_quantize(&dx, s.p, MXSIM_AXIS_COLS, &q, nullptr, &e), MXSIM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.message).find("x is not contiguous"), std::string::npos) << e.message;
}

// ---- contexts, the scale histogram and the recorder -------------------------------------

TEST(CApi, L2NormOfIntegersIsTheCorrectlyRoundedRoot) {
  // Integer elements: every square and every partial sum is exact in FP64, whatever the tree,
  // so the norm is sqrt of the hand sum, rounded once.
  std::vector<float> x(1000);
  int64_t sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = float(int(i % 7) - 3);
    sum += int64_t(x[i]) * int64_t(x[i]);
  }
  std::vector<int64_t> shape{10, 100};
  DLTensor t = view(x.data(), shape, kF32);
  mxsim_context* ctx = nullptr;
  mxsim_error e;
  ASSERT_EQ(mxsim_context_create({kDLCPU, 0}, &ctx, &e), MXSIM_OK) << e.message;
  double n = -1;
  ASSERT_EQ(mxsim_l2_norm(ctx, &t, nullptr, &n, &e), MXSIM_OK) << e.message;
  ASSERT_EQ(mxsim_context_resolve(ctx, &e), MXSIM_OK) << e.message;  // deferred until here
  EXPECT_EQ(n, std::sqrt(double(sum)));
  DLTensor bad = view(x.data(), shape, kU8);
  EXPECT_EQ(mxsim_l2_norm(ctx, &bad, nullptr, &n, &e), MXSIM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.message).find("x must be float32"), std::string::npos) << e.message;
  mxsim_context_destroy(ctx);
  EXPECT_EQ(mxsim_context_create({kDLMetal, 0}, &ctx, &e), MXSIM_ERR_INVALID_ARGUMENT);
}

TEST(CApi, OscMetricsOfAHandBuiltHistory) {
  // Two elements; element 1's quantized value goes up, down, up (Nagel et al. 2022: the second
  // and third moves oppose the last one: oscillations); momentum 1/2; a window of 2 steps.
  mxsim_context* ctx = nullptr;
  mxsim_osc_metrics* m = nullptr;
  mxsim_error e;
  ASSERT_EQ(mxsim_context_create({kDLCPU, 0}, &ctx, &e), MXSIM_OK) << e.message;
  ASSERT_EQ(mxsim_osc_metrics_create(ctx, 0.5f, 2, &m, &e), MXSIM_OK) << e.message;
  EXPECT_EQ(mxsim_osc_metrics_create(ctx, 0.0f, 2, &m, &e), MXSIM_ERR_INVALID_ARGUMENT);
  const float qs[] = {1.0f, 1.5f, 1.0f, 1.5f};
  const uint64_t flips[] = {0, 0, 1, 1}, total[] = {0, 0, 1, 2};
  const double ema[] = {0, 0, 0.25, 0.375};  // mean over 2 elements of 0, 0, 1/2, 3/4
  // window sums restart after steps 2 and 4 (window ends): |dq| / |dw| = 1 while element 1 moves
  const double ratio[] = {0, 1, 1, 1};
  std::vector<int64_t> shape{1, 1, 2};
  for (int s = 0; s < 4; ++s) {
    float w[2] = {6.0f, qs[s]}, q[2] = {6.0f, qs[s]};
    DLTensor tw = view(w, shape, kF32), tq = view(q, shape, kF32);
    mxsim_osc_step r{};
    r.flips = 99;
    ASSERT_EQ(mxsim_osc_metrics_update(m, "fc", &tw, &tq, nullptr, &r, &e), MXSIM_OK) << e.message;
    EXPECT_EQ(r.flips, 99u) << "deferred: delivered by mxsim_context_resolve, not before";
    ASSERT_EQ(mxsim_context_resolve(ctx, &e), MXSIM_OK) << e.message;
    EXPECT_EQ(r.flips, flips[s]) << s;
    EXPECT_EQ(r.flips_total, total[s]) << s;
    EXPECT_EQ(r.ema_mean, ema[s]) << s;
    EXPECT_EQ(r.dist_ratio_mean, ratio[s]) << s;
  }
  std::vector<int64_t> other{1, 2, 1};
  float w[2] = {0, 0};
  DLTensor tw = view(w, other, kF32);
  mxsim_osc_step r{};
  EXPECT_EQ(mxsim_osc_metrics_update(m, "fc", &tw, &tw, nullptr, &r, &e), MXSIM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.message).find("earlier steps had [1, 1, 2]"), std::string::npos) << e.message;
  mxsim_osc_metrics_destroy(m);
  mxsim_context_destroy(ctx);
}

TEST(CApi, ScaleExpHistogramCountsTheScaleBytes) {
  // mxfp8 rowwise of 2 x 64: four blocks; amaxes 1, 2, 0.25, 448 by hand: E8M0 floor rule
  // exponents floor(log2 amax) - 8 (E4M3's emax): -8, -7, -10, 0.
  Spec s{"recipe", "mxfp8", "scaling_mode", "floor"};
  std::vector<float> x(128, 0.0f);
  x[0] = 1.0f, x[32] = 2.0f, x[64] = 0.25f, x[96] = 448.0f;
  std::vector<int64_t> xs{2, 64};
  DLTensor tx = view(x.data(), xs, kF32);
  mxsim_qlayout L;
  mxsim_error e;
  ASSERT_EQ(mxsim_quant_layout(s.p, 1, 2, 64, MXSIM_AXIS_COLS, &L, &e), MXSIM_OK) << e.message;
  std::vector<uint8_t> data(size_t(L.rows * L.row_bytes)), scale(size_t(L.scale_rows * L.scale_cols));
  std::vector<int64_t> ds{L.rows, L.row_bytes}, ss{L.scale_rows, L.scale_cols};
  mxsim_qtensor q{s.p, L, view(data.data(), ds, kU8), view(scale.data(), ss, kU8), nullptr};
  ASSERT_EQ(mxsim_quantize(&tx, s.p, MXSIM_AXIS_COLS, &q, nullptr, &e), MXSIM_OK) << e.message;
  std::vector<uint64_t> h(256, 99);
  ASSERT_EQ(mxsim_scale_exp_histogram(&q, nullptr, h.data(), &e), MXSIM_OK) << e.message;
  std::vector<uint64_t> want(256, 0);
  for (int ex : {-8, -7, -10, 0}) want[size_t(127 + ex)] = 1;
  EXPECT_EQ(h, want);
}

TEST(CApi, RecorderWritesTheTraceOfItsPlan) {
  const std::string path = ::testing::TempDir() + "capi_recorder.h5";
  std::remove(path.c_str());
  const char* scalars[] = {"grad_norm"};
  mxsim_layer_plan layers[] = {{"blocks.0.experts", "mxfp4", "GroupedLinear", 2, 8, 4, 1, 0, 0, 0, 0, 0, {0, 0, 0}},
                               {"head", "bf16", "Linear", 1, 3, 8, 0, 0, 0, 0, 0, 0, {0, 0, 0}}};
  mxsim_run_plan plan{"[recorder]\n", "Toy", "emu", 7, 2, 3, scalars, 1, layers, 2, nullptr, 0, 1};
  mxsim_recorder* r = nullptr;
  mxsim_error e;
  ASSERT_EQ(mxsim_recorder_create(path.c_str(), &plan, &r, &e), MXSIM_OK) << e.message;
  std::vector<uint64_t> hist(256, 0);
  hist[127] = 3;
  for (int64_t step = 1; step <= 2; ++step) {
    double n0[] = {1.0 * step, 2.0 * step}, n1[] = {0.5, 0.25}, g = 10.0 * step;
    mxsim_layer_row rows[2]{};
    rows[0].main_grad_norm = n0;
    for (int o = 0; o < 3; ++o) {
      rows[0].quant[o].count = 64;
      rows[0].quant[o].sqnr_db = 20.0 + o;
      rows[0].scale_exp_hist[o] = hist.data();
    }
    rows[0].osc.flips_total = uint64_t(step);
    rows[1].main_grad_norm = n1;
    const int64_t tokens[6] = {step, 0, 2, 3, 4, 5};  // [micro-batch, expert]
    mxsim_step_row row{step, 1.0 / double(step), 0.125f, &g, tokens, rows};
    ASSERT_EQ(mxsim_recorder_append(r, &row, &e), MXSIM_OK) << e.message;
  }
  ASSERT_EQ(mxsim_recorder_close(r, &e), MXSIM_OK) << e.message;
  mxsim_recorder_destroy(r);

  mxsim::trace::Reader rd(path);
  EXPECT_EQ(rd.steps_completed(), 2u);
  EXPECT_EQ(rd.provenance().producer, mxsim::trace::kProducerRecorder);
  EXPECT_EQ(rd.provenance().model, "Toy");
  EXPECT_EQ(rd.read_series<double>("/train/grad_norm"), (std::vector<double>{10.0, 20.0}));
  EXPECT_EQ(rd.read_series<int64_t>("/train/tokens_per_expert", 1, 1), (std::vector<int64_t>{2, 0, 2, 3, 4, 5}));
  EXPECT_EQ(rd.read_series<double>("/layers/blocks.0.experts/main_grad_norm"), (std::vector<double>{1, 2, 2, 4}));
  EXPECT_EQ(rd.read_series<double>("/layers/blocks.0.experts/quant/dy/sqnr_db"), (std::vector<double>{22, 22}));
  EXPECT_EQ(rd.read_series<uint64_t>("/layers/blocks.0.experts/osc/flips_total"), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(rd.read_series<uint64_t>("/layers/blocks.0.experts/quant/w/scale_exp_hist", 1, 1)[127], 3u);
  EXPECT_FALSE(rd.has("/layers/head/quant/w/mse"));  // an unquantized layer: norms only
  EXPECT_EQ(rd.group_string_attribute("/layers/head", "recipe").value_or(""), "bf16");
  EXPECT_EQ(rd.group_i64_attribute("/layers/blocks.0.experts", "weight_shape").value_or(std::vector<int64_t>{}),
            (std::vector<int64_t>{2, 8, 4}));

  // A name the schema cannot hold: refused, nothing left behind.
  const std::string bad = ::testing::TempDir() + "capi_recorder_bad.h5";
  mxsim_layer_plan slash[] = {{"a/b", nullptr, nullptr, 1, 1, 1, 0, 0, 0, 0, 0, 0, {0, 0, 0}}};
  mxsim_run_plan p2{nullptr, nullptr, nullptr, 0, 1, 0, nullptr, 0, slash, 1, nullptr, 0, 1};
  EXPECT_EQ(mxsim_recorder_create(bad.c_str(), &p2, &r, &e), MXSIM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(e.message).find("'a/b'"), std::string::npos) << e.message;
  EXPECT_FALSE(std::ifstream(bad).good());
  EXPECT_FALSE(std::ifstream(bad + ".partial").good());
}

// NVFP4's tensor scale in a recorder's trace: the plan says which operands have one (as the
// recipe's info reports them); the series holds each row's value, and the layer's recipe name is
// not parsed for it (NULL or a name of the user's own is fine, as before ABI 4).
TEST(CApi, RecorderWritesTheTensorScaleOfThePlansOperands) {
  mxsim_error e;
  for (const char* name : {"nvfp4", "mxfp4"}) {
    mxsim_linear_recipe* lr = nullptr;
    ASSERT_EQ(mxsim_linear_recipe_create(name, nullptr, nullptr, 0, &lr, &e), MXSIM_OK) << e.message;
    mxsim_linear_recipe_info info;
    ASSERT_EQ(mxsim_linear_recipe_get_info(lr, &info, &e), MXSIM_OK) << e.message;
    const int32_t want = std::string(name) == "nvfp4";
    for (int o = 0; o < 3; ++o) EXPECT_EQ(info.two_level_scale[o], want) << name << " operand " << o;
    mxsim_linear_recipe_destroy(lr);
  }
  const std::string path = ::testing::TempDir() + "capi_recorder_ts.h5";
  std::remove(path.c_str());
  mxsim_layer_plan layers[] = {{"a", nullptr, nullptr, 1, 4, 4, 1, 0, 0, 0, 0, 0, {0, 0, 0}, {0, 1, 0}},
                               {"b", "my_own_nvfp4", nullptr, 1, 4, 4, 1, 0, 0, 0, 0, 0, {0, 0, 0}, {0, 0, 0}}};
  mxsim_run_plan plan{nullptr, "Toy", "emu", 0, 1, 0, nullptr, 0, layers, 2, nullptr, 0, 1};
  mxsim_recorder* r = nullptr;
  ASSERT_EQ(mxsim_recorder_create(path.c_str(), &plan, &r, &e), MXSIM_OK) << e.message;
  std::vector<uint64_t> hist(256, 0);
  for (int64_t step = 1; step <= 2; ++step) {
    double n[] = {1.0};
    mxsim_layer_row rows[2]{};
    for (mxsim_layer_row& l : rows) {
      l.main_grad_norm = n;
      for (int o = 0; o < 3; ++o) {
        l.scale_exp_hist[o] = hist.data();
        l.quant[o].tensor_scale_inv = float(o + 1) / float(step * 1024);
      }
    }
    mxsim_step_row row{step, 1.0, 0.5f, nullptr, nullptr, rows};
    ASSERT_EQ(mxsim_recorder_append(r, &row, &e), MXSIM_OK) << e.message;
  }
  ASSERT_EQ(mxsim_recorder_close(r, &e), MXSIM_OK) << e.message;
  mxsim_recorder_destroy(r);
  mxsim::trace::Reader rd(path);
  EXPECT_EQ(rd.read_series<float>("/layers/a/quant/x/tensor_scale_inv"), (std::vector<float>{2.0f / 1024, 2.0f / 2048}));
  for (const char* n : {"/layers/a/quant/w/tensor_scale_inv", "/layers/a/quant/dy/tensor_scale_inv",
                        "/layers/b/quant/x/tensor_scale_inv"})
    EXPECT_FALSE(rd.has(n)) << n;
  std::remove(path.c_str());
}

TEST(CApi, DeOscOfAHandBuiltHistory) {
  // Three elements, windows of 2 observations after the seeding one, ratio 1/2 (Primus's rule:
  // at a window end snap w = q where dist_w > 0 and dist_q / dist_w >= ratio):
  //   element 0: w 1.125, 1.375, 1.125 with q 1, 1.5, 1: dist_w 0.5, dist_q 1 -> snaps to 1;
  //   element 1: w 2, 2.125, 2.25 with q 2 throughout: dist_q 0 -> keeps 2.25;
  //   element 2: w 5 throughout: dist_w 0 -> keeps 5.
  mxsim_context* ctx = nullptr;
  mxsim_deosc* d = nullptr;
  mxsim_error e;
  ASSERT_EQ(mxsim_context_create({kDLCPU, 0}, &ctx, &e), MXSIM_OK) << e.message;
  ASSERT_EQ(mxsim_deosc_create(ctx, 2, 0.5f, &d, &e), MXSIM_OK) << e.message;
  EXPECT_EQ(mxsim_deosc_create(ctx, 0, 0.5f, &d, &e), MXSIM_ERR_INVALID_ARGUMENT);
  const float ws[3][3] = {{1.125f, 2.0f, 5.0f}, {1.375f, 2.125f, 5.0f}, {1.125f, 2.25f, 5.0f}};
  const float qs[3][3] = {{1.0f, 2.0f, 5.0f}, {1.5f, 2.0f, 5.0f}, {1.0f, 2.0f, 5.0f}};
  const int64_t want[3] = {-1, -1, 1};
  std::vector<int64_t> shape{1, 3};
  float w[3];
  for (int s = 0; s < 3; ++s) {
    float q[3];
    std::copy(ws[s], ws[s] + 3, w);
    std::copy(qs[s], qs[s] + 3, q);
    DLTensor tw = view(w, shape, kF32), tq = view(q, shape, kF32);
    int64_t snapped = 99;
    ASSERT_EQ(mxsim_deosc_observe(d, "experts", &tw, &tq, nullptr, &snapped, &e), MXSIM_OK) << e.message;
    EXPECT_EQ(snapped, want[s]) << s;
  }
  EXPECT_EQ(w[0], 1.0f);  // snapped in the caller's memory
  EXPECT_EQ(w[1], 2.25f);
  EXPECT_EQ(w[2], 5.0f);
  mxsim_deosc_destroy(d);
  mxsim_context_destroy(ctx);
}
