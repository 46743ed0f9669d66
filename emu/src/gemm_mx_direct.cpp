// Direct MX-exact grouped GEMM (docs/numerics.md §5.2 class 1) with AVX-512
// VNNI, reading the QuantizedTensors' packed codes (E2M1 nibbles, E2M3 bytes)
// without building code panels. One OpenMP parallel region per grouped call:
//   1. every group's A rows become u8 (integer value 2x or 8x the element, plus
//      an offset: 12 for E2M1, 60 for E2M3) through a 16/64-entry byte LUT
//      (vpshufb / vpermb); every group's B becomes s8 tiles
//      [32-column panel][32-block][k/4][32 columns][4] (vpdpbusd's layout),
//      decoded straight from contiguous rows, or, when B's contraction runs
//      along its storage rows (dgrad's W), transposed once per call by byte
//      permutes of decoded 32x32 tiles; per column and block the correction
//      -offset * sum(B block) that turns the u8 x s8 dot into D_b;
//   2. 4 x 32 register tiles (vnni_tile, gemm_vnni.hpp, shared with the panel
//      path): vpdpbusd sums four exact products per int32
//      lane; per block t = float(D_b) * 2^(sb - 127 - shift_b) (exact) and
//      acc = fma(t, 2^(sa - 127 - shift_a), acc): the contract's one RNE;
//      output rounding (BF16 RNE, canonical NaN) in the same tile;
//   3. rows with a NaN scale (0xFF) and columns with one outside [2^-126,
//      2^110] (after the integer shift) are left unwritten in 2 and
//      recomputed by the exact scalar block walk (mx_add).
// Every output is computed by one task in K order: thread-count independent.
//
// Two instruction sets share this driver through a policy type: Vnni (the
// above, AVX-512 VNNI + VBMI) and Avx2 (AVX2 only: the same u8/s8 tiles, but
// vpmaddubsw sums pairs of products into int16 lanes, each lane covering 16
// products of one column and block; vpmaddwd with ones then joins the two
// int16 halves of a column into int32 = D_b - correction; see avx2_tile).
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "cpu_dispatch.hpp"
#include "gemm_mx_avx2.hpp"
#include "gemm_mx_direct.hpp"
#include "gemm_scratch.hpp"
#include "gemm_vnni.hpp"
#include "mxsim/quantized_tensor.hpp"

