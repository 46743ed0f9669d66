// Grouped GEMM, class fp8-chunk128 (numerics.md §5.2.3): FP32-scaled E4M3/E5M2
// (per tensor, per row, 1x128, 128x128). K in chunks of 128, each four chained
// k32 fused groups (F = 13, RZ e8m13), promoted as
// acc = fmaf(chunk, fl32(sa * sb), acc) (hd::fp8_chunk128_dot; DeepGEMM's
// promotion). Portable tiled kernel (gemm_panel.hpp) over packed elements
// (hd::fused_group_packed): a slab of kSlab = 128 is exactly one chunk.
#include "gemm_panel.hpp"

namespace mxsim::hip::gemm {
namespace {
static_assert(kSlab == 128, "one fp8 chunk per slab");
struct Fp8Chunk128Tile {
  using Slab = PackedSlab;
  static constexpr unsigned kLanes = 32;  // one lane per product of a k32 group
  Format ea, eb;
  __device__ void stage_a(Slab& s, const PanelView& p, size_t r0, size_t R, unsigned rows, size_t k0,
               unsigned ks) const {
    stage_packed(s, p, ea, r0, R, rows, k0, ks, false, true);
  }
  __device__ void stage_b(Slab& s, const PanelView& p, size_t r0, size_t R, unsigned rows, size_t k0,
               unsigned ks) const {
    stage_packed(s, p, eb, r0, R, rows, k0, ks, false, true);
  }
  __device__ float walk(float acc, const Slab& a, unsigned ia, const Slab& b, unsigned jb, unsigned ks) const {
    float chunk = 0.0f;  // the k32 groups of the chunk are chained through C
    for (unsigned q = 0; q < ks; q += 32) {
      const int n = int(ks - q < 32 ? ks - q : 32);
      chunk = hd::fused_group_packed(
          n, [&](int t) { return a.v[q + t][ia]; }, [&](int t) { return b.v[q + t][jb]; }, chunk, 13, true);
    }
    return hd::fp8_chunk_promote(acc, chunk, a.sinv[ia], b.sinv[jb]);
  }
  __device__ float walk_lanes(float acc, const Slab& a, unsigned ia, const Slab& b, unsigned jb, unsigned ks,
                              unsigned lane) const {
    float chunk = 0.0f;
    for (unsigned q = 0; q < ks; q += 32) {
      const int n = int(ks - q < 32 ? ks - q : 32);
      chunk = fused_group_packed_lanes<32, 13>(
          n, lane, [&](int t) { return a.v[q + t][ia]; }, [&](int t) { return b.v[q + t][jb]; }, chunk, true);
    }
    return hd::fp8_chunk_promote(acc, chunk, a.sinv[ia], b.sinv[jb]);
  }
};
}  // namespace

void launch_fp8_chunk128(const Launch* L, size_t n, hipStream_t s) {
  if (n) launch(L, n, Fp8Chunk128Tile{L[0].A.elem, L[0].B.elem}, s, "launch of gemm_tile_kernel<fp8-chunk128>");
}

}  // namespace mxsim::hip::gemm
