// Grouped GEMM, class bf16-f25 (numerics.md §5.2.4): unscaled BF16 operands.
// K in groups of 16, each a truncated fused group (F = 25) whose C is the
// running accumulator, RZ to FP32 (hd::bf16_f25_dot; the Hopper wgmma bf16
// group, with its measured edges: hd::hopper_bf16_edges). Portable tiled
// kernels (gemm_panel.hpp) over packed elements (hd::fused_group_packed; 16
// lanes per output for long K, fused_group_packed_lanes).
#include "gemm_panel.hpp"

namespace mxsim::hip::gemm {
namespace {
struct Bf16F25Tile {
  using Slab = PackedSlab;
  static constexpr unsigned kLanes = 16;  // one lane per product of a 16-group
  __device__ void stage_a(Slab& s, const PanelView& p, size_t r0, size_t R, unsigned rows, size_t k0,
               unsigned ks) const {
    stage_packed(s, p, Format::BF16, r0, R, rows, k0, ks, false, false);
  }
  __device__ void stage_b(Slab& s, const PanelView& p, size_t r0, size_t R, unsigned rows, size_t k0,
               unsigned ks) const {
    stage_packed(s, p, Format::BF16, r0, R, rows, k0, ks, false, false);
  }
  __device__ float walk(float acc, const Slab& a, unsigned ia, const Slab& b, unsigned jb, unsigned ks) const {
    for (unsigned q = 0; q < ks; q += 16) {
      const int n = int(ks - q < 16 ? ks - q : 16);
      acc = hd::fused_group_packed(
          n, [&](int t) { return a.v[q + t][ia]; }, [&](int t) { return b.v[q + t][jb]; }, acc, 25, false,
          hd::hopper_bf16_edges());
    }
    return acc;
  }
  __device__ float walk_lanes(float acc, const Slab& a, unsigned ia, const Slab& b, unsigned jb, unsigned ks,
                              unsigned lane) const {
    for (unsigned q = 0; q < ks; q += 16) {
      const int n = int(ks - q < 16 ? ks - q : 16);
      acc = fused_group_packed_lanes<16, 25>(
          n, lane, [&](int t) { return a.v[q + t][ia]; }, [&](int t) { return b.v[q + t][jb]; }, acc, false,
          hd::hopper_bf16_edges());
    }
    return acc;
  }
};
}  // namespace

void launch_bf16_f25(const Launch* L, size_t n, hipStream_t s) {
  if (n) launch(L, n, Bf16F25Tile{}, s, "launch of gemm_tile_kernel<bf16-f25>");
}

}  // namespace mxsim::hip::gemm
