// Grouped GEMM, class mx-f13 (numerics.md §5.2.2): E8M0-scaled pairs with an
// E4M3, E5M2 or E3M2 operand. Per 32-block one truncated fused group (F = 13,
// RZ to e8m13, C = 0), then acc = RNE(acc + D * 2^(sa + sb - 254))
// (hd::mx_f13_dot). Simple kernel: one thread per output element; the wgmma
// k32 path (scale-d = false per block) is to come behind launch_mx_f13.
#include "gemm_panel.hpp"

namespace mxsim::hip::gemm {
namespace {
struct MxF13Dot {
  Format ea, eb;
  __device__ float operator()(float acc, const Row& a, const Row& b, size_t K) const {
    return hd::mx_f13_dot(acc, K, spec_of(ea), spec_of(eb), a, b);
  }
};
}  // namespace

void launch_mx_f13(const Launch& L, hipStream_t s) {
  launch(L, MxF13Dot{L.A.elem, L.B.elem}, s, "launch of gemm_kernel<mx-f13>");
}

}  // namespace mxsim::hip::gemm
