// Grouped GEMM, class mx-f13 (numerics.md §5.2.2): E8M0-scaled pairs with an
// E4M3, E5M2 or E3M2 operand. Per 32-block one truncated fused group (F = 13,
// RZ to e8m13, C = 0), then acc = RNE(acc + D * 2^(sa + sb - 254))
// (hd::mx_f13_dot). Portable kernel: one warp (or, for short contractions, one thread) per output element (gemm_panel.hpp); the wgmma
// k32 path (scale-d = false per block) is to come behind launch_mx_f13.
#include "gemm_panel.hpp"

namespace mxsim::hip::gemm {
namespace {
// hd::mx_f13_dot with lane l taking product l of each 32-block's fused group.
struct MxF13Dot {
  static constexpr unsigned kLanes = 32;
  Format ea, eb;
  __device__ float operator()(float acc, const Row& a, const Row& b, size_t K) const {
    return hd::mx_f13_dot(acc, K, spec_of(ea), spec_of(eb), a, b);
  }
  __device__ float operator()(float acc, const Row& a, const Row& b, size_t K, unsigned lane) const {
    const FormatSpec fa = spec_of(ea), fb = spec_of(eb);
    for (size_t k0 = 0; k0 < K; k0 += 32) {
      const bool has = k0 + lane < K;
      const hd::Term t = has ? term_at(fa, fb, a, b, k0 + lane) : hd::Term{};
      const float d = fused_group_lanes(has, t, 0.0f, 13, true);
      acc = hd::mx_f13_block(acc, d, a.e8m0(k0 / 32), b.e8m0(k0 / 32));
    }
    return acc;
  }
};
}  // namespace

void launch_mx_f13(const Launch* L, size_t n, hipStream_t s) {
  if (n) launch(L, n, MxF13Dot{L[0].A.elem, L[0].B.elem}, s, "launch of gemm_kernel<mx-f13>");
}

}  // namespace mxsim::hip::gemm
