// MX quantization of BF16 sources: rowwise, columnwise and both orientations
// from one read (include/mxsim/hip/codec.hpp). The codes and scales are
// those of emu::quantize on the FP32 widening of the values (exact).
//
// A BF16 word holds two elements, and encode_by_add's argument (rounding.hpp)
// holds in BF16 arithmetic as well, so on GPUs with a packed BF16 FMA the
// element step runs on both halves of a 32-bit register at once. For x in a
// block with scale exponent s:
//  - ee, x's binade after scaling, is x's exponent field minus s, clamped
//    below at the format's smallest normal binade (above, the block's own
//    scale bounds it: packed_block_ok);
//  - M = 2^(ee + 7 - man_bits) has the target's ulp at ee as its BF16 ulp
//    (7 fraction bits), and |x| * 2^-s < 2^(ee+1) <= M;
//  - fma.rn.bf16x2(|x|, 2^-s, M) rounds the exact |x| * 2^-s + M once, RNE:
//    M plus k target ulps, k = |x| * 2^-s in ulps rounded to nearest even;
//  - the code magnitude is k + (ee - emin) << man_bits, saturated at
//    max_code; the sign is x's.
// A packed constant holds one value per 16-bit half (lo + hi * 2^16, mod
// 2^32): a 32-bit add or subtract is then exact per half whenever each
// half's result lies in [0, 2^16), which every intermediate below does.
// Blocks outside the packed step's conditions (NaN/Inf, extreme scales, RZ
// and SR, FNUZ formats, AMD) take BlockQuant::encode per element.
// GpuMxQuantize.*Bf16EveryValueUnderEveryScale compare both paths with
// emu::quantize on every BF16 value under every scale the rules reach.
#include "check.hpp"  // first: the GPU runtime before Random123 (its asserts in device code)
#include "mx_bf16.hpp"

#include <stdexcept>
#include <string>