namespace mxsim::emu::gemm {

namespace {

#define MXSIM_MX_TARGET "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,avx2"

// Scale bytes the vector tiles take (others: the exact scalar walk). Per block
// the tile forms t = float(D_b) * fb, then fma(t, fa, acc).
// A side: fa = 2^(sa - 127 - shift) is only the FMA's multiplicand (exact
// product, one rounding), so any FP32 power of two will do, subnormal ones
// included: every byte but the NaN 0xFF.
bool safe_a(uint8_t s) { return s != 0xFF; }
// B side: t must be exact with |D_b| < 2^17, so fb must be normal and <= 2^110.
bool safe_b(uint8_t s, int shift) {
  const int e = int(s) - 127 - shift;
  return s != 0xFF && e >= -126 && e <= 110;
}
inline float pow2_scale(uint8_t s, int shift) {
  const int e = int(s) - 127 - shift;  // normal powers of two built directly: ldexp is a libm call per block
  return e >= -126 && e <= 127 ? std::bit_cast<float>(uint32_t(e + 127) << 23) : std::ldexp(1.0f, e);
}

/// Storage access of one group of an MX operand seen as [R rows, K contraction].
struct View {
  const QuantizedTensor* q;
  size_t g, r0, R, K;
  bool contract_rows;
  bool contig;  // contraction along storage cols
  const uint8_t* base;
  size_t rb;
  bool e2m1;
  View(const MxOperand& o)
      : q(o.q), g(o.g), r0(o.contract_rows ? 0 : o.r0), R(o.R), K(o.contract_rows ? o.q->rows : o.q->cols),
        contract_rows(o.contract_rows), contig(o.contract_rows == o.q->transposed) {
    rb = q->row_bytes();
    base = q->data.data() + g * q->srows() * rb;
    e2m1 = q->spec.elem == Format::E2M1;
  }
  uint32_t code_st(size_t sr, size_t sc) const {
    const uint8_t b = base[sr * rb + (e2m1 ? sc / 2 : sc)];
    return e2m1 ? ((sc & 1) ? b >> 4 : b & 0xFu) : b & 0x3Fu;
  }
  /// Scale byte of panel row r, block b (same mapping as make_panel).
  uint8_t scale(size_t r, size_t b) const {
    size_t lr, lc;
    if (contract_rows) { lr = b * 32; lc = r; } else { lr = r0 + r; lc = b * 32; }
    const size_t sr = q->transposed ? lc : lr, sc = q->transposed ? lr : lc;
    return q->scale_bytes(g, sr / q->block_rows(), sc / q->block_cols());
  }
};

struct Lut {
  alignas(64) int8_t v[64];
};
Lut make_lut(Format f) {
  Lut l{};
  for (uint32_t c = 0; c < 64; ++c) {
    const uint32_t cc = f == Format::E2M1 ? (c & 0xF) : c;
    l.v[c] = int8_t(std::ldexp(decode(f, cc), hd::int_shift(f)));
  }
  return l;
}

/// 32 values of storage row sr starting at storage col sc0, n <= 32 of them
/// valid (rest 0), as int8 into dst[32]: the vector path when the 32 codes
/// start on a byte (E2M3 through vpermb), else one code at a time.
__attribute__((target(MXSIM_MX_TARGET))) inline void decode32_vbmi(const View& v, const Lut& lut, size_t sr, size_t sc0,
                                                                  size_t n, int8_t* dst) {
  if (n == 32 && !(v.e2m1 && (sc0 & 1))) {
    const uint8_t* src = v.base + sr * v.rb + (v.e2m1 ? sc0 / 2 : sc0);
    if (v.e2m1) {
      const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
      const __m256i lo = _mm256_and_si256(w, _mm256_set1_epi16(0x000F));
      const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x00F0)), 4);
      const __m256i codes = _mm256_or_si256(lo, hi);
      const __m256i tab = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(lut.v)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_shuffle_epi8(tab, codes));
    } else {
      const __m256i c = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src)), _mm256_set1_epi8(0x3F));
      const __m256i t0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lut.v));
      const __m256i t1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lut.v + 32));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_permutex2var_epi8(t0, c, t1));
    }
    return;
  }
  for (size_t t = 0; t < 32; ++t) dst[t] = t < n ? lut.v[v.code_st(sr, sc0 + t)] : int8_t(0);
}

/// The same with AVX2 only: E2M1 nibbles through vpshufb (16-entry table);
/// E2M3 (64 entries, not on the training recipes' hot path) one code at a time.
__attribute__((target("avx2,fma"))) inline void decode32_avx2(const View& v, const Lut& lut, size_t sr, size_t sc0,
                                                             size_t n, int8_t* dst) {
  if (n == 32 && v.e2m1 && !(sc0 & 1)) {
    const uint8_t* src = v.base + sr * v.rb + sc0 / 2;
    const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
    const __m256i lo = _mm256_and_si256(w, _mm256_set1_epi16(0x000F));
    const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x00F0)), 4);
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(lut.v)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_shuffle_epi8(tab, _mm256_or_si256(lo, hi)));
    return;
  }
  if (n == 32 && !v.e2m1) {
    const uint8_t* src = v.base + sr * v.rb + sc0;
    for (size_t t = 0; t < 32; ++t) dst[t] = lut.v[src[t] & 0x3F];
    return;
  }
  for (size_t t = 0; t < 32; ++t) dst[t] = t < n ? lut.v[v.code_st(sr, sc0 + t)] : int8_t(0);
}

