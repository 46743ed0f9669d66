// GPU quantization kernels (include/mxsim/hip/quantize.hpp). Correctness
// first: every block's arithmetic is hd/quant_block.hpp's, walked by
//  * quantize_blocks_kernel: one thread block per quantization block, any
//    recipe and layout (rowwise, columnwise = transposed reads, 2-D tiles,
//    per row, per tensor), Hadamard runs of 16, NVFP4's tensor scale;
//  * quantize_both_kernel: one L x L tile in shared memory gives L rowwise
//    and L columnwise 1-D blocks (one read for both orientations);
//  * amax_groups_kernel + quantize_per_tensor_kernel: blocks of a whole group
//    (per-tensor FP32 scales), the amax folded by every thread block, then one
//    element per thread; amax_hadamard_kernel: NVFP4's post-RHT tensor amax.
// amax is a max of bit patterns (exact in any order): the passes over a whole
// group or tensor fold their thread blocks' results with atomicMax.
#include "check.hpp"

#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxsim/hd/quant_block.hpp"
#include "mxsim/hip/codec.hpp"
#include "mxsim/hip/quantize.hpp"

namespace mxsim::hip {
namespace {

using detail::stream_of;
using hd::QuantLayout;

constexpr unsigned kMaxThreads = 256;

// Element (g, r, c) of the storage layout read from the logical source.
__device__ inline float load_storage(const float* __restrict__ x, const QuantLayout& L, size_t g, size_t r, size_t c) {
  const size_t lr = L.transposed ? c : r, lc = L.transposed ? r : c;
  return x[(g * L.rows + lr) * L.cols + lc];
}
__device__ inline uint64_t storage_index(const QuantLayout& L, size_t g, size_t r, size_t c) {
  return L.transposed ? hd::logical_index(g, c, r, L.rows, L.cols) : hd::logical_index(g, r, c, L.rows, L.cols);
}

// max over the thread block of v (all threads call; blockDim % 32 == 0).
__device__ inline uint32_t block_max(uint32_t v, uint32_t* red) {
  for (int m = 16; m >= 1; m >>= 1) v = hd::amax_step(v, MXSIM_SHFL_XOR32(v, m));
  const unsigned warp = threadIdx.x >> 5, nwarp = blockDim.x >> 5;
  if ((threadIdx.x & 31u) == 0) red[warp] = v;
  __syncthreads();
  uint32_t r = 0;
  for (unsigned w = 0; w < nwarp; ++w) r = hd::amax_step(r, red[w]);
  __syncthreads();  // red is reused by the next block
  return r;
}

// A work unit is U consecutive storage elements of one row: 1 (one code per
// byte), 2 (an E2M1 byte) or 16 (a Hadamard run). Elements at or past c1
// (the block's end) are zeros that never reach amax or storage.
template <int U>
__device__ inline void load_unit(const float* __restrict__ x, const QuantLayout& L, const QuantSpec& sp, size_t g,
                                 size_t r, size_t c, size_t c1, float* v) {
  for (int k = 0; k < U; ++k) v[k] = c + k < c1 ? load_storage(x, L, g, r, c + k) : 0.0f;
  if constexpr (U == 16) {
    if (sp.hadamard16) hd::hadamard16(v, sp.hadamard16_signs);
  }
}

// max over each aligned group of `lanes` lanes (a power of two <= 32; all 32 lanes call).
__device__ inline uint32_t lanes_amax(uint32_t v, unsigned lanes) {
  for (unsigned m = lanes / 2; m >= 1; m >>= 1) v = hd::amax_step(v, MXSIM_SHFL_XOR32(v, m));
  return v;
}

// Index of block (g, bi, bj) in the scale grid, and the block's scale stored
// there (FP32 scale_inv, or its byte): every quantize kernel's.
__device__ inline size_t scale_index(const QuantLayout& L, size_t g, size_t bi, size_t bj) {
  return (g * L.nbr + bi) * L.nbc + bj;
}
__device__ inline void store_block_scale(const DeviceQTensor& q, size_t si, const hd::BlockQuant& bq) {
  if (q.spec.scale_kind == ScaleKind::FP32) q.scale_inv[si] = bq.scale_inv;
  else q.scale_bytes[si] = bq.scale_byte;
}

// Every block of q, blockIdx.x striding over them (the body of both kernels
// below). `lanes` threads take one quantization block: the whole thread block
// (lanes == blockDim.x), or, for blocks of at most 16 units in a 32-thread
// block, an aligned group of lanes (a power of two) so that one warp
// quantizes 32 / lanes blocks at once (the Hadamard wgrad operands: 2 units
// of 16 per block).
template <int U>
__device__ inline void quantize_blocks(const float* __restrict__ x, const DeviceQTensor& q, const uint32_t* gamax,
                                       unsigned lanes) {
  __shared__ uint32_t red[kMaxThreads / 32];
  const QuantLayout& L = q.layout;
  const FormatSpec ef = spec_of(q.spec.elem);
  const bool e2m1 = q.spec.elem == Format::E2M1;
  hd::Nvfp4TensorScale ts;
  if (has_tensor_scale(q.spec.scale_kind)) ts = hd::nvfp4_tensor_scale(*gamax);
  if (blockIdx.x == 0 && threadIdx.x == 0 && q.tensor_scale_inv) *q.tensor_scale_inv = ts.s_dec;
  const size_t per_group = L.nbr * L.nbc, nblk = L.groups * per_group;
  const unsigned per = blockDim.x / lanes, sub = threadIdx.x / lanes, sl = threadIdx.x % lanes;
  for (size_t base = size_t(blockIdx.x) * per; base < nblk; base += size_t(gridDim.x) * per) {
    const size_t blk = base + sub;
    const bool live = blk < nblk;  // always, when per == 1
    const size_t g = live ? blk / per_group : 0, bi = live ? (blk % per_group) / L.nbc : 0, bj = live ? blk % L.nbc : 0;
    const size_t r0 = bi * L.br, r1 = r0 + L.br < L.srows ? r0 + L.br : L.srows;
    const size_t c0 = bj * L.bc, c1 = c0 + L.bc < L.scols ? c0 + L.bc : L.scols;
    const size_t nu = (c1 - c0 + U - 1) / U, units = live ? (r1 - r0) * nu : 0;
    uint32_t amax = 0;
    for (size_t u = sl; u < units; u += lanes) {
      const size_t r = r0 + u / nu, c = c0 + (u % nu) * U;
      float v[U];
      load_unit<U>(x, L, q.spec, g, r, c, c1, v);
      for (int k = 0; k < U; ++k)
        if (c + k < c1) amax = hd::amax_step(amax, f32_bits(v[k]));
    }
    amax = per == 1 ? block_max(amax, red) : lanes_amax(amax, lanes);
    if (!live) continue;
    const hd::BlockQuant bq = hd::block_quant(q.spec, ef, amax, ts);  // every thread: same inputs, same result
    if (sl == 0) store_block_scale(q, scale_index(L, g, bi, bj), bq);
    for (size_t u = sl; u < units; u += lanes) {
      const size_t r = r0 + u / nu, c = c0 + (u % nu) * U;
      float v[U];
      load_unit<U>(x, L, q.spec, g, r, c, c1, v);
      uint32_t code[U];
      for (int k = 0; k < U; ++k) {
        code[k] = 0;
        if (c + k < c1)
          code[k] = bq.encode(ef, f32_bits(v[k]), q.spec.round, hd::sr_word(q.spec, storage_index(L, g, r, c + k)));
      }
      uint8_t* row = q.data + (g * L.srows + r) * L.rbytes;
      if (e2m1) {
        for (int k = 0; k < U; k += 2) {
          if (c + k >= c1) break;
          row[(c + k) / 2] = hd::pack_e2m1(code[k], k + 1 < U ? code[k + 1] : 0u);
        }
      } else {
        for (int k = 0; k < U; ++k)
          if (c + k < c1) row[c + k] = uint8_t(code[k]);
      }
    }
  }
}

template <int U>
__global__ void quantize_blocks_kernel(const float* __restrict__ x, DeviceQTensor q, const uint32_t* gamax,
                                       unsigned lanes) {
  quantize_blocks<U>(x, q, gamax, lanes);
}

// ---- 32 x 32 tiles (2-D weight recipes: mxfp4_2d, mxfp8_2d), one warp each ----
// Lane l owns column c0 + l of the tile: its 32 row loads are each one
// coalesced 128-byte row segment across the warp, the tile stays in
// registers for both walks, and amax is a shuffle max (exact in any order).
// The generic kernel above spends a 256-thread block and two barriers on
// each 1024-element tile (1.15 ms for an 8 x 4096 x 2048 weight on an H200).
// The steps are the same hd::block_quant / encode / sr_word calls on the
// same elements, so the bytes are the same.
__device__ inline void quantize_tile32(const float* __restrict__ x, const DeviceQTensor& q) {
  const QuantLayout& L = q.layout;
  const FormatSpec ef = spec_of(q.spec.elem);
  const bool e2m1 = q.spec.elem == Format::E2M1;
  const unsigned lane = threadIdx.x & 31u;
  const size_t per_group = L.nbr * L.nbc, nblk = L.groups * per_group;
  const size_t nwarps = (size_t(gridDim.x) * blockDim.x) >> 5;
  if (blockIdx.x == 0 && threadIdx.x == 0 && q.tensor_scale_inv) *q.tensor_scale_inv = 1.0f;  // not NVFP4
  for (size_t blk = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; blk < nblk; blk += nwarps) {
    const size_t g = blk / per_group, bi = (blk % per_group) / L.nbc, bj = blk % L.nbc;
    const size_t r0 = bi * 32, c = bj * 32 + lane;
    const int nr = int(L.srows - r0 < 32 ? L.srows - r0 : 32);
    const bool live = c < L.scols;  // every lane stays for the shuffles
    float v[32];
    uint32_t amax = 0;
#pragma unroll
    for (int k = 0; k < 32; ++k) {
      v[k] = live && k < nr ? x[(g * L.rows + r0 + size_t(k)) * L.cols + c] : 0.0f;
      if (live && k < nr) amax = hd::amax_step(amax, f32_bits(v[k]));
    }
    amax = lanes_amax(amax, 32);
    const hd::BlockQuant bq = hd::block_quant(q.spec, ef, amax, hd::Nvfp4TensorScale{});
    if (lane == 0) store_block_scale(q, scale_index(L, g, bi, bj), bq);
#pragma unroll
    for (int k = 0; k < 32; ++k) {
      if (k >= nr) break;  // uniform across the warp
      const size_t r = r0 + size_t(k);
      const uint32_t code = live ? bq.encode(ef, f32_bits(v[k]), q.spec.round, hd::sr_word(q.spec, storage_index(L, g, r, c))) : 0u;
      uint8_t* row = q.data + (g * L.srows + r) * L.rbytes;
      if (e2m1) {
        const uint32_t hi = MXSIM_SHFL_DOWN32(code, 1);  // the odd neighbour's code (0 past the row)
        if (live && lane % 2 == 0) row[c / 2] = hd::pack_e2m1(code, c + 1 < L.scols ? hi : 0u);
      } else if (live) {
        row[c] = uint8_t(code);
      }
    }
  }
}

__global__ void quantize_tile32_kernel(const float* __restrict__ x, DeviceQTensor q) { quantize_tile32(x, q); }

/// 32 x 32 tiles in the logical layout, E8M0 or FP32 scales, no Hadamard:
/// quantize_tile32_kernel's case.
bool tile32_by_warps(const DeviceQTensor& q) {
  const QuantSpec& sp = q.spec;
  return sp.block_rows == 32 && sp.block_cols == 32 && !sp.hadamard16 && !q.layout.transposed &&
         (sp.scale_kind == ScaleKind::E8M0 || sp.scale_kind == ScaleKind::FP32);
}

/// Up to kMaxGroupBatch per-group tensors of one spec quantized by one
/// launch (blockIdx.y picks the group): the wgrad operands of all experts
/// side by side instead of one launch each. Not for NVFP4 (its tensor scale
/// needs each group's amax first).
constexpr int kMaxGroupBatch = 16;
struct GroupBatch {
  DeviceQTensor q[kMaxGroupBatch];
  size_t x_offset[kMaxGroupBatch];  ///< first element of group g in the source
};
static_assert(sizeof(GroupBatch) <= 4000, "kernel parameters are limited to 4 KiB");

template <int U>
__global__ void quantize_group_batch_kernel(const float* __restrict__ x, GroupBatch b, unsigned lanes) {
  quantize_blocks<U>(x + b.x_offset[blockIdx.y], b.q[blockIdx.y], nullptr, lanes);
}

// ---- columnwise 1-D blocks, one source column per lane -----------------------
// Storage is transposed: storage row c of a group holds source column c, and
// its blocks of L run down the source rows. Lane l of a warp owns column
// c0 + l of one block row: each of its L loads is one row's coalesced
// 128-byte segment across the warp, all in flight at once, and the whole
// block then sits in the lane's registers, so amax, the Hadamard runs (along
// the block, as the storage-order walk applies them) and the codes need no
// shuffle or shared memory. Consecutive warps take consecutive block rows of
// the same columns, so their code bytes meet in the same storage rows.
template <int L>
__device__ inline void quantize_colwise_lanes(const float* __restrict__ x, const DeviceQTensor& q) {
  const QuantLayout& Ly = q.layout;
  const QuantSpec& sp = q.spec;
  const FormatSpec ef = spec_of(sp.elem);
  const bool e2m1 = sp.elem == Format::E2M1;
  const size_t rows = Ly.rows, cols = Ly.cols, nbk = Ly.nbc, ncg = (cols + 31) / 32;
  const size_t units = Ly.groups * ncg * nbk;
  const unsigned lane = threadIdx.x & 31u;
  const size_t nwarps = (size_t(gridDim.x) * blockDim.x) >> 5;
  if (blockIdx.x == 0 && threadIdx.x == 0 && q.tensor_scale_inv) *q.tensor_scale_inv = 1.0f;  // not NVFP4
  for (size_t u = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; u < units; u += nwarps) {
    // Column groups fastest: the warps running at once read whole source rows.
    const size_t cg = u % ncg, rest = u / ncg, bk = rest % nbk, g = rest / nbk;
    const size_t c = cg * 32 + lane, r0 = bk * L;
    if (c >= cols) continue;  // no shuffles below: lanes are independent
    const int nr = int(rows - r0 < size_t(L) ? rows - r0 : size_t(L));
    const float* src = x + (g * rows + r0) * cols + c;
    float v[L];
#pragma unroll
    for (int k = 0; k < L; ++k) v[k] = k < nr ? src[size_t(k) * cols] : 0.0f;
    if (sp.hadamard16) {
#pragma unroll
      for (int h = 0; h < L; h += 16) hd::hadamard16(v + h, sp.hadamard16_signs);
    }
    uint32_t amax = 0;
#pragma unroll
    for (int k = 0; k < L; ++k)
      if (k < nr) amax = hd::amax_step(amax, f32_bits(v[k]));
    const hd::BlockQuant bq = hd::block_quant(sp, ef, amax);
    store_block_scale(q, scale_index(Ly, g, c, bk), bq);
    uint8_t* out = q.data + (g * Ly.srows + c) * Ly.rbytes;
    uint32_t code[L];
    if (bq.by_add(ef, sp.round)) {  // the common block: no per-element branch
#pragma unroll
      for (int k = 0; k < L; ++k) code[k] = k < nr ? encode_by_add(ef, f32_bits(v[k]), bq.scale_exp, sp.round) : 0u;
    } else {
#pragma unroll
      for (int k = 0; k < L; ++k) {
        const uint32_t rnd =
            sp.round == RoundMode::Stochastic ? hd::sr_word(sp, hd::logical_index(g, r0 + k, c, rows, cols)) : 0u;
        code[k] = k < nr ? bq.encode(ef, f32_bits(v[k]), sp.round, rnd) : 0u;
      }
    }
    if (e2m1) {
      uint8_t* o = out + r0 / 2;
      const bool words = nr == L && reinterpret_cast<uintptr_t>(o) % 4 == 0;
#pragma unroll
      for (int k = 0; k < L; k += 8) {
        uint32_t w = 0;
#pragma unroll
        for (int p = 0; p < 8; p += 2) w |= hd::pack_e2m1(code[k + p], code[k + p + 1]) << (4 * p);
        if (words) {
          *reinterpret_cast<uint32_t*>(o + k / 2) = w;
        } else {
          for (int p = 0; p < 8 && k + p < nr; p += 2) o[(k + p) / 2] = uint8_t(w >> (4 * p));
        }
      }
    } else {
      uint8_t* o = out + r0;
      const bool words = nr == L && reinterpret_cast<uintptr_t>(o) % 4 == 0;
#pragma unroll
      for (int k = 0; k < L; k += 4) {
        const uint32_t w = (code[k] & 0xFFu) | (code[k + 1] & 0xFFu) << 8 | (code[k + 2] & 0xFFu) << 16 |
                           (code[k + 3] & 0xFFu) << 24;
        if (words) {
          *reinterpret_cast<uint32_t*>(o + k) = w;
        } else {
          for (int p = 0; p < 4 && k + p < nr; ++p) o[k + p] = uint8_t(w >> (8 * p));
        }
      }
    }
  }
}

// Both orientations from one read, 1 x 32 E8M0 blocks: the walk above (lane
// = source column, 32 rows of a group in registers) also holds, in row k of
// the warp, the rowwise block of source row k: its 32 columns are the 32
// lanes. A transpose-reduce butterfly (31 shuffles) leaves lane k with row
// k's amax, lane k takes row k's block step, and each element fetches its
// row's scale exponent with one shuffle. The rowwise codes go through shared
// memory so that lane k stores row k's codes with one 16- or 32-byte write.
constexpr int kBothWarps = 8;
__global__ void quantize_both_lanes_kernel(const float* __restrict__ x, size_t C, size_t m0, size_t Mg,
                                           DeviceQTensor row, DeviceQTensor col) {
  constexpr int L = 32;
  __shared__ uint32_t stage[kBothWarps][L][9];  // a warp's rowwise codes: 32 rows x 32 bytes (+1 word: no conflicts)
  const QuantSpec& sp = row.spec;
  const FormatSpec ef = spec_of(sp.elem);
  const bool e2m1 = sp.elem == Format::E2M1;
  const size_t nbk = col.layout.nbc, ncg = (C + 31) / 32, units = ncg * nbk;
  const unsigned lane = threadIdx.x & 31u, wib = threadIdx.x >> 5;
  const size_t nwarps = (size_t(gridDim.x) * blockDim.x) >> 5;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    if (col.tensor_scale_inv) *col.tensor_scale_inv = 1.0f;
  }
  for (size_t u = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5; u < units; u += nwarps) {  // warp-uniform
    const size_t cg = u % ncg, bk = u / ncg;  // column groups fastest: whole source rows at once
    const size_t c = cg * 32 + lane, r0 = bk * L;
    const bool cin = c < C;
    const int nr = int(Mg - r0 < size_t(L) ? Mg - r0 : size_t(L));
    const float* src = x + (m0 + r0) * C + c;
    float v[L];
#pragma unroll
    for (int k = 0; k < L; ++k) v[k] = cin && k < nr ? src[size_t(k) * C] : 0.0f;
    auto word = [&](int k) {
      return sp.round == RoundMode::Stochastic ? hd::sr_word(sp, uint64_t(m0 + r0 + k) * C + c) : 0u;
    };
    // Columnwise: this lane's block of column c.
    if (cin) {
      uint32_t amax = 0;
#pragma unroll
      for (int k = 0; k < L; ++k)
        if (k < nr) amax = hd::amax_step(amax, f32_bits(v[k]));
      const hd::BlockQuant bq = hd::block_quant_e8m0(sp.rule, ef, amax);
      col.scale_bytes[c * nbk + bk] = bq.scale_byte;
      uint8_t* o = col.data + c * col.layout.rbytes + (e2m1 ? r0 / 2 : r0);
      const bool words = nr == L && reinterpret_cast<uintptr_t>(o) % 4 == 0;
#pragma unroll
      for (int k = 0; k < L; k += 8) {
        uint32_t code[8];
        if (bq.by_add(ef, sp.round)) {
#pragma unroll
          for (int p = 0; p < 8; ++p) code[p] = k + p < nr ? encode_by_add(ef, f32_bits(v[k + p]), bq.scale_exp, sp.round) : 0u;
        } else {
#pragma unroll
          for (int p = 0; p < 8; ++p) code[p] = k + p < nr ? bq.encode(ef, f32_bits(v[k + p]), sp.round, word(k + p)) : 0u;
        }
        if (e2m1) {
          uint32_t w = 0;
#pragma unroll
          for (int p = 0; p < 8; p += 2) w |= hd::pack_e2m1(code[p], code[p + 1]) << (4 * p);
          if (words) *reinterpret_cast<uint32_t*>(o + k / 2) = w;
          else
            for (int p = 0; p < 8 && k + p < nr; p += 2) o[(k + p) / 2] = uint8_t(w >> (4 * p));
        } else {
          const uint32_t w0 = code[0] | code[1] << 8 | code[2] << 16 | code[3] << 24;
          const uint32_t w1 = code[4] | code[5] << 8 | code[6] << 16 | code[7] << 24;
          if (words) {
            *reinterpret_cast<uint32_t*>(o + k) = w0;
            *reinterpret_cast<uint32_t*>(o + k + 4) = w1;
          } else {
            for (int p = 0; p < 8 && k + p < nr; ++p) o[k + p] = uint8_t(p < 4 ? w0 >> (8 * p) : w1 >> (8 * (p - 4)));
          }
        }
      }
    }
    // Rowwise: row amaxes by a transpose-reduce (lane k ends with row k's).
    uint32_t a[L];
#pragma unroll
    for (int k = 0; k < L; ++k) a[k] = f32_bits(v[k]) & 0x7FFFFFFFu;  // amax_step's fold, zeros past C
#pragma unroll
    for (int o = 16, n = L; o >= 1; o >>= 1, n >>= 1) {
      const bool up = lane & unsigned(o);
#pragma unroll
      for (int i = 0; i < n / 2; ++i) {
        const uint32_t send = up ? a[i] : a[i + n / 2], keep = up ? a[i + n / 2] : a[i];
        a[i] = hd::amax_step(keep, MXSIM_SHFL_XOR32(send, o));
      }
    }
    const hd::BlockQuant rq = hd::block_quant_e8m0(sp.rule, ef, a[0]);  // row r0 + lane's block
    const size_t rr = m0 + r0 + lane;
    if (int(lane) < nr) row.scale_bytes[rr * row.layout.nbc + cg] = rq.scale_byte;
    const int my = rq.zero_codes ? 0x7FFFFFFF : rq.scale_exp;
    uint8_t* st = reinterpret_cast<uint8_t*>(&stage[wib][0][0]);
#pragma unroll
    for (int k = 0; k < L; ++k) {
      const int se = MXSIM_SHFL32(my, k);
      hd::BlockQuant q;
      q.zero_codes = se == 0x7FFFFFFF;
      q.scale_exp = q.zero_codes ? 0 : se;
      uint32_t code = 0;
      if (cin && k < nr)
        code = q.by_add(ef, sp.round) ? encode_by_add(ef, f32_bits(v[k]), se, sp.round)
                                      : q.encode(ef, f32_bits(v[k]), sp.round, word(k));
      if (e2m1) {
        const uint32_t hi = MXSIM_SHFL_DOWN32(code, 1);
        if ((lane & 1u) == 0) st[k * 36 + lane / 2] = uint8_t(hd::pack_e2m1(code, hi));
      } else {
        st[k * 36 + lane] = uint8_t(code);
      }
    }
    MXSIM_SYNCWARP();
    if (int(lane) < nr) {  // lane k writes row k's codes of this block column
      const size_t nbytes = e2m1 ? (C - cg * 32 < 32 ? (C - cg * 32 + 1) / 2 : 16) : (C - cg * 32 < 32 ? C - cg * 32 : 32);
      uint8_t* o = row.data + rr * row.layout.rbytes + (e2m1 ? cg * 16 : cg * 32);
      const uint32_t* w = &stage[wib][lane][0];
      if (nbytes == (e2m1 ? 16u : 32u) && reinterpret_cast<uintptr_t>(o) % 16 == 0) {
        *reinterpret_cast<uint4*>(o) = make_uint4(w[0], w[1], w[2], w[3]);
        if (!e2m1) *reinterpret_cast<uint4*>(o + 16) = make_uint4(w[4], w[5], w[6], w[7]);
      } else {
        const uint8_t* b = reinterpret_cast<const uint8_t*>(w);
        for (size_t i = 0; i < nbytes; ++i) o[i] = b[i];
      }
    }
    MXSIM_SYNCWARP();
  }
}

/// Groups of a batch side by side (blockIdx.y), as quantize_group_batch_kernel.
template <int L>
__global__ void quantize_colwise_lanes_kernel(const float* __restrict__ x, GroupBatch b) {
  quantize_colwise_lanes<L>(x + b.x_offset[blockIdx.y], b.q[blockIdx.y]);
}

// ---- tensor amax (NVFP4's S_enc) -------------------------------------------
/// With hadamard16 the tensor amax is the transformed tensor's (numerics.md §3.3; TE's post-RHT
/// amax): each run of 16 along the storage rows transformed as the quantizer transforms it,
/// folded into *amax (zeroed first) by atomicMax as amax_groups_kernel folds.
/// (The validated spec has scols a multiple of 16.)
__global__ void amax_hadamard_kernel(const float* __restrict__ x, QuantLayout L, QuantSpec sp, uint32_t* amax) {
  __shared__ uint32_t red[kMaxThreads / 32];
  uint32_t a = 0;
  const size_t per_row = L.scols / 16, runs = L.groups * L.srows * per_row;
  for (size_t u = size_t(blockIdx.x) * blockDim.x + threadIdx.x; u < runs; u += size_t(gridDim.x) * blockDim.x) {
    const size_t g = u / (L.srows * per_row), r = (u / per_row) % L.srows, c = (u % per_row) * 16;
    float v[16];
    load_unit<16>(x, L, sp, g, r, c, L.scols, v);
    for (int k = 0; k < 16; ++k) a = hd::amax_step(a, f32_bits(v[k]));
  }
  a = block_max(a, red);
  if (threadIdx.x == 0 && a) atomicMax(amax, a);
}

// ---- per-tensor FP32 scales (fp8_current, fp8_delayed) ------------------------
// A per-tensor block is a whole group ([R, C] of [G, R, C]), or under whole_tensor_scale the
// whole tensor: one thread block walking it twice would leave the GPU idle. Here the amax is
// folded by every thread block at once (hd::amax_step is a max on the bits of |x|, so atomicMax
// folds the partial results to the same word in any order), then each element is coded on its
// own. Storage is untransposed: per-tensor blocks have no orientation.

/// amax[whole ? 0 : g] = fold of group g (blockIdx.y strides over the groups); amax zeroed first.
__global__ void amax_groups_kernel(const float* __restrict__ x, size_t per_group, size_t groups, bool whole,
                                   uint32_t* amax) {
  __shared__ uint32_t red[kMaxThreads / 32];
  for (size_t g = blockIdx.y; g < groups; g += gridDim.y) {
    const float* xg = x + g * per_group;
    uint32_t a = 0;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < per_group; i += size_t(gridDim.x) * blockDim.x)
      a = hd::amax_step(a, f32_bits(xg[i]));
    a = block_max(a, red);
    if (threadIdx.x == 0 && a) atomicMax(amax + (whole ? 0 : g), a);
  }
}

