// Kernels and host glue of the GPU codec (include/mxsim/hip/codec.hpp).
// HIP C++: compiled as CUDA by nvcc (-fmad=false) on NVIDIA through
// vendors/cuda.h, and by hipcc (-ffp-contract=off) on AMD.
//
// Numerics: nothing here rounds. Every code comes from mxsim::encode /
// decode and the per-block step of hd/quant_block.hpp (amax, E8M0 scale,
// element encoder, E2M1 packing), the same inline functions the CPU emulator
// runs; the kernels only move data and pick the Philox word of each element.
// The one exception is the packed BF16 path, which rounds with the GPU's
// bf16x2 FMA by the argument written beside it, and is checked against
// emu::quantize on every BF16 value under every scale.
#include "check.hpp"
#include "mx_bf16.hpp"
#include "mx_dispatch.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "mxsim/bits.hpp"
#include "mxsim/hd/quant_block.hpp"
#include "mxsim/hip/codec.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/scale_rule.hpp"

namespace mxsim::hip {
namespace {

using detail::aligned;
using detail::check_mx_spec;
using detail::FormatTag;
using detail::ModeTag;
using detail::mx_rowwise_bf16_packed;
using detail::stream_of;
using detail::with_format;
using detail::with_mode;
using detail::with_mx_format;
constexpr unsigned kThreads = 256;
unsigned grid_for(size_t work_items) { return detail::grid_for(work_items, kThreads); }

template <int Bytes> struct CodeOf;
template <> struct CodeOf<1> { using type = uint8_t; };
template <> struct CodeOf<2> { using type = uint16_t; };
template <> struct CodeOf<4> { using type = uint32_t; };

// Four codes stored with one access.
template <typename C> struct alignas(4 * sizeof(C)) Quad { C v[4]; };

// Kernels are specialized on the Format (and rounding mode) so the format
// table row is a compile-time constant: encode()'s branches on exponent
// width, NaN kind and subnormals fold away. The arithmetic is the same
// inline function; only constants propagate.
template <Format F> using CodeT = typename CodeOf<(spec_of(F).bits <= 8 ? 1 : spec_of(F).bits <= 16 ? 2 : 4)>::type;

// ---- encode ---------------------------------------------------------------
// Thread q converts elements 4q .. 4q+3 (vectorized when `vec`: 16-byte
// aligned input, output aligned to four codes). When index_base is a
// multiple of 4 those four share one Philox counter block (philox.hpp),
// drawn once.
template <Format F, RoundMode M>
__global__ void encode_kernel(const float* __restrict__ x, CodeT<F>* __restrict__ out, size_t n, bool vec,
                              int scale_exp, Overflow ov, PhiloxStream sr, uint64_t base) {
  using C = CodeT<F>;
  constexpr FormatSpec f = spec_of(F);
  const size_t nq = (n + 3) / 4;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t q = size_t(blockIdx.x) * blockDim.x + threadIdx.x; q < nq; q += stride) {
    const size_t i0 = q * 4;
    const bool full = vec && i0 + 4 <= n;
    uint32_t xb[4];
    if (full) {
      const uint4 v = reinterpret_cast<const uint4*>(x)[q];
      xb[0] = v.x; xb[1] = v.y; xb[2] = v.z; xb[3] = v.w;
    } else {
      for (int k = 0; k < 4; ++k) xb[k] = i0 + k < n ? f32_bits(x[i0 + k]) : 0u;
    }
    uint32_t rnd[4] = {0u, 0u, 0u, 0u};
    if constexpr (M == RoundMode::Stochastic) {
      if ((base & 3u) == 0) {
        const auto r = sr.block((base + i0) >> 2);
        for (int k = 0; k < 4; ++k) rnd[k] = r[k];
      } else {
        for (int k = 0; k < 4; ++k) rnd[k] = sr(base + i0 + k);
      }
    }
    Quad<C> c;
    for (int k = 0; k < 4; ++k) c.v[k] = C(encode(f, xb[k], scale_exp, M, ov, rnd[k]));
    if (full) {
      reinterpret_cast<Quad<C>*>(out)[q] = c;
    } else {
      for (int k = 0; k < 4; ++k)
        if (i0 + k < n) out[i0 + k] = c.v[k];
    }
  }
}

// ---- decode ---------------------------------------------------------------
template <Format F>
__global__ void decode_kernel(const CodeT<F>* __restrict__ codes, float* __restrict__ out, size_t n, bool vec) {
  using C = CodeT<F>;
  constexpr FormatSpec f = spec_of(F);
  const size_t nq = (n + 3) / 4;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t q = size_t(blockIdx.x) * blockDim.x + threadIdx.x; q < nq; q += stride) {
    const size_t i0 = q * 4;
    if (vec && i0 + 4 <= n) {
      const Quad<C> c = reinterpret_cast<const Quad<C>*>(codes)[q];
      float4 v;
      v.x = decode(f, c.v[0]); v.y = decode(f, c.v[1]); v.z = decode(f, c.v[2]); v.w = decode(f, c.v[3]);
      reinterpret_cast<float4*>(out)[q] = v;
    } else {
      for (int k = 0; k < 4; ++k)
        if (i0 + k < n) out[i0 + k] = decode(f, codes[i0 + k]);
    }
  }
}

