// Internal: AVX2 register tile for MX-exact blocks (docs/numerics.md §5.2
// class 1), the AVX2 counterpart of vnni_tile (gemm_vnni.hpp) on the same
// packed operands. Compiled for AVX2 + FMA only (no AVX-512, no AVX-VNNI).
//
// Exactness. A bytes are u8 = integer element + offset (E2M1: 2x value + 12 in
// [0, 24]; E2M3: 8x value + 60 in [0, 120]); B bytes s8 integer elements
// (E2M1 [-12, 12], E2M3 [-60, 60]). vpmaddubsw forms u8*s8 + u8*s8 per int16
// lane (at most 2 * 120 * 60 = 14400: never saturates). B's layout
// [k/4][32 columns][4] puts column c's bytes k..k+3 in one dword, so int16
// lane 2c of a ymm holds products k, k+1 and lane 2c+1 products k+2, k+3;
// vpaddw over the 8 dwords of a block leaves 16 products per lane, at most
// 16 * 24 * 60 = 23040 (one E2M1 operand) < 2^15: exact. Two E2M3 operands
// (16 * 120 * 60 would overflow) widen after every 2 dwords (4 products,
// 28800). vpmaddwd with ones then adds the two int16 lanes of each column into
// an int32 = sum (a + offset) b; adding corr = -offset * sum(b) gives D_b.
// From there as vnni_tile: t = float(D_b) * 2^(sb...) exact, acc =
// fma(t, 2^(sa...), acc), the contract's one RNE per block.
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gemm_internal.hpp"

namespace mxsim::emu::gemm {

#define MXSIM_AVX2_TARGET "avx2,fma"

/// In-register transpose of 8 rows of 8 dwords: r[q] becomes dword q of every row.
__attribute__((target(MXSIM_AVX2_TARGET))) inline void avx2_transpose8x8_epi32(__m256i r[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h + 0], t[4 * h + 2]);
    u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h + 0], t[4 * h + 2]);
    u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
  for (int q = 0; q < 4; ++q) {
    r[q] = _mm256_permute2x128_si256(u[q], u[4 + q], 0x20);
    r[4 + q] = _mm256_permute2x128_si256(u[q], u[4 + q], 0x31);
  }
}

/// B tile layout [k/4][32 columns][4] from t[column][32 k]: dword q of row jj
/// goes to out[q * 128 + jj * 4].
__attribute__((target(MXSIM_AVX2_TARGET))) inline void avx2_store_b_tile(const int8_t (*t)[32], int8_t* out) {
  for (int j0 = 0; j0 < 32; j0 += 8) {
    __m256i r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(t[j0 + i]));
    avx2_transpose8x8_epi32(r);
    for (int q = 0; q < 8; ++q) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + q * 128 + j0 * 4), r[q]);
  }
}

/// Lanes of columns [c0, c0 + 8) set in the 32-bit column mask (all-ones int32).
__attribute__((target(MXSIM_AVX2_TARGET))) inline __m256i avx2_colmask(uint32_t cols, int c0) {
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i m = _mm256_set1_epi32(int32_t((cols >> c0) & 0xFFu));
  return _mm256_cmpeq_epi32(_mm256_and_si256(m, bit), bit);
}

/// BF16 RNE (round_bf16 of rounding.hpp) and canonical NaN on 8 lanes.
__attribute__((target(MXSIM_AVX2_TARGET))) inline __m256 avx2_finish(__m256 v, bool bf16) {
  const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  if (bf16) {
    const __m256i b = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7FFF)), lsb);
    v = _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(int32_t(0xFFFF0000u))));
  }
  return _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(kCanonicalNan32))), nan);
}

/// MR rows x 16 columns (col0 = 0 or 16 of the 32-column panel) of
/// out (+)= A . B; arguments as vnni_tile, `cols` the panel's 32-bit mask of
/// columns to write (valid and not handed to the scalar walk); rows r with
/// badi[r] are not written. WIDE: both operands E2M3.
template <int MR, bool WIDE>
__attribute__((target(MXSIM_AVX2_TARGET))) inline void avx2_tile16(const uint8_t* A, size_t Kp, const int8_t* Bp,
                                                                   const float* fa, size_t KB, const float* fb,
                                                                   const int32_t* corr, float* out, size_t ld,
                                                                   uint32_t cols, int col0, const uint8_t* badi,
                                                                   bool accumulate, bool bf16) {
  const __m256i m0 = avx2_colmask(cols, col0), m1 = avx2_colmask(cols, col0 + 8);
  // vmaskmovps stores are slow on AMD cores: plain loads/stores for full halves.
  const bool full0 = ((cols >> col0) & 0xFFu) == 0xFFu, full1 = ((cols >> (col0 + 8)) & 0xFFu) == 0xFFu;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MR][2];
  for (int r = 0; r < MR; ++r) {
    if (accumulate) {
      acc[r][0] = full0 ? _mm256_loadu_ps(out + r * ld + col0) : _mm256_maskload_ps(out + r * ld + col0, m0);
      acc[r][1] = full1 ? _mm256_loadu_ps(out + r * ld + col0 + 8) : _mm256_maskload_ps(out + r * ld + col0 + 8, m1);
    } else {
      acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    }
  }
  for (size_t b = 0; b < KB; ++b) {
    const int8_t* bb = Bp + b * 1024 + col0 * 4;
    const uint8_t* ab = A + b * 32;
    __m256i s32[MR][2];
    for (int r = 0; r < MR; ++r)
      for (int h = 0; h < 2; ++h) s32[r][h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr + b * 32 + col0 + h * 8));
    constexpr int kStep = WIDE ? 2 : 8;  // dwords summed in int16 before widening
    for (int q0 = 0; q0 < 8; q0 += kStep) {
      __m256i s16[MR][2];
      for (int r = 0; r < MR; ++r) s16[r][0] = s16[r][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int q = q0; q < q0 + kStep; ++q) {
        const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bb + q * 128));
        const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bb + q * 128 + 32));
        for (int r = 0; r < MR; ++r) {
          int32_t w;
          std::memcpy(&w, ab + r * Kp + q * 4, 4);
          const __m256i av = _mm256_set1_epi32(w);
          s16[r][0] = _mm256_add_epi16(s16[r][0], _mm256_maddubs_epi16(av, b0));
          s16[r][1] = _mm256_add_epi16(s16[r][1], _mm256_maddubs_epi16(av, b1));
        }
      }
      for (int r = 0; r < MR; ++r)
        for (int h = 0; h < 2; ++h) s32[r][h] = _mm256_add_epi32(s32[r][h], _mm256_madd_epi16(s16[r][h], ones));
    }
    const __m256 f0 = _mm256_loadu_ps(fb + b * 32 + col0), f1 = _mm256_loadu_ps(fb + b * 32 + col0 + 8);
    for (int r = 0; r < MR; ++r) {
      const __m256 ar = _mm256_set1_ps(fa[r * KB + b]);
      acc[r][0] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s32[r][0]), f0), ar, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s32[r][1]), f1), ar, acc[r][1]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    if (badi[r]) continue;  // a row with an unsafe scale: the scalar walk writes it
    const __m256 v0 = avx2_finish(acc[r][0], bf16), v1 = avx2_finish(acc[r][1], bf16);
    if (full0) _mm256_storeu_ps(out + r * ld + col0, v0);
    else _mm256_maskstore_ps(out + r * ld + col0, m0, v0);
    if (full1) _mm256_storeu_ps(out + r * ld + col0 + 8, v1);
    else _mm256_maskstore_ps(out + r * ld + col0 + 8, m1, v1);
  }
}

}  // namespace mxsim::emu::gemm