#include "mx_dispatch.hpp"
#include "mxsim/bits.hpp"
#include "mxsim/hd/quant_block.hpp"
#include "mxsim/hip/codec.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::hip {
namespace {

using detail::aligned;
using detail::check_mx_spec;
using detail::stream_of;
using detail::with_mode;
using detail::with_mx_format;
constexpr unsigned kThreads = 256;
unsigned grid_for(size_t work_items) { return detail::grid_for(work_items, kThreads); }
constexpr int kWarps = kThreads / 32;

__device__ inline uint32_t max_u16x2(uint32_t a, uint32_t b) {
#if MXSIM_HAS_PACKED_BF16
  return mxsim_max_u16x2(a, b);
#else
  const uint32_t lo = (a & 0xFFFFu) > (b & 0xFFFFu) ? (a & 0xFFFFu) : (b & 0xFFFFu);
  const uint32_t hi = (a >> 16) > (b >> 16) ? (a >> 16) : (b >> 16);
  return lo | hi << 16;
#endif
}

// Both 16-bit halves' amax of words w[0..n): |x| bits order as |x|, NaN above Inf.
template <int N>
__device__ inline uint32_t amax_u16x2(const uint32_t (&w)[N]) {
  uint32_t m = 0;
#pragma unroll
  for (int k = 0; k < N; ++k) m = max_u16x2(m, w[k] & 0x7FFF7FFFu);
  return m;
}

// The packed step's block constants, one value per half.
struct PackedBlock {
  uint32_t p2;    // 2^-s, BF16 bits
  uint32_t lo2;   // smallest exponent field taken, << 7: 127 + emin + s
  uint32_t c1;    // M's bits minus the clamped exponent field << 7
  uint32_t c2;    // (s + 127 + emin) << man_bits
  uint32_t max2;  // max_code
};

// True when every element of an E8M0 block takes the packed step: finite
// block; 2^-s a normal BF16 (s <= 126); the clamp floor at least 9 binades
// above BF16's subnormals, so that a subnormal x (flushed or not by the FMA)
// rounds to zero either way; and no element above the format's largest
// binade (true of every scale rule; checked, not assumed).
template <Format F>
__device__ inline bool packed_block_ok(const hd::BlockQuant& bq, uint32_t amax16) {
  constexpr FormatSpec f = spec_of(F);
  const int s = bq.scale_exp;
  return !bq.zero_codes && s <= 126 && 127 + f.emin() + s >= 9 && int(amax16 >> 7) - 127 - s <= f.emax();
}

template <Format F>
__device__ inline PackedBlock packed_block(int s_lo, int s_hi) {
  constexpr FormatSpec f = spec_of(F);
  const auto pair = [](int lo, int hi) { return uint32_t(lo) + (uint32_t(hi) << 16); };
  return {pair((127 - s_lo) << 7, (127 - s_hi) << 7),
          pair((127 + f.emin() + s_lo) << 7, (127 + f.emin() + s_hi) << 7),
          pair((7 - f.man_bits - s_lo) * 128, (7 - f.man_bits - s_hi) * 128),
          pair((s_lo + 127 + f.emin()) << f.man_bits, (s_hi + 127 + f.emin()) << f.man_bits),
          pair(int(f.max_code()), int(f.max_code()))};
}

// The two codes of BF16 word w (low half: the first element), each in the low
// bits of its 16-bit half.
template <Format F>
__device__ inline uint32_t encode2_bf16(uint32_t w, const PackedBlock& k) {
  constexpr FormatSpec f = spec_of(F);
#if MXSIM_HAS_PACKED_BF16
  const uint32_t e = mxsim_max_u16x2(w & 0x7F807F80u, k.lo2);  // clamped exponent fields, << 7
  const uint32_t m = e + k.c1;                                   // M
  const uint32_t sum = mxsim_fma_bf16x2(w & 0x7FFF7FFFu, k.p2, m);
  const uint32_t mag = mxsim_min_u16x2(sum - m + (e >> (7 - f.man_bits)) - k.c2, k.max2);
  return mag | ((w >> (16 - f.bits)) & (f.sign_bit() * 0x10001u));
#else
  (void)w, (void)k;
  return 0u;  // not called: packed_ok() is false without the packed FMA
#endif
}

// The per-element path of one word (two elements): encode() through the
// block step (NaN/Inf blocks, extreme scales, RZ and SR). Inline in the
// rowwise block; out of line in the columnwise one, whose 32 unrolled call
// sites in 42 instantiations per arch had doubled every binary's size (a
// call in the rowwise kernel costs it 12 % of its bandwidth, measured).
template <Format F, RoundMode M>
__device__ inline uint32_t encode2_per_element(const hd::BlockQuant& lo, const hd::BlockQuant& hi, uint32_t w,
                                               uint32_t r_lo, uint32_t r_hi) {
  constexpr FormatSpec f = spec_of(F);
  return lo.encode(f, w << 16, M, r_lo) | hi.encode(f, w & 0xFFFF0000u, M, r_hi) << 16;
}
template <Format F, RoundMode M>
__device__ __noinline__ uint32_t encode2_per_element_call(const hd::BlockQuant& lo, const hd::BlockQuant& hi,
                                                          uint32_t w, uint32_t r_lo, uint32_t r_hi) {
  return encode2_per_element<F, M>(lo, hi, w, r_lo, r_hi);
}

template <Format F, RoundMode M>
__host__ __device__ constexpr bool packed_ok() {
  return MXSIM_HAS_PACKED_BF16 && M == RoundMode::RNE && spec_of(F).nan != NanKind::NegZero;
}

// Codes of words w whose low halves belong to block `lo` and high halves to
// block `hi` (the same block rowwise, two columns' blocks columnwise).
// sr(i, half) is the Philox index of word i's element `half`.
template <Format F, RoundMode M, int N, typename SrIndex>
__device__ inline void encode_words(const uint32_t (&w)[N], const hd::BlockQuant& lo, uint32_t amax_lo,
                                    const hd::BlockQuant& hi, uint32_t amax_hi, const QuantSpec& spec, SrIndex sr,
                                    uint32_t (&code)[N]) {
  if constexpr (packed_ok<F, M>()) {
    if (packed_block_ok<F>(lo, amax_lo) && packed_block_ok<F>(hi, amax_hi)) {
      const PackedBlock k = packed_block<F>(lo.scale_exp, hi.scale_exp);
#pragma unroll
      for (int i = 0; i < N; ++i) code[i] = encode2_bf16<F>(w[i], k);
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const uint32_t r0 = M == RoundMode::Stochastic ? hd::sr_word(spec, sr(i, 0)) : 0u;
    const uint32_t r1 = M == RoundMode::Stochastic ? hd::sr_word(spec, sr(i, 1)) : 0u;
    code[i] = encode2_per_element<F, M>(lo, hi, w[i], r0, r1);
  }
}

// One rowwise block: 16 words (32 elements of one row, in order) to its scale
// byte and its 16 (E2M1) or 32 code bytes at `out`, 16-byte aligned. `index0`
// is the logical index of its first element (SR).
template <Format F, RoundMode M>
__device__ inline void rowwise_block(const uint32_t (&w)[16], const QuantSpec& spec, uint64_t index0,
                                     uint8_t* __restrict__ out, uint8_t* __restrict__ scale) {
  constexpr FormatSpec f = spec_of(F);
  const uint32_t m2 = amax_u16x2(w);
  const uint32_t amax16 = (m2 & 0xFFFFu) > (m2 >> 16) ? (m2 & 0xFFFFu) : (m2 >> 16);
  const hd::BlockQuant bq = hd::block_quant_e8m0(spec.rule, f, amax16 << 16);
  *scale = bq.scale_byte;
  uint32_t code[16];
  encode_words<F, M>(w, bq, amax16, bq, amax16, spec, [&](int i, int h) { return index0 + 2 * i + h; }, code);
  uint4* dst = reinterpret_cast<uint4*>(out);
  if constexpr (f.bits == 4) {  // element 2i in the low nibble of byte i
    uint32_t o[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t t[4];
#pragma unroll
      for (int p = 0; p < 4; ++p) t[p] = code[4 * j + p] | code[4 * j + p] >> 12;  // byte 0: both nibbles
      o[j] = MXSIM_BYTE_PERM(MXSIM_BYTE_PERM(t[0], t[1], 0x0040u), MXSIM_BYTE_PERM(t[2], t[3], 0x0040u), 0x5410u);
    }
    dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
  } else {  // one code per byte: bytes 0 and 2 of each word
    uint32_t o[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) o[j] = MXSIM_BYTE_PERM(code[2 * j], code[2 * j + 1], 0x6420u);
    dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
    dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
  }
}

// Rowwise, one lane per block (cols % 32 == 0: block b is elements
// [32 b, 32 b + 32) and its codes sit at b times the block's code bytes, as
// rows are not padded): four 16-byte loads, one or two 16-byte stores, and a
// scale byte beside its neighbours'.
template <Format F, RoundMode M>
__global__ void mx_rowwise_bf16_lane_kernel(const uint16_t* __restrict__ x, uint8_t* __restrict__ data,
                                            uint8_t* __restrict__ scales, size_t nblk, QuantSpec spec) {
  constexpr size_t block_bytes = spec_of(F).bits == 4 ? 16 : 32;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t b = size_t(blockIdx.x) * blockDim.x + threadIdx.x; b < nblk; b += stride) {
    uint32_t w[16];
    const uint4* src = reinterpret_cast<const uint4*>(x + b * 32);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint4 v = src[q];
      w[4 * q] = v.x, w[4 * q + 1] = v.y, w[4 * q + 2] = v.z, w[4 * q + 3] = v.w;
    }
    rowwise_block<F, M>(w, spec, uint64_t(b) * 32, data + b * block_bytes, scales + b);
  }
}

