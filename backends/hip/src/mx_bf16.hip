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

// Columnwise unit of a warp: rows [r0, r0 + 32) of columns [c0, c0 + 64),
// lane l holding columns c0 + 2l and c0 + 2l + 1, one word per row (w[k]:
// row r0 + k; zeros past the last row). The halves' amaxes are the two
// columns' block amaxes, with no shuffle. Outputs in emu::quantize's
// Axis::Rows storage: data [cols, row_bytes(rows)], scales [cols, nbk].
template <Format F, RoundMode M>
__device__ inline void colwise_pair(const uint32_t (&w)[32], int nr, size_t r0, size_t c, size_t rows, size_t cols,
                                    const QuantSpec& spec, uint8_t* __restrict__ data, uint8_t* __restrict__ scales) {
  constexpr FormatSpec f = spec_of(F);
  constexpr bool fp4 = f.bits == 4;
  constexpr int nw = fp4 ? 4 : 8;  // output words per column
  const uint32_t m2 = amax_u16x2(w);
  const hd::BlockQuant lo = hd::block_quant_e8m0(spec.rule, f, m2 << 16);
  const hd::BlockQuant hi = hd::block_quant_e8m0(spec.rule, f, m2 & 0xFFFF0000u);
  const size_t nbk = (rows + 31) / 32, rb = fp4 ? (rows + 1) / 2 : rows;
  scales[c * nbk + r0 / 32] = lo.scale_byte;
  scales[(c + 1) * nbk + r0 / 32] = hi.scale_byte;
  // Codes straight into the two columns' output words, four bytes at a time
  // (E2M1: two words' codes per byte, the first in the low nibble), so that
  // no array of codes stays live: 32 words of input are registers enough.
  uint32_t o_lo[nw], o_hi[nw];
  auto emit = [&](auto code_of) {
#pragma unroll
    for (int q = 0; q < nw; ++q) {
      uint32_t t[4];  // byte 0: column lo's byte, byte 2: column hi's
#pragma unroll
      for (int j = 0; j < 4; ++j) t[j] = fp4 ? code_of(8 * q + 2 * j) | code_of(8 * q + 2 * j + 1) << 4 : code_of(4 * q + j);
      o_lo[q] = MXSIM_BYTE_PERM(MXSIM_BYTE_PERM(t[0], t[1], 0x0040u), MXSIM_BYTE_PERM(t[2], t[3], 0x0040u), 0x5410u);
      o_hi[q] = MXSIM_BYTE_PERM(MXSIM_BYTE_PERM(t[0], t[1], 0x0062u), MXSIM_BYTE_PERM(t[2], t[3], 0x0062u), 0x5410u);
    }
  };
  bool done = false;
  if constexpr (packed_ok<F, M>()) {
    if (packed_block_ok<F>(lo, m2 & 0xFFFFu) && packed_block_ok<F>(hi, m2 >> 16)) {
      const PackedBlock k = packed_block<F>(lo.scale_exp, hi.scale_exp);
      emit([&](int i) { return encode2_bf16<F>(w[i], k); });
      done = true;
    }
  }
  if (!done) {
    emit([&](int i) {
      if (i >= nr) return 0u;  // rows past the end: no code (their nibble or byte is never stored or is 0)
      const uint64_t index = uint64_t(r0 + i) * cols + c;
      const uint32_t r_lo = M == RoundMode::Stochastic ? hd::sr_word(spec, index) : 0u;
      const uint32_t r_hi = M == RoundMode::Stochastic ? hd::sr_word(spec, index + 1) : 0u;
      return encode2_per_element_call<F, M>(lo, hi, w[i], r_lo, r_hi);
    });
  }
  uint8_t* out_lo = data + c * rb + (fp4 ? r0 / 2 : r0);
  uint8_t* out_hi = out_lo + rb;
  if (nr == 32 && aligned(out_lo, 16) && aligned(out_hi, 16)) {
#pragma unroll
    for (int q = 0; q < nw; q += 4) {
      *reinterpret_cast<uint4*>(out_lo + 4 * q) = make_uint4(o_lo[q], o_lo[q + 1], o_lo[q + 2], o_lo[q + 3]);
      *reinterpret_cast<uint4*>(out_hi + 4 * q) = make_uint4(o_hi[q], o_hi[q + 1], o_hi[q + 2], o_hi[q + 3]);
    }
  } else {  // a short last block, or storage rows not 16-byte aligned
    const int nbytes = fp4 ? (nr + 1) / 2 : nr;
#pragma unroll
    for (int q = 0; q < nw; ++q)  // static indices: the words stay in registers
#pragma unroll
      for (int b = 0; b < 4; ++b)
        if (4 * q + b < nbytes) {
          out_lo[4 * q + b] = uint8_t(o_lo[q] >> (8 * b));
          out_hi[4 * q + b] = uint8_t(o_hi[q] >> (8 * b));
        }
  }
}

