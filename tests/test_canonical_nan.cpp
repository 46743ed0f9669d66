// numerics.md §1 rule 6: every NaN a training-step op or dequantization
// computes is stored as the canonical quiet NaN (FP32 0x7FC00000, FP64
// 0x7FF8000000000000), whatever NaN the hardware's arithmetic made. The inputs
// below make NaNs the way x86 SSE gives them other bits (Inf - Inf and 0 * Inf
// give 0xFFC00000; a NaN operand passes on its payload and sign), so an op that
// stores an uncanonical NaN fails here; the GPU backend's agreement with these
// bits is mxsim verify's part.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "mxsim/backend.hpp"
#include "mxsim/bits.hpp"
#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/quant_spec.hpp"

namespace mxsim {
namespace {

constexpr uint32_t kCanon32 = 0x7FC00000u;
constexpr uint64_t kCanon64 = 0x7FF8000000000000ull;
const float kInf = std::numeric_limits<float>::infinity();
// A negative NaN with a payload: x86 passes it on as it is.
const float kOddNan = f32_from_bits(0xFFC12345u);

class CanonicalNan : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be = emu::make_emu_backend();
  Tensor f32(Shape s, const std::vector<float>& v) {
    Tensor t = be->alloc(DType::f32, s);
    be->upload(t, std::span<const float>(v));
    return t;
  }
  template <class T>
  Tensor typed(DType d, Shape s, const std::vector<T>& v) {
    Tensor t = be->alloc(d, s);
    be->upload(t, std::span<const T>(v));
    return t;
  }
  // Every NaN of t is canonical, and there is at least one (so the case made one).
  void expect_canonical(const Tensor& t, const char* what) {
    const std::vector<float> v = be->download<float>(t);
    size_t nans = 0;
    for (size_t i = 0; i < v.size(); ++i)
      if (std::isnan(v[i])) {
        ++nans;
        EXPECT_EQ(f32_bits(v[i]), kCanon32) << what << " element " << i;
      }
    EXPECT_GT(nans, 0u) << what << ": the case made no NaN";
  }
};

TEST_F(CanonicalNan, HelperMapsEveryNanAndKeepsOtherValues) {
  EXPECT_EQ(f32_bits(canonical_nan(kOddNan)), kCanon32);
  EXPECT_EQ(f32_bits(canonical_nan(f32_from_bits(0x7FFFFFFFu))), kCanon32);  // NVIDIA's NaN
  EXPECT_EQ(f32_bits(canonical_nan(f32_from_bits(0x7F800001u))), kCanon32);  // signalling
  EXPECT_EQ(f32_bits(canonical_nan(-0.0f)), 0x80000000u);
  EXPECT_EQ(f32_bits(canonical_nan(-kInf)), 0xFF800000u);
  EXPECT_EQ(f64_bits(canonical_nan(f64_from_bits(0xFFF8000000000001ull))), kCanon64);
  EXPECT_EQ(f64_bits(canonical_nan(-1.5)), f64_bits(-1.5));
}

TEST_F(CanonicalNan, SoftmaxActivationsAndAccumulate) {
  // softmax of {+inf, 1}: inf - inf = NaN (x86: 0xFFC00000).
  Tensor l = f32({1, 2}, {kInf, 1.0f}), p = be->alloc(DType::f32, {1, 2});
  be->softmax_rows(l, p);
  expect_canonical(p, "softmax_rows");
  Tensor u = f32({4}, {kOddNan, 1.0f, -kInf, kInf}), a = be->alloc(DType::f32, {4});
  for (Activation k : {Activation::Relu, Activation::Gelu, Activation::Silu}) {
    if (k != Activation::Relu) {  // relu(NaN) = 0 (NaN > 0 is false): no NaN to check
      be->activation(k, u, a);
      expect_canonical(a, "activation");
    }
    Tensor da = f32({4}, {1.0f, kOddNan, 0.0f, 0.0f}), du = be->alloc(DType::f32, {4});
    be->activation_grad(k, u, da, du);
    expect_canonical(du, "activation_grad");
  }
  Tensor acc = f32({1, 1, 2}, {kInf, 1.0f}), x = f32({1, 1, 2}, {-kInf, kOddNan});
  const int64_t ms[] = {3};
  be->accumulate_groups(acc, x, ms);
  expect_canonical(acc, "accumulate_groups");
}

TEST_F(CanonicalNan, LossNormsAndAdamW) {
  Tensor l = f32({2, 3}, {kOddNan, 0.0f, 1.0f, 0.5f, 0.25f, 0.0f});
  Tensor y = typed<uint8_t>(DType::u8, {2}, {1, 0}), dl = be->alloc(DType::f32, {2, 3});
  const double loss = be->cross_entropy(l, y, 1.0f, dl);
  EXPECT_EQ(f64_bits(loss), kCanon64);
  expect_canonical(dl, "cross_entropy dlogits");
  EXPECT_EQ(f64_bits(be->l2_norm(f32({3}, {1.0f, kOddNan, 2.0f}))), kCanon64);
  Tensor w = f32({2}, {1.0f, 1.0f}), m = f32({2}, {0.0f, 0.0f}), v = f32({2}, {0.0f, 0.0f});
  Tensor g = f32({2}, {kInf, kOddNan}), model = be->alloc(DType::f32, {2});
  be->adamw(w, m, v, g, {0.01f, 0.9f, 0.95f, 1e-8f, 0.0f, 1}, model);
  expect_canonical(w, "adamw master");
  expect_canonical(v, "adamw v");
  expect_canonical(model, "adamw model copy");
}

TEST_F(CanonicalNan, Dequantize) {
  QuantizedTensor q;  // one FP8 per-tensor block: scale_inv = +inf, codes 0 and 1: 0 * inf = NaN
  q.spec.elem = Format::E4M3;
  q.spec.scale_kind = ScaleKind::FP32;
  q.spec.block_rows = q.spec.block_cols = 0;
  q.rows = 1;
  q.cols = 2;
  q.data = Bytes3::from_shape({1, 1, 2});
  q.data(0, 0, 0) = 0;
  q.data(0, 0, 1) = 1;
  q.scale_inv = Tensor3f::from_shape({1, 1, 1});
  q.scale_inv(0, 0, 0) = kInf;
  Tensor out = be->alloc(DType::f32, {1, 2});
  be->dequantize(be->upload(q), out);
  expect_canonical(out, "dequantize");
}

}  // namespace
}  // namespace mxsim
