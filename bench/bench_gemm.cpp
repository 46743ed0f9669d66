// Emulated grouped GEMM (docs/numerics.md §5) against OpenBLAS SGEMM on the
// same M, N, K in the same run. GFLOP/s = 2*M*N*K / time. Operands are
// quantized once outside the timed loop; the timed call includes the API's
// operand repacking. Run the OpenBLAS peer without this machine's
// OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE overrides:
//   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OMP_WAIT_POLICY=passive OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2
//     build/bench/bench_gemm        (one command line; build/ is scripts/build.sh's)
// CPU time is the main thread's: CPU ~ real/2 with 2 threads means they did not run at once (load).
// The emulator's CPU path (docs/numerics.md §5.6) is the best the CPU runs; MXSIM_CPU_PATH=avx2 (or
// scalar) in front of the command forces another. An AVX2-only machine is approximated on an
// AVX-512 one by forcing the AVX2 path here and OpenBLAS's Haswell (AVX2) kernels with
// OPENBLAS_CORETYPE=Haswell (instead of -u OPENBLAS_CORETYPE) in the same command.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <random>
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

void rate(benchmark::State& st) {
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * M * N * K, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

// Threads: OMP_NUM_THREADS (2 in the documented command; 1 to read per-core cost).

// recipe pairs: 0 = MXFP4 (x 1x32, W 32x32), 1 = MXFP8, 2 = BF16
QuantSpec tok_spec(int r) { return r == 0 ? tensor_recipe("mxfp4") : r == 1 ? tensor_recipe("mxfp8") : bf16_spec(); }
QuantSpec w_spec(int r) { return r == 0 ? tensor_recipe("mxfp4_2d") : r == 1 ? tensor_recipe("mxfp8") : bf16_spec(); }

void BM_fprop(benchmark::State& st) {
  const int r = int(st.range(0));
  const Tensor2f x = rnd2(M, K, 1);
  const Tensor3f w = rnd3(G, N, K, 2);
  Tensor2f y;
  if (r == 2) {
    for (auto _ : st) grouped_fprop(x, bf16_spec(), w, bf16_spec(), kSplits, y);
  } else {
    const QuantizedTensor qx = quantize(x, tok_spec(r), Axis::Cols), qw = quantize(w, w_spec(r), Axis::Cols);
    for (auto _ : st) grouped_fprop(qx, qw, kSplits, y);
  }
  benchmark::DoNotOptimize(y.data());
  rate(st);
}
void BM_dgrad(benchmark::State& st) {
  const int r = int(st.range(0));
  const Tensor2f dy = rnd2(M, N, 3);
  const Tensor3f w = rnd3(G, N, K, 2);
  Tensor2f dx;
  if (r == 2) {
    for (auto _ : st) grouped_dgrad(dy, bf16_spec(), w, bf16_spec(), kSplits, dx);
  } else {
    const QuantizedTensor qa = quantize(dy, tok_spec(r), Axis::Cols);
    const QuantizedTensor qw = quantize(w, w_spec(r), r == 0 ? Axis::Cols : Axis::Rows);
    for (auto _ : st) grouped_dgrad(qa, qw, kSplits, dx);
  }
  benchmark::DoNotOptimize(dx.data());
  rate(st);
}
void BM_wgrad(benchmark::State& st) {
  const int r = int(st.range(0));
  const Tensor2f dy = rnd2(M, N, 3), x = rnd2(M, K, 1);
  Tensor3f dw = Tensor3f::from_shape({G, N, K});
  GemmOptions o;
  o.accumulate = true;  // into FP32 main_grad
  if (r == 2) {
    for (auto _ : st) grouped_wgrad(dy, bf16_spec(), x, bf16_spec(), kSplits, dw, o);
  } else {
    const auto qa = quantize_grouped_colwise(dy, kSplits, tok_spec(r));
    const auto qb = quantize_grouped_colwise(x, kSplits, tok_spec(r));
    for (auto _ : st) grouped_wgrad(qa, qb, kSplits, dw, o);
  }
  benchmark::DoNotOptimize(dw.data());
  rate(st);
}
void BM_openblas_sgemm(benchmark::State& st) {
  const Tensor2f a = rnd2(M, K, 1), b = rnd2(N, K, 2);
  Tensor2f c = Tensor2f::from_shape({M, N});
  for (auto _ : st)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(N), int(K), 1.0f, a.data(), int(K), b.data(), int(K),
                0.0f, c.data(), int(N));
  benchmark::DoNotOptimize(c.data());
  rate(st);
}
// The peer again after the emulated GEMMs: on a shared machine the load can
// change within one run; the two peer rates bracket it.
void BM_openblas_sgemm_again(benchmark::State& st) { BM_openblas_sgemm(st); }
}  // namespace

BENCHMARK(BM_openblas_sgemm)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_fprop)->ArgName("recipe_mxfp4_mxfp8_bf16")->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_dgrad)->ArgName("recipe_mxfp4_mxfp8_bf16")->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_wgrad)->ArgName("recipe_mxfp4_mxfp8_bf16")->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_openblas_sgemm_again)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_MAIN();
