// Internal: AVX-512 VNNI kernel for MX-exact blocks (E2M1/E2M3 pairs): the one
// 4 x 32 register tile (vnni_tile) used by the panel path (gemm_vnni.cpp) and
// the direct path (gemm_mx_direct.cpp), and the panel path's entry point.
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gemm_internal.hpp"

namespace mxsim::emu::gemm {
/// Requires AVX-512 F/BW/VNNI. Runs the contract for GemmClass::MxExact; returns false if it declines (then
/// the caller runs the portable path).
bool run_mx_exact_vnni(const Panel& A, const Panel& B, Out out, bool accumulate, Format out_fmt);
void finish(float& o, float acc, Format out_fmt);
/// RNE(acc + blk * 2^(sa + sb - 254 + extra)), exact for every scale (0xFF: NaN).
float mx_add(float acc, float blk, int sa, int sb, int extra);

/// Output columns 0..15 / 16..31 of a tile with ncols (<= 32) valid columns.
inline __mmask16 vnni_mask_lo(size_t ncols) { return ncols >= 16 ? 0xFFFF : __mmask16((1u << ncols) - 1); }
inline __mmask16 vnni_mask_hi(size_t ncols) {
  return ncols >= 32 ? 0xFFFF : (ncols <= 16 ? 0 : __mmask16((1u << (ncols - 16)) - 1));
}

/// MR (1 or 4) rows x 32 columns of out (+)= A . B for MX-exact blocks.
/// A: MR rows of Kp = 32 * KB u8 values (integer element + offset), row stride
/// Kp; Bp: s8 [block][k/4][32 columns][4] (vpdpbusd's layout); fa[r * KB + b],
/// fb[b * 32 + j]: 2^(s - 127 - shift) per block (0 for unsafe scales);
/// corr[b * 32 + j] = -offset * sum(B block), so each int32 lane ends at the
/// exact integer block dot D_b; then acc = fma(float(D_b) * fb, fa, acc): the
/// contract's one RNE per block (docs/numerics.md §5.2 class 1). Output
/// finished here: BF16 RNE when bf16, NaN -> canonical. Columns outside m0/m1
/// and rows r with badi[r] != 0 are neither read nor written (the caller
/// recomputes them with the exact scalar walk).
template <int MR>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline void vnni_tile(
    const uint8_t* A, size_t Kp, const int8_t* Bp, const float* fa, size_t KB, const float* fb, const int32_t* corr,
    float* out, size_t ld, __mmask16 m0, __mmask16 m1, const uint8_t* badi, bool accumulate, bool bf16) {
  __m512 acc[MR][2];
  for (int r = 0; r < MR; ++r) {
    if (accumulate && !badi[r]) {
      acc[r][0] = _mm512_maskz_loadu_ps(m0, out + r * ld);
      acc[r][1] = _mm512_maskz_loadu_ps(m1, out + r * ld + 16);
    } else {
      acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    }
  }
  for (size_t b = 0; b < KB; ++b) {
    const __m512i c0 = _mm512_loadu_si512(corr + b * 32), c1 = _mm512_loadu_si512(corr + b * 32 + 16);
    __m512i s[MR][2];
    for (int r = 0; r < MR; ++r) s[r][0] = c0, s[r][1] = c1;
    const int8_t* bb = Bp + b * 1024;
    const uint8_t* ab = A + b * 32;
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      const __m512i b0 = _mm512_loadu_si512(bb + q * 128), b1 = _mm512_loadu_si512(bb + q * 128 + 64);
      for (int r = 0; r < MR; ++r) {
        int32_t w;
        std::memcpy(&w, ab + r * Kp + q * 4, 4);
        const __m512i av = _mm512_set1_epi32(w);
        s[r][0] = _mm512_dpbusd_epi32(s[r][0], av, b0);
        s[r][1] = _mm512_dpbusd_epi32(s[r][1], av, b1);
      }
    }
    const __m512 f0 = _mm512_loadu_ps(fb + b * 32), f1 = _mm512_loadu_ps(fb + b * 32 + 16);
    for (int r = 0; r < MR; ++r) {
      const __m512 ar = _mm512_set1_ps(fa[r * KB + b]);
      acc[r][0] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s[r][0]), f0), ar, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s[r][1]), f1), ar, acc[r][1]);
    }
  }
  const __m512i qnan = _mm512_set1_epi32(int32_t(kCanonicalNan32));
  for (int r = 0; r < MR; ++r) {
    if (badi[r]) continue;
    for (int h = 0; h < 2; ++h) {
      __m512 v = acc[r][h];
      const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
      if (bf16) {  // round_bf16 (rounding.hpp) on 16 lanes; NaN lanes replaced below
        const __m512i bits = _mm512_castps_si512(v);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
        v = _mm512_castsi512_ps(_mm512_and_si512(_mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7FFF)), lsb),
                                                 _mm512_set1_epi32(int32_t(0xFFFF0000u))));
      }
      v = _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(qnan));
      _mm512_mask_storeu_ps(out + r * ld + h * 16, h ? m1 : m0, v);
    }
  }
}

}  // namespace mxsim::emu::gemm