// ---- rowwise MX quantize --------------------------------------------------
// amax is the max of |x| bit patterns (NaN/Inf compare above every finite,
// as in emu::quantize), reduced by shuffles; the max of integers is exact in
// any order. A block holding NaN/Inf gets scale 0xFF (e8m0_scale) and codes 0.
//
// Scalar form (any cols): 32 consecutive lanes own one block (row r, block
// column bj); lane l holds element c = 32 bj + l.
template <Format F, RoundMode M>
__global__ void mx_rowwise_kernel(const float* __restrict__ x, uint8_t* __restrict__ data,
                                  uint8_t* __restrict__ scales, size_t rows, size_t cols, size_t row_bytes,
                                  size_t nbc, QuantSpec spec) {
  constexpr FormatSpec f = spec_of(F);
  const unsigned lane = threadIdx.x & 31u;
  const size_t nblk = rows * nbc;
  const size_t stride = (size_t(gridDim.x) * blockDim.x) >> 5;
  for (size_t b = ((size_t(blockIdx.x) * blockDim.x) + threadIdx.x) >> 5; b < nblk; b += stride) {
    const size_t r = b / nbc, bj = b - r * nbc;
    const size_t c = bj * 32 + lane;
    const bool in = c < cols;
    const size_t index = r * cols + c;
    const uint32_t xb = in ? f32_bits(x[index]) : 0u;
    uint32_t amax = hd::amax_step(0u, xb);
    for (int m = 16; m >= 1; m >>= 1) amax = hd::amax_step(amax, MXSIM_SHFL_XOR32(amax, m));
    const hd::BlockQuant bq = hd::block_quant_e8m0(spec.rule, f, amax);
    if (lane == 0) scales[b] = bq.scale_byte;
    uint32_t code = 0;
    if (in) {
      uint32_t rnd = 0;
      if constexpr (M == RoundMode::Stochastic) rnd = spec.sr(spec.sr_index_base + index);
      code = bq.encode(f, xb, M, rnd);
    }
    if constexpr (f.bits == 4) {
      const uint32_t hi = MXSIM_SHFL_DOWN32(code, 1);  // lane+1's code; 0 past the row's end
      if (in && (lane & 1u) == 0) data[r * row_bytes + c / 2] = hd::pack_e2m1(code, hi);
    } else {
      if (in) data[r * row_bytes + c] = uint8_t(code);
    }
  }
}