/// Codes of every element (E2M1: of every byte, two elements) and each group's scale_inv, from
/// amax_groups_kernel's words: hd::block_quant of the group's amax, as quantize_blocks would.
/// I: the index type, 32 bits where the tensor's bytes fit (its divisions are several times
/// cheaper than 64-bit ones, which the GPU emulates).
template <bool kE2M1, typename I>
__global__ void quantize_per_tensor_kernel(const float* __restrict__ x, DeviceQTensor q) {
  const QuantLayout& L = q.layout;
  const FormatSpec ef = spec_of(q.spec.elem);
  const I C = I(L.cols), per_row = I(L.rbytes), per_group = I(L.rows) * per_row, n = I(L.groups) * per_group;
  I have = ~I(0);
  hd::BlockQuant bq;
  for (I u = I(blockIdx.x) * blockDim.x + threadIdx.x; u < n; u += I(gridDim.x) * blockDim.x) {
    const I g = u / per_group, rest = u - g * per_group, r = rest / per_row, j = rest - r * per_row;
    if (g != have) {  // a thread crosses a group boundary rarely: one block step per group it meets
      bq = hd::block_quant(q.spec, ef, q.amax[q.spec.whole_tensor_scale ? 0 : g]);
      have = g;
    }
    if (rest == 0) q.scale_inv[g] = bq.scale_inv;  // the group's one block
    const float* row = x + (size_t(g) * L.rows + r) * L.cols;
    auto code = [&](size_t c) {
      const uint32_t rnd = hd::sr_word(q.spec, hd::logical_index(g, r, c, L.rows, C));
      return bq.encode(ef, f32_bits(row[c]), q.spec.round, rnd);
    };
    if constexpr (kE2M1) q.data[u] = hd::pack_e2m1(code(2 * j), 2 * j + 1 < C ? code(2 * j + 1) : 0u);
    else q.data[u] = uint8_t(code(j));
  }
}