// Columnwise, lane unit: rows [r0, r0 + 32) of columns c, c + 1, one word per
// row (w[k]: row r0 + k; zeros past the last row), so that the words' halves'
// amaxes are the two columns' block amaxes with no shuffle. colwise_codes gives
// the two columns' code words (E2M1: two rows per byte, the first in the low
// nibble; rows past the end: code 0) and scale bytes; the stores are the
// caller's.
template <Format F>
struct ColCodes {
  static constexpr int nw = spec_of(F).bits == 4 ? 4 : 8;  // code words per column
  uint32_t lo[nw], hi[nw];
  uint8_t scale_lo, scale_hi;
};
template <Format F, RoundMode M>
__device__ inline ColCodes<F> colwise_codes(const uint32_t (&w)[32], int nr, size_t r0, size_t c, size_t cols,
                                            const QuantSpec& spec) {
  constexpr FormatSpec f = spec_of(F);
  constexpr bool fp4 = f.bits == 4;
  const uint32_t m2 = amax_u16x2(w);
  const hd::BlockQuant lo = hd::block_quant_e8m0(spec.rule, f, m2 << 16);
  const hd::BlockQuant hi = hd::block_quant_e8m0(spec.rule, f, m2 & 0xFFFF0000u);
  ColCodes<F> out;
  out.scale_lo = lo.scale_byte;
  out.scale_hi = hi.scale_byte;
  // Codes straight into the two columns' output words, four bytes at a time,
  // so that no array of codes stays live: 32 words of input are registers enough.
  auto emit = [&](auto code_of) {
#pragma unroll
    for (int q = 0; q < ColCodes<F>::nw; ++q) {
      uint32_t t[4];  // byte 0: column lo's byte, byte 2: column hi's
#pragma unroll
      for (int j = 0; j < 4; ++j) t[j] = fp4 ? code_of(8 * q + 2 * j) | code_of(8 * q + 2 * j + 1) << 4 : code_of(4 * q + j);
      out.lo[q] = MXSIM_BYTE_PERM(MXSIM_BYTE_PERM(t[0], t[1], 0x0040u), MXSIM_BYTE_PERM(t[2], t[3], 0x0040u), 0x5410u);
      out.hi[q] = MXSIM_BYTE_PERM(MXSIM_BYTE_PERM(t[0], t[1], 0x0062u), MXSIM_BYTE_PERM(t[2], t[3], 0x0062u), 0x5410u);
    }
  };
  if constexpr (packed_ok<F, M>()) {
    if (packed_block_ok<F>(lo, m2 & 0xFFFFu) && packed_block_ok<F>(hi, m2 >> 16)) {
      const PackedBlock k = packed_block<F>(lo.scale_exp, hi.scale_exp);
      emit([&](int i) { return encode2_bf16<F>(w[i], k); });  // rows past the end: w = +0, code 0
      return out;
    }
  }
  emit([&](int i) {
    if (i >= nr) return 0u;
    const uint64_t index = uint64_t(r0 + i) * cols + c;
    const uint32_t r_lo = M == RoundMode::Stochastic ? hd::sr_word(spec, index) : 0u;
    const uint32_t r_hi = M == RoundMode::Stochastic ? hd::sr_word(spec, index + 1) : 0u;
    return encode2_per_element_call<F, M>(lo, hi, w[i], r_lo, r_hi);
  });
  return out;
}