// Vector form (cols % 8 == 0, x 16-byte aligned, data aligned to 8 codes):
// 4 lanes own one block, each lane eight consecutive elements (16-byte
// loads; two Philox blocks, since r*cols + c is a multiple of 8), so a warp
// covers eight blocks. Src is float or BF16 bits (uint16_t, the upper half
// of an FP32: widening is a shift, exact). Same per-element arithmetic as the
// scalar form: the block's BlockQuant::encode.
template <typename Src>
__device__ inline void load8(const Src* __restrict__ x, size_t index, uint32_t (&xb)[8]) {
  if constexpr (sizeof(Src) == 4) {
    const uint4 a = *reinterpret_cast<const uint4*>(x + index), b = *reinterpret_cast<const uint4*>(x + index + 4);
    xb[0] = a.x; xb[1] = a.y; xb[2] = a.z; xb[3] = a.w;
    xb[4] = b.x; xb[5] = b.y; xb[6] = b.z; xb[7] = b.w;
  } else {
    const uint4 a = *reinterpret_cast<const uint4*>(x + index);
    const uint32_t w[4] = {a.x, a.y, a.z, a.w};
    for (int k = 0; k < 4; ++k) {
      xb[2 * k] = w[k] << 16;
      xb[2 * k + 1] = w[k] & 0xFFFF0000u;
    }
  }
}

// A thread takes kIter of those eight-element pieces, all loads first, so
// that 64 bytes per lane are in flight (the kernel is latency-bound below that).
template <typename Src> constexpr int kVecIter = sizeof(Src) == 4 ? 2 : 4;

template <Format F, RoundMode M, typename Src>
__global__ void mx_rowwise_vec_kernel(const Src* __restrict__ x, uint8_t* __restrict__ data,
                                      uint8_t* __restrict__ scales, size_t rows, size_t cols, size_t row_bytes,
                                      size_t nbc, QuantSpec spec) {
  constexpr FormatSpec f = spec_of(F);
  constexpr int kIter = kVecIter<Src>;
  const unsigned lane = threadIdx.x & 31u, sub = lane >> 2, j = lane & 3u;
  const size_t nblk = rows * nbc;
  const size_t nwarp_total = (size_t(gridDim.x) * blockDim.x) >> 5;
  const bool small = nblk <= 0xFFFFFFFFu;
  for (size_t w = ((size_t(blockIdx.x) * blockDim.x) + threadIdx.x) >> 5; w * 8 * kIter < nblk; w += nwarp_total) {
    size_t b[kIter], r[kIter], c[kIter];
    bool in[kIter];
    uint32_t xb[kIter][8];
    // One division per lane; the later pieces are 8 blocks further on.
    size_t rr, bj;
    b[0] = w * kIter * 8 + sub;
    if (small) {  // 32-bit division where it suffices
      rr = uint32_t(b[0]) / uint32_t(nbc);
      bj = uint32_t(b[0]) - uint32_t(rr) * uint32_t(nbc);
    } else {
      rr = b[0] / nbc;
      bj = b[0] - rr * nbc;
    }
#pragma unroll
    for (int it = 0; it < kIter; ++it) {  // warp-uniform; lanes past the end carry zeros
      if (it > 0) {
        b[it] = b[it - 1] + 8;
        bj += 8;
        while (bj >= nbc) {
          bj -= nbc;
          ++rr;
        }
      }
      r[it] = rr;
      c[it] = bj * 32 + j * 8;
      in[it] = b[it] < nblk && c[it] < cols;  // cols % 8 == 0: eight elements are wholly in or out
#pragma unroll
      for (int k = 0; k < 8; ++k) xb[it][k] = 0u;
      if (in[it]) load8(x, r[it] * cols + c[it], xb[it]);
    }
#pragma unroll
    for (int it = 0; it < kIter; ++it) {
      uint32_t amax = 0;
#pragma unroll
      for (int k = 0; k < 8; ++k) amax = hd::amax_step(amax, xb[it][k]);
      for (int m = 2; m >= 1; m >>= 1)  // within the 4 lanes of this block
        amax = hd::amax_step(amax, MXSIM_SHFL_XOR32(amax, m));
      const hd::BlockQuant bq = hd::block_quant_e8m0(spec.rule, f, amax);
      if (b[it] < nblk && j == 0) scales[b[it]] = bq.scale_byte;
      if (!in[it]) continue;
      const size_t index = r[it] * cols + c[it];
      uint32_t rnd[8] = {0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u};
      if constexpr (M == RoundMode::Stochastic) {
        const uint64_t q = (spec.sr_index_base + index) >> 2;  // sr_index_base % 4 == 0 (dispatch)
        const auto r0 = spec.sr.block(q), r1 = spec.sr.block(q + 1);
        for (int k = 0; k < 4; ++k) {
          rnd[k] = r0[k];
          rnd[4 + k] = r1[k];
        }
      }
      uint32_t code[8];
      if (bq.by_add(f, M)) {  // the common block: no per-element branch
#pragma unroll
        for (int k = 0; k < 8; ++k) code[k] = encode_by_add(f, xb[it][k], bq.scale_exp, M);
      } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) code[k] = bq.encode(f, xb[it][k], M, rnd[k]);
      }
      if constexpr (f.bits == 4) {  // little-endian: element c in the low nibble of the first byte
        uint32_t four = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) four |= hd::pack_e2m1(code[2 * k], code[2 * k + 1]) << (8 * k);
        *reinterpret_cast<uint32_t*>(data + r[it] * row_bytes + c[it] / 2) = four;
      } else {
        uint32_t lo = 0, hi = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          lo |= (code[k] & 0xFFu) << (8 * k);
          hi |= (code[4 + k] & 0xFFu) << (8 * k);
        }
        *reinterpret_cast<uint2*>(data + r[it] * row_bytes + c[it]) = make_uint2(lo, hi);
      }
    }
  }
}