// ---- both orientations from one tile ----------------------------------------
// Tile (tm, tc) of group rows [m0, m0 + Mg): source rows m0 + tm*L .. +L,
// columns tc*L .. +L, into shared memory (row stride L + 1). Warp w takes
// tile rows w, w + nwarp, ... as rowwise blocks, then tile columns as
// columnwise blocks of the group's transposed storage [C, Mg].
template <int L>
__global__ void quantize_both_kernel(const float* __restrict__ x, size_t C, size_t m0, size_t Mg, DeviceQTensor row,
                                     DeviceQTensor col) {
  extern __shared__ float tile[];
  constexpr int S = L + 1;
  const size_t tm = blockIdx.x, tc = blockIdx.y;
  const size_t rb = tm * L, cb = tc * L;
  const int nr = int(Mg - rb < size_t(L) ? Mg - rb : size_t(L)), nc = int(C - cb < size_t(L) ? C - cb : size_t(L));
  for (int i = threadIdx.x; i < L * L; i += blockDim.x) {
    const int rr = i / L, cc = i % L;
    tile[rr * S + cc] = rr < nr && cc < nc ? x[(m0 + rb + rr) * C + cb + cc] : 0.0f;
  }
  __syncthreads();
  const QuantSpec& spec = row.spec;
  const FormatSpec ef = spec_of(spec.elem);
  const bool e2m1 = spec.elem == Format::E2M1;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarp = blockDim.x >> 5;
  auto word = [&](int rr, int cc) { return hd::sr_word(spec, uint64_t(m0 + rb + rr) * C + cb + cc); };
  // Rowwise: block (row m0 + rb + rr, block column tc) of [1, M, C].
  for (int rr = warp; rr < nr; rr += nwarp) {
    uint32_t amax = 0;
    for (int cc = lane; cc < nc; cc += 32) amax = hd::amax_step(amax, f32_bits(tile[rr * S + cc]));
    for (int m = 16; m >= 1; m >>= 1) amax = hd::amax_step(amax, MXSIM_SHFL_XOR32(amax, m));
    const hd::BlockQuant bq = hd::block_quant(spec, ef, amax);
    const size_t r = m0 + rb + rr;
    if (lane == 0) store_block_scale(row, r * row.layout.nbc + tc, bq);
    uint8_t* out = row.data + r * row.layout.rbytes;
    if (e2m1) {
      for (int p = lane; 2 * p < nc; p += 32) {
        const int cc = 2 * p;
        const uint32_t lo = bq.encode(ef, f32_bits(tile[rr * S + cc]), spec.round, word(rr, cc));
        const uint32_t hi = cc + 1 < nc ? bq.encode(ef, f32_bits(tile[rr * S + cc + 1]), spec.round, word(rr, cc + 1)) : 0u;
        out[(cb + cc) / 2] = hd::pack_e2m1(lo, hi);
      }
    } else {
      for (int cc = lane; cc < nc; cc += 32)
        out[cb + cc] = uint8_t(bq.encode(ef, f32_bits(tile[rr * S + cc]), spec.round, word(rr, cc)));
    }
  }
  // Columnwise: block (storage row cb + cc, block column tm) of group storage [C, Mg].
  for (int cc = warp; cc < nc; cc += nwarp) {
    uint32_t amax = 0;
    for (int rr = lane; rr < nr; rr += 32) amax = hd::amax_step(amax, f32_bits(tile[rr * S + cc]));
    for (int m = 16; m >= 1; m >>= 1) amax = hd::amax_step(amax, MXSIM_SHFL_XOR32(amax, m));
    const hd::BlockQuant bq = hd::block_quant(spec, ef, amax);
    const size_t sr = cb + cc;
    if (lane == 0) store_block_scale(col, sr * col.layout.nbc + tm, bq);
    uint8_t* out = col.data + sr * col.layout.rbytes;
    if (e2m1) {
      for (int p = lane; 2 * p < nr; p += 32) {
        const int rr = 2 * p;
        const uint32_t lo = bq.encode(ef, f32_bits(tile[rr * S + cc]), spec.round, word(rr, cc));
        const uint32_t hi = rr + 1 < nr ? bq.encode(ef, f32_bits(tile[(rr + 1) * S + cc]), spec.round, word(rr + 1, cc)) : 0u;
        out[(rb + rr) / 2] = hd::pack_e2m1(lo, hi);
      }
    } else {
      for (int rr = lane; rr < nr; rr += 32)
        out[rb + rr] = uint8_t(bq.encode(ef, f32_bits(tile[rr * S + cc]), spec.round, word(rr, cc)));
    }
  }
  if (tm == 0 && tc == 0 && threadIdx.x == 0 && col.tensor_scale_inv) *col.tensor_scale_inv = 1.0f;  // not NVFP4
}

