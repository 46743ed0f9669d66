// Operand images of the Hopper grouped GEMM: K-major 8-bit (or BF16) codes
// in 128-byte slabs and FP32 scale images, built from QuantizedTensor storage
// by two kernels (codes, scales) before the GEMM launch.
// Internal to gemm_sm90.hip (the one file that includes it, inside its
// MXSIM_GPU_NVIDIA build): one room of the Hopper grouped GEMM.
#pragma once
#include "gemm_sm90_layout.hpp"

namespace mxsim::hip::gemm::sm90 {
// ---- operand images ------------------------------------------------------------

/// One launch's operand panel and where its image goes: rows [row0, row0 +
/// rows_pad) and K elements [col0, col0 + kp) of the image, zeros past R and K.
struct ImgJob {
  PanelView p;
  int R = 0, K = 0, row0 = 0, col0 = 0, rows_pad = 0, kp = 0;
};
struct ImgBatch {
  ImgJob j[kMaxBatch];
  int n = 0;
  Img kind = Img::E4M3;
  Format elem = Format::E4M3;  // the panels' element format
  uint8_t* img = nullptr;
  long long pitch = 0;  // bytes per image row
  // scales (Mode::Block32 / Chunk128): one FP32 value per 32-block of K,
  // [rows][K / 32] for A, transposed [K / 32][rows] for B
  float* scales = nullptr;
  long long spitch = 0;  // floats per scale-image row
  int transposed = 0, fp32_scales = 0, with_scales = 0;
  int* range = nullptr;  // min and max E8M0 byte seen (NaN 0xFF left out)
};

/// The E4M3 code of an E2M1 code's value: magnitudes 0, 0.5, 1, 1.5, 2, 3,
/// 4, 6 are E4M3 0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C; the sign
/// bit moves from bit 3 to bit 7 (-0 stays -0, as encode_f32 gives it).
__device__ inline uint32_t e2m1_as_e4m3(uint32_t c) {
  return (c & 8u ? 0x80u : 0u) | uint32_t((0x4C4844403C383000ull >> (8 * (c & 7u))) & 0xFFu);
}

/// Four E2M1 codes (the nibbles of q, lowest first) as four E4M3 bytes: the
/// magnitudes through one byte permute of the table above, then the signs.
__device__ inline uint32_t e2m1x4_as_e4m3(uint32_t q) {
  const uint32_t sel = (q & 0x7u) | ((q >> 4) & 0x7u) << 4 | ((q >> 8) & 0x7u) << 8 | ((q >> 12) & 0x7u) << 12;
  const uint32_t mag = __byte_perm(0x3C383000u, 0x4C484440u, sel);
  const uint32_t sign = (q & 0x8u) << 4 | (q & 0x80u) << 8 | (q & 0x800u) << 12 | (q & 0x8000u) << 16;
  return mag | sign;
}

/// The image code of storage code `code`: E2M1 through its E4M3 table,
/// E4M3 / E5M2 as they are, FP6 re-encoded exactly as E4M3, BF16 as is.
__device__ inline uint32_t image_code(Img kind, Format elem, const FormatSpec& fs, uint32_t code) {
  if (kind == Img::BF16 || kind == Img::E5M2 || elem == Format::E4M3) return code;
  if (elem == Format::E2M1) return e2m1_as_e4m3(code);
  return encode_f32(Format::E4M3, decode(fs, code));  // E2M3 / E3M2 values are E4M3 values
}

/// Grid of the image kernels: x walks the index that runs along storage rows
/// (neighbouring threads read neighbouring bytes), y the other, z the job.
__global__ void image_codes_kernel(const __grid_constant__ ImgBatch b) {
  const ImgJob& J = b.j[blockIdx.z];
  const FormatSpec fs = spec_of(b.elem);
  const bool bf16 = b.kind == Img::BF16, kmajor = J.p.along_scols;
  const unsigned per = bf16 ? 8 : 16;  // elements per 16-byte store
  const unsigned chunks = unsigned(J.kp) / per, rows = unsigned(J.rows_pad);
  const unsigned nfast = kmajor ? chunks : rows, nslow = kmajor ? rows : chunks;
  for (unsigned sl = blockIdx.y; sl < nslow; sl += gridDim.y)
    for (unsigned f = blockIdx.x * blockDim.x + threadIdx.x; f < nfast; f += gridDim.x * blockDim.x) {
      const unsigned r = kmajor ? sl : f, c = kmajor ? f : sl;
      uint32_t w[4] = {0, 0, 0, 0};
      if (r < unsigned(J.R)) {
        if (kmajor && b.elem == Format::E2M1) {  // each storage byte is two neighbouring elements
          const uint8_t* src = J.p.data + (J.p.roff + r) * J.p.rbytes + c * 8;
          if (c * 16 + 16 <= unsigned(J.K) && (reinterpret_cast<uintptr_t>(src) & 7) == 0) {
            const uint2 v = *reinterpret_cast<const uint2*>(src);  // 16 codes, low nibble first
            w[0] = e2m1x4_as_e4m3(v.x & 0xFFFFu), w[1] = e2m1x4_as_e4m3(v.x >> 16);
            w[2] = e2m1x4_as_e4m3(v.y & 0xFFFFu), w[3] = e2m1x4_as_e4m3(v.y >> 16);
          } else {
            for (unsigned e = 0; e < 8; ++e) {
              const unsigned k = c * 16 + 2 * e;
              if (k >= unsigned(J.K)) break;
              const uint32_t byte = src[e];
              const uint32_t lo = e2m1_as_e4m3(byte & 0xFu), hi = k + 1 < unsigned(J.K) ? e2m1_as_e4m3(byte >> 4) : 0u;
              w[e / 2] |= (lo | hi << 8) << (16 * (e % 2));
            }
          }
        } else {
          for (unsigned e = 0; e < per; ++e) {
            const unsigned k = c * per + e;
            if (k >= unsigned(J.K)) break;
            const uint32_t code = image_code(b.kind, b.elem, fs, Row{J.p, r}.code(k));
            if (bf16) w[e / 2] |= (code & 0xFFFFu) << (16 * (e % 2));
            else w[e / 4] |= code << (8 * (e % 4));
          }
        }
      }
      uint8_t* dst = b.img + size_t(J.row0 + r) * size_t(b.pitch) + size_t(J.col0 + c * per) * (bf16 ? 2 : 1);
      *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

__device__ inline float pow2_of_e8m0(uint8_t e) {
  if (e == 0xFF) return f32_from_bits(kCanonicalNan32);
  return f32_from_bits(e ? uint32_t(e) << 23 : 0x00400000u);  // 0x00: 2^-127, a subnormal
}

/// True when every element of row r's 32-block starting at K index k (up to
/// K) is +0 or -0.
__device__ inline bool block_is_zero(const PanelView& p, unsigned r, unsigned k, unsigned K) {
  const uint32_t mag = spec_of(p.elem).sign_bit() - 1u;
  const Row row{p, r};
  for (unsigned i = k; i < k + 32 && i < K; ++i)
    if (row.code(i) & mag) return false;
  return true;
}

/// Scale image: A [rows][K / 32] (x walks the blocks), B transposed
/// [K / 32][rows] (x walks the rows), so that neighbouring threads write
/// neighbouring words.
__global__ void image_scales_kernel(const __grid_constant__ ImgBatch b) {
  const ImgJob& J = b.j[blockIdx.z];
  const unsigned nbp = unsigned(J.kp) / 32, nreal = (unsigned(J.K) + 31) / 32, rows = unsigned(J.rows_pad);
  const unsigned nfast = b.transposed ? rows : nbp, nslow = b.transposed ? nbp : rows;
  const PanelView& p = J.p;
  unsigned lo = 255, hi = 0;
  for (unsigned sl = blockIdx.y; sl < nslow; sl += gridDim.y)
    for (unsigned f = blockIdx.x * blockDim.x + threadIdx.x; f < nfast; f += gridDim.x * blockDim.x) {
      const unsigned r = b.transposed ? f : sl, blk = b.transposed ? sl : f;
      float v = 1.0f;  // padding: a finite neutral scale (its blocks are never promoted)
      if (r < unsigned(J.R) && blk < nreal) {
        // the scale grid entry of element (r, 32 blk) (Row::scale_at, in 32-bit steps)
        const unsigned k = blk * 32, sr = p.along_scols ? unsigned(p.roff) + r : k,
                       sc = p.along_scols ? k : unsigned(p.roff) + r;
        const size_t at = size_t(sr / unsigned(p.br)) * p.nbc + sc / unsigned(p.bc);
        if (b.fp32_scales) {
          v = p.sinv[at];
        } else {
          const uint8_t e = p.sbytes[at];
          v = pow2_of_e8m0(e);
          if (e != 0xFF) {
            // The smallest byte counts only rows whose block has a nonzero
            // element: a block of zeros dots to +-0 with anything, and
            // fmaf(+-0, s, acc) is acc for any finite s, however small (acc is
            // never -0 inside the range: see the kernel), which is the
            // contract's exact add of a zero product. Zero blocks (dead ReLU
            // features, masked gradients) sat at byte 0x00 and sent whole
            // training-step wgrads to the exact-steps twin (H200: 12.2 ms per
            // launch against the fmaf kernel's 0.71).
            // The largest byte counts every block: an Inf s would make 0 * s NaN.
            if (e < lo && !block_is_zero(p, r, k, unsigned(J.K))) lo = e;
            hi = e > hi ? e : hi;
          }
        }
      }
      const size_t col = size_t(J.col0 / 32) + blk, row_i = size_t(J.row0) + r;
      b.scales[b.transposed ? col * size_t(b.spitch) + row_i : row_i * size_t(b.spitch) + col] = v;
    }
  if (!b.fp32_scales) {
    lo = __reduce_min_sync(0xFFFFFFFFu, lo);
    hi = __reduce_max_sync(0xFFFFFFFFu, hi);
    if (threadIdx.x % 32 == 0) {
      atomicMin(&b.range[0], int(lo));
      atomicMax(&b.range[1], int(hi));
    }
  }
}

static_assert(sizeof(ImgBatch) <= 4000, "kernel parameters are limited to 4 KiB");

}  // namespace mxsim::hip::gemm::sm90