// The vector kernel's conditions. QuantSpec::sr_index_base offsets the
// Philox element index (grouped wgrad operands, numerics.md §2.5); the vector
// kernel draws whole counter blocks, so it needs the base to be a multiple of 4.
bool vec_rowwise_ok(const void* d_x, size_t cols, const QuantSpec& spec, const void* d_data) {
  const size_t code_align = spec_of(spec.elem).bits == 4 ? 4 : 8;
  return cols % 8 == 0 && spec.sr_index_base % 4 == 0 && aligned(d_x, 16) && aligned(d_data, code_align);
}

}  // namespace

size_t code_bytes(Format f) {
  const int b = spec_of(f).bits;
  return b <= 8 ? 1 : (b <= 16 ? 2 : 4);
}

void encode_device(const float* d_x, void* d_codes, size_t n, const CodecParams& p, void* stream) {
  if (n == 0) return;
  const hipStream_t s = stream_of(stream);
  const unsigned grid = grid_for((n + 3) / 4);
  const bool vec = aligned(d_x, 16) && aligned(d_codes, 4 * code_bytes(p.format));
  with_format(p.format, [&](auto ft) {
    constexpr Format F = decltype(ft)::value;
    with_mode(p.round, [&](auto mt) {
      constexpr RoundMode M = decltype(mt)::value;
      encode_kernel<F, M><<<grid, kThreads, 0, s>>>(d_x, static_cast<CodeT<F>*>(d_codes), n, vec, p.scale_exp,
                                                    p.overflow, p.sr, p.index_base);
    });
  });
  MXSIM_HIP_CHECK_LAUNCH("encode_kernel");
}

void decode_device(const void* d_codes, Format f, float* d_out, size_t n, void* stream) {
  if (n == 0) return;
  const hipStream_t s = stream_of(stream);
  const unsigned grid = grid_for((n + 3) / 4);
  const bool vec = aligned(d_codes, 4 * code_bytes(f)) && aligned(d_out, 16);
  with_format(f, [&](auto ft) {
    constexpr Format F = decltype(ft)::value;
    decode_kernel<F><<<grid, kThreads, 0, s>>>(static_cast<const CodeT<F>*>(d_codes), d_out, n, vec);
  });
  MXSIM_HIP_CHECK_LAUNCH("decode_kernel");
}

namespace {
template <Format F, RoundMode M>
__global__ void encode_by_add_check_kernel(int scale_exp, unsigned long long* bad) {
  constexpr FormatSpec f = spec_of(F);
  unsigned long long n = 0;
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i <= 0xFFFFFFFFull; i += stride) {
    const uint32_t x = uint32_t(i);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) continue;  // NaN: outside encode_by_add's domain
    n += encode_by_add(f, x, scale_exp, M) != encode(f, x, scale_exp, M, Overflow::Saturate);
  }
  for (int m = 16; m >= 1; m >>= 1) n += MXSIM_SHFL_XOR32(n, m);
  if ((threadIdx.x & 31u) == 0 && n) atomicAdd(bad, n);
}
}  // namespace