// ---- host side --------------------------------------------------------------

/// Elements one thread handles as a unit (1 per byte, 2 per E2M1 byte, 16 per
/// Hadamard run) and the threads a quantization block of layout L gets.
struct BlockLaunch {
  int unit;
  unsigned threads;
  unsigned lanes;  ///< threads per quantization block (quantize_blocks)
  /// Thread blocks for nblk quantization blocks (the kernels stride over more).
  unsigned grid(size_t nblk) const {
    const size_t per = threads / lanes;
    return unsigned(std::min<size_t>((nblk + per - 1) / per, size_t(1) << 20));
  }
};
BlockLaunch block_launch(const QuantSpec& spec, const QuantLayout& L) {
  const int U = spec.hadamard16 ? 16 : (spec.elem == Format::E2M1 ? 2 : 1);
  const size_t units = L.br * ((L.bc + U - 1) / U);
  const unsigned threads = unsigned(std::min<size_t>(kMaxThreads, std::max<size_t>(32, (units + 31) / 32 * 32)));
  unsigned lanes = threads;
  if (threads == 32 && units <= 16) {
    lanes = 1;
    while (lanes < units) lanes *= 2;
  }
  return {U, threads, lanes};
}

[[noreturn]] void bad(const char* who, const std::string& msg) {
  throw std::invalid_argument(std::string(who) + ": " + msg);
}

