// Grouped-GEMM mechanics of the CPU emulator backend (mxsim::Backend from
// emu::make_emu_backend, backend-owned buffers as the simulator uses them),
// with values worked out by hand: a non-accumulating fprop / wgrad overwrites
// an output buffer pre-filled with NaN; an empty group's dW is +0 (bits 0, the
// sum over no tokens); all groups empty gives exactly +0 everywhere; K = 0
// gives +0. (GpuGemm.EmptyGroupsAndEmptyContraction is the GPU twin.)
//
// Operands are MXFP4 (E2M1, 1 x 32 blocks, E8M0 EVEN) whose every block holds
// a 4 or a 6, so the scale is 2^0 (EVEN: amax 4 = 1 * 2^2 and 6 = 1.5 * 2^2
// give s = 2 - 2 = 0) and every value is an E2M1 value: quantization is exact
// and the mx-exact products are the integer sums written below.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "mxsim/backend.hpp"
#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/quant_spec.hpp"

using namespace mxsim;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

Tensor upload2(Backend& be, size_t r, size_t c, const std::vector<float>& v) {
  Tensor2f h = Tensor2f::from_shape({r, c});
  std::copy(v.begin(), v.end(), h.data());
  return be.upload(h);
}

/// An f32 backend tensor of `shape` filled with NaN.
Tensor nan_tensor(Backend& be, Shape shape, size_t n) {
  Tensor t = be.alloc(DType::f32, shape);
  const std::vector<float> v(n, kNaN);
  be.upload(t, std::span<const float>(v));
  return t;
}

QuantSpec mxfp4() {
  QuantSpec s = named_spec("mxfp4");
  EXPECT_EQ(s.rule, ScaleRule::Even);
  return s;
}

}  // namespace

// fprop y[M, N] = x[M, K] . w[g]^T with m_splits {0, 2, 0, 1}: rows 0, 1 use
// w[1], row 2 uses w[3]; w[0] and w[2] hold NaN and must never be read.
//   x = [1, 4, -0.5, 2], [6, 0, 1, -1], [-4, 0.5, 3, 1.5]
//   w[1] = [1, 1, 1, 4], [-6, 0.5, 2, 0];  w[3] = [4, -1, 0.5, 0], [2, 2, -6, 1]
//   y[0] = 1 + 4 - 0.5 + 8 = 12.5,   -6 + 2 - 1 + 0 = -5
//   y[1] = 6 + 0 + 1 - 4 = 3,        -36 + 0 + 2 + 0 = -34
//   y[2] = -16 - 0.5 + 1.5 + 0 = -15, -8 + 1 - 18 + 1.5 = -23.5
TEST(EmuBackendMechanics, FpropOverwritesNanPrefilledOutput) {
  auto be = emu::make_emu_backend();
  const QuantSpec s = mxfp4();
  const Tensor x = upload2(*be, 3, 4, {1, 4, -0.5f, 2, 6, 0, 1, -1, -4, 0.5f, 3, 1.5f});
  Tensor3f wh = Tensor3f::from_shape({4, 2, 4});
  const float w1[8] = {1, 1, 1, 4, -6, 0.5f, 2, 0}, w3[8] = {4, -1, 0.5f, 0, 2, 2, -6, 1};
  for (size_t i = 0; i < 8; ++i) {
    wh.data()[0 * 8 + i] = kNaN;
    wh.data()[1 * 8 + i] = w1[i];
    wh.data()[2 * 8 + i] = kNaN;
    wh.data()[3 * 8 + i] = w3[i];
  }
  const Tensor w = be->upload(wh);
  const QTensor qx = be->quantize(x, s, Axis::Cols), qw = be->quantize(w, s, Axis::Cols);
  const std::vector<int64_t> ms = {0, 2, 0, 1};
  Tensor y = nan_tensor(*be, {3, 2}, 6);
  GemmOptions o;
  o.accumulate = false;
  be->grouped_fprop(qx, qw, ms, y, o);
  const std::vector<float> got = be->download<float>(y);
  const std::vector<float> want = {12.5f, -5, 3, -34, -15, -23.5f};
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(bits(got[i]), bits(want[i])) << i;
}