uint64_t encode_by_add_mismatches(Format fm, RoundMode mode, int scale_exp) {
  if (!encode_by_add_applies(spec_of(fm), scale_exp, mode))
    throw std::invalid_argument(std::string("encode_by_add_mismatches: encode_by_add does not apply to ") +
                                spec_of(fm).name + " at scale_exp " + std::to_string(scale_exp) + " in this mode");
  DeviceBuffer d(sizeof(unsigned long long), "encode_by_add_mismatches count");
  MXSIM_HIP_CHECK(hipMemset(d.get(), 0, sizeof(unsigned long long)));
  auto* bad = static_cast<unsigned long long*>(d.get());
  const unsigned grid = 132u * 16u;
  with_format(fm, [&](auto ft) {
    constexpr Format F = decltype(ft)::value;
    if constexpr (encode_by_add_applies(spec_of(F), 0, RoundMode::RNE)) {
      if (mode == RoundMode::RZ) encode_by_add_check_kernel<F, RoundMode::RZ><<<grid, kThreads>>>(scale_exp, bad);
      else encode_by_add_check_kernel<F, RoundMode::RNE><<<grid, kThreads>>>(scale_exp, bad);
    }
  });
  MXSIM_HIP_CHECK_LAUNCH("encode_by_add_check_kernel");
  unsigned long long n = 0;
  d.download(&n, sizeof n);  // synchronizes
  return n;
}

void encode_array(std::span<const float> x, std::span<uint8_t> codes, const CodecParams& p) {
  const size_t n = x.size(), cb = code_bytes(p.format);
  if (codes.size() != n * cb)
    throw std::invalid_argument("encode_array: codes holds " + std::to_string(codes.size()) + " bytes, " +
                                std::to_string(n) + " codes of " + spec_of(p.format).name + " need " +
                                std::to_string(n * cb));
  if (n == 0) return;
  DeviceBuffer dx(n * sizeof(float), "encode_array input"), dc(n * cb, "encode_array codes");
  dx.upload(x.data(), n * sizeof(float));
  encode_device(static_cast<const float*>(dx.get()), dc.get(), n, p);
  synchronize();
  dc.download(codes.data(), n * cb);
}

std::vector<uint8_t> encode_array(std::span<const float> x, const CodecParams& p) {
  std::vector<uint8_t> out(x.size() * code_bytes(p.format));
  encode_array(x, out, p);
  return out;
}

void decode_array(std::span<const uint8_t> codes, Format f, std::span<float> out) {
  const size_t n = out.size(), cb = code_bytes(f);
  if (codes.size() != n * cb)
    throw std::invalid_argument("decode_array: codes holds " + std::to_string(codes.size()) + " bytes, " +
                                std::to_string(n) + " codes of " + spec_of(f).name + " need " +
                                std::to_string(n * cb));
  if (n == 0) return;
  DeviceBuffer dc(n * cb, "decode_array codes"), dy(n * sizeof(float), "decode_array output");
  dc.upload(codes.data(), n * cb);
  decode_device(dc.get(), f, static_cast<float*>(dy.get()), n);
  synchronize();
  dy.download(out.data(), n * sizeof(float));
}

size_t mx_row_bytes(Format elem, size_t cols) { return spec_of(elem).bits == 4 ? (cols + 1) / 2 : cols; }

