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
void EmuBackend::grouped_fprop_impl(const QTensor& x, const QTensor& w, std::span<const int64_t> ms, Tensor& y,
                               const GemmOptions& o) {
  ::mxsim::emu::grouped_fprop(host(x, "grouped_fprop", "x"), host(w, "grouped_fprop", "w"), ms,
                              mat(y, "grouped_fprop", "y"), o);
}
void EmuBackend::grouped_fprop_impl(const Tensor& x, const Tensor& w, std::span<const int64_t> ms, Tensor& y,
                               const GemmOptions& o) {
  Tensor2f xw;
  Tensor3f ww;
  ::mxsim::emu::grouped_fprop(operand2(x, xw, "grouped_fprop", "x"), bf16_spec(), operand3(w, ww, "grouped_fprop", "w"),
                              bf16_spec(), ms, mat(y, "grouped_fprop", "y"), o);
}
void EmuBackend::grouped_dgrad_impl(const QTensor& dy, const QTensor& w, std::span<const int64_t> ms, Tensor& dx,
                               const GemmOptions& o) {
  ::mxsim::emu::grouped_dgrad(host(dy, "grouped_dgrad", "dy"), host(w, "grouped_dgrad", "w"), ms,
                              mat(dx, "grouped_dgrad", "dx"), o);
}
void EmuBackend::grouped_dgrad_impl(const Tensor& dy, const Tensor& w, std::span<const int64_t> ms, Tensor& dx,
                               const GemmOptions& o) {
  Tensor2f dyw;
  Tensor3f ww;
  ::mxsim::emu::grouped_dgrad(operand2(dy, dyw, "grouped_dgrad", "dy"), bf16_spec(),
                              operand3(w, ww, "grouped_dgrad", "w"), bf16_spec(), ms, mat(dx, "grouped_dgrad", "dx"), o);
}
void EmuBackend::grouped_wgrad_impl(const GroupedQTensor& dy, const GroupedQTensor& x, std::span<const int64_t> ms,
                               Tensor& dw, const GemmOptions& o) {
  ::mxsim::emu::grouped_wgrad(host(dy, "grouped_wgrad", "dy"), host(x, "grouped_wgrad", "x"), ms,
                              ten3(dw, "grouped_wgrad", "dw"), o);
}
void EmuBackend::grouped_wgrad_impl(const Tensor& dy, const Tensor& x, std::span<const int64_t> ms, Tensor& dw,
                               const GemmOptions& o) {
  Tensor2f dyw, xw;
  ::mxsim::emu::grouped_wgrad(operand2(dy, dyw, "grouped_wgrad", "dy"), bf16_spec(),
                              operand2(x, xw, "grouped_wgrad", "x"), bf16_spec(), ms, ten3(dw, "grouped_wgrad", "dw"), o);
}

void EmuBackend::accumulate_groups_impl(Tensor& acc, const Tensor& x, std::span<const int64_t> ms) {
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
