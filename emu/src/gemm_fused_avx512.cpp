// AVX-512 kernels for the truncated fused groups (docs/numerics.md §5.2
// classes 2-4: mx-f13, fp8-chunk128, bf16-f25; the group itself: §5.3).
//
// One zmm lane is one output element (i, j); 16 consecutive columns j share a
// vector, MR rows i share each B load. Every lane walks K in the contract's
// order, so results do not depend on the tiling or the thread count.
//
// Per group (L = 32 for F = 13, L = 16 for F = 25) and lane:
//  - products a_k * b_k of two FP8/FP6/FP4 or two BF16 values are exact in
//    FP32 whenever e(a) + e(b) lies in [-126, 125] (significands of at most
//    8 bits each); that is checked per (row, column) pair from each row's
//    range of element exponents, and pairs outside it are "bad" lanes;
//  - E = max(-126, e(C), max_k e(a_k) + e(b_k)) with zero elements carrying a
//    sentinel exponent so a zero product never wins;
//  - each term (and C) truncated toward zero to a multiple of 2^(E-F) is
//    exactly cvtt(term * 2^(F-E)) (the power-of-two multiply is exact for
//    every term that can reach 1; smaller ones truncate to 0 anyway);
//  - the int32 sum S is exact (F = 13: |S| < 33 * 2^15; F = 25: two partial
//    sums, each < 2^31, with an overflow test on their total);
//  - RZ(S * 2^(E-F)) to FP32 is cvt_roundepi32_ps(S, RZ) times 2^(E-F) while
//    the result is normal (E - F >= -126 and E <= 119 checked per lane), and
//    RZ to e8m13 masks the 10 low fraction bits of that (nested RZ).
// Lanes that fail any check (NaN/Inf elements, a non-finite BF16 accumulator,
// exponent ranges, a possible subnormal result, an unsafe E8M0 scale) are not
// stored; the caller recomputes them with the scalar path.
#include "gemm_fused_avx512.hpp"
#include "gemm_fused_pack.hpp"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "mxsim/bits.hpp"
#include "mxsim/format.hpp"

namespace mxsim::emu::gemm {

namespace {

using namespace fused;

template <int L, int F, bool E8M13, int MR>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"), always_inline)) inline void fused_group(
    const float* a, const int32_t* ae, size_t lda, const float* b, const int8_t* be, const __m512* C, bool c_zero,
    __m512* R, __mmask16* bad) {
  // Pass 1: exponent sums e(a) + e(b) in narrow lanes, one dword per output
  // lane holding 4 (int8, F = 13 classes) or 2 (int16, BF16) consecutive k.
  constexpr bool X8 = F == 13;
  constexpr int KPD = X8 ? 4 : 2;
  __m512i Eh[MR];
  for (int r = 0; r < MR; ++r) Eh[r] = X8 ? _mm512_set1_epi8(int8_t(kZero8)) : _mm512_set1_epi16(int16_t(kZeroExp));
#pragma GCC unroll 16
  for (int q = 0; q < L / KPD; ++q) {
    const __m512i eb = _mm512_loadu_si512(be + q * 64);
    for (int r = 0; r < MR; ++r) {
      const __m512i ea = _mm512_set1_epi32(ae[r * (lda / KPD) + q]);
      Eh[r] = X8 ? _mm512_max_epi8(Eh[r], _mm512_add_epi8(eb, ea)) : _mm512_max_epi16(Eh[r], _mm512_add_epi16(eb, ea));
    }
  }
  __m512i Em[MR];
  __mmask16 nzm[MR];  // lanes with a non-zero product or C
  for (int r = 0; r < MR; ++r) {
    if (X8) {
      __m512i t = _mm512_max_epi8(Eh[r], _mm512_srli_epi32(Eh[r], 16));
      t = _mm512_max_epi8(t, _mm512_srli_epi32(t, 8));
      Em[r] = _mm512_srai_epi32(_mm512_slli_epi32(t, 24), 24);
      nzm[r] = _mm512_cmpgt_epi32_mask(Em[r], _mm512_set1_epi32(-40));
    } else {
      Em[r] = _mm512_max_epi32(_mm512_srai_epi32(Eh[r], 16), _mm512_srai_epi32(_mm512_slli_epi32(Eh[r], 16), 16));
      nzm[r] = _mm512_cmpgt_epi32_mask(Em[r], _mm512_set1_epi32(-500));
    }
    if (!c_zero) {
      // floor(log2|C|) (subnormals normalized).
      const __m512 g = _mm512_getexp_ps(C[r]);
      const __mmask16 nz = _mm512_cmp_ps_mask(C[r], _mm512_setzero_ps(), _CMP_NEQ_UQ);
      Em[r] = _mm512_mask_max_epi32(Em[r], nz, Em[r], _mm512_cvt_roundps_epi32(g, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
      nzm[r] |= nz;
    }
  }
  __m512 f[MR], u[MR];
  __m512i S[MR], S2[MR];
  for (int r = 0; r < MR; ++r) {
    // Lanes with a non-zero term and E < F - 126 or E > 119 are bad. For the
    // others E equals the contract's max(-126, ...) except all-zero lanes,
    // where E = F - 126 keeps 2^(F-E) finite (every term is 0 anyway).
    bad[r] |= _mm512_mask_cmplt_epi32_mask(nzm[r], Em[r], _mm512_set1_epi32(F - 126)) |
              _mm512_cmpgt_epi32_mask(Em[r], _mm512_set1_epi32(119));
    const __m512i E = _mm512_max_epi32(Em[r], _mm512_set1_epi32(F - 126));
    // 2^(F-E) and 2^(E-F) from exponent bits (both normal for E in [F-126, 119]).
    f[r] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(F + 127), E), 23));
    u[r] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(E, _mm512_set1_epi32(127 - F)), 23));
    S[r] = c_zero ? _mm512_setzero_si512() : _mm512_cvttps_epi32(_mm512_mul_ps(C[r], f[r]));
    S2[r] = _mm512_setzero_si512();
  }