void check_target(const DeviceQTensor& q, const char* who) {
  const QuantLayout& L = q.layout;
  hd::validate_quant_spec(q.spec, L.scols, who);
  // The GPU kernels implement TransformerEngine's FP32 scale arithmetic only
  // (hd::block_quant); the torchao conventions are the CPU quantizer's.
  if (q.spec.scale_convention != ScaleConvention::TE)
    bad(who, std::string("scale convention ") + name_of(q.spec.scale_convention) +
                 " is not supported by the GPU quantizer (it implements te only); quantize on the CPU "
                 "(mxsim::emu::quantize) and upload the result");
  if (!hd::quant_elem(q.spec.elem))
    bad(who, std::string(spec_of(q.spec.elem).name) + " elements are not stored one code per byte (need <= 8 bits)");
  if (q.spec.elem == Format::E2M1 && L.bc % 2 != 0 && L.bc < L.scols)
    bad(who, "E2M1 blocks of odd width " + std::to_string(L.bc) + " would share code bytes between blocks");
  const bool fp32 = q.spec.scale_kind == ScaleKind::FP32;
  if (L.data_bytes() && !q.data) bad(who, "no data buffer");
  if (L.scale_count() && (fp32 ? !q.scale_inv : !q.scale_bytes)) bad(who, "no scale buffer for the spec's scale kind");
}

/// tensor_scale_inv = 1 (every kind but NVFP4; an empty tensor). The source
/// is a static, so the asynchronous copy may outlive the call.
void set_unit_scale(const DeviceQTensor& q, hipStream_t s) {
  static const float one = 1.0f;
  if (q.tensor_scale_inv) MXSIM_HIP_CHECK(hipMemcpyAsync(q.tensor_scale_inv, &one, sizeof one, hipMemcpyHostToDevice, s));
}

