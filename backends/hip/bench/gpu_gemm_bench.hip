// mxsim_gpu_gemm_bench: the bit-exact grouped GEMMs (hip::grouped_fprop /
// dgrad / wgrad) on MoE shapes, timed with events, and checked bit for bit
// against the tiled CUDA-core kernels (which tests/test_gpu_gemm.cpp checks
// against the emulator) on the same operands.
//
// Usage: mxsim_gpu_gemm_bench [--reps N] [--csv FILE] [--shapes all|small|large]
//                             [--cases LIST] [--no-check] [--overhead]
// --overhead: host microseconds per call of a grouped GEMM with empty groups, one of 32 rows and a
// 32 x 32 quantize (the C++ floor beneath bench/peers/torch_layer_bench.py's overhead table).
// Shapes (groups x rows per group, N, K), the peers' (bench/peers/gemm_peers.py):
//   8 x 2048, 4096, 7168;  32 x 512, 4096, 2048;  16 x 1024, 2048, 7168
// (--shapes large: the first only; --shapes small: 4 x 512, 1024, 2048)
// Cases (comma list; default all): mxfp4-fprop, mxfp4-dgrad, mxfp4-wgrad,
// mxfp8-fprop, fp8block-fprop, bf16-fprop. FLOPs = 2 M N K for every form
// (dgrad contracts over N, wgrad over the tokens, accumulating into FP32
// main_grad). The time is one whole call as the simulator makes it: the
// operand images and the GEMM (kernel Auto; the check runs LargeTile). The
// FP8 / BF16 cases also run GemmKernel::WgmmaHardware (kernel column
// "wgmma-hardware"; for BF16 the same kernel as Auto), with its own count of
// bits that differ.
// Inputs: FP32 normal values, random sign and mantissa, exponents 2^-4 ..
// 2^4, drawn on the device from Philox, then quantized on the device.
// Prints CSV: case,shape,kernel,ms,tflops,mismatches
#include "gpu.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "mxsim/hip/gemm.hpp"
#include "mxsim/hip/gemm_testing.hpp"
#include "mxsim/hip/quantize.hpp"
#include "mxsim/philox.hpp"
#include "mxsim/quant_spec.hpp"

namespace {
using namespace mxsim;

#define CHECK(call)                                                                                   \
  do {                                                                                                \
    hipError_t e_ = (call);                                                                           \
    if (e_ != hipSuccess) {                                                                           \
      std::fprintf(stderr, "%s failed: %s: %s\n", #call, hipGetErrorName(e_), hipGetErrorString(e_)); \
      std::exit(2);                                                                                   \
    }                                                                                                 \
  } while (0)

__global__ void fill_random(float* x, size_t n, PhiloxStream ps) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t r = ps(i), r2 = ps(i + n);
    const uint32_t exp = 123u + (r2 % 9u);  // 2^-4 .. 2^4
    x[i] = f32_from_bits((r & 0x80000000u) | (exp << 23) | (r & 0x7FFFFFu));
  }
}

hip::DeviceBuffer random_floats(size_t n, uint64_t seed) {
  hip::DeviceBuffer b(n * 4, "bench input");
  fill_random<<<2048, 256>>>(b.as<float>(), n, PhiloxStream{seed, 1});
  CHECK(hipGetLastError());
  return b;
}

