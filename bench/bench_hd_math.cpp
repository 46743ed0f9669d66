// The correctly rounded FP32 functions of mxsim/hd/math.hpp against the
// host libm (glibc expf, logf, erff, powf) on the same vector in the same
// run: items/s = elements per second, one thread, scalar loop.
//   build/bench/bench_hd_math
// Inputs follow the training step's use (docs/numerics.md §6): exp of
// softmax / cross-entropy logits minus their max and of silu's -x, log of a
// softmax denominator, erf of gelu's x / sqrt(2), beta^t of AdamW.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "mxsim/hd/math.hpp"

namespace {
constexpr size_t kN = 1 << 16;

std::vector<float> uniform(float lo, float hi, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(kN);
  for (auto& x : v) x = d(g);
  return v;
}

template <float (*F)(float)>
void run(benchmark::State& state, const std::vector<float>& x) {
  std::vector<float> y(kN);
  for (auto _ : state) {
    for (size_t i = 0; i < kN; ++i) y[i] = F(x[i]);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * kN);
}

const std::vector<float>& exp_in() { static const auto v = uniform(-30.0f, 0.0f, 1); return v; }
const std::vector<float>& log_in() { static const auto v = uniform(1.0f, 256.0f, 2); return v; }
const std::vector<float>& erf_in() { static const auto v = uniform(-4.0f, 4.0f, 3); return v; }

float libm_exp(float x) { return expf(x); }
float libm_log(float x) { return logf(x); }
float libm_erf(float x) { return erff(x); }

void BM_exp_f32(benchmark::State& s) { run<mxsim::exp_f32>(s, exp_in()); }
void BM_libm_expf(benchmark::State& s) { run<libm_exp>(s, exp_in()); }
void BM_log_f32(benchmark::State& s) { run<mxsim::log_f32>(s, log_in()); }
void BM_libm_logf(benchmark::State& s) { run<libm_log>(s, log_in()); }
void BM_erf_f32(benchmark::State& s) { run<mxsim::erf_f32>(s, erf_in()); }
void BM_libm_erff(benchmark::State& s) { run<libm_erf>(s, erf_in()); }

// beta^t for t = 1..kN (the approximate path from t = 3 on for beta = 0.999).
void BM_pow_int_f32(benchmark::State& state) {
  std::vector<float> y(kN);
  for (auto _ : state) {
    for (size_t i = 0; i < kN; ++i) y[i] = mxsim::pow_int_f32(0.999f, uint32_t(i + 1));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * kN);
}
void BM_libm_powf(benchmark::State& state) {
  std::vector<float> y(kN);
  for (auto _ : state) {
    for (size_t i = 0; i < kN; ++i) y[i] = powf(0.999f, float(i + 1));
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * kN);
}
}  // namespace

BENCHMARK(BM_exp_f32);
BENCHMARK(BM_libm_expf);
BENCHMARK(BM_log_f32);
BENCHMARK(BM_libm_logf);
BENCHMARK(BM_erf_f32);
BENCHMARK(BM_libm_erff);
BENCHMARK(BM_pow_int_f32);
BENCHMARK(BM_libm_powf);
BENCHMARK_MAIN();