#pragma GCC unroll 16
  for (int k = 0; k < L; ++k) {
    const __m512 pb = _mm512_loadu_ps(b + k * 16);
    for (int r = 0; r < MR; ++r) {
      const __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(a[r * lda + k]), pb), f[r]);
      if (F > 13 && k >= L / 2) S2[r] = _mm512_add_epi32(S2[r], _mm512_cvttps_epi32(t));
      else S[r] = _mm512_add_epi32(S[r], _mm512_cvttps_epi32(t));
    }
  }
  for (int r = 0; r < MR; ++r) {
    __m512i s = S[r];
    if (F > 13) {
      s = _mm512_add_epi32(S[r], S2[r]);
      // signed overflow: both addends' signs differ from the sum's
      const __m512i ov = _mm512_and_si512(_mm512_xor_si512(S[r], s), _mm512_xor_si512(S2[r], s));
      bad[r] |= _mm512_movepi32_mask(ov);
    }
    __m512 v = _mm512_cvt_roundepi32_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    if (E8M13) v = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(int32_t(0xFFFFFC00u))));
    R[r] = _mm512_mul_ps(v, u[r]);
  }
}

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) inline __m512 finish_vec(__m512 v, bool bf16) {
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  if (bf16) {
    const __m512i b = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7FFF)), lsb);
    v = _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(int32_t(0xFFFF0000u))));
  }
  return _mm512_mask_mov_ps(v, nan, _mm512_castsi512_ps(_mm512_set1_epi32(int32_t(0x7FC00000u))));
}

