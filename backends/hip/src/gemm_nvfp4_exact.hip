// Grouped GEMM, class nvfp4-exact (numerics.md §5.2.5): NVFP4 operands (E2M1
// elements, a UE4M3 scale per 16 along K, an FP32 tensor scale each). Per
// 16-block an exact integer dot of the E2M1 images 2x, then
// acc = RNE(acc + dot / 4 * sa * sb) (hd::nvfp4_block) from +0, and at the
// end out = fmaf(acc, fl32(S_dec_a * S_dec_b), C) (hd::nvfp4_tensor_step),
// the steps of hd::nvfp4_exact_dot.
// Portable tiled kernel (gemm_panel.hpp): the slab holds each element's
// integer image as an int8, four along K per 32-bit word (a block's dot is
// four 4-way integer multiply-adds, exact), and each 16-block's scale decoded
// once as hd::Nvfp4Scale. No tensor-core path yet.
#include "gemm_panel.hpp"

namespace mxsim::hip::gemm {
namespace {

struct Nvfp4Tile {
  struct Slab {
    int32_t w[kSlab / 4][kSlabStride];          // element (r, k): byte k % 4 of w[k / 4][r]
    hd::Nvfp4Scale scale[kSlab / 16][kTile];    // the 16-blocks' scales
  };
  static constexpr unsigned kLanes = 0;  // a block's dot is four dp4a: no lanes needed

  __device__ void stage(Slab& s, const PanelView& p, size_t r0, size_t R, unsigned rows, size_t k0, unsigned ks) const {
    const FormatSpec fs = spec_of(Format::E2M1);
    int8_t* bytes = reinterpret_cast<int8_t*>(&s.w[0][0]);
    const auto at = [&](unsigned rl, unsigned kl) -> int8_t& { return bytes[((kl / 4) * kSlabStride + rl) * 4 + kl % 4]; };
    const unsigned fill = (ks + 15) / 16 * 16;  // a block's missing tail adds zero products
    stage_elements(
        p, r0, R, rows, k0, ks, fill,
        [&](unsigned rl, unsigned kl, const Row& row, size_t k) { at(rl, kl) = int8_t(hd::mx_int_value(fs, 1, row.code(k))); },
        [&](unsigned rl, unsigned kl) { at(rl, kl) = 0; });
    const unsigned nb = (ks + 15) / 16;
    for (unsigned idx = threadIdx.x; idx < rows * nb; idx += kTileThreads) {
      const unsigned rl = idx % rows, b = idx / rows;
      s.scale[b][rl] = r0 + rl < R ? hd::nvfp4_scale_of(Row{p, r0 + rl}.ue4m3(k0 / 16 + b)) : hd::Nvfp4Scale{};
    }
  }
  __device__ void stage_a(Slab& s, const PanelView& p, size_t r0, size_t R, unsigned rows, size_t k0,
                          unsigned ks) const {
    stage(s, p, r0, R, rows, k0, ks);
  }
  __device__ void stage_b(Slab& s, const PanelView& p, size_t r0, size_t R, unsigned rows, size_t k0,
                          unsigned ks) const {
    stage(s, p, r0, R, rows, k0, ks);
  }
  __device__ float walk(float acc, const Slab& a, unsigned ia, const Slab& b, unsigned jb, unsigned ks) const {
    for (unsigned blk = 0; blk * 16 < ks; ++blk) {
      int32_t d = 0;
#pragma unroll
      for (unsigned w = 0; w < 4; ++w) d = dot4_i8(a.w[blk * 4 + w][ia], b.w[blk * 4 + w][jb], d);
      acc = hd::nvfp4_block(acc, d, a.scale[blk][ia], b.scale[blk][jb]);
    }
    return acc;
  }
  __device__ float tensor_step(float acc, const Launch& L, float c) const {
    return hd::nvfp4_tensor_step(acc, L.K, *L.A.tsi, *L.B.tsi, c);
  }
};
}  // namespace

void launch_nvfp4_exact(const Launch* L, size_t n, hipStream_t s) {
  if (n == 0) return;
  launch(L, n, Nvfp4Tile{}, s, "launch of gemm_tile_kernel<nvfp4-exact>");
}

}  // namespace mxsim::hip::gemm
