// Grouped GEMM, class fp8-chunk128 (numerics.md §5.2.3): FP32-scaled E4M3/E5M2
// (per tensor, per row, 1x128, 128x128). K in chunks of 128, each four chained
// k32 fused groups (F = 13, RZ e8m13), promoted as
// acc = fmaf(chunk, fl32(sa * sb), acc) (hd::fp8_chunk128_dot; DeepGEMM's
// promotion). Portable kernel: one warp (or, for short contractions, one thread) per output element (gemm_panel.hpp).
#include "gemm_panel.hpp"

namespace mxsim::hip::gemm {
namespace {
// hd::fp8_chunk128_dot with lane l taking product l of each k32 group; the
// groups of a chunk chain through C as there.
struct Fp8Chunk128Dot {
  static constexpr unsigned kLanes = 32;
  Format ea, eb;
  __device__ float operator()(float acc, const Row& a, const Row& b, size_t K) const {
    return hd::fp8_chunk128_dot(acc, K, spec_of(ea), spec_of(eb), a, b);
  }
  __device__ float operator()(float acc, const Row& a, const Row& b, size_t K, unsigned lane) const {
    const FormatSpec fa = spec_of(ea), fb = spec_of(eb);
    for (size_t c0 = 0; c0 < K; c0 += 128) {
      const size_t c1 = K < c0 + 128 ? K : c0 + 128;
      float chunk = 0.0f;
      for (size_t q = c0; q < c1; q += 32) {
        const bool has = q + lane < c1;
        const hd::Term t = has ? term_at(fa, fb, a, b, q + lane) : hd::Term{};
        chunk = fused_group_lanes(has, t, chunk, 13, true);
      }
      acc = hd::fp8_chunk_promote(acc, chunk, a.sinv(c0 / 128), b.sinv(c0 / 128));
    }
    return acc;
  }
};
}  // namespace

void launch_fp8_chunk128(const Launch* L, size_t n, hipStream_t s) {
  if (n) launch(L, n, Fp8Chunk128Dot{L[0].A.elem, L[0].B.elem}, s, "launch of gemm_kernel<fp8-chunk128>");
}

}  // namespace mxsim::hip::gemm
