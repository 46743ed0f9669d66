// Emulated grouped GEMM (docs/numerics.md §5) against OpenBLAS SGEMM on the
// same M, N, K in the same run. GFLOP/s = 2*M*N*K / time. Operands are
// quantized once outside the timed loop; the timed call includes the API's
// operand repacking. Run the OpenBLAS peer without this machine's
// OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE overrides:
//   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2
//     build/bench/bench_gemm --benchmark_min_time=1       (one command line; build/ is scripts/build.sh's)
// CPU time is the main thread's: CPU ~ real/2 with 2 threads means they did not run at once (load).
// The emulator's CPU path (docs/numerics.md §5.6) is the best the CPU runs; MXSIM_CPU_PATH=avx2 (or
// scalar) in front of the command forces another. An AVX2-only machine is approximated on an
// AVX-512 one by forcing the AVX2 path here and OpenBLAS's Haswell (AVX2) kernels with
// OPENBLAS_CORETYPE=Haswell (instead of -u OPENBLAS_CORETYPE) in the same command.
//
// Steady state and first call are reported apart. Each benchmark's first call
// in the process (outputs already allocated and written, as a training step's
// are; operands quantized) is timed on its own and reported as first_ms (the
// MX kernels' packing arena is per thread, so only the first MX benchmark's
// first call grows it: docs/numerics.md §5.6); the timed loop starts after an untimed warm-up call, so its rate is the steady
// state whatever --benchmark_min_time is. x_sgemm is the steady rate over the
// first OpenBLAS peer's of the same run; load1 is the 1-minute load average
// when the benchmark ended (the context line gives it at the start): on a
// shared machine compare ratios from one run, and repeat.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/quantize.hpp"

extern "C" {
#include <cblas.h>
}

using namespace mxsim;
using namespace mxsim::emu;

namespace {
constexpr size_t G = 8, MG = 512, M = G * MG, N = 1024, K = 1024;

Tensor2f rnd2(size_t r, size_t c, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0, 1);
  Tensor2f t = Tensor2f::from_shape({r, c});
  for (auto& v : t) v = d(g);
  return t;
}
Tensor3f rnd3(size_t a, size_t r, size_t c, uint32_t seed) {
  Tensor2f x = rnd2(a * r, c, seed);
  Tensor3f t = Tensor3f::from_shape({a, r, c});
  std::copy(x.begin(), x.end(), t.begin());
  return t;
}
const std::vector<int64_t> kSplits(G, int64_t(MG));

double load1() {
  double l[1] = {-1.0};
  return getloadavg(l, 1) == 1 ? l[0] : -1.0;
}

double g_sgemm_rate = 0;  // steady GFLOP/s of the first OpenBLAS peer in this run

/// Runs `call` once before the timed loop. The first time per key (benchmark
/// and argument) and process it is timed: that is the first call, returned in
/// ms. Google Benchmark invokes a benchmark several times while it sizes the
/// iteration count; later invocations run it as an untimed warm-up, so no
/// timed loop contains a first call.
template <class F>
double first_call_ms(const std::string& key, F&& call) {
  static std::map<std::string, double> first;
  const auto t0 = std::chrono::steady_clock::now();
  call();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return first.emplace(key, ms).first->second;
}

/// The timed loop (steady state) and the counters. Returns its GFLOP/s.
template <class F>
double steady(benchmark::State& st, double first_ms, F&& call) {
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : st) call();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double flop = 2.0 * M * N * K, rate = s > 0 ? flop * double(st.iterations()) / s / 1e9 : 0;
  st.counters["GFLOP/s"] = benchmark::Counter(flop, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  st.counters["first_ms"] = first_ms;
  if (g_sgemm_rate > 0) st.counters["x_sgemm"] = rate / g_sgemm_rate;
  st.counters["load1"] = load1();
  return rate;
}

// Threads: OMP_NUM_THREADS (2 in the documented command; 1 to read per-core cost).

// recipe pairs: 0 = MXFP4 (x 1x32, W 32x32), 1 = MXFP8, 2 = BF16
QuantSpec tok_spec(int r) { return r == 0 ? tensor_recipe("mxfp4") : r == 1 ? tensor_recipe("mxfp8") : bf16_spec(); }
QuantSpec w_spec(int r) { return r == 0 ? tensor_recipe("mxfp4_2d") : r == 1 ? tensor_recipe("mxfp8") : bf16_spec(); }

