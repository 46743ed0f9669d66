// Grouped GEMM, class mx-exact (numerics.md §5.2.1): E8M0-scaled E2M1/E2M3
// operands. Per 32-block an exact integer dot of the int_shift images, then
// acc = RNE(acc + dot * 2^(sa + sb - 254 - shift)) (hd::mx_exact_dot).
// Simple kernel: one thread per output element. A fast int8 IMMA / MFMA path
// (exact, order independent) is to come behind launch_mx_exact.
#include "gemm_panel.hpp"

namespace mxsim::hip::gemm {
namespace {
struct MxExactDot {
  Format ea, eb;
  __device__ float operator()(float acc, const Row& a, const Row& b, size_t K) const {
    return hd::mx_exact_dot(acc, K, spec_of(ea), spec_of(eb), hd::int_shift(ea), hd::int_shift(eb), a, b);
  }
};
}  // namespace

void launch_mx_exact(const Launch& L, hipStream_t s) {
  launch(L, MxExactDot{L.A.elem, L.B.elem}, s, "launch of gemm_kernel<mx-exact>");
}

}  // namespace mxsim::hip::gemm
