// mxsim_gpu_bench: GPU codec and rowwise MX quantize throughput beside a
// device-to-device copy of the same bytes, in the same run.
//
// Usage: mxsim_gpu_bench [N_elements (default 2^28)] [reps (default 30)] [out.md]
// Inputs are random FP32 (sign, exponents 2^-20 .. 2^20, mantissa), drawn on
// the device from Philox, never zeros. Each case: 3 warm-ups, then `reps`
// launches each timed with events; the median is reported. Bytes counted are
// those the kernel must move (inputs read once + outputs written once); the
// copy rows count read + write of the copied bytes.
#include "gpu.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "mxsim/hip/codec.hpp"
#include "mxsim/hip/quantize.hpp"

namespace {
#define CHECK(call)                                                                                \
  do {                                                                                             \
    hipError_t e_ = (call);                                                                        \
    if (e_ != hipSuccess) {                                                                        \
      std::fprintf(stderr, "%s failed: %s: %s\n", #call, hipGetErrorName(e_), hipGetErrorString(e_)); \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)

__global__ void fill_random(float* x, size_t n, mxsim::PhiloxStream ps) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t r = ps(i), r2 = ps(i + n);
    const uint32_t exp = 107u + (r2 % 41u);  // 2^-20 .. 2^20
    x[i] = mxsim::f32_from_bits((r & 0x80000000u) | (exp << 23) | (r & 0x7FFFFFu));
  }
}

__global__ void to_bf16(const float* x, uint16_t* y, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    y[i] = uint16_t(mxsim::f32_bits(x[i]) >> 16);  // truncation: any BF16 values will do
}

float median_ms(int reps, const std::function<void()>& fn) {
  hipEvent_t a, b;
  CHECK(hipEventCreate(&a));
  CHECK(hipEventCreate(&b));
  for (int i = 0; i < 3; ++i) fn();
  CHECK(hipDeviceSynchronize());
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CHECK(hipEventRecord(a, 0));
    fn();
    CHECK(hipEventRecord(b, 0));
    CHECK(hipEventSynchronize(b));
    float ms = 0;
    CHECK(hipEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CHECK(hipGetLastError());
  CHECK(hipEventDestroy(a));
  CHECK(hipEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  using namespace mxsim;
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (size_t(1) << 28);
  const int reps = argc > 2 ? std::atoi(argv[2]) : 30;
  const char* out_path = argc > 3 ? argv[3] : nullptr;
  std::string why;
  if (!hip::available(&why)) {
    std::fprintf(stderr, "no GPU: %s\n", why.c_str());
    return 1;
  }
  const hip::DeviceInfo d = hip::device_info();
  hip::DeviceBuffer x(n * 4), y(n * 4), codes(n * 4), copy_dst(n * 4), scales(n / 16 + 64);  // both orientations: two scale tensors
  fill_random<<<1024, 256>>>(static_cast<float*>(x.get()), n, PhiloxStream{12345, 1});
  hip::synchronize();
  const float* dx = static_cast<const float*>(x.get());

  std::string table;
  char line[512];
  std::snprintf(line, sizeof line,
                "GPU: %s (cc %d.%d, %d SMs, L2 %zu MiB), driver %d, runtime %d, platform %s\n"
                "N = %zu FP32 elements (%.2f GiB), median of %d event-timed launches\n\n"
                "| case | bytes moved | time (ms) | GB/s | vs D2D copy of same bytes |\n|---|---|---|---|---|\n",
                d.name.c_str(), d.cc_major, d.cc_minor, d.multiprocessors, d.l2_bytes >> 20, d.driver_version,
                d.runtime_version, hip::platform(), n, n * 4.0 / (1 << 30), reps);
  table += line;

  // D2D copy of `bytes` (read + write counted) as the peer of each case.
  auto copy_ms = [&](size_t bytes) {
    return median_ms(reps, [&] { CHECK(hipMemcpyAsync(copy_dst.get(), x.get(), bytes, hipMemcpyDeviceToDevice, 0)); });
  };
  auto row = [&](const std::string& name, size_t moved, float ms, float peer_ms) {
    std::snprintf(line, sizeof line, "| %s | %.3f GB | %.3f | %.0f | %.2f x copy time (copy %.3f ms, %.0f GB/s) |\n",
                  name.c_str(), moved / 1e9, ms, moved / 1e6 / ms, ms / peer_ms, peer_ms, moved / 1e6 / peer_ms);
    table += line;
    std::fputs(line, stdout);
    std::fflush(stdout);
  };
  // The peer copies the same number of bytes the kernel moves: half read, half written.
  auto peer = [&](size_t moved) { return copy_ms(moved / 2); };

  const size_t full_copy = n * 4;
  {
    const float ms = copy_ms(full_copy);
    std::snprintf(line, sizeof line, "| D2D copy of the FP32 input | %.3f GB | %.3f | %.0f | 1.00 |\n",
                  2.0 * full_copy / 1e9, ms, 2.0 * full_copy / 1e6 / ms);
    table += line;
    std::fputs(line, stdout);
  }
  struct EncCase { const char* name; Format f; RoundMode m; };
  const EncCase enc[] = {
      {"encode E4M3 RNE", Format::E4M3, RoundMode::RNE},
      {"encode E4M3 SR", Format::E4M3, RoundMode::Stochastic},
      {"encode E2M1 RNE", Format::E2M1, RoundMode::RNE},
      {"encode E5M2 RZ", Format::E5M2, RoundMode::RZ},
      {"encode BF16 RNE", Format::BF16, RoundMode::RNE},
      {"encode BF16 SR", Format::BF16, RoundMode::Stochastic},
  };
  for (const auto& c : enc) {
    hip::CodecParams p;
    p.format = c.f;
    p.round = c.m;
    p.sr = PhiloxStream{7, make_stream(1, 2)};
    const size_t moved = n * 4 + n * hip::code_bytes(c.f);
    const float ms = median_ms(reps, [&] { hip::encode_device(dx, codes.get(), n, p); });
    row(c.name, moved, ms, peer(moved));
  }
  {
    const size_t moved = n * 1 + n * 4;
    const float ms = median_ms(reps, [&] { hip::decode_device(codes.get(), Format::E4M3, static_cast<float*>(y.get()), n); });
    row("decode E4M3", moved, ms, peer(moved));
  }
  struct MxCase { const char* name; Format f; ScaleRule r; RoundMode m; };
  const MxCase mx[] = {
      {"MX rowwise E2M1 EVEN RNE (mxfp4)", Format::E2M1, ScaleRule::Even, RoundMode::RNE},
      {"MX rowwise E2M1 EVEN SR", Format::E2M1, ScaleRule::Even, RoundMode::Stochastic},
      {"MX rowwise E4M3 RCEIL RNE (mxfp8)", Format::E4M3, ScaleRule::Rceil, RoundMode::RNE},
  };
  const size_t cols = 4096, rows = n / cols;
  for (const auto& c : mx) {
    QuantSpec s;
    s.elem = c.f;
    s.rule = c.r;
    s.round = c.m;
    s.sr = PhiloxStream{9, 3};
    const size_t moved = rows * cols * 4 + rows * hip::mx_row_bytes(c.f, cols) + rows * (cols / 32);
    const float ms = median_ms(reps, [&] {
      hip::mx_quantize_rowwise_device(dx, rows, cols, s, static_cast<uint8_t*>(codes.get()),
                                      static_cast<uint8_t*>(scales.get()));
    });
    row(c.name, moved, ms, peer(moved));
  }
  // BF16 sources: 2 bytes read per element (the issue's "quantize BF16 -> MXFP4 / MXFP8").
  hip::DeviceBuffer xb(n * 2);
  to_bf16<<<1024, 256>>>(dx, static_cast<uint16_t*>(xb.get()), n);
  hip::synchronize();
  for (const auto& c : mx) {
    if (c.m == RoundMode::Stochastic) continue;
    QuantSpec s;
    s.elem = c.f;
    s.rule = c.r;
    s.round = c.m;
    const size_t moved = rows * cols * 2 + rows * hip::mx_row_bytes(c.f, cols) + rows * (cols / 32);
    const float ms = median_ms(reps, [&] {
      hip::mx_quantize_rowwise_bf16_device(static_cast<const uint16_t*>(xb.get()), rows, cols, s,
                                           static_cast<uint8_t*>(codes.get()), static_cast<uint8_t*>(scales.get()));
    });
    row(std::string(c.name).replace(0, 10, "MX rowwise from BF16"), moved, ms, peer(moved));
  }
  // Columnwise (transposed storage) and both orientations from one read, BF16 source.
  for (const auto& c : mx) {
    if (c.m == RoundMode::Stochastic) continue;
    QuantSpec s;
    s.elem = c.f;
    s.rule = c.r;
    s.round = c.m;
    const size_t codes_bytes = cols * hip::mx_row_bytes(c.f, rows) + cols * (rows / 32);
    const auto* px = static_cast<const uint16_t*>(xb.get());
    auto* cd = static_cast<uint8_t*>(codes.get());
    auto* cs = static_cast<uint8_t*>(scales.get());
    size_t moved = rows * cols * 2 + codes_bytes;
    float ms = median_ms(reps, [&] { hip::mx_quantize_colwise_bf16_device(px, rows, cols, s, cd, cs); });
    row(std::string(c.name).replace(0, 10, "MX columnwise from BF16"), moved, ms, peer(moved));
    moved = rows * cols * 2 + 2 * codes_bytes;
    // Both: the rowwise outputs after the columnwise ones in the same buffers.
    const size_t col_data = cols * hip::mx_row_bytes(c.f, rows), col_scales = cols * (rows / 32);
    ms = median_ms(reps, [&] {
      hip::mx_quantize_both_bf16_device(px, rows, cols, s, cd + col_data, cs + col_scales, cd, cs);
    });
    row(std::string(c.name).replace(0, 10, "MX both orientations from BF16"), moved, ms, peer(moved));
  }
  // The training backend's quantizer (quantize.hip, any recipe and layout):
  // rowwise, columnwise (Axis::Rows, transposed storage) and both
  // orientations from one read, FP32 source.
  for (const auto& c : mx) {
    if (c.m == RoundMode::Stochastic) continue;
    QuantSpec s;
    s.elem = c.f;
    s.rule = c.r;
    s.round = c.m;
    const std::string fmt = spec_of(c.f).name;
    hip::DeviceQuantized rq = hip::alloc_quantized(s, 1, rows, cols, Axis::Cols, "bench rowwise");
    hip::DeviceQuantized cq = hip::alloc_quantized(s, 1, rows, cols, Axis::Rows, "bench colwise");
    const size_t one = rq.t.layout.data_bytes() + rq.t.layout.scale_count();
    const size_t moved = rows * cols * 4 + one;
    row("quantize_device rowwise " + fmt, moved, median_ms(reps, [&] { hip::quantize_device(dx, rq.t); }), peer(moved));
    row("quantize_device columnwise " + fmt, moved, median_ms(reps, [&] { hip::quantize_device(dx, cq.t); }),
        peer(moved));
    const int64_t split[1] = {int64_t(rows)};
    const hip::DeviceQTensor col[1] = {cq.t};
    const size_t both = rows * cols * 4 + 2 * one;
    row("quantize_both_device " + fmt, both,
        median_ms(reps, [&] { hip::quantize_both_device(dx, rows, cols, split, rq.t, col); }), peer(both));
  }
  hip::synchronize();
  std::printf("\n%s", table.c_str());
  if (out_path) {
    if (FILE* fo = std::fopen(out_path, "w")) {
      std::fputs(table.c_str(), fo);
      std::fclose(fo);
    }
  }
  return 0;
}