/// A written output of the given shape: training steps reuse theirs, so the
/// first call below measures the GEMM's own one-time costs, not the page
/// faults of an output the benchmark never touched.
Tensor2f out2(size_t r, size_t c) {
  Tensor2f t = Tensor2f::from_shape({r, c});
  t.fill(0.0f);
  return t;
}

void BM_fprop(benchmark::State& st) {
  const int r = int(st.range(0));
  const Tensor2f x = rnd2(M, K, 1);
  const Tensor3f w = rnd3(G, N, K, 2);
  Tensor2f y = out2(M, N);
  if (r == 2) {
    auto call = [&] { grouped_fprop(x, bf16_spec(), w, bf16_spec(), kSplits, y); };
    steady(st, first_call_ms("fprop/" + std::to_string(r), call), call);
  } else {
    const QuantizedTensor qx = quantize(x, tok_spec(r), Axis::Cols), qw = quantize(w, w_spec(r), Axis::Cols);
    auto call = [&] { grouped_fprop(qx, qw, kSplits, y); };
    steady(st, first_call_ms("fprop/" + std::to_string(r), call), call);
  }
  benchmark::DoNotOptimize(y.data());
}
void BM_dgrad(benchmark::State& st) {
  const int r = int(st.range(0));
  const Tensor2f dy = rnd2(M, N, 3);
  const Tensor3f w = rnd3(G, N, K, 2);
  Tensor2f dx = out2(M, K);
  if (r == 2) {
    auto call = [&] { grouped_dgrad(dy, bf16_spec(), w, bf16_spec(), kSplits, dx); };
    steady(st, first_call_ms("dgrad/" + std::to_string(r), call), call);
  } else {
    const QuantizedTensor qa = quantize(dy, tok_spec(r), Axis::Cols);
    const QuantizedTensor qw = quantize(w, w_spec(r), r == 0 ? Axis::Cols : Axis::Rows);
    auto call = [&] { grouped_dgrad(qa, qw, kSplits, dx); };
    steady(st, first_call_ms("dgrad/" + std::to_string(r), call), call);
  }
  benchmark::DoNotOptimize(dx.data());
}
void BM_wgrad(benchmark::State& st) {
  const int r = int(st.range(0));
  const Tensor2f dy = rnd2(M, N, 3), x = rnd2(M, K, 1);
  Tensor3f dw = Tensor3f::from_shape({G, N, K});
  dw.fill(0.0f);  // FP32 main_grad, written before (see out2)
  GemmOptions o;
  o.accumulate = true;  // into FP32 main_grad
  if (r == 2) {
    auto call = [&] { grouped_wgrad(dy, bf16_spec(), x, bf16_spec(), kSplits, dw, o); };
    steady(st, first_call_ms("wgrad/" + std::to_string(r), call), call);
  } else {
    const auto qa = quantize_grouped_colwise(dy, kSplits, tok_spec(r));
    const auto qb = quantize_grouped_colwise(x, kSplits, tok_spec(r));
    auto call = [&] { grouped_wgrad(qa, qb, kSplits, dw, o); };
    steady(st, first_call_ms("wgrad/" + std::to_string(r), call), call);
  }
  benchmark::DoNotOptimize(dw.data());
}
void sgemm_peer(benchmark::State& st, const char* name, bool first_peer) {
  const Tensor2f a = rnd2(M, K, 1), b = rnd2(N, K, 2);
  Tensor2f c = out2(M, N);
  auto call = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(N), int(K), 1.0f, a.data(), int(K), b.data(), int(K),
                0.0f, c.data(), int(N));
  };
  const double first = first_call_ms(name, call);
  if (first_peer) g_sgemm_rate = 0;  // no ratio for the peer itself
  const double rate = steady(st, first, call);
  if (first_peer) g_sgemm_rate = rate;
  benchmark::DoNotOptimize(c.data());
}
void BM_openblas_sgemm(benchmark::State& st) { sgemm_peer(st, "openblas", true); }
// The peer again after the emulated GEMMs: on a shared machine the load can
// change within one run; the two peer rates bracket it (x_sgemm: against the first).
void BM_openblas_sgemm_again(benchmark::State& st) { sgemm_peer(st, "openblas_again", false); }
}  // namespace

BENCHMARK(BM_openblas_sgemm)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_fprop)->ArgName("recipe_mxfp4_mxfp8_bf16")->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_dgrad)->ArgName("recipe_mxfp4_mxfp8_bf16")->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_wgrad)->ArgName("recipe_mxfp4_mxfp8_bf16")->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_openblas_sgemm_again)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("load_average_1min_at_start", std::to_string(load1()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
