// emu Backend ops: grouped GEMMs and the main_grad bridge add. Every GEMM goes
// through the contract grouped GEMM of emu/include/mxsim/emu/grouped_gemm.hpp
// (docs/numerics.md §5, bit-exact, independent of the thread count); this
// file adds no GEMM of its own.
#include "backend_emu_impl.hpp"
#include "mxsim/bits.hpp"
#include "mxsim/emu/grouped_gemm.hpp"

namespace mxsim::emu {

// The output must already have the GEMM's shape: the emu GEMM would resize a
// container of another shape behind the handle's back.
void EmuBackend::grouped_fprop(const QTensor& x, const QTensor& w, std::span<const int64_t> ms, Tensor& y,
                               const GemmOptions& o) {
  expect_shape(y, {x.rows(), w.rows()}, "grouped_fprop", "y");
  ::mxsim::emu::grouped_fprop(host(x, "grouped_fprop", "x"), host(w, "grouped_fprop", "w"), ms,
                              mat(y, "grouped_fprop", "y"), o);
}
void EmuBackend::grouped_fprop(const Tensor& x, const Tensor& w, std::span<const int64_t> ms, Tensor& y,
                               const GemmOptions& o) {
  expect_shape(y, {x.dim(0), w.dim(1)}, "grouped_fprop", "y");
  ::mxsim::emu::grouped_fprop(mat(x, "grouped_fprop", "x"), bf16_spec(), ten3(w, "grouped_fprop", "w"), bf16_spec(),
                              ms, mat(y, "grouped_fprop", "y"), o);
}
void EmuBackend::grouped_dgrad(const QTensor& dy, const QTensor& w, std::span<const int64_t> ms, Tensor& dx,
                               const GemmOptions& o) {
  expect_shape(dx, {dy.rows(), w.cols()}, "grouped_dgrad", "dx");
  ::mxsim::emu::grouped_dgrad(host(dy, "grouped_dgrad", "dy"), host(w, "grouped_dgrad", "w"), ms,
                              mat(dx, "grouped_dgrad", "dx"), o);
}
void EmuBackend::grouped_dgrad(const Tensor& dy, const Tensor& w, std::span<const int64_t> ms, Tensor& dx,
                               const GemmOptions& o) {
  expect_shape(dx, {dy.dim(0), w.dim(2)}, "grouped_dgrad", "dx");
  ::mxsim::emu::grouped_dgrad(mat(dy, "grouped_dgrad", "dy"), bf16_spec(), ten3(w, "grouped_dgrad", "w"), bf16_spec(),
                              ms, mat(dx, "grouped_dgrad", "dx"), o);
}
void EmuBackend::grouped_wgrad(const GroupedQTensor& dy, const GroupedQTensor& x, std::span<const int64_t> ms,
                               Tensor& dw, const GemmOptions& o) {
  expect_shape(dw, {ms.size(), dy.cols(), x.cols()}, "grouped_wgrad", "dw");
  ::mxsim::emu::grouped_wgrad(host(dy, "grouped_wgrad", "dy"), host(x, "grouped_wgrad", "x"), ms,
                              ten3(dw, "grouped_wgrad", "dw"), o);
}
void EmuBackend::grouped_wgrad(const Tensor& dy, const Tensor& x, std::span<const int64_t> ms, Tensor& dw,
                               const GemmOptions& o) {
  expect_shape(dw, {ms.size(), dy.dim(1), x.dim(1)}, "grouped_wgrad", "dw");
  ::mxsim::emu::grouped_wgrad(mat(dy, "grouped_wgrad", "dy"), bf16_spec(), mat(x, "grouped_wgrad", "x"), bf16_spec(),
                              ms, ten3(dw, "grouped_wgrad", "dw"), o);
}

void EmuBackend::accumulate_groups(Tensor& acc, const Tensor& x, std::span<const int64_t> ms) {
  expect_shape(x, acc.shape(), "accumulate_groups", "x");
  if (acc.rank() != 3 || acc.dim(0) != ms.size())
    throw std::invalid_argument("accumulate_groups: acc " + acc.shape().str() + " needs one group per m_splits entry (" +
                                std::to_string(ms.size()) + ")");
  float* a = f32(acc, "accumulate_groups", "acc");
  const float* b = f32(x, "accumulate_groups", "x");
  const size_t per = acc.dim(1) * acc.dim(2);
  for (size_t g = 0; g < ms.size(); ++g) {
    if (ms[g] == 0) continue;
    float* ag = a + g * per;
    const float* bg = b + g * per;
    for (size_t i = 0; i < per; ++i) ag[i] = canonical_nan(ag[i] + bg[i]);
  }
}

}  // namespace mxsim::emu