struct GroupPack {
  MxGroup job;
  size_t I = 0, J = 0, K = 0, KB = 0, Kp = 0, NP = 0;
  int sha = 1, shb = 1, offA = 12;
  size_t au_off = 0, fa_off = 0, bp_off = 0, fb_off = 0, corr_off = 0, badi_off = 0, badj_off = 0;
  size_t ntask = 0, nIt = 0;
};

/// dst[t] = tmp[t] + off (u8) for t < 32; true if any tmp[t] != 0. Both
/// instruction-set policies have AVX2.
__attribute__((target("avx2"))) bool offset_block32(const int8_t* tmp, int off, uint8_t* dst) {
  const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(tmp));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_add_epi8(v, _mm256_set1_epi8(int8_t(off))));
  return !_mm256_testz_si256(v, v);
}

/// Row i of A as u8 (integer element + offset) and its per-block 2^(sa...).
template <class Isa>
void pack_a_row(const GroupPack& gp, const View& v, const Lut& lut, size_t i, uint8_t* au, float* fa, uint8_t& bad) {
  const size_t K = gp.K, KB = gp.KB;
  uint8_t* dst = au + i * gp.Kp;
  alignas(32) int8_t tmp[32];
  for (size_t b = 0; b < KB; ++b) {
    const size_t n = std::min<size_t>(32, K - b * 32);
    if (v.contig) Isa::decode32(v, lut, v.r0 + i, b * 32, n, tmp);
    else
      for (size_t t = 0; t < 32; ++t) tmp[t] = t < n ? lut.v[v.code_st(b * 32 + t, v.r0 + i)] : int8_t(0);
    const bool nz = offset_block32(tmp, gp.offA, dst + b * 32);
    const uint8_t s = v.scale(i, b);
    // An all-zero block (scale byte 0x00 from the quantizer) adds D_b = 0
    // exactly whatever its factor: 1 then, so it never sends the row to the
    // scalar walk. Only a NaN scale must still reach it.
    if (!nz && s != 0xFF) { fa[i * KB + b] = 1.0f; continue; }
    if (!safe_a(s)) bad = 1;
    fa[i * KB + b] = safe_a(s) ? pow2_scale(s, gp.sha) : 0.0f;
  }
}

/// Per-column scale factors of one B tile (shared by both instruction sets);
/// nz[jj]: column jj's block has a non-zero element (all-zero blocks get
/// factor 1, as in pack_a_row).
void b_tile_scales(const GroupPack& gp, const View& v, size_t p, size_t b, const bool* nz, float* fb, uint8_t* badj) {
  const size_t nj = std::min<size_t>(32, gp.J - p * 32), KB = gp.KB;
  for (size_t jj = 0; jj < 32; ++jj) {
    if (jj >= nj) { fb[(p * KB + b) * 32 + jj] = 0.0f; continue; }
    const uint8_t s = v.scale(p * 32 + jj, b);
    if (!nz[jj] && s != 0xFF) { fb[(p * KB + b) * 32 + jj] = 1.0f; continue; }
    if (!safe_b(s, gp.shb)) badj[p * 32 + jj] = 1;
    fb[(p * KB + b) * 32 + jj] = safe_b(s, gp.shb) ? pow2_scale(s, gp.shb) : 0.0f;
  }
}