// Warp unit u: column groups of 64 fastest, so the warps running at once
// read whole source rows.
struct ColUnit {
  size_t c, r0;
  int nr;
  bool in;
};
__device__ inline ColUnit col_unit(size_t u, size_t rows, size_t cols) {
  const size_t ncg = (cols + 63) / 64, cg = u % ncg, bk = u / ncg;
  const size_t c = cg * 64 + 2 * (threadIdx.x & 31u), r0 = bk * 32;
  return {c, r0, int(rows - r0 < 32 ? rows - r0 : 32), c < cols};
}
__device__ inline void load_col_words(const uint16_t* __restrict__ x, const ColUnit& t, size_t cols, uint32_t (&w)[32]) {
  const uint32_t* src = reinterpret_cast<const uint32_t*>(x + t.r0 * cols + t.c);
#pragma unroll
  for (int k = 0; k < 32; ++k) w[k] = t.in && k < t.nr ? src[size_t(k) * (cols / 2)] : 0u;
}

template <Format F, RoundMode M>
__global__ void mx_colwise_bf16_kernel(const uint16_t* __restrict__ x, size_t rows, size_t cols,
                                       uint8_t* __restrict__ data, uint8_t* __restrict__ scales, QuantSpec spec) {
  const size_t units = (cols + 63) / 64 * ((rows + 31) / 32), nwarps = (size_t(gridDim.x) * blockDim.x) >> 5;
  for (size_t u = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; u < units; u += nwarps) {
    const ColUnit t = col_unit(u, rows, cols);
    if (!t.in) continue;  // lanes are independent: no shuffles
    uint32_t w[32];
    load_col_words(x, t, cols, w);
    colwise_pair<F, M>(w, t.nr, t.r0, t.c, rows, cols, spec, data, scales);
  }
}

// Both orientations from one read (cols % 32 == 0): the columnwise unit as
// above, and its 32 x 64 tile through shared memory (row stride 36 words: a
// 16-byte read of each of 8 rows hits all 32 banks once), from which lane k
// takes row r0 + k's two rowwise blocks.
constexpr int kWarps = kThreads / 32;
template <Format F, RoundMode M>
__global__ void mx_both_bf16_kernel(const uint16_t* __restrict__ x, size_t rows, size_t cols,
                                    uint8_t* __restrict__ row_data, uint8_t* __restrict__ row_scales,
                                    uint8_t* __restrict__ col_data, uint8_t* __restrict__ col_scales, QuantSpec spec) {
  constexpr size_t block_bytes = spec_of(F).bits == 4 ? 16 : 32;
  __shared__ __align__(16) uint32_t tile[kWarps][32][36];
  const unsigned lane = threadIdx.x & 31u, wib = threadIdx.x >> 5;
  const size_t units = (cols + 63) / 64 * ((rows + 31) / 32), nwarps = (size_t(gridDim.x) * blockDim.x) >> 5;
  const size_t nbc = cols / 32, rrb = nbc * block_bytes;
  for (size_t u = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; u < units; u += nwarps) {  // warp-uniform
    const ColUnit t = col_unit(u, rows, cols);
    uint32_t w[32];
    load_col_words(x, t, cols, w);
#pragma unroll
    for (int k = 0; k < 32; ++k) tile[wib][k][lane] = w[k];
    if (t.in) colwise_pair<F, M>(w, t.nr, t.r0, t.c, rows, cols, spec, col_data, col_scales);
    MXSIM_SYNCWARP();
    const size_t r = t.r0 + lane, c0 = t.c - 2 * lane;  // this lane's row; the unit's first column
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const size_t bc = c0 / 32 + h;  // block column
      if (int(lane) >= t.nr || bc >= nbc) continue;
      uint32_t rw[16];
      const uint4* s = reinterpret_cast<const uint4*>(&tile[wib][lane][16 * h]);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint4 v = s[q];
        rw[4 * q] = v.x, rw[4 * q + 1] = v.y, rw[4 * q + 2] = v.z, rw[4 * q + 3] = v.w;
      }
      rowwise_block<F, M>(rw, spec, uint64_t(r) * cols + bc * 32, row_data + r * rrb + bc * block_bytes,
                          row_scales + r * nbc + bc);
    }
    MXSIM_SYNCWARP();
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
  const size_t units = (cols + 63) / 64 * ((rows + 31) / 32);
  with_mx_format(spec.elem, [&](auto ft) {
    with_mode(spec.round, [&](auto mt) {
      mx_colwise_bf16_kernel<decltype(ft)::value, decltype(mt)::value>
          <<<grid_for(units * 32), kThreads, 0, stream_of(stream)>>>(d_x, rows, cols, d_data, d_scales, spec);
    });
  });
  MXSIM_HIP_CHECK_LAUNCH("mx_colwise_bf16_kernel");
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
  const size_t units = (cols + 63) / 64 * ((rows + 31) / 32);
  with_mx_format(spec.elem, [&](auto ft) {
    with_mode(spec.round, [&](auto mt) {
      mx_both_bf16_kernel<decltype(ft)::value, decltype(mt)::value><<<grid_for(units * 32), kThreads, 0,
                                                                      stream_of(stream)>>>(
          d_x, rows, cols, d_row_data, d_row_scales, d_col_data, d_col_scales, spec);
    });
  });
  MXSIM_HIP_CHECK_LAUNCH("mx_both_bf16_kernel");
}

}  // namespace mxsim::hip
