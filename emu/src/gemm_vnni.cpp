// AVX-512 VNNI kernel for MX-exact blocks (docs/numerics.md §5.2 class 1).
// A codes become u8 (integer value + offset), B codes s8; vpdpbusd sums four
// u8*s8 products per int32 lane exactly; each int32 lane starts at
// -offset * sum(B block) so it ends at the exact integer block dot D_b. Then
// per block: t = float(D_b) * 2^(sb...) (exact), acc = fma(t, 2^(sa...), acc):
// the product is exact, so the FMA is the contract's one RNE of acc + V_b.
// Register tile (vnni_tile, gemm_vnni.hpp, shared with the direct path):
// 4 rows x 32 columns; B packed [panel][block][k4][32][4]. Rows/columns with a
// NaN scale (or, for B, a factor outside [2^-126, 2^110]) are left to the exact scalar path
// (mx_add) afterwards.
#include "gemm_vnni.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "mxsim/bits.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::emu::gemm {

namespace {

// Scales the tile takes, as gemm_mx_direct.cpp: A's factor is only the FMA's
// multiplicand (any power of two but NaN); B's must keep float(D_b) * fb exact.
bool safe_a(uint8_t s) { return s != 0xFF; }
bool safe_b(uint8_t s, int shift) {
  const int e = int(s) - 127 - shift;
  return s != 0xFF && e >= -126 && e <= 110;
}

}  // namespace

bool run_mx_exact_vnni(const Panel& A, const Panel& B, Out out, bool accumulate, Format out_fmt) {
  const size_t I = A.R, J = B.R, K = A.K, KB = A.kb(), Kp = KB * 32;
  const size_t NP = (J + 31) / 32;
  const int sha = hd::int_shift(A.elem), shb = hd::int_shift(B.elem);
  const int offA = A.elem == Format::E2M1 ? 12 : 60;
  std::vector<uint8_t> au(I * Kp, uint8_t(offA));
  std::vector<float> fa(I * KB), fb(NP * KB * 32, 0.0f);
  std::vector<int32_t> corr(NP * KB * 32, 0);
  std::vector<uint8_t> bad_i(I, 0), bad_j(J, 0);
  std::vector<int8_t> bp(NP * KB * 1024, 0);
  int8_t lut_a[256], lut_b[256];
  for (uint32_t c = 0; c < 256; ++c) {
    const uint32_t ca = A.elem == Format::E2M1 ? (c & 0xF) : (c & 0x3F), cb = B.elem == Format::E2M1 ? (c & 0xF) : (c & 0x3F);
    lut_a[c] = int8_t(std::ldexp(decode(A.elem, ca), sha));
    lut_b[c] = int8_t(std::ldexp(decode(B.elem, cb), shb));
  }
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < I; ++i) {
    for (size_t k = 0; k < K; ++k) {
      const int v = lut_a[A.code[i * K + k] & 0xFF];
      au[i * Kp + k] = uint8_t(v + offA);
    }
    for (size_t b = 0; b < KB; ++b) {
      const uint8_t s = A.sbyte[i * KB + b];
      if (!safe_a(s)) bad_i[i] = 1;
      fa[i * KB + b] = safe_a(s) ? std::ldexp(1.0f, int(s) - 127 - sha) : 0.0f;
    }
  }
#pragma omp parallel for schedule(static)
  for (size_t j = 0; j < J; ++j) {
    const size_t p = j / 32, jj = j % 32;
    const uint32_t* bc = B.code.data() + j * K;
    for (size_t b = 0; b < KB; ++b) {
      const uint8_t s = B.sbyte[j * KB + b];
      if (!safe_b(s, shb)) bad_j[j] = 1;
      fb[(p * KB + b) * 32 + jj] = safe_b(s, shb) ? std::ldexp(1.0f, int(s) - 127 - shb) : 0.0f;
      int32_t sum = 0;
      for (size_t q = 0; q < 8; ++q)
        for (size_t t = 0; t < 4; ++t) {
          const size_t k = b * 32 + q * 4 + t;
          const int8_t v = k < K ? lut_b[bc[k] & 0xFF] : int8_t(0);
          sum += v;
          bp[(p * KB + b) * 1024 + q * 128 + jj * 4 + t] = v;
        }
      corr[(p * KB + b) * 32 + jj] = -offA * sum;
    }
  }
  const uint8_t* bi_all = bad_i.data();
  const bool bf = out_fmt == Format::BF16;
  const size_t nIt = (I + 3) / 4;
  const long ntask = long(NP * nIt);
#pragma omp parallel for schedule(static)
  for (long t = 0; t < ntask; ++t) {
    const size_t p = size_t(t) / nIt, it = size_t(t) % nIt;
    const size_t i0 = it * 4, nr = std::min<size_t>(4, I - i0);
    const size_t ncols = std::min<size_t>(32, J - p * 32);
    __mmask16 m0 = vnni_mask_lo(ncols), m1 = vnni_mask_hi(ncols);
    for (size_t c = 0; c < ncols; ++c)  // columns with an unsafe scale: scalar walk below
      if (bad_j[p * 32 + c]) (c < 16 ? m0 : m1) &= __mmask16(~(1u << (c % 16)));
    float* o = out.p + i0 * out.ld + p * 32;
    const uint8_t* a = au.data() + i0 * Kp;
    const int8_t* bpp = bp.data() + p * KB * 1024;
    const float* fap = fa.data() + i0 * KB;
    const float* fbp = fb.data() + p * KB * 32;
    const int32_t* cp = corr.data() + p * KB * 32;
    if (nr == 4) vnni_tile<4>(a, Kp, bpp, fap, KB, fbp, cp, o, out.ld, m0, m1, bi_all + i0, accumulate, bf);
    else
      for (size_t r = 0; r < nr; ++r)
        vnni_tile<1>(a + r * Kp, Kp, bpp, fap + r * KB, KB, fbp, cp, o + r * out.ld, out.ld, m0, m1, bi_all + i0 + r,
                     accumulate, bf);
  }
  // Outputs in a row or column with an unsafe scale are still untouched
  // (accumulate reads them): exact scalar block walk on the packed integers.
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < I; ++i)
    for (size_t j = 0; j < J; ++j) {
      if (!(bad_i[i] | bad_j[j])) continue;
      float& o = out.p[i * out.ld + j];
      float acc = accumulate ? o : 0.0f;
      for (size_t b = 0; b < KB; ++b) {
        int32_t s = 0;
        for (size_t k = b * 32; k < b * 32 + 32; ++k)
          s += (int32_t(au[i * Kp + k]) - offA) * bp[((j / 32) * KB + b) * 1024 + (k % 32) / 4 * 128 + (j % 32) * 4 + k % 4];
        acc = mx_add(acc, float(s), A.sbyte[i * KB + b], B.sbyte[j * KB + b], -sha - shb);
      }
      finish(o, acc, out_fmt);
    }
  return true;
}

}  // namespace mxsim::emu::gemm