// A lane unit: rows [r0, r0 + nr) of columns c, c + 1 (in: c < cols).
struct ColUnit {
  size_t c, r0;
  int nr;  // rows of the unit (at most 32)
  bool in;
};
__device__ inline void load_col_words(const uint16_t* __restrict__ x, const ColUnit& t, size_t cols, uint32_t (&w)[32]) {
  const uint32_t* src = reinterpret_cast<const uint32_t*>(x + t.r0 * cols + t.c);
#pragma unroll
  for (int k = 0; k < 32; ++k) w[k] = t.in && k < t.nr ? src[size_t(k) * (cols / 2)] : 0u;
}

// Columnwise through a CTA tile: the CTA's kWarps warps take consecutive row
// blocks of the same 64 columns (lane l: columns 2l, 2l + 1 of its warp's
// block), put their codes and scale bytes in shared memory, and the CTA then
// writes each column's kWarps blocks as one run: 16-byte stores of adjacent
// threads filling whole sectors, and the scale bytes 8 at a time. Stored
// straight from each lane, every code store filled half a sector (E2M1) and
// every scale byte took one: L2 throughput, not DRAM, bounded that kernel
// (ncu on an H200, MXFP4: L2 87 %, DRAM 36 %, 0.44x the copy; tiled 0.70x).
// Shared rows: column 2l at row l, 2l + 1 at row 32 + l, 16 bytes of padding
// per row, so that the lanes of a quarter warp storing 16 bytes each hit
// distinct banks. (Lane units of 16 rows, half the registers, measured slower.)
template <Format F>
struct ColTile {
  static constexpr int block_bytes = spec_of(F).bits == 4 ? 16 : 32;  // code bytes of one column's block
  static constexpr int row_bytes = kWarps * block_bytes + 16;
  static constexpr int codes_bytes = 64 * row_bytes, scales_bytes = 64 * kWarps;
  __device__ static int row_of(int col) { return (col & 1) * 32 + col / 2; }
};

// The lane unit of warp wib of a tile whose first row block is bk0.
__device__ inline ColUnit tile_unit(size_t cg, size_t bk0, unsigned wib, size_t rows, size_t cols) {
  ColUnit t;
  t.c = cg * 64 + 2 * (threadIdx.x & 31u);
  t.r0 = (bk0 + wib) * 32;
  t.nr = t.r0 < rows ? int(rows - t.r0 < 32 ? rows - t.r0 : 32) : 0;  // a warp past the last block: no rows
  t.in = t.c < cols;
  return t;
}