/// One (panel p, block b) tile of B: 32 columns j, 32 contraction indices.
__attribute__((target(MXSIM_MX_TARGET))) void pack_b_tile_vnni(const GroupPack& gp, const View& v, const Lut& lut, size_t p, size_t b,
                                                  int8_t* bp, float* fb, int32_t* corr, uint8_t* badj) {
  const size_t J = gp.J, K = gp.K, KB = gp.KB;
  alignas(64) int8_t t[32][32];  // contig: [column jj][k]; else [k][column jj]
  const size_t nj = std::min<size_t>(32, J - p * 32), nk = std::min<size_t>(32, K - b * 32);
  int8_t* out = bp + (p * KB + b) * 1024;
  int32_t* cr = corr + (p * KB + b) * 32;
  if (v.contig) {
    for (size_t jj = 0; jj < 32; ++jj) {
      if (jj < nj) decode32_vbmi(v, lut, v.r0 + p * 32 + jj, b * 32, nk, t[jj]);
      else std::memset(t[jj], 0, 32);
    }
    // out[q*128 + jj*4 + tt] = t[jj][q*4 + tt]: dword (q) of row jj
    for (size_t jj = 0; jj < 32; ++jj) {
      const __m256i row = _mm256_load_si256(reinterpret_cast<const __m256i*>(t[jj]));
      const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(row, _mm256_set1_epi8(int8_t(0x80))), _mm256_setzero_si256());
      const int64_t sum = _mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 1) + _mm256_extract_epi64(s, 2) +
                          _mm256_extract_epi64(s, 3) - 32 * 128;
      cr[jj] = int32_t(-gp.offA * sum);
    }
    avx2_store_b_tile(t, out);
  } else {
    for (size_t kk = 0; kk < 32; ++kk) {
      if (kk < nk) decode32_vbmi(v, lut, b * 32 + kk, v.r0 + p * 32, nj, t[kk]);
      else std::memset(t[kk], 0, 32);
    }
    // out[q*128 + jj*4 + tt] = t[q*4 + tt][jj]: vpermt2b over 4 rows (128 bytes)
    alignas(64) uint8_t idx0[64], idx1[64];
    for (int jj = 0; jj < 16; ++jj)
      for (int tt = 0; tt < 4; ++tt) idx0[jj * 4 + tt] = uint8_t(tt * 32 + jj), idx1[jj * 4 + tt] = uint8_t(tt * 32 + jj + 16);
    const __m512i i0 = _mm512_load_si512(idx0), i1 = _mm512_load_si512(idx1);
    __m512i cs0 = _mm512_setzero_si512();  // int16 column sums, jj 0..31
    for (size_t q = 0; q < 8; ++q) {
      const __m512i z0 = _mm512_load_si512(t[q * 4]), z1 = _mm512_load_si512(t[q * 4 + 2]);
      _mm512_storeu_si512(out + q * 128, _mm512_permutex2var_epi8(z0, i0, z1));
      _mm512_storeu_si512(out + q * 128 + 64, _mm512_permutex2var_epi8(z0, i1, z1));
      for (int tt = 0; tt < 4; ++tt)
        cs0 = _mm512_add_epi16(cs0, _mm512_cvtepi8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(t[q * 4 + tt]))));
    }
    alignas(64) int16_t cs[32];
    _mm512_store_si512(cs, cs0);
    for (size_t jj = 0; jj < 32; ++jj) cr[jj] = -gp.offA * int32_t(cs[jj]);
  }
  bool nz[32];
  if (v.contig) {  // row jj of t is column jj's block
    for (size_t jj = 0; jj < 32; ++jj) {
      const __m256i r = _mm256_load_si256(reinterpret_cast<const __m256i*>(t[jj]));
      nz[jj] = !_mm256_testz_si256(r, r);
    }
  } else {  // byte jj of every row of t
    __m256i any = _mm256_setzero_si256();
    for (size_t kk = 0; kk < 32; ++kk) any = _mm256_or_si256(any, _mm256_load_si256(reinterpret_cast<const __m256i*>(t[kk])));
    const uint32_t zero = uint32_t(_mm256_movemask_epi8(_mm256_cmpeq_epi8(any, _mm256_setzero_si256())));
    for (size_t jj = 0; jj < 32; ++jj) nz[jj] = !((zero >> jj) & 1);
  }
  b_tile_scales(gp, v, p, b, nz, fb, badj);
}

