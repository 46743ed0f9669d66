// Grouped GEMM, class fp8-chunk128 (numerics.md §5.2.3): FP32-scaled E4M3/E5M2
// (per tensor, per row, 1x128, 128x128). K in chunks of 128, each four chained
// k32 fused groups (F = 13, RZ e8m13), promoted as
// acc = fmaf(chunk, fl32(sa * sb), acc) (hd::fp8_chunk128_dot; DeepGEMM's
// promotion). Simple kernel: one thread per output element.
#include "gemm_panel.hpp"

namespace mxsim::hip::gemm {
namespace {
struct Fp8Chunk128Dot {
  Format ea, eb;
  __device__ float operator()(float acc, const Row& a, const Row& b, size_t K) const {
    return hd::fp8_chunk128_dot(acc, K, spec_of(ea), spec_of(eb), a, b);
  }
};
}  // namespace

void launch_fp8_chunk128(const Launch& L, hipStream_t s) {
  launch(L, Fp8Chunk128Dot{L.A.elem, L.B.elem}, s, "launch of gemm_kernel<fp8-chunk128>");
}

}  // namespace mxsim::hip::gemm
