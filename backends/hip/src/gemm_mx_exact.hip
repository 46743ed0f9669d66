// Grouped GEMM, class mx-exact (numerics.md §5.2.1): E8M0-scaled E2M1/E2M3
// operands. Per 32-block an exact integer dot of the int_shift images, then
// acc = RNE(acc + dot * 2^(sa + sb - 254 - shift)) (hd::mx_exact_dot).
// Portable kernel: one warp (or, for short contractions, one thread) per output element (gemm_panel.hpp). A fast int8 IMMA / MFMA path
// (exact, order independent) is to come behind launch_mx_exact.
#include "gemm_panel.hpp"

namespace mxsim::hip::gemm {
namespace {
// hd::mx_exact_dot with lane l taking element l of each 32-block.
struct MxExactDot {
  static constexpr unsigned kLanes = 32;
  Format ea, eb;
  __device__ float operator()(float acc, const Row& a, const Row& b, size_t K) const {
    return hd::mx_exact_dot(acc, K, spec_of(ea), spec_of(eb), hd::int_shift(ea), hd::int_shift(eb), a, b);
  }
  __device__ float operator()(float acc, const Row& a, const Row& b, size_t K, unsigned lane) const {
    const FormatSpec fa = spec_of(ea), fb = spec_of(eb);
    const int sha = hd::int_shift(ea), shb = hd::int_shift(eb);
    for (size_t k0 = 0; k0 < K; k0 += 32) {
      const size_t k = k0 + lane;
      const int32_t v = k < K ? hd::mx_int_value(fa, sha, a.code(k)) * hd::mx_int_value(fb, shb, b.code(k)) : 0;
      acc = hd::mx_exact_block(acc, warp_sum_i32(v), a.e8m0(k0 / 32), b.e8m0(k0 / 32), sha + shb);
    }
    return acc;
  }
};
}  // namespace

void launch_mx_exact(const Launch* L, size_t n, hipStream_t s) {
  if (n) launch(L, n, MxExactDot{L[0].A.elem, L[0].B.elem}, s, "launch of gemm_kernel<mx-exact>");
}

}  // namespace mxsim::hip::gemm