/// Median of `reps` event-timed calls after one warm-up (three calls when a
/// call takes over 100 ms: the CUDA-core fused-group kernels on these shapes).
float median_ms(int reps, const std::function<void()>& fn) {
  hipEvent_t a, b;
  CHECK(hipEventCreate(&a));
  CHECK(hipEventCreate(&b));
  fn();
  CHECK(hipDeviceSynchronize());
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    if (i == 3 && t[0] > 100.0f) break;
    CHECK(hipEventRecord(a, 0));
    fn();
    CHECK(hipEventRecord(b, 0));
    CHECK(hipEventSynchronize(b));
    float ms = 0;
    CHECK(hipEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CHECK(hipEventDestroy(a));
  CHECK(hipEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

size_t count_diffs(const hip::DeviceBuffer& x, const hip::DeviceBuffer& y, size_t n) {
  std::vector<uint32_t> a(n), b(n);
  x.download(a.data(), n * 4);
  y.download(b.data(), n * 4);
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += a[i] != b[i];
  return bad;
}

struct Shape {
  size_t g, rows, n, k;
};

struct Case {
  std::string name;
  const char* x_recipe;  // token operand (and dy)
  const char* w_recipe;
  int form;              // 0 fprop, 1 dgrad, 2 wgrad
};

/// Host microseconds per call of fn (n calls after 50 warm-up calls, the device drained after):
/// the C++ floor beneath mxsim.torch's per-call overhead (bench/peers/torch_layer_bench.py).
double host_us(const std::function<void()>& fn, int n = 2000) {
  for (int i = 0; i < 50; ++i) fn();
  hip::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) fn();
  const auto t1 = std::chrono::steady_clock::now();
  hip::synchronize();
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
}

/// --overhead: the calls torch_layer_bench.py's overhead table makes, from C++ (MXFP8 operands,
/// W [4, 128, 256], the default stream).
int overhead() {
  const QuantSpec s = tensor_recipe("mxfp8");
  const hip::DeviceBuffer x = random_floats(32 * 256, 1), w = random_floats(4 * 128 * 256, 2);
  hip::DeviceQuantized qw = hip::alloc_quantized(s, 4, 128, 256, Axis::Cols, "w");
  hip::DeviceQuantized qx = hip::alloc_quantized(s, 1, 32, 256, Axis::Cols, "x");
  hip::DeviceQuantized qe = hip::alloc_quantized(s, 1, 0, 256, Axis::Cols, "empty x");  // M = 0
  hip::DeviceQuantized q32 = hip::alloc_quantized(s, 1, 32, 32, Axis::Cols, "32 x 32");
  hip::quantize_device(w.as<float>(), qw.t);
  hip::quantize_device(x.as<float>(), qx.t);
  hip::DeviceBuffer out(32 * 128 * 4, "output");
  const hip::GemmOperand a = hip::GemmOperand::from_quantized(qx.t), b = hip::GemmOperand::from_quantized(qw.t),
                         a0 = hip::GemmOperand::from_quantized(qe.t);
  const std::vector<int64_t> empty(4, 0), one = {32, 0, 0, 0};
  std::printf("call,us_per_call\n");
  std::printf("grouped_fprop M=0 (4 empty groups),%.1f\n",
              host_us([&] { hip::grouped_fprop(a0, b, empty, out.as<float>(), {}); }));
  std::printf("grouped_fprop M=32 (one group of 32 rows K 256 N 128),%.1f\n",
              host_us([&] { hip::grouped_fprop(a, b, one, out.as<float>(), {}); }));
  std::printf("quantize_device 32 x 32 mxfp8,%.1f\n", host_us([&] { hip::quantize_device(x.as<float>(), q32.t); }));
  std::printf("alloc_quantized 32 x 32 mxfp8 (cached allocator),%.1f\n",
              host_us([&] { hip::DeviceQuantized t = hip::alloc_quantized(s, 1, 32, 32, Axis::Cols, "t"); }));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 10;
  const char* csv_path = nullptr;
  bool check = true, small = false, large_only = false, overhead_only = false;
  std::string cases_arg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--csv" && i + 1 < argc) csv_path = argv[++i];
    else if (a == "--shapes" && i + 1 < argc) {
      const std::string v = argv[++i];
      small = v == "small";
      large_only = v == "large";  // the first MoE shape only (bench/peers/torch_layer_bench.py's)
      if (!small && !large_only && v != "all") {
        std::fprintf(stderr, "--shapes takes all, small or large, not '%s'\n", v.c_str());
        return 2;
      }
    }
    else if (a == "--cases" && i + 1 < argc) cases_arg = argv[++i];
    else if (a == "--no-check") check = false;
    else if (a == "--overhead") overhead_only = true;
    else {
      std::fprintf(stderr, "usage: mxsim_gpu_gemm_bench [--reps N] [--csv FILE] [--shapes all|small|large] [--cases LIST] [--no-check] [--overhead]\n");
      return 2;
    }
  }
  std::string why;
  if (!hip::available(&why)) {
    std::fprintf(stderr, "no GPU: %s\n", why.c_str());
    return 1;
  }
  if (overhead_only) return overhead();
  std::vector<Shape> shapes = {{8, 2048, 4096, 7168}, {32, 512, 4096, 2048}, {16, 1024, 2048, 7168}};
  if (small) shapes = {{4, 512, 1024, 2048}};
  if (large_only) shapes.resize(1);
  const std::vector<Case> all = {
      {"mxfp4-fprop", "mxfp4", "mxfp4_2d", 0}, {"mxfp4-dgrad", "mxfp4", "mxfp4_2d", 1},
      {"mxfp4-wgrad", "mxfp4", "mxfp4", 2},    {"mxfp8-fprop", "mxfp8", "mxfp8", 0},
      {"fp8block-fprop", "fp8_block", "fp8_block2d", 0}, {"bf16-fprop", "bf16", "bf16", 0}};
  std::vector<Case> cases;
  for (const Case& c : all)
    if (cases_arg.empty() || ("," + cases_arg + ",").find("," + c.name + ",") != std::string::npos) cases.push_back(c);

  FILE* csv = csv_path ? std::fopen(csv_path, "w") : nullptr;
  std::printf("case,shape,kernel,ms,tflops,mismatches\n");
  if (csv) std::fprintf(csv, "case,shape,kernel,ms,tflops,mismatches\n");
  for (const Shape& sh : shapes) {
    const size_t M = sh.g * sh.rows, N = sh.n, K = sh.k;
    const std::vector<int64_t> ms(sh.g, int64_t(sh.rows));
    const hip::DeviceBuffer x = random_floats(M * K, 1), dy = random_floats(M * N, 2), w = random_floats(sh.g * N * K, 3);
    char shape[64];
    std::snprintf(shape, sizeof shape, "%zux%zu:%zu:%zu", sh.g, sh.rows, N, K);
    for (const Case& c : cases) {
      const bool bf16 = std::string(c.x_recipe) == "bf16";
      const size_t out_n = c.form == 0 ? M * N : c.form == 1 ? M * K : sh.g * N * K;
      hip::DeviceBuffer out(out_n * 4, "output"), ref(out_n * 4, "reference output");
      // Operands, quantized once on the device.
      std::vector<hip::DeviceQuantized> keep;
      hip::DeviceBuffer xb, wb, dyb;
      hip::GemmOperand oa, ow;
      std::vector<hip::GemmOperand> odys, oxs;
      if (bf16) {
        xb = hip::DeviceBuffer(M * K * 2, "x bf16");
        wb = hip::DeviceBuffer(sh.g * N * K * 2, "w bf16");
        hip::round_bf16_device(x.as<float>(), xb.as<uint16_t>(), M * K);
        hip::round_bf16_device(w.as<float>(), wb.as<uint16_t>(), sh.g * N * K);
        oa = hip::GemmOperand::from_bf16(xb.as<uint16_t>(), 1, M, K);
        ow = hip::GemmOperand::from_bf16(wb.as<uint16_t>(), sh.g, N, K);
      } else if (c.form < 2) {
        const QuantSpec sx = tensor_recipe(c.x_recipe), sw = tensor_recipe(c.w_recipe);
        const size_t J = c.form == 0 ? K : N;
        keep.push_back(hip::alloc_quantized(sx, 1, M, J, Axis::Cols, "token operand"));
        hip::quantize_device(c.form == 0 ? x.as<float>() : dy.as<float>(), keep.back().t);
        oa = hip::GemmOperand::from_quantized(keep.back().t);
        keep.push_back(hip::alloc_quantized(sw, sh.g, N, K, c.form == 0 || sw.is_2d_tile() ? Axis::Cols : Axis::Rows, "w"));
        hip::quantize_device(w.as<float>(), keep.back().t);
        ow = hip::GemmOperand::from_quantized(keep.back().t);
      } else {
        const QuantSpec s = tensor_recipe(c.x_recipe);
        std::vector<hip::DeviceQuantized> qdy = hip::alloc_grouped_colwise(s, N, ms, "dy");
        std::vector<hip::DeviceQuantized> qx = hip::alloc_grouped_colwise(s, K, ms, "x");
        std::vector<hip::DeviceQTensor> tdy, tx;
        for (auto& q : qdy) tdy.push_back(q.t);
        for (auto& q : qx) tx.push_back(q.t);
        hip::quantize_grouped_colwise_device(dy.as<float>(), M, N, ms, tdy);
        hip::quantize_grouped_colwise_device(x.as<float>(), M, K, ms, tx);
        for (auto& t : tdy) odys.push_back(hip::GemmOperand::from_quantized(t));
        for (auto& t : tx) oxs.push_back(hip::GemmOperand::from_quantized(t));
        for (auto& q : qdy) keep.push_back(std::move(q));
        for (auto& q : qx) keep.push_back(std::move(q));
      }
      auto call = [&](float* o, hip::GemmKernel k) {
        hip::GemmParams p;
        p.kernel = k;
        p.accumulate = c.form == 2;  // wgrad into FP32 main_grad
        if (c.form == 0) hip::grouped_fprop(oa, ow, ms, o, p);
        else if (c.form == 1) hip::grouped_dgrad(oa, ow, ms, o, p);
        else hip::grouped_wgrad(odys, oxs, ms, o, p);
      };
      hip::synchronize();
      long long bad = -1;
      if (check) {  // same start values for the accumulating form
        CHECK(hipMemset(out.get(), 0, out_n * 4));
        CHECK(hipMemset(ref.get(), 0, out_n * 4));
        call(out.as<float>(), hip::GemmKernel::Auto);
        call(ref.as<float>(), hip::GemmKernel::LargeTile);
        hip::synchronize();
        bad = (long long)count_diffs(out, ref, out_n);
      }
      const auto report = [&](const char* want, hip::GemmKernel k, long long mism) {
        const hip::GemmLaunchCounts before = hip::gemm_launch_counts();
        const float t = median_ms(reps, [&] { call(out.as<float>(), k); });
        // The kernel that did the work, from the launch counts ("auto" names what Auto chose).
        const bool tc = hip::gemm_launch_counts().wgmma > before.wgmma;
        const std::string kernel = std::string(want) + (tc ? ":wgmma" : ":tiled");
        const double tflops = 2.0 * double(M) * double(N) * double(K) / (t * 1e-3) / 1e12;
        char line[256];
        std::snprintf(line, sizeof line, "%s,%s,%s,%.4f,%.1f,%lld\n", c.name.c_str(), shape, kernel.c_str(), t, tflops,
                      mism);
        std::fputs(line, stdout);
        std::fflush(stdout);
        if (csv) std::fputs(line, csv);
      };
      report("auto", hip::GemmKernel::Auto, bad);
      // The fused-group classes on the tensor cores' own arithmetic (for the
      // FP8 classes not the contract's bits on every input: docs/gpu.md),
      // with its bit count against the contract kernels on these operands.
      if (c.name != "mxfp4-fprop" && c.name != "mxfp4-dgrad" && c.name != "mxfp4-wgrad") {
        long long hbad = -1;
        if (check) {
          CHECK(hipMemset(out.get(), 0, out_n * 4));
          call(out.as<float>(), hip::GemmKernel::WgmmaHardware);
          hip::synchronize();
          hbad = (long long)count_diffs(out, ref, out_n);
        }
        report("wgmma-hardware", hip::GemmKernel::WgmmaHardware, hbad);
      }
    }
  }
  if (csv) std::fclose(csv);
  return 0;
}
