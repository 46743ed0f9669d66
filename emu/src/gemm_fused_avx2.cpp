// AVX2 kernels for the truncated fused groups (docs/numerics.md §5.2 classes
// 2-4, the group itself §5.3): the algorithm of gemm_fused_avx512.cpp (read
// its header for why each step is exact) on 8-lane vectors, compiled for
// AVX2 + FMA only. One ymm lane is one output element; a task is MR rows x
// one 16-column panel, walked as two 8-column halves. What differs from the
// 512-bit kernel:
//  - masks are vectors (all-ones int32 lanes), stores are vmaskmov;
//  - floor(log2|C|) of a non-zero accumulator comes from its exponent bits:
//    a subnormal C reads as -127, which only matters when C would set E, and
//    then E < F - 126 makes the lane bad anyway (as in the 512-bit kernel);
//  - RZ of the int32 group sum to FP32: for F = 13 the sum is below 2^20 and
//    converts exactly; for BF16 (F = 25, sums up to 2^31) the tile runs with
//    MXCSR rounding toward zero, so vcvtdq2ps rounds toward zero. Every other
//    FP operation of the BF16 tile is exact (products and power-of-two
//    scalings of checked exponent ranges; terms small enough to round truncate
//    to 0 either way), so the mode changes nothing else. The MX and chunk
//    classes keep the default RNE, which their FP32 accumulation needs.
#include "gemm_fused_avx2.hpp"

#include <immintrin.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "gemm_fused_pack.hpp"

namespace mxsim::emu::gemm {

namespace {

using namespace fused;

#define MXSIM_AVX2 __attribute__((target("avx2,fma")))

/// Per-thread MXCSR rounding toward zero while alive (then restored).
struct RoundTowardZero {
  unsigned saved;
  MXSIM_AVX2 RoundTowardZero() : saved(_mm_getcsr()) { _mm_setcsr((saved & ~0x6000u) | 0x6000u); }
  MXSIM_AVX2 ~RoundTowardZero() { _mm_setcsr(saved); }
};

template <int L, int F, bool E8M13, int MR>
MXSIM_AVX2 inline void fused_group(const float* a, const int32_t* ae, size_t lda, const float* b, const int8_t* be,
                                   const __m256* C, bool c_zero, __m256* R, __m256i* bad) {
  constexpr bool X8 = F == 13;
  constexpr int KPD = X8 ? 4 : 2;
  // Pass 1: exponent sums in int8 / int16 lanes (B rows of the packed panel
  // are 64 bytes of 16 columns; this half's 8 columns are 32 of them).
  __m256i Eh[MR];
  for (int r = 0; r < MR; ++r) Eh[r] = X8 ? _mm256_set1_epi8(int8_t(kZero8)) : _mm256_set1_epi16(int16_t(kZeroExp));
#pragma GCC unroll 16
  for (int q = 0; q < L / KPD; ++q) {
    const __m256i eb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(be + q * 64));
    for (int r = 0; r < MR; ++r) {
      const __m256i ea = _mm256_set1_epi32(ae[r * (lda / KPD) + q]);
      Eh[r] = X8 ? _mm256_max_epi8(Eh[r], _mm256_add_epi8(eb, ea)) : _mm256_max_epi16(Eh[r], _mm256_add_epi16(eb, ea));
    }
  }
  __m256i Em[MR], nzm[MR];
  for (int r = 0; r < MR; ++r) {
    if (X8) {
      __m256i t = _mm256_max_epi8(Eh[r], _mm256_srli_epi32(Eh[r], 16));
      t = _mm256_max_epi8(t, _mm256_srli_epi32(t, 8));
      Em[r] = _mm256_srai_epi32(_mm256_slli_epi32(t, 24), 24);
      nzm[r] = _mm256_cmpgt_epi32(Em[r], _mm256_set1_epi32(-40));
    } else {
      Em[r] = _mm256_max_epi32(_mm256_srai_epi32(Eh[r], 16), _mm256_srai_epi32(_mm256_slli_epi32(Eh[r], 16), 16));
      nzm[r] = _mm256_cmpgt_epi32(Em[r], _mm256_set1_epi32(-500));
    }
    if (!c_zero) {
      const __m256i cb = _mm256_castps_si256(C[r]);
      const __m256i ec = _mm256_sub_epi32(_mm256_and_si256(_mm256_srli_epi32(cb, 23), _mm256_set1_epi32(0xFF)),
                                          _mm256_set1_epi32(127));
      const __m256i nz = _mm256_castps_si256(_mm256_cmp_ps(C[r], _mm256_setzero_ps(), _CMP_NEQ_UQ));
      Em[r] = _mm256_blendv_epi8(Em[r], _mm256_max_epi32(Em[r], ec), nz);
      nzm[r] = _mm256_or_si256(nzm[r], nz);
    }
  }
  __m256 f[MR], u[MR];
  __m256i S[MR], S2[MR];
  for (int r = 0; r < MR; ++r) {
    bad[r] = _mm256_or_si256(bad[r], _mm256_and_si256(nzm[r], _mm256_cmpgt_epi32(_mm256_set1_epi32(F - 126), Em[r])));
    bad[r] = _mm256_or_si256(bad[r], _mm256_cmpgt_epi32(Em[r], _mm256_set1_epi32(119)));
    const __m256i E = _mm256_max_epi32(Em[r], _mm256_set1_epi32(F - 126));
    f[r] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(F + 127), E), 23));
    u[r] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(E, _mm256_set1_epi32(127 - F)), 23));
    S[r] = c_zero ? _mm256_setzero_si256() : _mm256_cvttps_epi32(_mm256_mul_ps(C[r], f[r]));
    S2[r] = _mm256_setzero_si256();
  }
