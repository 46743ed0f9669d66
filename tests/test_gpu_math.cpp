// GPU elementary functions (backends/hip, mxsim/hip/math.hpp) vs the CPU,
// bit for bit, on every FP32 input. Both sides run the same header
// (mxsim/hd/math.hpp); this test proves the device compilation (nvcc
// -fmad=false / hipcc -ffp-contract=off, FP64 on the device, tables in
// device memory, denormals kept) changed no bit. The functions' own
// correctness is proven against the exact oracle in test_hd_math.cpp.
//
// Skips, with the runtime's reason, when the backend is not built or no GPU
// is present (CI has nvcc but no GPU).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "mxsim/bits.hpp"
#include "mxsim/hd/math.hpp"

#ifdef MXSIM_HAVE_GPU
#include "mxsim/hip/codec.hpp"
#include "mxsim/hip/math.hpp"
#endif

namespace {
using namespace mxsim;

#ifndef MXSIM_HAVE_GPU
TEST(GpuMath, SkippedWithoutBackend) { GTEST_SKIP() << "built without the GPU backend (MXSIM_GPU=off or no GPU compiler)"; }
#else

#define REQUIRE_GPU()                                               \
  do {                                                              \
    std::string why_;                                               \
    if (!hip::available(&why_)) GTEST_SKIP() << "no GPU: " << why_; \
  } while (0)

float cpu(hip::MathFn fn, float x) {
  switch (fn) {
    case hip::MathFn::Exp: return exp_f32(x);
    case hip::MathFn::Log: return log_f32(x);
    default: return erf_f32(x);
  }
}

TEST(GpuMath, EveryInputMatchesCpu) {
  REQUIRE_GPU();
  constexpr uint64_t kChunk = uint64_t(1) << 26;
  std::vector<float> x(kChunk), y(kChunk);
  const struct {
    hip::MathFn fn;
    const char* name;
  } fns[] = {{hip::MathFn::Exp, "exp"}, {hip::MathFn::Log, "log"}, {hip::MathFn::Erf, "erf"}};
  for (const auto& f : fns) {
    long long wrong = 0;
    uint32_t first_wrong = 0;
    for (uint64_t base = 0; base < (uint64_t(1) << 32); base += kChunk) {
#pragma omp parallel for
      for (int64_t i = 0; i < int64_t(kChunk); ++i) x[i] = f32_from_bits(uint32_t(base + uint64_t(i)));
      hip::math_array(f.fn, x, y);
      long long w = 0;
#pragma omp parallel for reduction(+ : w)
      for (int64_t i = 0; i < int64_t(kChunk); ++i) w += f32_bits(y[i]) != f32_bits(cpu(f.fn, x[i]));
      if (w && !wrong)
        for (uint64_t i = 0; i < kChunk; ++i)
          if (f32_bits(y[i]) != f32_bits(cpu(f.fn, x[i]))) {
            first_wrong = f32_bits(x[i]);
            break;
          }
      wrong += w;
    }
    std::printf("[gpu] %s: 2^32 inputs, %lld differ from the CPU\n", f.name, wrong);
    EXPECT_EQ(wrong, 0) << f.name << ": first at input bits 0x" << std::hex << first_wrong;
  }
}

TEST(GpuMath, PowIntMatchesCpu) {
  REQUIRE_GPU();
  // AdamW's betas over t = 1..2^20, then random x of every exponent and sign
  // with small and large n.
  std::vector<float> x;
  std::vector<uint32_t> n;
  for (float beta : {0.9f, 0.95f, 0.98f, 0.99f, 0.995f, 0.999f, 0.9999f})
    for (uint32_t t = 1; t <= (1u << 20); ++t) x.push_back(beta), n.push_back(t);
  std::mt19937_64 rng(5);
  for (int i = 0; i < (1 << 23); ++i) {
    x.push_back(f32_from_bits(uint32_t(rng())));
    n.push_back(i % 2 ? uint32_t(rng() % 64) : uint32_t(rng() >> (32 + rng() % 32)));
  }
  std::vector<float> y(x.size());
  hip::pow_int_array(x, n, y);
  long long wrong = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const bool bad = f32_bits(y[i]) != f32_bits(pow_int_f32(x[i], n[i]));
    if (bad && wrong == 0) ADD_FAILURE() << "pow_int_f32(" << x[i] << ", " << n[i] << ")";
    wrong += bad;
  }
  std::printf("[gpu] pow_int: %zu inputs, %lld differ from the CPU\n", x.size(), wrong);
  EXPECT_EQ(wrong, 0);
}

TEST(GpuMath, MismatchedSizesAreRejected) {  // checked before any runtime call: no GPU needed
  std::vector<float> x(4), y(3);
  std::vector<uint32_t> n(4);
  EXPECT_THROW(hip::math_array(hip::MathFn::Exp, x, y), std::invalid_argument);
  EXPECT_THROW(hip::pow_int_array(x, n, y), std::invalid_argument);
}
#endif

}  // namespace
