// Matrix-unit models (mma_model.hpp) against published observations
// (shared/reference/matrix-units-and-gpu.md §2, H200, cuBLASLt FP8 via
// torch._scaled_mm with use_fast_accum=True: rows [256, 1, 1, ...] give
// 65536 at K = 64 to 4096, every 1 lost) and against hand-derived values.
#include <gtest/gtest.h>

#include <limits>

#include <cmath>

#include "mxsim/emu/mma_model.hpp"
#include "mxsim/emu/quantize.hpp"

using namespace mxsim;
using namespace mxsim::emu;

namespace {
QuantizedTensor row256(size_t K, size_t rows = 1) {
  Tensor2f x = Tensor2f::from_shape({rows, K});
  for (size_t r = 0; r < rows; ++r)
    for (size_t k = 0; k < K; ++k) x(r, k) = k == 0 ? 256.0f : 1.0f;
  QuantSpec s = tensor_recipe("fp8_tensor");
  s.fixed_scale = 1.0f;
  return quantize(x, s, Axis::Cols);
}
}  // namespace

TEST(GemmModel, HopperFastAccumLosesEveryOne) {
  for (size_t K : {64u, 256u, 1024u, 4096u}) {
    const QuantizedTensor q = row256(K);
    EXPECT_EQ(mma_model_gemm(q, q, MmaModel::HopperWgmmaFp8)(0, 0), 65536.0f) << K;
    // F = 25 keeps 2^-8 resolution at 2^16: every 1 survives (Blackwell f8f6f4 model).
    EXPECT_EQ(mma_model_gemm(q, q, MmaModel::BlackwellMxf8f6f4)(0, 0), 65536.0f + float(K - 1)) << K;
    // The contract (128-K promotion) is the use_fast_accum=False observation.
    const float want = 65536.0f + float(K >= 128 ? K - 128 : 0);
    EXPECT_EQ(mma_model_gemm(q, q, MmaModel::Contract)(0, 0), want) << K;
  }
}

// Inside one k32 group 2^16 + 8 survives and 2^16 + 4 does not (F = 13;
// matrix-units-and-gpu.md §2): A row [256, 8, 0...] . B row [256, 1, 0...] etc.
TEST(GemmModel, HopperThirteenBits) {
  auto one = [](float a1, float b1) {
    Tensor2f a = Tensor2f::from_shape({1, 32}), b = Tensor2f::from_shape({1, 32});
    a.fill(0);
    b.fill(0);
    a(0, 0) = 256, b(0, 0) = 256, a(0, 1) = a1, b(0, 1) = b1;
    QuantSpec s = tensor_recipe("fp8_tensor");
    s.fixed_scale = 1.0f;
    return mma_model_gemm(quantize(a, s), quantize(b, s), MmaModel::HopperWgmmaFp8)(0, 0);
  };
  EXPECT_EQ(one(8, 1), 65536.0f + 8);
  EXPECT_EQ(one(4, 1), 65536.0f);
  EXPECT_EQ(one(-4, 1), 65536.0f - 0);  // truncation toward zero of the term: -4 -> 0 at 2^3 resolution
}

// Distances on the ordered FP32 line with -0 and +0 one point (numerics.md §5.5):
// 1 vs nextafter(1) = 1; +0 vs -0 = 0; the smallest subnormal 2^-149 is 1 from
// either zero and -2^-149 vs +2^-149 = 2; NaN vs 1 is a NaN mismatch.
TEST(GemmModel, UlpReport) {
  const float tiny = std::numeric_limits<float>::denorm_min();
  Tensor2f a = {{1.0f, 0.0f, std::nanf(""), tiny, -tiny, -tiny}};
  Tensor2f b = {{std::nextafter(1.0f, 2.0f), -0.0f, 1.0f, -0.0f, 0.0f, tiny}};
  const UlpReport r = ulp_report(a, b);
  EXPECT_EQ(r.total, 6u);
  EXPECT_EQ(r.buckets[0], 1u);  // +0 vs -0
  EXPECT_EQ(r.buckets[1], 3u);  // 1 vs next, tiny vs -0, -tiny vs +0
  EXPECT_EQ(r.buckets[2], 1u);  // -tiny vs +tiny: distance 2 lies in [2, 4)
  EXPECT_EQ(r.nan_mismatch, 1u);
  EXPECT_EQ(r.max_ulp, 2u);
}