/// Specs whose blocks are whole groups with FP32 scales: the per-tensor kernels code them
/// (the Hadamard transform's runs take quantize_blocks).
bool per_tensor_fp32(const QuantSpec& sp) { return sp.fp32_per_tensor() && !sp.hadamard16; }
/// Words of DeviceQTensor::amax that `sp` needs for `groups` groups.
size_t amax_words(const QuantSpec& sp, size_t groups) {
  if (has_tensor_scale(sp.scale_kind)) return 1;
  return per_tensor_fp32(sp) ? groups : 0;
}

/// `n` amax words for views that bring none (the C interface's tensors over a caller's memory),
/// from the process's workspace of the stream: reused in stream order, so the call returns without
/// waiting for the device, as with the quantizer's own words. The workspace's lock is held until
/// the call's last launch (another host thread on this stream would clear the words in between).
/// n = 0: nothing taken, no lock.
struct AmaxScratch {
  std::unique_lock<std::mutex> lock;
  uint32_t* words = nullptr;
  AmaxScratch(size_t n, hipStream_t s) {
    if (n == 0) return;
    StreamWorkspace& w = stream_workspace(s);
    // A call that holds the lock must not take it again (a std::mutex relocked by its owner is
    // undefined behaviour: a deadlock in practice). Nested quantizer calls receive their words.
    if (held() == &w) throw std::logic_error("quantize_device: nested use of the stream's amax words");
    lock = std::unique_lock<std::mutex>(w.mutex());
    words = reinterpret_cast<uint32_t*>(w.get(n * sizeof(uint32_t), s, "amax words (quantizer)"));
    held() = &w;  // after get(): a throw there leaves no mark (the lock member unlocks itself)
  }
  ~AmaxScratch() {
    if (lock.owns_lock()) held() = nullptr;
  }
  AmaxScratch(const AmaxScratch&) = delete;
  AmaxScratch& operator=(const AmaxScratch&) = delete;
  static const StreamWorkspace*& held() {
    thread_local const StreamWorkspace* w = nullptr;  // the workspace this thread's call holds
    return w;
  }
};

/// The amax pass of a per-tensor spec: words[g] (words[0] when `whole`) = the fold of group g
/// of [groups, per_group] at x.
void launch_amax_groups(const float* x, size_t per_group, size_t groups, bool whole, uint32_t* words, hipStream_t s) {
  MXSIM_HIP_CHECK(hipMemsetAsync(words, 0, (whole ? 1 : groups) * sizeof(uint32_t), s));
  if (per_group == 0 || groups == 0) return;
  const unsigned gy = unsigned(std::min<size_t>(groups, 65535));
  const unsigned gx = std::max(1u, std::min(detail::grid_for(per_group, kMaxThreads), std::max(1u, 2048u / gy)));
  amax_groups_kernel<<<dim3(gx, gy), kMaxThreads, 0, s>>>(x, per_group, groups, whole, words);
  MXSIM_HIP_CHECK_LAUNCH("amax_groups_kernel");
}

/// Codes and scales of a per-tensor FP32 spec from q.amax, which the amax pass has filled
/// (amax_ready) or fills here.
void quantize_per_tensor(const float* x, const DeviceQTensor& q, hipStream_t s, bool amax_ready) {
  const QuantLayout& L = q.layout;
  if (!amax_ready) launch_amax_groups(x, L.rows * L.cols, L.groups, q.spec.whole_tensor_scale, q.amax, s);
  set_unit_scale(q, s);
  const size_t units = L.data_bytes();
  if (units == 0) return;
  const unsigned grid = std::min(detail::grid_for(units, kMaxThreads), 1u << 16);
  // 32-bit indices while u + one grid's stride cannot wrap
  const bool narrow = units + size_t(grid) * kMaxThreads < (size_t(1) << 32);
  if (q.spec.elem == Format::E2M1) {
    if (narrow) quantize_per_tensor_kernel<true, uint32_t><<<grid, kMaxThreads, 0, s>>>(x, q);
    else quantize_per_tensor_kernel<true, size_t><<<grid, kMaxThreads, 0, s>>>(x, q);
  } else {
    if (narrow) quantize_per_tensor_kernel<false, uint32_t><<<grid, kMaxThreads, 0, s>>>(x, q);
    else quantize_per_tensor_kernel<false, size_t><<<grid, kMaxThreads, 0, s>>>(x, q);
  }
  MXSIM_HIP_CHECK_LAUNCH("quantize_per_tensor_kernel");
}

}  // namespace

DeviceQuantized alloc_quantized(const QuantSpec& spec, size_t groups, size_t rows, size_t cols, Axis axis,
                                std::string_view name) {
  // A negative block size cannot form a layout: refuse it first (this throws).
  if (spec.block_rows < 0 || spec.block_cols < 0) hd::validate_quant_spec(spec, 0, "alloc_quantized");
  DeviceQuantized d;
  d.t.spec = spec;
  d.t.layout = hd::quant_layout(spec, groups, rows, cols, axis);
  hd::validate_quant_spec(spec, d.t.layout.scols, "alloc_quantized");
  const std::string n(name);
  d.data = DeviceBuffer(d.t.layout.data_bytes(), n + " codes");
  const bool fp32 = spec.scale_kind == ScaleKind::FP32;
  d.scales = DeviceBuffer(d.t.layout.scale_count() * (fp32 ? sizeof(float) : 1), n + " scales");
  d.tensor_scale = DeviceBuffer(sizeof(float), n + " tensor_scale_inv");
  d.amax = DeviceBuffer(amax_words(spec, groups) * sizeof(uint32_t), n + " amax");
  d.t.amax = d.amax.as<uint32_t>();
  d.t.data = d.data.as<uint8_t>();
  if (fp32) d.t.scale_inv = d.scales.as<float>();
  else d.t.scale_bytes = d.scales.as<uint8_t>();
  d.t.tensor_scale_inv = d.tensor_scale.as<float>();
  return d;
}

std::vector<DeviceQuantized> alloc_grouped_colwise(const QuantSpec& spec, size_t C, std::span<const int64_t> m_splits,
                                                   std::string_view name) {
  std::vector<DeviceQuantized> out;
  uint64_t m0 = 0;
  for (size_t g = 0; g < m_splits.size(); ++g) {
    if (m_splits[g] < 0)
      bad("alloc_grouped_colwise", "m_splits[" + std::to_string(g) + "] = " + std::to_string(m_splits[g]) + " is negative");
    const QuantSpec s = row_slice_spec(spec, m0, uint64_t(m_splits[g]), C);  // SR words by index in [M, C]
    out.push_back(alloc_quantized(s, 1, size_t(m_splits[g]), C, Axis::Rows,
                                  std::string(name) + " group " + std::to_string(g)));
    m0 += uint64_t(m_splits[g]);
  }
  return out;
}