/// The same tile for the AVX2 policy: decode 32 rows (transposing bytes when
/// the contraction runs along B's storage rows), sum each column, and move
/// dwords into [k/4][32 columns][4].
__attribute__((target("avx2,fma"))) void pack_b_tile_avx2(const GroupPack& gp, const View& v, const Lut& lut, size_t p, size_t b, int8_t* bp, float* fb,
                         int32_t* corr, uint8_t* badj,
                         void (*decode32)(const View&, const Lut&, size_t, size_t, size_t, int8_t*)) {
  const size_t J = gp.J, K = gp.K, KB = gp.KB;
  alignas(64) int8_t t[32][32];  // [column jj][k]
  const size_t nj = std::min<size_t>(32, J - p * 32), nk = std::min<size_t>(32, K - b * 32);
  int8_t* out = bp + (p * KB + b) * 1024;
  int32_t* cr = corr + (p * KB + b) * 32;
  if (v.contig) {
    for (size_t jj = 0; jj < 32; ++jj) {
      if (jj < nj) decode32(v, lut, v.r0 + p * 32 + jj, b * 32, nk, t[jj]);
      else std::memset(t[jj], 0, 32);
    }
  } else {
    alignas(64) int8_t u[32][32];  // [k][column jj]
    for (size_t kk = 0; kk < 32; ++kk) {
      if (kk < nk) decode32(v, lut, b * 32 + kk, v.r0 + p * 32, nj, u[kk]);
      else std::memset(u[kk], 0, 32);
    }
    for (size_t kk = 0; kk < 32; ++kk)
      for (size_t jj = 0; jj < 32; ++jj) t[jj][kk] = u[kk][jj];
  }
  bool nz[32];
  for (size_t jj = 0; jj < 32; ++jj) {
    int32_t sum = 0, any = 0;
    for (size_t k = 0; k < 32; ++k) sum += t[jj][k], any |= t[jj][k];
    cr[jj] = -gp.offA * sum;
    nz[jj] = any != 0;
  }
  avx2_store_b_tile(t, out);
  b_tile_scales(gp, v, p, b, nz, fb, badj);
}


/// Instruction-set policies of the driver below.
struct VnniIsa {
  static void decode32(const View& v, const Lut& l, size_t sr, size_t sc0, size_t n, int8_t* d) {
    decode32_vbmi(v, l, sr, sc0, n, d);
  }
  static void pack_b(const GroupPack& gp, const View& v, const Lut& lut, size_t p, size_t b, int8_t* bp, float* fb,
                     int32_t* corr, uint8_t* badj) {
    pack_b_tile_vnni(gp, v, lut, p, b, bp, fb, corr, badj);
  }
  /// nr (1..4) rows x 32 columns.
  static void tile(const GroupPack&, size_t nr, const uint8_t* a, size_t Kp, const int8_t* bpp, const float* fap, size_t KB,
                   const float* fbp, const int32_t* cp, float* o, size_t ld, uint32_t cols, const uint8_t* bi, bool acc,
                   bool bf) {
    const __mmask16 m0 = __mmask16(cols & 0xFFFFu), m1 = __mmask16(cols >> 16);
    if (nr == 4) vnni_tile<4>(a, Kp, bpp, fap, KB, fbp, cp, o, ld, m0, m1, bi, acc, bf);
    else
      for (size_t r = 0; r < nr; ++r)
        vnni_tile<1>(a + r * Kp, Kp, bpp, fap + r * KB, KB, fbp, cp, o + r * ld, ld, m0, m1, bi + r, acc, bf);
  }
};