template <GemmClass KIND, int MR>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"))) void tile(const Packed& P, size_t i0, size_t p, Out out,
                                                                        size_t ncols, bool accumulate, bool bf16_out,
                                                                        std::vector<std::pair<uint32_t, uint32_t>>& badv) {
  const size_t Kp = P.Kp;
  const __mmask16 cm = ncols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << ncols) - 1);
  const float* a = at(P.av, i0 * Kp);
  constexpr size_t esz = KIND == GemmClass::Bf16F25 ? 2 : 1, kpd = KIND == GemmClass::Bf16F25 ? 2 : 4;
  const int32_t* ae = at(P.ae, i0 * (Kp / kpd));
  const float* b = at(P.bv, p * Kp * 16);
  const int8_t* be = at(P.be, p * Kp * 16 * esz);
  float* o = out.p + i0 * out.ld + p * 16;
  __m512 acc[MR];
  __mmask16 bad[MR];
  const __m512i blo = _mm512_loadu_si512(at(P.blo, p * 16)), bhi = _mm512_loadu_si512(at(P.bhi, p * 16));
  const __mmask16 bsp = _mm512_test_epi32_mask(_mm512_loadu_si512(at(P.bsp, p * 16)), _mm512_set1_epi32(-1));
  for (int r = 0; r < MR; ++r) {
    const RowInfo& ri = P.ai[i0 + r];
    acc[r] = accumulate ? _mm512_maskz_loadu_ps(cm, o + r * out.ld) : _mm512_setzero_ps();
    bad[r] = bsp | (ri.sp ? __mmask16(0xFFFF) : __mmask16(0)) |
             _mm512_cmplt_epi32_mask(_mm512_add_epi32(blo, _mm512_set1_epi32(ri.lo)), _mm512_set1_epi32(-126)) |
             _mm512_cmpgt_epi32_mask(_mm512_add_epi32(bhi, _mm512_set1_epi32(ri.hi)), _mm512_set1_epi32(125));
    if (KIND == GemmClass::Bf16F25)  // the accumulator is C of every group: must be finite
      bad[r] |= _mm512_cmp_ps_mask(_mm512_sub_ps(acc[r], acc[r]), _mm512_setzero_ps(), _CMP_NEQ_UQ);
  }
  if constexpr (KIND == GemmClass::Bf16F25) {
    for (size_t k = 0; k < Kp; k += 16) {
      __m512 R[MR];
      fused_group<16, 25, false, MR>(a + k, ae + k / 2, Kp, b + k * 16, be + k * 32, acc, false, R, bad);
      for (int r = 0; r < MR; ++r) acc[r] = R[r];
    }
  } else if constexpr (KIND == GemmClass::MxF13) {
    const size_t KB = P.KB;
    const float* as = at(P.as, i0 * KB);
    const float* bs = at(P.bs, p * KB * 16);
    for (size_t kb = 0; kb < KB; ++kb) {
      __m512 R[MR];
      fused_group<32, 13, true, MR>(a + kb * 32, ae + kb * 8, Kp, b + kb * 512, be + kb * 512, nullptr, true, R, bad);
      const __m512 fb = _mm512_loadu_ps(bs + kb * 16);
      for (int r = 0; r < MR; ++r)  // D * 2^(sb) exact (safe scales), one RNE in the FMA
        acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(R[r], fb), _mm512_set1_ps(as[r * KB + kb]), acc[r]);
    }
  } else {
    const size_t KC = P.KC;
    const float* as = at(P.as, i0 * KC);
    const float* bs = at(P.bs, p * KC * 16);
    for (size_t c = 0; c < KC; ++c) {
      __m512 ch[MR];
      for (int r = 0; r < MR; ++r) ch[r] = _mm512_setzero_ps();
      const size_t q1 = std::min(Kp, c * 128 + 128);
      for (size_t q = c * 128; q < q1; q += 32) {
        __m512 R[MR];
        fused_group<32, 13, true, MR>(a + q, ae + q / 4, Kp, b + q * 16, be + q * 16, ch, q == c * 128, R, bad);
        for (int r = 0; r < MR; ++r) ch[r] = R[r];
      }
      const __m512 sb = _mm512_loadu_ps(bs + c * 16);
      for (int r = 0; r < MR; ++r) acc[r] = _mm512_fmadd_ps(ch[r], _mm512_mul_ps(_mm512_set1_ps(as[r * KC + c]), sb), acc[r]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    const __mmask16 good = __mmask16(cm & ~bad[r]);
    _mm512_mask_storeu_ps(o + r * out.ld, good, finish_vec(acc[r], bf16_out));
    const __mmask16 b2 = __mmask16(cm & bad[r]);
    if (b2)
      for (size_t c = 0; c < ncols; ++c)
        if ((b2 >> c) & 1) badv.emplace_back(uint32_t(i0 + r), uint32_t(p * 16 + c));
  }
}

}  // namespace

void run_fused_avx512(GemmClass kind, const Panel& A, const Panel& B, Out out, bool accumulate, Format out_fmt,
                      std::vector<std::pair<uint32_t, uint32_t>>& bad) {
  const size_t I = A.R, J = B.R;
  const Packed P = pack(kind, A, B);
  const size_t NP = P.NP;
  // Rows per tile: F = 13 keeps 4 registers per row (scale, sum, output,
  // factor), BF16 one more (second partial sum).
  const size_t MR = kind == GemmClass::Bf16F25 ? 4 : 6;
  const size_t nIt = (I + MR - 1) / MR;
  const long ntask = long(NP * nIt);
  const bool bf = out_fmt == Format::BF16;
#pragma omp parallel
  {
    std::vector<std::pair<uint32_t, uint32_t>> mine;
#pragma omp for schedule(static) nowait
    for (long t = 0; t < ntask; ++t) {
      const size_t p = size_t(t) / nIt, it = size_t(t) % nIt;
      const size_t i0 = it * MR, nr = std::min(MR, I - i0);
      const size_t ncols = std::min<size_t>(16, J - p * 16);
      auto run1 = [&](auto kc) {
        constexpr GemmClass KK = decltype(kc)::value;
        constexpr int kMR = KK == GemmClass::Bf16F25 ? 4 : 6;
        if (nr == MR) tile<KK, kMR>(P, i0, p, out, ncols, accumulate, bf, mine);
        else
          for (size_t r = 0; r < nr; ++r) tile<KK, 1>(P, i0 + r, p, out, ncols, accumulate, bf, mine);
      };
      switch (kind) {
        case GemmClass::Bf16F25: run1(std::integral_constant<GemmClass, GemmClass::Bf16F25>{}); break;
        case GemmClass::MxF13: run1(std::integral_constant<GemmClass, GemmClass::MxF13>{}); break;
        case GemmClass::Fp8Chunk128: run1(std::integral_constant<GemmClass, GemmClass::Fp8Chunk128>{}); break;
        case GemmClass::MxExact:
        case GemmClass::Nvfp4Exact: break;  // (not F classes)
      }
    }
#pragma omp critical(mxsim_gemm_fused_bad)
    bad.insert(bad.end(), mine.begin(), mine.end());
  }
}

}  // namespace mxsim::emu::gemm