// K = 0: every output is the sum over nothing, +0, whatever the buffer held.
TEST(EmuBackendMechanics, FpropWithEmptyContractionWritesPlusZero) {
  auto be = emu::make_emu_backend();
  const QuantSpec s = mxfp4();
  const Tensor x = be->upload(Tensor2f::from_shape({3, 0}));
  const Tensor w = be->upload(Tensor3f::from_shape({1, 5, 0}));
  const QTensor qx = be->quantize(x, s, Axis::Cols), qw = be->quantize(w, s, Axis::Cols);
  Tensor y = nan_tensor(*be, {3, 5}, 15);
  const std::vector<int64_t> ms = {3};
  be->grouped_fprop(qx, qw, ms, y, GemmOptions{});
  for (float v : be->download<float>(y)) EXPECT_EQ(bits(v), 0u);
}

// wgrad dW[g][N, K] = dy_g^T . x_g with m_splits {0, 3, 0} into a NaN-filled
// dW [3, 2, 2]: groups 0 and 2 have no tokens and become +0 (bits 0); group 1:
//   dy = [4, 1], [0.5, -6], [-1, 2];  x = [6, -0.5], [2, 4], [1, 1.5]
//   (each column of dy and x holds a 4 or a 6: its block of 3 tokens has scale 2^0)
//   dW[0][0] = 24 + 1 - 1 = 24     dW[0][1] = -2 + 2 - 1.5 = -1.5
//   dW[1][0] = 6 - 12 + 2 = -4     dW[1][1] = -0.5 - 24 + 3 = -21.5
TEST(EmuBackendMechanics, WgradEmptyGroupsArePlusZeroInNanPrefilledOutput) {
  auto be = emu::make_emu_backend();
  const QuantSpec s = mxfp4();
  const std::vector<int64_t> ms = {0, 3, 0};
  const Tensor dy = upload2(*be, 3, 2, {4, 1, 0.5f, -6, -1, 2});
  const Tensor x = upload2(*be, 3, 2, {6, -0.5f, 2, 4, 1, 1.5f});
  const GroupedQTensor qdy = be->quantize_grouped_colwise(dy, ms, s), qx = be->quantize_grouped_colwise(x, ms, s);
  Tensor dw = nan_tensor(*be, {3, 2, 2}, 12);
  GemmOptions o;
  o.accumulate = false;
  be->grouped_wgrad(qdy, qx, ms, dw, o);
  const std::vector<float> got = be->download<float>(dw);
  const std::vector<float> want = {0, 0, 0, 0, 24, -1.5f, -4, -21.5f, 0, 0, 0, 0};
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(bits(got[i]), bits(want[i])) << i;
}

// All experts empty (m_splits {0, 0}, no tokens at all): dW is exactly +0
// everywhere after a non-accumulating wgrad, from a NaN-filled buffer; with
// accumulate it is left bit for bit as it was (NaN payloads included).
TEST(EmuBackendMechanics, WgradAllGroupsEmptyIsExactlyPlusZero) {
  auto be = emu::make_emu_backend();
  const QuantSpec s = mxfp4();
  const std::vector<int64_t> ms = {0, 0};
  const Tensor dy = be->upload(Tensor2f::from_shape({0, 3}));
  const Tensor x = be->upload(Tensor2f::from_shape({0, 4}));
  const GroupedQTensor qdy = be->quantize_grouped_colwise(dy, ms, s), qx = be->quantize_grouped_colwise(x, ms, s);
  Tensor dw = nan_tensor(*be, {2, 3, 4}, 24);
  be->grouped_wgrad(qdy, qx, ms, dw, GemmOptions{});
  for (float v : be->download<float>(dw)) EXPECT_EQ(bits(v), 0u);
  std::vector<float> before(24);
  for (size_t i = 0; i < before.size(); ++i) {
    const uint32_t b = 0x7FC00000u + uint32_t(i);  // distinct NaN payloads
    std::memcpy(&before[i], &b, 4);
  }
  be->upload(dw, std::span<const float>(before));
  GemmOptions acc;
  acc.accumulate = true;
  be->grouped_wgrad(qdy, qx, ms, dw, acc);
  const std::vector<float> after = be->download<float>(dw);
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(bits(after[i]), bits(before[i])) << i;
}