namespace {
// The launch of both source types: the vector kernel where the shape and the
// pointers allow it, else the scalar one (FP32 sources only: BF16 sources
// need the vector form's layout, checked by the caller).
template <typename Src>
void launch_mx_rowwise(const Src* d_x, size_t rows, size_t cols, const QuantSpec& spec, uint8_t* d_data,
                       uint8_t* d_scales, void* stream) {
  const size_t nbc = (cols + 31) / 32, nblk = rows * nbc;
  if (nblk == 0) return;
  const hipStream_t s = stream_of(stream);
  const size_t rb = mx_row_bytes(spec.elem, cols);
  if constexpr (std::is_same_v<Src, uint16_t>) {  // two elements per instruction where it applies
    if (spec.round == RoundMode::RNE && mx_rowwise_bf16_packed(d_x, rows, cols, spec, d_data, d_scales, stream)) return;
  }
  const bool vec = vec_rowwise_ok(d_x, cols, spec, d_data);
  with_mx_format(spec.elem, [&](auto ft) {
    constexpr Format F = decltype(ft)::value;
    with_mode(spec.round, [&](auto mt) {
      constexpr RoundMode M = decltype(mt)::value;
      if (vec) {
        const size_t warps = (nblk + 8 * kVecIter<Src> - 1) / (8 * kVecIter<Src>);
        mx_rowwise_vec_kernel<F, M, Src><<<grid_for(warps * 32), kThreads, 0, s>>>(d_x, d_data, d_scales, rows, cols,
                                                                                  rb, nbc, spec);
      } else if constexpr (std::is_same_v<Src, float>) {
        mx_rowwise_kernel<F, M><<<grid_for(nblk * 32), kThreads, 0, s>>>(d_x, d_data, d_scales, rows, cols, rb, nbc,
                                                                         spec);
      }
    });
  });
  MXSIM_HIP_CHECK_LAUNCH("mx_rowwise_kernel");
}
}  // namespace

void mx_quantize_rowwise_device(const float* d_x, size_t rows, size_t cols, const QuantSpec& spec, uint8_t* d_data,
                                uint8_t* d_scales, void* stream) {
  check_mx_spec(spec);
  launch_mx_rowwise(d_x, rows, cols, spec, d_data, d_scales, stream);
}

void mx_quantize_rowwise_bf16_device(const uint16_t* d_x, size_t rows, size_t cols, const QuantSpec& spec,
                                     uint8_t* d_data, uint8_t* d_scales, void* stream) {
  check_mx_spec(spec);
  if (rows * cols != 0 && !vec_rowwise_ok(d_x, cols, spec, d_data))
    throw std::invalid_argument("mx_quantize_rowwise_bf16: needs cols % 8 == 0 (got " + std::to_string(cols) +
                                "), 16-byte aligned x, data aligned to 8 codes and sr_index_base % 4 == 0");
  launch_mx_rowwise(d_x, rows, cols, spec, d_data, d_scales, stream);
}

void mx_quantize_rowwise(std::span<const float> x, size_t rows, size_t cols, const QuantSpec& spec,
                         std::vector<uint8_t>& data, std::vector<uint8_t>& scales) {
  check_mx_spec(spec);
  if (x.size() != rows * cols)
    throw std::invalid_argument("mx_quantize_rowwise: x holds " + std::to_string(x.size()) + " values, shape " +
                                std::to_string(rows) + "x" + std::to_string(cols) + " needs " +
                                std::to_string(rows * cols));
  const size_t rb = mx_row_bytes(spec.elem, cols), nbc = (cols + 31) / 32;
  data.assign(rows * rb, 0);
  scales.assign(rows * nbc, 0);
  if (rows * cols == 0) return;
  DeviceBuffer dx(x.size() * sizeof(float), "mx_quantize_rowwise input"), dd(data.size(), "mx_quantize_rowwise data"),
      ds(scales.size(), "mx_quantize_rowwise scales");
  dx.upload(x.data(), x.size() * sizeof(float));
  MXSIM_HIP_CHECK(hipMemset(dd.get(), 0, data.size()));  // odd cols: the last high nibble stays 0
  mx_quantize_rowwise_device(static_cast<const float*>(dx.get()), rows, cols, spec, static_cast<uint8_t*>(dd.get()),
                             static_cast<uint8_t*>(ds.get()));
  synchronize();
  dd.download(data.data(), data.size());
  ds.download(scales.data(), scales.size());
}

}  // namespace mxsim::hip