// A lane's codes and scale bytes into the tile's shared buffers.
template <Format F>
__device__ inline void stage_col_codes(const ColCodes<F>& k, unsigned wib, uint8_t* codes, uint8_t* sc) {
  using Tile = ColTile<F>;
  const unsigned lane = threadIdx.x & 31u;
  uint4* lo = reinterpret_cast<uint4*>(codes + Tile::row_of(2 * lane) * Tile::row_bytes + wib * Tile::block_bytes);
  uint4* hi = reinterpret_cast<uint4*>(codes + Tile::row_of(2 * lane + 1) * Tile::row_bytes + wib * Tile::block_bytes);
#pragma unroll
  for (int q = 0; q < ColCodes<F>::nw; q += 4) {
    lo[q / 4] = make_uint4(k.lo[q], k.lo[q + 1], k.lo[q + 2], k.lo[q + 3]);
    hi[q / 4] = make_uint4(k.hi[q], k.hi[q + 1], k.hi[q + 2], k.hi[q + 3]);
  }
  sc[(2 * lane) * kWarps + wib] = k.scale_lo;
  sc[(2 * lane + 1) * kWarps + wib] = k.scale_hi;
}

// The whole CTA writes the staged tile (after a __syncthreads): each column's
// run of blocks as 16-byte stores from adjacent threads, its scale bytes as one
// 8-byte store; byte stores for a short tile or unaligned storage.
template <Format F>
__device__ inline void store_col_tile(const uint8_t* codes, const uint8_t* sc, size_t cg, size_t bk0, size_t rows,
                                      size_t cols, uint8_t* __restrict__ data, uint8_t* __restrict__ scales) {
  using Tile = ColTile<F>;
  constexpr bool fp4 = spec_of(F).bits == 4;
  constexpr int bb = Tile::block_bytes, rowb = Tile::row_bytes;
  const size_t nbk = (rows + 31) / 32, rb = fp4 ? (rows + 1) / 2 : rows;
  const size_t ncol = cols - cg * 64 < 64 ? cols - cg * 64 : 64;
  const size_t nb = nbk - bk0 < size_t(kWarps) ? nbk - bk0 : size_t(kWarps);  // blocks of this tile
  const size_t trows = rows - bk0 * 32 < nb * 32 ? rows - bk0 * 32 : nb * 32;
  const size_t nbytes = fp4 ? (trows + 1) / 2 : trows;  // code bytes of one column in this tile
  uint8_t* out0 = data + cg * 64 * rb + bk0 * bb;        // the tile's first column's first byte
  if (nbytes == size_t(kWarps * bb) && rb % 16 == 0 && aligned(data, 16)) {
    constexpr int per_col = kWarps * bb / 16;  // 16-byte chunks per column
    for (int i = threadIdx.x; i < 64 * per_col; i += kThreads) {
      const int col = i / per_col, q = i % per_col;
      if (size_t(col) < ncol)
        *reinterpret_cast<uint4*>(out0 + col * rb + 16 * q) =
            *reinterpret_cast<const uint4*>(codes + Tile::row_of(col) * rowb + 16 * q);
    }
  } else {
    for (size_t i = threadIdx.x; i < 64 * nbytes; i += kThreads) {
      const size_t col = i / nbytes, b = i % nbytes;
      if (col < ncol) out0[col * rb + b] = codes[Tile::row_of(int(col)) * rowb + b];
    }
  }
  uint8_t* s0 = scales + cg * 64 * nbk + bk0;
  if (nb == size_t(kWarps) && nbk % 8 == 0 && aligned(scales, 8)) {
    static_assert(kWarps == 8, "one 8-byte store per column");
    if (threadIdx.x < ncol)
      *reinterpret_cast<uint64_t*>(s0 + threadIdx.x * nbk) = *reinterpret_cast<const uint64_t*>(sc + threadIdx.x * kWarps);
  } else {
    for (size_t i = threadIdx.x; i < 64 * nb; i += kThreads) {
      const size_t col = i / nb, b = i % nb;
      if (col < ncol) s0[col * nbk + b] = sc[col * kWarps + b];
    }
  }
}