struct Avx2Isa {
  static void decode32(const View& v, const Lut& l, size_t sr, size_t sc0, size_t n, int8_t* d) {
    decode32_avx2(v, l, sr, sc0, n, d);
  }
  static void pack_b(const GroupPack& gp, const View& v, const Lut& lut, size_t p, size_t b, int8_t* bp, float* fb,
                     int32_t* corr, uint8_t* badj) {
    pack_b_tile_avx2(gp, v, lut, p, b, bp, fb, corr, badj, &decode32_avx2);
  }
  template <bool WIDE>
  static void tile_as(size_t nr, const uint8_t* a, size_t Kp, const int8_t* bpp, const float* fap, size_t KB,
                      const float* fbp, const int32_t* cp, float* o, size_t ld, uint32_t cols, const uint8_t* bi, bool acc,
                      bool bf) {
    for (int c0 : {0, 16}) {
      if (!((cols >> c0) & 0xFFFFu)) continue;
      size_t r = 0;
      // 4 rows share each B load (measured faster than 2 x 2 rows despite a few spills)
      if (nr == 4) {
        avx2_tile16<4, WIDE>(a, Kp, bpp, fap, KB, fbp, cp, o, ld, cols, c0, bi, acc, bf);
        continue;
      }
      for (; r + 2 <= nr; r += 2)
        avx2_tile16<2, WIDE>(a + r * Kp, Kp, bpp, fap + r * KB, KB, fbp, cp, o + r * ld, ld, cols, c0, bi + r, acc, bf);
      if (r < nr) avx2_tile16<1, WIDE>(a + r * Kp, Kp, bpp, fap + r * KB, KB, fbp, cp, o + r * ld, ld, cols, c0, bi + r, acc, bf);
    }
  }
  static void tile(const GroupPack& gp, size_t nr, const uint8_t* a, size_t Kp, const int8_t* bpp, const float* fap,
                   size_t KB, const float* fbp, const int32_t* cp, float* o, size_t ld, uint32_t cols, const uint8_t* bi,
                   bool acc, bool bf) {
    if (gp.sha == 3 && gp.shb == 3) tile_as<true>(nr, a, Kp, bpp, fap, KB, fbp, cp, o, ld, cols, bi, acc, bf);
    else tile_as<false>(nr, a, Kp, bpp, fap, KB, fbp, cp, o, ld, cols, bi, acc, bf);
  }
};

