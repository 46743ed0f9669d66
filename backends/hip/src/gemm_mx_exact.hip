// Grouped GEMM, class mx-exact (numerics.md §5.2.1): E8M0-scaled E2M1/E2M3
// operands. Per 32-block an exact integer dot of the int_shift images, then
// acc = RNE(acc + dot * 2^(sa + sb - 254 - shift)) (hd::mx_exact_block, the
// step of hd::mx_exact_dot).
// Portable tiled kernel (gemm_panel.hpp): the slab holds each element's
// integer image as an int8, four along K per 32-bit word, so a block's dot is
// eight 4-way integer multiply-adds (exact, order free). An int8 IMMA / MFMA
// path (also exact) is to come behind launch_mx_exact.
#include "gemm_panel.hpp"

namespace mxsim::hip::gemm {
namespace {

struct MxExactTile {
  struct Slab {
    int32_t w[kSlab / 4][kSlabStride];  // element (r, k): byte k % 4 of w[k / 4][r]
    SlabE8m0 e8m0;
  };
  static constexpr unsigned kLanes = 0;  // a block's dot is eight dp4a: no lanes needed
  Format ea, eb;
  int sha, shb;

  __device__ void stage(Slab& s, const PanelView& p, Format f, int sh, size_t r0, size_t R, unsigned rows, size_t k0,
                        unsigned ks) const {
    const FormatSpec fs = spec_of(f);
    int8_t* bytes = reinterpret_cast<int8_t*>(&s.w[0][0]);
    const auto at = [&](unsigned rl, unsigned kl) -> int8_t& { return bytes[((kl / 4) * kSlabStride + rl) * 4 + kl % 4]; };
    const unsigned fill = (ks + 31) / 32 * 32;  // a block's missing tail adds zero products
    stage_elements(
        p, r0, R, rows, k0, ks, fill,
        [&](unsigned rl, unsigned kl, const Row& row, size_t k) { at(rl, kl) = int8_t(hd::mx_int_value(fs, sh, row.code(k))); },
        [&](unsigned rl, unsigned kl) { at(rl, kl) = 0; });
    stage_e8m0(s.e8m0, p, r0, R, rows, k0, ks);
  }
  __device__ void stage_a(Slab& s, const PanelView& p, size_t r0, size_t R, unsigned rows, size_t k0,
               unsigned ks) const {
    stage(s, p, ea, sha, r0, R, rows, k0, ks);
  }
  __device__ void stage_b(Slab& s, const PanelView& p, size_t r0, size_t R, unsigned rows, size_t k0,
               unsigned ks) const {
    stage(s, p, eb, shb, r0, R, rows, k0, ks);
  }
  __device__ float walk(float acc, const Slab& a, unsigned ia, const Slab& b, unsigned jb, unsigned ks) const {
    for (unsigned blk = 0; blk * 32 < ks; ++blk) {
      int32_t d = 0;
#pragma unroll
      for (unsigned w = 0; w < 8; ++w) d = dot4_i8(a.w[blk * 8 + w][ia], b.w[blk * 8 + w][jb], d);
      acc = hd::mx_exact_block(acc, d, a.e8m0[blk][ia], b.e8m0[blk][jb], sha + shb);
    }
    return acc;
  }
};
}  // namespace

void launch_mx_exact(const Launch* L, size_t n, hipStream_t s) {
  if (n == 0) return;
  const Format ea = L[0].A.elem, eb = L[0].B.elem;
  launch(L, n, MxExactTile{ea, eb, hd::int_shift(ea), hd::int_shift(eb)}, s, "launch of gemm_tile_kernel<mx-exact>");
}

}  // namespace mxsim::hip::gemm