template <Format F, RoundMode M>
__global__ void __launch_bounds__(kThreads) mx_colwise_bf16_tile_kernel(const uint16_t* __restrict__ x, size_t rows,
                                                                        size_t cols, uint8_t* __restrict__ data,
                                                                        uint8_t* __restrict__ scales, QuantSpec spec) {
  __shared__ __align__(16) uint8_t codes[ColTile<F>::codes_bytes];
  __shared__ __align__(8) uint8_t sc[ColTile<F>::scales_bytes];
  const unsigned wib = threadIdx.x >> 5;
  const size_t ncg = (cols + 63) / 64, ntb = ((rows + 31) / 32 + kWarps - 1) / kWarps;
  for (size_t tile = blockIdx.x; tile < ncg * ntb; tile += gridDim.x) {  // CTA-uniform
    const size_t cg = tile % ncg, bk0 = tile / ncg * kWarps;
    const ColUnit t = tile_unit(cg, bk0, wib, rows, cols);
    uint32_t w[32];
    load_col_words(x, t, cols, w);
    stage_col_codes<F>(colwise_codes<F, M>(w, t.nr, t.r0, t.c, cols, spec), wib, codes, sc);
    __syncthreads();
    store_col_tile<F>(codes, sc, cg, bk0, rows, cols, data, scales);
    __syncthreads();  // the next tile reuses the shared buffers
  }
}

// Both orientations from one read (cols % 32 == 0): the columnwise tile as
// above, and each warp's 32 x 64 block through shared memory as well (row
// stride 36 words: a 16-byte read of each of 8 rows hits all 32 banks once),
// from which lane k takes row r0 + k's two rowwise blocks. Dynamic shared
// memory (bytes: both_smem_bytes): the input tiles, then the code tile, then
// the scale bytes.
template <Format F>
constexpr size_t both_smem_bytes() {
  return size_t(kWarps) * 32 * 36 * 4 + ColTile<F>::codes_bytes + ColTile<F>::scales_bytes;
}
template <Format F, RoundMode M>
__global__ void __launch_bounds__(kThreads) mx_both_bf16_kernel(const uint16_t* __restrict__ x, size_t rows,
                                                                size_t cols, uint8_t* __restrict__ row_data,
                                                                uint8_t* __restrict__ row_scales,
                                                                uint8_t* __restrict__ col_data,
                                                                uint8_t* __restrict__ col_scales, QuantSpec spec) {
  constexpr size_t block_bytes = spec_of(F).bits == 4 ? 16 : 32;
  extern __shared__ __align__(16) uint8_t smem[];
  const unsigned lane = threadIdx.x & 31u, wib = threadIdx.x >> 5;
  uint32_t(*tile)[36] = reinterpret_cast<uint32_t(*)[36]>(smem + size_t(wib) * 32 * 36 * 4);  // this warp's
  uint8_t* codes = smem + size_t(kWarps) * 32 * 36 * 4;
  uint8_t* sc = codes + ColTile<F>::codes_bytes;
  const size_t ncg = (cols + 63) / 64, ntb = ((rows + 31) / 32 + kWarps - 1) / kWarps;
  const size_t nbc = cols / 32, rrb = nbc * block_bytes;
  for (size_t ti = blockIdx.x; ti < ncg * ntb; ti += gridDim.x) {  // CTA-uniform
    const size_t cg = ti % ncg, bk0 = ti / ncg * kWarps;
    const ColUnit t = tile_unit(cg, bk0, wib, rows, cols);
    uint32_t w[32];
    load_col_words(x, t, cols, w);
#pragma unroll
    for (int k = 0; k < 32; ++k) tile[k][lane] = w[k];
    stage_col_codes<F>(colwise_codes<F, M>(w, t.nr, t.r0, t.c, cols, spec), wib, codes, sc);
    MXSIM_SYNCWARP();
    const size_t r = t.r0 + lane;  // this lane's row
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const size_t bc = cg * 2 + h;  // block column
      if (int(lane) >= t.nr || bc >= nbc) continue;
      uint32_t rw[16];
      const uint4* s = reinterpret_cast<const uint4*>(&tile[lane][16 * h]);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint4 v = s[q];
        rw[4 * q] = v.x, rw[4 * q + 1] = v.y, rw[4 * q + 2] = v.z, rw[4 * q + 3] = v.w;
      }
      rowwise_block<F, M>(rw, spec, uint64_t(r) * cols + bc * 32, row_data + r * rrb + bc * block_bytes,
                          row_scales + r * nbc + bc);
    }
    __syncthreads();
    store_col_tile<F>(codes, sc, cg, bk0, rows, cols, col_data, col_scales);
    __syncthreads();  // the next tile reuses the shared buffers
  }
}

}  // namespace