namespace {
/// 1-D blocks of L = 16, 32 or 64 along Axis::Rows (transposed storage) with
/// E8M0 or FP32 scales (not NVFP4, whose tensor scale needs its amax pass):
/// the layouts quantize_colwise_lanes takes.
bool colwise_by_lanes(const DeviceQTensor& q) {
  const QuantSpec& sp = q.spec;
  const int L = sp.block_cols;
  return q.layout.transposed && sp.block_rows == 1 && (L == 16 || L == 32 || L == 64) &&
         (sp.scale_kind == ScaleKind::E8M0 || sp.scale_kind == ScaleKind::FP32);
}

/// Launches quantize_colwise_lanes_kernel over the nb tensors of `batch`
/// (one block size L; `units` the largest tensor's warp count).
void launch_colwise_lanes(const float* d_x, const GroupBatch& batch, int nb, int L, size_t units, hipStream_t s) {
  const dim3 grid(unsigned(std::min<size_t>((units + 7) / 8, size_t(1) << 20)), unsigned(nb));
  switch (L) {
    case 16: quantize_colwise_lanes_kernel<16><<<grid, kMaxThreads, 0, s>>>(d_x, batch); break;
    case 32: quantize_colwise_lanes_kernel<32><<<grid, kMaxThreads, 0, s>>>(d_x, batch); break;
    default: quantize_colwise_lanes_kernel<64><<<grid, kMaxThreads, 0, s>>>(d_x, batch); break;
  }
  MXSIM_HIP_CHECK_LAUNCH("quantize_colwise_lanes_kernel");
}

/// Warps quantize_colwise_lanes uses for tensor q.
size_t colwise_units(const DeviceQTensor& q) {
  return q.layout.groups * ((q.layout.cols + 31) / 32) * q.layout.nbc;
}
}  // namespace

void quantize_device(const float* d_x, const DeviceQTensor& out, void* stream) {
  const char* who = "quantize_device";
  check_target(out, who);
  const QuantLayout& L = out.layout;
  const hipStream_t s = stream_of(stream);
  const size_t nblk = L.scale_count();
  const size_t n = L.groups * L.rows * L.cols;
  // A view without the quantizer's amax words (the C interface's, over a caller's memory) takes
  // them from its stream's workspace (AmaxScratch), reused in stream order: no wait for the device.
  DeviceQTensor q = out;
  const AmaxScratch scratch(q.amax ? 0 : amax_words(q.spec, L.groups), s);
  if (!q.amax) q.amax = scratch.words;
  const uint32_t* gamax = nullptr;
  if (has_tensor_scale(q.spec.scale_kind) && n) {
    if (q.spec.hadamard16) {
      MXSIM_HIP_CHECK(hipMemsetAsync(q.amax, 0, sizeof(uint32_t), s));
      const unsigned np = std::max(1u, std::min(1024u, detail::grid_for(n / 16, kMaxThreads)));
      amax_hadamard_kernel<<<np, kMaxThreads, 0, s>>>(d_x, L, q.spec, q.amax);
      MXSIM_HIP_CHECK_LAUNCH("amax_hadamard_kernel");
    } else {
      launch_amax_groups(d_x, n, 1, true, q.amax, s);
    }
    gamax = q.amax;
  }
  const QuantSpec& sp = q.spec;
  const bool mx_rowwise = sp.block_rows == 1 && sp.block_cols == 32 && sp.scale_kind == ScaleKind::E8M0 &&
                          !sp.hadamard16 && !L.transposed;
  if (nblk == 0 || n == 0) {
    // No blocks: only the tensor scale (NVFP4 of an empty tensor: S_dec = 1).
    set_unit_scale(q, s);
  } else if (per_tensor_fp32(sp)) {
    quantize_per_tensor(d_x, q, s, false);
  } else if (colwise_by_lanes(q)) {
    GroupBatch one{};
    one.q[0] = q;
    launch_colwise_lanes(d_x, one, 1, q.spec.block_cols, colwise_units(q), s);
  } else if (tile32_by_warps(q)) {
    const unsigned grid = unsigned(std::min<size_t>((nblk + 7) / 8, size_t(1) << 20));
    quantize_tile32_kernel<<<grid, 256, 0, s>>>(d_x, q);
    MXSIM_HIP_CHECK_LAUNCH("quantize_tile32_kernel");
  } else if (mx_rowwise) {
    // 1 x 32 MX blocks along storage rows: the codec's rowwise kernel (the
    // same block step, eight elements per lane), groups as consecutive rows.
    mx_quantize_rowwise_device(d_x, L.groups * L.rows, L.cols, sp, q.data, q.scale_bytes, stream);
    set_unit_scale(q, s);
  } else {
    const BlockLaunch bl = block_launch(q.spec, L);
    const unsigned grid = bl.grid(nblk), threads = bl.threads, lanes = bl.lanes;
    switch (bl.unit) {
      case 16: quantize_blocks_kernel<16><<<grid, threads, 0, s>>>(d_x, q, gamax, lanes); break;
      case 2: quantize_blocks_kernel<2><<<grid, threads, 0, s>>>(d_x, q, gamax, lanes); break;
      default: quantize_blocks_kernel<1><<<grid, threads, 0, s>>>(d_x, q, gamax, lanes); break;
    }
    MXSIM_HIP_CHECK_LAUNCH("quantize_blocks_kernel");
  }
}

namespace {
void check_grouped(const char* who, size_t M, size_t C, std::span<const int64_t> m_splits,
                   std::span<const DeviceQTensor> out, const QuantSpec* spec) {
  if (out.size() != m_splits.size())
    bad(who, std::to_string(out.size()) + " outputs for " + std::to_string(m_splits.size()) + " groups");
  uint64_t m0 = 0;
  for (size_t g = 0; g < m_splits.size(); ++g) {
    const std::string gs = "group " + std::to_string(g);
    if (m_splits[g] < 0) bad(who, "m_splits[" + std::to_string(g) + "] = " + std::to_string(m_splits[g]) + " is negative");
    const QuantLayout& L = out[g].layout;
    const bool along_rows = hd::quant_layout(out[g].spec, 1, L.rows, L.cols, Axis::Rows).transposed == L.transposed;
    if (L.groups != 1 || L.rows != size_t(m_splits[g]) || L.cols != C || !along_rows)
      bad(who, gs + ": output is not a [1, " + std::to_string(m_splits[g]) + ", " + std::to_string(C) +
                   "] tensor quantized along Axis::Rows");
    if (spec) {
      const QuantSpec want = row_slice_spec(*spec, m0, uint64_t(m_splits[g]), C);
      if (!(out[g].spec == want))
        bad(who, gs + ": spec differs from the rowwise spec (with sr_index_base + m0 * C, as alloc_grouped_colwise sets it)");
    }
    m0 += uint64_t(m_splits[g]);
  }
  if (m0 != M) bad(who, "m_splits sum to " + std::to_string(m0) + " but the tensor has M = " + std::to_string(M) + " rows");
}
}  // namespace