#pragma GCC unroll 16
  for (int k = 0; k < L; ++k) {
    const __m256 pb = _mm256_loadu_ps(b + k * 16);
    for (int r = 0; r < MR; ++r) {
      const __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(a[r * lda + k]), pb), f[r]);
      if (F > 13 && k >= L / 2) S2[r] = _mm256_add_epi32(S2[r], _mm256_cvttps_epi32(t));
      else S[r] = _mm256_add_epi32(S[r], _mm256_cvttps_epi32(t));
    }
  }
  for (int r = 0; r < MR; ++r) {
    __m256i s = S[r];
    if (F > 13) {
      s = _mm256_add_epi32(S[r], S2[r]);
      const __m256i ov = _mm256_and_si256(_mm256_xor_si256(S[r], s), _mm256_xor_si256(S2[r], s));
      bad[r] = _mm256_or_si256(bad[r], _mm256_srai_epi32(ov, 31));
    }
    __m256 v = _mm256_cvtepi32_ps(s);  // exact (F = 13) or RZ by MXCSR (BF16 tile)
    if (E8M13) v = _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(int32_t(0xFFFFFC00u))));
    R[r] = _mm256_mul_ps(v, u[r]);
  }
}

MXSIM_AVX2 inline __m256 finish_vec(__m256 v, bool bf16) {
  const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  if (bf16) {
    const __m256i b = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7FFF)), lsb);
    v = _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(int32_t(0xFFFF0000u))));
  }
  return _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(0x7FC00000u))), nan);
}