namespace detail {
bool mx_rowwise_bf16_packed(const uint16_t* d_x, size_t rows, size_t cols, const QuantSpec& spec, uint8_t* d_data,
                            uint8_t* d_scales, void* stream) {
  if (!MXSIM_HAS_PACKED_BF16 || spec.round != RoundMode::RNE || cols % 32 != 0 || !aligned(d_x, 16) ||
      !aligned(d_data, 16))
    return false;
  const size_t nblk = rows * (cols / 32);
  bool launched = false;
  with_mx_format(spec.elem, [&](auto ft) {
    constexpr Format F = decltype(ft)::value;
    if constexpr (packed_ok<F, RoundMode::RNE>()) {
      mx_rowwise_bf16_lane_kernel<F, RoundMode::RNE>
          <<<detail::grid_for(nblk, kThreads), kThreads, 0, stream_of(stream)>>>(d_x, d_data, d_scales, nblk, spec);
      launched = true;
    }
  });
  if (launched) MXSIM_HIP_CHECK_LAUNCH("mx_rowwise_bf16_lane_kernel");
  return launched;
}
}  // namespace detail

void mx_quantize_colwise_bf16_device(const uint16_t* d_x, size_t rows, size_t cols, const QuantSpec& spec,
                                     uint8_t* d_data, uint8_t* d_scales, void* stream) {
  check_mx_spec(spec, "mx_quantize_colwise_bf16");
  if (rows * cols == 0) return;
  if (cols % 2 != 0 || !aligned(d_x, 4))
    throw std::invalid_argument("mx_quantize_colwise_bf16: needs an even number of columns (got " +
                                std::to_string(cols) + ") and a 4-byte aligned x");
  const size_t tiles = (cols + 63) / 64 * (((rows + 31) / 32 + kWarps - 1) / kWarps);
  with_mx_format(spec.elem, [&](auto ft) {
    with_mode(spec.round, [&](auto mt) {
      mx_colwise_bf16_tile_kernel<decltype(ft)::value, decltype(mt)::value>
          <<<grid_for(tiles * kThreads), kThreads, 0, stream_of(stream)>>>(d_x, rows, cols, d_data, d_scales, spec);
    });
  });
  MXSIM_HIP_CHECK_LAUNCH("mx_colwise_bf16_tile_kernel");
}

void mx_quantize_both_bf16_device(const uint16_t* d_x, size_t rows, size_t cols, const QuantSpec& spec,
                                  uint8_t* d_row_data, uint8_t* d_row_scales, uint8_t* d_col_data,
                                  uint8_t* d_col_scales, void* stream) {
  check_mx_spec(spec, "mx_quantize_both_bf16");
  if (rows * cols == 0) return;
  if (cols % 32 != 0 || !aligned(d_x, 16) || !aligned(d_row_data, 16)) {  // two reads: each orientation's kernel
    mx_quantize_colwise_bf16_device(d_x, rows, cols, spec, d_col_data, d_col_scales, stream);
    mx_quantize_rowwise_bf16_device(d_x, rows, cols, spec, d_row_data, d_row_scales, stream);
    return;
  }
  const size_t tiles = (cols + 63) / 64 * (((rows + 31) / 32 + kWarps - 1) / kWarps);
  with_mx_format(spec.elem, [&](auto ft) {
    with_mode(spec.round, [&](auto mt) {
      constexpr Format F = decltype(ft)::value;
      auto* kernel = mx_both_bf16_kernel<F, decltype(mt)::value>;
      constexpr size_t smem = both_smem_bytes<F>();  // E4M3: 54 KB, over the 48 KB default
      static const bool opted_in = [&] {
        MXSIM_HIP_CHECK(hipFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                            hipFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        return true;
      }();
      (void)opted_in;
      kernel<<<grid_for(tiles * kThreads), kThreads, smem, stream_of(stream)>>>(
          d_x, rows, cols, d_row_data, d_row_scales, d_col_data, d_col_scales, spec);
    });
  });
  MXSIM_HIP_CHECK_LAUNCH("mx_both_bf16_kernel");
}

}  // namespace mxsim::hip
