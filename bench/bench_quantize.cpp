// MX quantize throughput on one thread, next to memcpy of the same bytes.
//
// Input: BF16 [rows, cols], values ~ N(0, 1) with per-row magnitudes spread
// over 2^-20 .. 2^20 (so scales vary), rounded to BF16. Throughput is GB/s of
// BF16 input (SetBytesProcessed = rows * cols * 2 per iteration). memcpy
// copies the same number of bytes (rows * cols * 2) into a preallocated
// buffer. The counter "x_memcpy" is the case's bandwidth divided by the
// memcpy bandwidth of the same shape measured earlier in the same run (the
// memcpy case is registered first; the issue-2 target is >= 0.25). Both
// bandwidths use the wall time of the whole timed loop.
//
// Cases:
//   BM_memcpy                 peer
//   BM_quantize/<recipe>      emu::quantize_bf16 (fast kernels, allocates the result)
//   BM_quantize_raw/<recipe>  the kernel into preallocated buffers (no allocation,
//                             no page faults: the like-for-like peer of memcpy)
//   BM_quantize_reference     the reference quantizer (fast path off), for contrast
//
// Run: build-*/bench/bench_quantize --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "../emu/src/quantize_fast.hpp"
#include "mxsim/bits.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/quant_spec.hpp"

using namespace mxsim;

namespace {

using Shape = std::pair<size_t, size_t>;

const std::vector<uint16_t>& input(size_t rows, size_t cols) {
  static std::map<Shape, std::vector<uint16_t>> cache;
  auto& v = cache[{rows, cols}];
  if (v.empty()) {
    // A pool of 2^20 N(0,1) values, rounded to BF16, tiled with an exact
    // per-row power-of-two factor (cheap to build for 2^28 elements).
    std::mt19937 rng(42);
    std::normal_distribution<float> nd;
    std::uniform_int_distribution<int> mag(-20, 20);
    std::vector<float> pool(1u << 20);
    for (float& p : pool) p = nd(rng);
    v.resize(rows * cols);
    for (size_t r = 0; r < rows; ++r) {
      const float m = std::ldexp(1.0f, mag(rng));
      for (size_t c = 0; c < cols; ++c) {
        const uint32_t b = f32_bits(pool[(r * cols + c) & (pool.size() - 1)] * m);
        v[r * cols + c] = uint16_t(round_bf16_code(b));
      }
    }
  }
  return v;
}

std::map<Shape, double> g_memcpy_bps;  // bytes per second, by shape

/// Counter x_memcpy: this case's bandwidth (bytes over the wall time of the
/// timed loop, measured here) divided by memcpy's for the same shape.
void set_ratio(benchmark::State& st, Shape shape, double bytes_total, double secs) {
  const auto it = g_memcpy_bps.find(shape);
  if (it != g_memcpy_bps.end() && secs > 0) st.counters["x_memcpy"] = bytes_total / secs / it->second;
}

using Clock = std::chrono::steady_clock;

void BM_memcpy(benchmark::State& st) {
  const Shape shape{size_t(st.range(0)), size_t(st.range(1))};
  const auto& in = input(shape.first, shape.second);
  const size_t bytes = in.size() * sizeof(uint16_t);
  std::vector<uint16_t> dst(in.size(), 1);  // touched: no page faults inside the loop
  const auto t0 = Clock::now();
  for (auto _ : st) {
    std::memcpy(dst.data(), in.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  st.SetBytesProcessed(int64_t(st.iterations() * bytes));
  g_memcpy_bps[shape] = double(st.iterations()) * double(bytes) / secs;
}

void BM_quantize(benchmark::State& st, const char* recipe) {
  const Shape shape{size_t(st.range(0)), size_t(st.range(1))};
  const auto& in = input(shape.first, shape.second);
  const QuantSpec spec = tensor_recipe(recipe);
  if (!emu::fast::takes(spec, Axis::Cols)) {
    st.SkipWithError("the fast path does not take this recipe");
    return;
  }
  const auto t0 = Clock::now();
  for (auto _ : st) {
    QuantizedTensor q = emu::quantize_bf16(in.data(), 1, shape.first, shape.second, spec, Axis::Cols);
    benchmark::DoNotOptimize(q.data.data());
    benchmark::ClobberMemory();
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const double bytes = double(st.iterations()) * double(in.size() * sizeof(uint16_t));
  st.SetBytesProcessed(int64_t(bytes));
  set_ratio(st, shape, bytes, secs);
}

void BM_quantize_raw(benchmark::State& st, const char* recipe) {
  const Shape shape{size_t(st.range(0)), size_t(st.range(1))};
  const auto& in = input(shape.first, shape.second);
  const QuantSpec spec = tensor_recipe(recipe);
  const size_t row_bytes = spec.elem == Format::E2M1 ? (shape.second + 1) / 2 : shape.second;
  std::vector<uint8_t> data(shape.first * row_bytes, 1);
  std::vector<uint8_t> scales(((shape.first + spec.block_rows - 1) / spec.block_rows) * ((shape.second + 31) / 32), 1);
  const auto t0 = Clock::now();
  for (auto _ : st) {
    emu::fast::quantize_bf16_raw(in.data(), 1, shape.first, shape.second, spec, data.data(), scales.data());
    benchmark::DoNotOptimize(data.data());
    benchmark::ClobberMemory();
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  const double bytes = double(st.iterations()) * double(in.size() * sizeof(uint16_t));
  st.SetBytesProcessed(int64_t(bytes));
  set_ratio(st, shape, bytes, secs);
}

void BM_quantize_reference(benchmark::State& st, const char* recipe) {
  const Shape shape{size_t(st.range(0)), size_t(st.range(1))};
  const auto& in = input(shape.first, shape.second);
  const QuantSpec spec = tensor_recipe(recipe);
  emu::fast::set_enabled(false);
  const auto t0 = Clock::now();
  for (auto _ : st) {
    QuantizedTensor q = emu::quantize_bf16(in.data(), 1, shape.first, shape.second, spec, Axis::Cols);
    benchmark::DoNotOptimize(q.data.data());
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  emu::fast::set_enabled(true);
  const double bytes = double(st.iterations()) * double(in.size() * sizeof(uint16_t));
  st.SetBytesProcessed(int64_t(bytes));
  set_ratio(st, shape, bytes, secs);
}

// 4096 x 4096 BF16 = 32 MiB (beyond L1/L2; this machine reports a large
// shared L3, so 16384 x 16384 = 512 MiB is run as well to be beyond it).
#define MXSIM_SHAPES Args({4096, 4096})->Args({16384, 16384})

BENCHMARK(BM_memcpy)->MXSIM_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_quantize, mxfp4, "mxfp4")->MXSIM_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_quantize, mxfp4_2d, "mxfp4_2d")->MXSIM_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_quantize, mxfp8, "mxfp8")->MXSIM_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_quantize, mxfp8_2d, "mxfp8_2d")->MXSIM_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_quantize_raw, mxfp4, "mxfp4")->MXSIM_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_quantize_raw, mxfp8, "mxfp8")->MXSIM_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_quantize_reference, mxfp4, "mxfp4")->Args({4096, 4096})->Unit(benchmark::kMillisecond)
    ->UseRealTime()->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