template <class Isa>
bool run_direct(const std::vector<MxGroup>& jobs, bool accumulate, Format out_fmt) {
  for (const auto& j : jobs) {
    for (const MxOperand* o : {&j.a, &j.b}) {
      const Format f = o->q->spec.elem;
      if (f != Format::E2M1 && f != Format::E2M3) return false;
    }
    if (View(j.a).K != View(j.b).K) return false;
  }
  std::vector<GroupPack> gps;
  size_t au_n = 0, fa_n = 0, bp_n = 0, fb_n = 0, bi_n = 0, bj_n = 0, ntask = 0;
  std::vector<size_t> task_start;
  for (const auto& j : jobs) {
    GroupPack gp;
    gp.job = j;
    gp.I = j.a.R;
    gp.J = j.b.R;
    gp.K = View(j.a).K;
    gp.KB = (gp.K + 31) / 32;
    gp.Kp = gp.KB * 32;
    gp.NP = (gp.J + 31) / 32;
    gp.sha = hd::int_shift(j.a.q->spec.elem);
    gp.shb = hd::int_shift(j.b.q->spec.elem);
    gp.offA = j.a.q->spec.elem == Format::E2M1 ? 12 : 60;
    if (gp.I == 0 || gp.J == 0) continue;
    gp.au_off = au_n, au_n += gp.I * gp.Kp;
    gp.fa_off = fa_n, fa_n += gp.I * gp.KB;
    gp.bp_off = bp_n, bp_n += gp.NP * gp.KB * 1024;
    gp.fb_off = fb_n, gp.corr_off = fb_n, fb_n += gp.NP * gp.KB * 32;
    gp.badi_off = bi_n, bi_n += gp.I + 4;
    gp.badj_off = bj_n, bj_n += gp.NP * 32;
    gp.nIt = (gp.I + 3) / 4;
    gp.ntask = gp.NP * gp.nIt;
    task_start.push_back(ntask);
    ntask += gp.ntask;
    gps.push_back(gp);
  }
  if (gps.empty()) return true;
  // Every element of these is written by the packing loops: no zero fill. They
  // live in the thread's scratch arena (gemm_scratch.hpp): fresh buffers would
  // be page-faulted again on every call.
  ScratchLayout lay;
  const size_t o_au = lay.add<uint8_t>(au_n), o_fa = lay.add<float>(fa_n), o_fb = lay.add<float>(fb_n),
               o_bp = lay.add<int8_t>(bp_n), o_corr = lay.add<int32_t>(fb_n);
  std::byte* ws = thread_scratch(lay.bytes);
  uint8_t* const au = scratch_at<uint8_t>(ws, o_au);
  float* const fa = scratch_at<float>(ws, o_fa);
  float* const fb = scratch_at<float>(ws, o_fb);
  int8_t* const bp = scratch_at<int8_t>(ws, o_bp);
  int32_t* const corr = scratch_at<int32_t>(ws, o_corr);
  std::vector<uint8_t> badi(bi_n, 0), badj(bj_n, 0);
  std::vector<Lut> la, lb;
  for (const auto& gp : gps) la.push_back(make_lut(gp.job.a.q->spec.elem)), lb.push_back(make_lut(gp.job.b.q->spec.elem));
  // work lists for packing
  std::vector<std::pair<uint32_t, uint32_t>> arows, btiles;  // (group, row) / (group, p*KB+b)
  for (uint32_t gi = 0; gi < gps.size(); ++gi) {
    for (uint32_t i = 0; i < gps[gi].I; ++i) arows.emplace_back(gi, i);
    for (uint32_t t = 0; t < gps[gi].NP * gps[gi].KB; ++t) btiles.emplace_back(gi, t);
  }
  const bool bf = out_fmt == Format::BF16;
  bool any_bad = false;
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (size_t n = 0; n < arows.size(); ++n) {
      const GroupPack& gp = gps[arows[n].first];
      const View v(gp.job.a);
      pack_a_row<Isa>(gp, v, la[arows[n].first], arows[n].second, au + gp.au_off, fa + gp.fa_off,
                 badi[gp.badi_off + arows[n].second]);
    }
#pragma omp for schedule(static)
    for (size_t n = 0; n < btiles.size(); ++n) {
      const GroupPack& gp = gps[btiles[n].first];
      const View v(gp.job.b);
      const size_t p = btiles[n].second / gp.KB, b = btiles[n].second % gp.KB;
      Isa::pack_b(gp, v, lb[btiles[n].first], p, b, bp + gp.bp_off, fb + gp.fb_off,
                  corr + gp.corr_off, badj.data() + gp.badj_off);
    }
#pragma omp single
    {
      for (auto x : badi) any_bad |= x != 0;
      for (auto x : badj) any_bad |= x != 0;
    }
    // Task t: rows 4 * it .. of group gi against its column panel p.
    auto task = [&](size_t t, size_t& gi, size_t& p, size_t& i0) {
      gi = size_t(std::upper_bound(task_start.begin(), task_start.end(), t) - task_start.begin()) - 1;
      const size_t lt = t - task_start[gi];
      p = lt / gps[gi].nIt;
      i0 = (lt % gps[gi].nIt) * 4;
    };
#pragma omp for schedule(static)
    for (size_t t = 0; t < ntask; ++t) {
      size_t gi, p, i0;
      task(t, gi, p, i0);
      const GroupPack& gp = gps[gi];
      const size_t nr = std::min<size_t>(4, gp.I - i0);
      if (t + 1 < ntask) {
        // The next tile's output rows lie ld floats apart, a page or more for
        // wide outputs, where the hardware prefetchers do not follow; with
        // accumulate (wgrad into main_grad) the tile waits on their loads.
        // Fetch them while this tile computes.
        size_t gn, pn, in;
        task(t + 1, gn, pn, in);
        const MxGroup& jn = gps[gn].job;
        for (size_t r = in; r < std::min<size_t>(in + 4, gps[gn].I); ++r) {
          const float* on = jn.out + r * jn.ld + pn * 32;
          const size_t last = std::min<size_t>(32, gps[gn].J - pn * 32) - 1;
          __builtin_prefetch(on, 1);
          __builtin_prefetch(on + std::min<size_t>(16, last), 1);
          __builtin_prefetch(on + last, 1);
        }
      }
      const size_t ncols = std::min<size_t>(32, gp.J - p * 32);
      uint32_t cols = ncols >= 32 ? 0xFFFFFFFFu : (1u << ncols) - 1;
      const uint8_t* bj = badj.data() + gp.badj_off + p * 32;
      for (int c = 0; c < 32; ++c)
        if (bj[c]) cols &= ~(1u << c);
      float* o = gp.job.out + i0 * gp.job.ld + p * 32;
      const uint8_t* a = au + gp.au_off + i0 * gp.Kp;
      const int8_t* bpp = bp + gp.bp_off + p * gp.KB * 1024;
      const float* fap = fa + gp.fa_off + i0 * gp.KB;
      const float* fbp = fb + gp.fb_off + p * gp.KB * 32;
      const int32_t* cp = corr + gp.corr_off + p * gp.KB * 32;
      const uint8_t* bi = badi.data() + gp.badi_off + i0;
      Isa::tile(gp, nr, a, gp.Kp, bpp, fap, gp.KB, fbp, cp, o, gp.job.ld, cols, bi, accumulate, bf);
    }
    if (any_bad) {
      // Rows or columns with an unsafe scale: exact scalar block walk on the
      // packed integers; those outputs are still untouched (accumulate reads them).
#pragma omp for schedule(dynamic, 16)
      for (size_t n = 0; n < arows.size(); ++n) {
        const size_t gi = arows[n].first, i = arows[n].second;
        const GroupPack& gp = gps[gi];
        const View va(gp.job.a), vb(gp.job.b);
        const bool rb = badi[gp.badi_off + i];
        for (size_t j = 0; j < gp.J; ++j) {
          if (!rb && !badj[gp.badj_off + j]) continue;
          float& out = gp.job.out[i * gp.job.ld + j];
          float acc = accumulate ? out : 0.0f;
          const size_t p = j / 32, jj = j % 32;
          for (size_t b = 0; b < gp.KB; ++b) {
            int32_t s = 0;
            const int8_t* bt = bp + gp.bp_off + (p * gp.KB + b) * 1024;
            for (size_t k = 0; k < 32; ++k)
              s += (int32_t(au[gp.au_off + i * gp.Kp + b * 32 + k]) - gp.offA) * bt[(k / 4) * 128 + jj * 4 + k % 4];
            acc = mx_add(acc, float(s), va.scale(i, b), vb.scale(j, b), -gp.sha - gp.shb);
          }
          finish(out, acc, out_fmt);
        }
      }
    }
  }
  return true;
}

}  // namespace

MxDirectIsa mx_direct_isa(CpuPath path) {
  if (path == CpuPath::Avx512 && cpu_has_avx512_vnni() && cpu_has_avx512_vbmi()) return MxDirectIsa::Vnni;
  if (path == CpuPath::Avx512 && !cpu_has_avx512_vnni()) return MxDirectIsa::Avx2;
  if (path == CpuPath::Avx2) return MxDirectIsa::Avx2;
  return MxDirectIsa::None;
}

bool run_mx_exact_direct(const std::vector<MxGroup>& jobs, bool accumulate, Format out_fmt, MxDirectIsa isa) {
  switch (isa) {
    case MxDirectIsa::Vnni:
      if (!run_direct<VnniIsa>(jobs, accumulate, out_fmt)) return false;
      note_kernel(KernelSlot::MxExact, kernel::kMxVnniDirect);
      return true;
    case MxDirectIsa::Avx2:
      if (!run_direct<Avx2Isa>(jobs, accumulate, out_fmt)) return false;
      note_kernel(KernelSlot::MxExact, kernel::kMxAvx2);
      return true;
    case MxDirectIsa::None: return false;
  }
  return false;
}

}  // namespace mxsim::emu::gemm