/// MR rows x the 8 columns [p * 16 + h * 8, + 8) of which `ncols` are valid.
template <GemmClass KIND, int MR>
MXSIM_AVX2 void tile(const Packed& P, size_t i0, size_t p, int h, Out out, size_t ncols, bool accumulate, bool bf16_out,
                     std::vector<std::pair<uint32_t, uint32_t>>& badv) {
  const size_t Kp = P.Kp;
  const __m256i cm = _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(ncols)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  const float* a = at(P.av, i0 * Kp);
  constexpr size_t esz = KIND == GemmClass::Bf16F25 ? 2 : 1, kpd = KIND == GemmClass::Bf16F25 ? 2 : 4;
  const int32_t* ae = at(P.ae, i0 * (Kp / kpd));
  const float* b = at(P.bv, p * Kp * 16 + h * 8);
  const int8_t* be = at(P.be, p * Kp * 16 * esz + h * 32);
  const size_t c0 = p * 16 + h * 8;
  float* o = out.p + i0 * out.ld + c0;
  __m256 acc[MR];
  __m256i bad[MR];
  const __m256i blo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at(P.blo, c0)));
  const __m256i bhi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at(P.bhi, c0)));
  const __m256i bsp = _mm256_xor_si256(
      _mm256_cmpeq_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at(P.bsp, c0))), _mm256_setzero_si256()),
      _mm256_set1_epi32(-1));
  for (int r = 0; r < MR; ++r) {
    const RowInfo& ri = P.ai[i0 + r];
    acc[r] = !accumulate ? _mm256_setzero_ps() : ncols == 8 ? _mm256_loadu_ps(o + r * out.ld) : _mm256_maskload_ps(o + r * out.ld, cm);
    bad[r] = _mm256_or_si256(bsp, _mm256_set1_epi32(ri.sp ? -1 : 0));
    bad[r] = _mm256_or_si256(bad[r], _mm256_cmpgt_epi32(_mm256_set1_epi32(-126), _mm256_add_epi32(blo, _mm256_set1_epi32(ri.lo))));
    bad[r] = _mm256_or_si256(bad[r], _mm256_cmpgt_epi32(_mm256_add_epi32(bhi, _mm256_set1_epi32(ri.hi)), _mm256_set1_epi32(125)));
    if (KIND == GemmClass::Bf16F25)  // the accumulator is C of every group: must be finite
      bad[r] = _mm256_or_si256(bad[r], _mm256_castps_si256(_mm256_cmp_ps(_mm256_sub_ps(acc[r], acc[r]), _mm256_setzero_ps(), _CMP_NEQ_UQ)));
  }
  if constexpr (KIND == GemmClass::Bf16F25) {
    for (size_t k = 0; k < Kp; k += 16) {
      __m256 R[MR];
      fused_group<16, 25, false, MR>(a + k, ae + k / 2, Kp, b + k * 16, be + k * 32, acc, false, R, bad);
      for (int r = 0; r < MR; ++r) acc[r] = R[r];
    }
  } else if constexpr (KIND == GemmClass::MxF13) {
    const size_t KB = P.KB;
    const float* as = at(P.as, i0 * KB);
    const float* bs = at(P.bs, p * KB * 16 + h * 8);
    for (size_t kb = 0; kb < KB; ++kb) {
      __m256 R[MR];
      fused_group<32, 13, true, MR>(a + kb * 32, ae + kb * 8, Kp, b + kb * 512, be + kb * 512, nullptr, true, R, bad);
      const __m256 fb = _mm256_loadu_ps(bs + kb * 16);
      for (int r = 0; r < MR; ++r)  // D * 2^(sb) exact (safe scales), one RNE in the FMA
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(R[r], fb), _mm256_set1_ps(as[r * KB + kb]), acc[r]);
    }
  } else {
    const size_t KC = P.KC;
    const float* as = at(P.as, i0 * KC);
    const float* bs = at(P.bs, p * KC * 16 + h * 8);
    for (size_t c = 0; c < KC; ++c) {
      __m256 ch[MR];
      for (int r = 0; r < MR; ++r) ch[r] = _mm256_setzero_ps();
      const size_t q1 = std::min(Kp, c * 128 + 128);
      for (size_t q = c * 128; q < q1; q += 32) {
        __m256 R[MR];
        fused_group<32, 13, true, MR>(a + q, ae + q / 4, Kp, b + q * 16, be + q * 16, ch, q == c * 128, R, bad);
        for (int r = 0; r < MR; ++r) ch[r] = R[r];
      }
      const __m256 sb = _mm256_loadu_ps(bs + c * 16);
      for (int r = 0; r < MR; ++r) acc[r] = _mm256_fmadd_ps(ch[r], _mm256_mul_ps(_mm256_set1_ps(as[r * KC + c]), sb), acc[r]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    const __m256i good = _mm256_andnot_si256(bad[r], cm);
    // vmaskmovps stores are slow on AMD cores: a plain store when every lane is good.
    if (_mm256_movemask_ps(_mm256_castsi256_ps(good)) == 0xFF) _mm256_storeu_ps(o + r * out.ld, finish_vec(acc[r], bf16_out));
    else _mm256_maskstore_ps(o + r * out.ld, good, finish_vec(acc[r], bf16_out));
    const unsigned b2 = unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_and_si256(cm, bad[r]))));
    if (b2)
      for (size_t c = 0; c < ncols; ++c)
        if ((b2 >> c) & 1) badv.emplace_back(uint32_t(i0 + r), uint32_t(c0 + c));
  }
}

}  // namespace

