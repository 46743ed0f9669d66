// Grouped GEMM, class mx-f13 (numerics.md §5.2.2): E8M0-scaled pairs with an
// E4M3, E5M2 or E3M2 operand. Per 32-block one truncated fused group (F = 13,
// RZ to e8m13, C = 0), then acc = RNE(acc + D * 2^(sa + sb - 254))
// (hd::mx_f13_dot). Portable tiled kernel (gemm_panel.hpp) over packed
// elements (hd::fused_group_packed); the wgmma k32 path (scale-d = false per
// block) is to come behind launch_mx_f13.
#include "gemm_panel.hpp"

namespace mxsim::hip::gemm {
namespace {
struct MxF13Tile {
  using Slab = PackedSlab;
  static constexpr unsigned kLanes = 32;  // one lane per product of a 32-block
  Format ea, eb;
  __device__ void stage_a(Slab& s, const PanelView& p, size_t r0, size_t R, unsigned rows, size_t k0,
               unsigned ks) const {
    stage_packed(s, p, ea, r0, R, rows, k0, ks, true, false);
  }
  __device__ void stage_b(Slab& s, const PanelView& p, size_t r0, size_t R, unsigned rows, size_t k0,
               unsigned ks) const {
    stage_packed(s, p, eb, r0, R, rows, k0, ks, true, false);
  }
  __device__ float walk(float acc, const Slab& a, unsigned ia, const Slab& b, unsigned jb, unsigned ks) const {
    for (unsigned q = 0; q < ks; q += 32) {
      const int n = int(ks - q < 32 ? ks - q : 32);
      const float d = hd::fused_group_packed(
          n, [&](int t) { return a.v[q + t][ia]; }, [&](int t) { return b.v[q + t][jb]; }, 0.0f, 13, true);
      acc = hd::mx_f13_block(acc, d, a.e8m0[q / 32][ia], b.e8m0[q / 32][jb]);
    }
    return acc;
  }
  __device__ float walk_lanes(float acc, const Slab& a, unsigned ia, const Slab& b, unsigned jb, unsigned ks,
                              unsigned lane) const {
    for (unsigned q = 0; q < ks; q += 32) {
      const int n = int(ks - q < 32 ? ks - q : 32);
      const float d = fused_group_packed_lanes<32, 13>(
          n, lane, [&](int t) { return a.v[q + t][ia]; }, [&](int t) { return b.v[q + t][jb]; }, 0.0f, true);
      acc = hd::mx_f13_block(acc, d, a.e8m0[q / 32][ia], b.e8m0[q / 32][jb]);
    }
    return acc;
  }
};
}  // namespace

void launch_mx_f13(const Launch* L, size_t n, hipStream_t s) {
  if (n) launch(L, n, MxF13Tile{L[0].A.elem, L[0].B.elem}, s, "launch of gemm_tile_kernel<mx-f13>");
}

}  // namespace mxsim::hip::gemm