void quantize_grouped_colwise_device(const float* d_x, size_t M, size_t C, std::span<const int64_t> m_splits,
                                     std::span<const DeviceQTensor> out, void* stream) {
  check_grouped("quantize_grouped_colwise_device", M, C, m_splits, out, nullptr);
  const hipStream_t s = stream_of(stream);
  // A whole-tensor scale (QuantSpec::whole_tensor_scale): one amax over all of x [M, C] for every
  // row slice, in the first slice with words. Views without words (the C interface's) take them
  // from the stream's workspace, one per slice that needs one and one for the whole tensor, taken
  // here once, so the per-slice quantize_device calls below need none of their own.
  const bool whole_scale = !out.empty() && out[0].spec.whole_tensor_scale;
  size_t scratch_words = whole_scale ? 1 : 0;
  for (const DeviceQTensor& q : out) scratch_words += q.amax ? 0 : amax_words(q.spec, q.layout.groups);
  const AmaxScratch scratch(scratch_words, s);
  uint32_t* next_word = scratch.words;
  uint32_t* whole = nullptr;
  if (whole_scale) {
    for (const DeviceQTensor& q : out)
      if (q.amax && !whole) whole = q.amax;
    if (!whole) whole = next_word++;
    launch_amax_groups(d_x, M * C, 1, true, whole, s);
  }
  auto with_words = [&](const DeviceQTensor& q) {
    DeviceQTensor v = q;
    if (!v.amax && amax_words(v.spec, v.layout.groups)) {
      v.amax = next_word;
      next_word += amax_words(v.spec, v.layout.groups);
    }
    return v;
  };
  size_t m0 = 0;
  GroupBatch batch{};
  int nb = 0;
  BlockLaunch launch{1, 32, 32};
  size_t grid = 0;
  int lanes_l = 0;      // > 0: the batch goes to quantize_colwise_lanes with blocks of lanes_l
  size_t lane_units = 0;
  auto flush = [&] {
    if (nb == 0) return;
    if (lanes_l > 0) {
      launch_colwise_lanes(d_x, batch, nb, lanes_l, lane_units, s);
    } else {
      const dim3 g{unsigned(grid), unsigned(nb)};
      const unsigned threads = launch.threads, lanes = launch.lanes;
      switch (launch.unit) {
        case 16: quantize_group_batch_kernel<16><<<g, threads, 0, s>>>(d_x, batch, lanes); break;
        case 2: quantize_group_batch_kernel<2><<<g, threads, 0, s>>>(d_x, batch, lanes); break;
        default: quantize_group_batch_kernel<1><<<g, threads, 0, s>>>(d_x, batch, lanes); break;
      }
      MXSIM_HIP_CHECK_LAUNCH("quantize_group_batch_kernel");
    }
    nb = 0;
    grid = 0;
    lane_units = 0;
  };
  for (size_t g = 0; g < m_splits.size(); ++g) {
    const DeviceQTensor& q = out[g];
    const size_t mg = size_t(m_splits[g]);
    if (mg == 0 || q.layout.scale_count() == 0) {
      if (mg > 0) quantize_device(d_x + m0 * C, with_words(q), stream);  // no blocks: the tensor scale only
      else set_unit_scale(q, s);
    } else if (has_tensor_scale(q.spec.scale_kind)) {
      quantize_device(d_x + m0 * C, with_words(q), stream);  // NVFP4: its own amax pass first
    } else if (per_tensor_fp32(q.spec)) {  // the whole GPU on each slice, as quantize_device codes it
      if (q.spec.whole_tensor_scale != whole_scale)
        bad("quantize_grouped_colwise_device", "group " + std::to_string(g) + ": whole_tensor_scale differs from group 0's");
      check_target(q, "quantize_grouped_colwise_device");
      DeviceQTensor v = with_words(q);
      if (whole) v.amax = whole;
      quantize_per_tensor(d_x + m0 * C, v, s, whole != nullptr);
    } else {
      check_target(q, "quantize_grouped_colwise_device");
      const QuantLayout& L = q.layout;
      const BlockLaunch bl = block_launch(q.spec, L);
      const int ll = colwise_by_lanes(q) ? q.spec.block_cols : 0;
      // One launch takes one kernel, unit size, block shape and lanes per block.
      if (nb > 0 && (ll != lanes_l || (ll == 0 && (bl.unit != launch.unit || bl.threads != launch.threads ||
                                                   bl.lanes != launch.lanes))))
        flush();
      launch = bl;
      lanes_l = ll;
      batch.q[nb] = q;
      batch.x_offset[nb] = m0 * C;
      ++nb;
      grid = std::max<size_t>(grid, bl.grid(L.scale_count()));
      lane_units = std::max(lane_units, colwise_units(q));
      if (nb == kMaxGroupBatch) flush();
    }
    m0 += mg;
  }
  flush();
}

void quantize_both_device(const float* d_x, size_t M, size_t C, std::span<const int64_t> m_splits,
                          const DeviceQTensor& rowwise, std::span<const DeviceQTensor> colwise, void* stream) {
  const char* who = "quantize_both_device";
  const QuantSpec& sp = rowwise.spec;
  const int Lb = sp.block_cols;
  if (sp.block_rows != 1 || !(Lb == 16 || Lb == 32 || Lb == 64 || Lb == 128))
    bad(who, "needs 1 x L blocks with L in {16, 32, 64, 128}, got " + std::to_string(sp.block_rows) + "x" +
                 std::to_string(sp.block_cols));
  if (has_tensor_scale(sp.scale_kind)) bad(who, "NVFP4 needs its tensor amax first: quantize each orientation apart");
  if (sp.hadamard16) bad(who, "hadamard16 transforms one orientation: quantize each orientation apart");
  const QuantLayout& RL = rowwise.layout;
  if (RL.groups != 1 || RL.rows != M || RL.cols != C || RL.transposed)
    bad(who, "rowwise output is not a [1, " + std::to_string(M) + ", " + std::to_string(C) + "] tensor along Axis::Cols");
  check_target(rowwise, who);
  check_grouped(who, M, C, m_splits, colwise, &sp);
  for (const auto& c : colwise)
    if (c.layout.rows) check_target(c, who);
  if (Lb == 32 && sp.scale_kind == ScaleKind::E8M0) {  // the MX case: one read, registers and shuffles
    const hipStream_t s = stream_of(stream);
    size_t m0 = 0;
    for (size_t g = 0; g < m_splits.size(); ++g) {
      const size_t mg = size_t(m_splits[g]);
      if (mg && C) {
        const size_t units = ((C + 31) / 32) * ((mg + 31) / 32);
        const unsigned grid = unsigned(std::min<size_t>((units + kBothWarps - 1) / kBothWarps, size_t(1) << 20));
        quantize_both_lanes_kernel<<<grid, kBothWarps * 32, 0, s>>>(d_x, C, m0, mg, rowwise, colwise[g]);
        MXSIM_HIP_CHECK_LAUNCH("quantize_both_lanes_kernel");
      } else {
        set_unit_scale(colwise[g], s);
      }
      m0 += mg;
    }
    set_unit_scale(rowwise, s);
    return;
  }
  const size_t smem = size_t(Lb) * size_t(Lb + 1) * sizeof(float);
  static const size_t optin = std::max<size_t>(device_info().shared_per_block_optin, 48 * 1024);
  if (smem > optin) {  // portable fallback: the same blocks, two reads
    quantize_device(d_x, rowwise, stream);
    quantize_grouped_colwise_device(d_x, M, C, m_splits, colwise, stream);
    return;
  }
  const hipStream_t s = stream_of(stream);
  auto launch = [&](auto kernel) {
    if (smem > 48 * 1024)
      MXSIM_HIP_CHECK(hipFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                          hipFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    size_t m0 = 0;
    for (size_t g = 0; g < m_splits.size(); ++g) {
      const size_t mg = size_t(m_splits[g]);
      if (mg && C) {
        const dim3 grid(unsigned((mg + Lb - 1) / Lb), unsigned((C + Lb - 1) / Lb));
        kernel<<<grid, kMaxThreads, smem, s>>>(d_x, C, m0, mg, rowwise, colwise[g]);
        MXSIM_HIP_CHECK_LAUNCH("quantize_both_kernel");
      }
      m0 += mg;
    }
  };
  switch (Lb) {
    case 16: launch(quantize_both_kernel<16>); break;
    case 32: launch(quantize_both_kernel<32>); break;
    case 64: launch(quantize_both_kernel<64>); break;
    default: launch(quantize_both_kernel<128>); break;
  }
  set_unit_scale(rowwise, s);
  for (size_t g = 0; g < m_splits.size(); ++g)
    if (m_splits[g] == 0 || C == 0) set_unit_scale(colwise[g], s);
}

}  // namespace mxsim::hip