void run_fused_avx2(GemmClass kind, const Panel& A, const Panel& B, Out out, bool accumulate, Format out_fmt,
                    std::vector<std::pair<uint32_t, uint32_t>>& bad) {
  const size_t I = A.R, J = B.R;
  const Packed P = fused::pack(kind, A, B);
  const size_t NP = P.NP;
  // Rows per tile: what fits the 16 ymm registers (BF16 keeps two partial sums).
  const size_t MR = kind == GemmClass::Bf16F25 ? 2 : 4;
  const size_t nIt = (I + MR - 1) / MR;
  const long ntask = long(NP * nIt);
  const bool bf = out_fmt == Format::BF16;
#pragma omp parallel
  {
    std::vector<std::pair<uint32_t, uint32_t>> mine;
    {
      // Only the BF16 class needs RZ conversions (see the header comment).
      std::optional<RoundTowardZero> rz;
      if (kind == GemmClass::Bf16F25) rz.emplace();
#pragma omp for schedule(static) nowait
      for (long t = 0; t < ntask; ++t) {
        const size_t p = size_t(t) / nIt, it = size_t(t) % nIt;
        const size_t i0 = it * MR, nr = std::min(MR, I - i0);
        const size_t ncols = std::min<size_t>(16, J - p * 16);
        for (int h = 0; h < 2 && size_t(h) * 8 < ncols; ++h) {
          const size_t nc = std::min<size_t>(8, ncols - size_t(h) * 8);
          auto run1 = [&](auto kc) {
            constexpr GemmClass KK = decltype(kc)::value;
            constexpr int kMR = KK == GemmClass::Bf16F25 ? 2 : 4;
            if (nr == MR) tile<KK, kMR>(P, i0, p, h, out, nc, accumulate, bf, mine);
            else
              for (size_t r = 0; r < nr; ++r) tile<KK, 1>(P, i0 + r, p, h, out, nc, accumulate, bf, mine);
          };
          switch (kind) {
            case GemmClass::Bf16F25: run1(std::integral_constant<GemmClass, GemmClass::Bf16F25>{}); break;
            case GemmClass::MxF13: run1(std::integral_constant<GemmClass, GemmClass::MxF13>{}); break;
            case GemmClass::Fp8Chunk128: run1(std::integral_constant<GemmClass, GemmClass::Fp8Chunk128>{}); break;
            case GemmClass::MxExact:
            case GemmClass::Nvfp4Exact: break;  // (not F classes)
          }
        }
      }
    }
#pragma omp critical(mxsim_gemm_fused_avx2_bad)
    bad.insert(bad.end(), mine.begin(), mine.end());
  }
}

}  // namespace mxsim::emu::gemm
