// Kernels and host glue of the GPU codec (include/mxsim/hip/codec.hpp).
// HIP C++: compiled as CUDA by nvcc (-fmad=false) on NVIDIA through
// vendors/cuda.h, and by hipcc (-ffp-contract=off) on AMD.
//
// Numerics: nothing here rounds. Every code comes from mxsim::encode /
// decode and the per-block step of hd/quant_block.hpp (amax, E8M0 scale,
// element encoder, E2M1 packing), the same inline functions the CPU emulator
// runs; the kernels only move data and pick the Philox word of each element.
#include "check.hpp"

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

using detail::stream_of;
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

// Vector form (cols % 4 == 0, x 16-byte aligned, data 4-byte aligned): 8
// lanes own one block, each lane four consecutive elements (one 16-byte
// load, one Philox block: r*cols + c is a multiple of 4), so a warp covers
// four blocks. Same per-element arithmetic as the scalar form.
template <Format F, RoundMode M>
__global__ void mx_rowwise_vec_kernel(const float* __restrict__ x, uint8_t* __restrict__ data,
                                      uint8_t* __restrict__ scales, size_t rows, size_t cols, size_t row_bytes,
                                      size_t nbc, QuantSpec spec) {
  constexpr FormatSpec f = spec_of(F);
  const unsigned lane = threadIdx.x & 31u, sub = lane >> 3, j = lane & 7u;
  const size_t nblk = rows * nbc;
  const size_t nwarp_total = (size_t(gridDim.x) * blockDim.x) >> 5;
  const bool small = nblk <= 0xFFFFFFFFu;
  for (size_t w = ((size_t(blockIdx.x) * blockDim.x) + threadIdx.x) >> 5; w * 4 < nblk; w += nwarp_total) {
    const size_t b = w * 4 + sub;  // warp-uniform loop; lanes past the end carry zeros
    const bool valid = b < nblk;
    size_t r, bj;
    if (small) {  // 32-bit division where it suffices
      r = uint32_t(b) / uint32_t(nbc);
      bj = uint32_t(b) - uint32_t(r) * uint32_t(nbc);
    } else {
      r = b / nbc;
      bj = b - r * nbc;
    }
    const size_t c = bj * 32 + j * 4;
    const bool in = valid && c < cols;  // cols % 4 == 0: a quad is wholly in or out
    const size_t index = r * cols + c;
    uint32_t xb[4] = {0u, 0u, 0u, 0u};
    if (in) {
      const uint4 v = *reinterpret_cast<const uint4*>(x + index);
      xb[0] = v.x; xb[1] = v.y; xb[2] = v.z; xb[3] = v.w;
    }
    uint32_t amax = 0;
    for (int k = 0; k < 4; ++k) amax = hd::amax_step(amax, xb[k]);
    for (int m = 4; m >= 1; m >>= 1)  // within the 8 lanes of this block
      amax = hd::amax_step(amax, MXSIM_SHFL_XOR32(amax, m));
    const hd::BlockQuant bq = hd::block_quant_e8m0(spec.rule, f, amax);
    if (valid && j == 0) scales[b] = bq.scale_byte;
    uint32_t code[4] = {0u, 0u, 0u, 0u};
    if (in) {
      uint32_t rnd[4] = {0u, 0u, 0u, 0u};
      if constexpr (M == RoundMode::Stochastic) {
        const auto rr = spec.sr.block((spec.sr_index_base + index) >> 2);  // sr_index_base % 4 == 0 (dispatch)
        for (int k = 0; k < 4; ++k) rnd[k] = rr[k];
      }
      for (int k = 0; k < 4; ++k) code[k] = bq.encode(f, xb[k], M, rnd[k]);
    }
    if (in) {
      if constexpr (f.bits == 4) {  // little-endian: element c in the low nibble of the first byte
        const uint16_t two = uint16_t(hd::pack_e2m1(code[0], code[1]) | (hd::pack_e2m1(code[2], code[3]) << 8));
        *reinterpret_cast<uint16_t*>(data + r * row_bytes + c / 2) = two;
      } else {
        const uint32_t four = (code[0] & 0xFFu) | ((code[1] & 0xFFu) << 8) | ((code[2] & 0xFFu) << 16) |
                              ((code[3] & 0xFFu) << 24);
        *reinterpret_cast<uint32_t*>(data + r * row_bytes + c) = four;
      }
    }
  }
}

bool aligned(const void* p, size_t a) { return (reinterpret_cast<uintptr_t>(p) % a) == 0; }

template <Format F> using FormatTag = std::integral_constant<Format, F>;
template <RoundMode M> using ModeTag = std::integral_constant<RoundMode, M>;

template <typename Fn>
void with_format(Format f, Fn&& fn) {
  switch (f) {
    case Format::FP32: fn(FormatTag<Format::FP32>{}); break;
    case Format::BF16: fn(FormatTag<Format::BF16>{}); break;
    case Format::FP16: fn(FormatTag<Format::FP16>{}); break;
    case Format::E4M3: fn(FormatTag<Format::E4M3>{}); break;
    case Format::E5M2: fn(FormatTag<Format::E5M2>{}); break;
    case Format::E4M3FNUZ: fn(FormatTag<Format::E4M3FNUZ>{}); break;
    case Format::E5M2FNUZ: fn(FormatTag<Format::E5M2FNUZ>{}); break;
    case Format::E3M2: fn(FormatTag<Format::E3M2>{}); break;
    case Format::E2M3: fn(FormatTag<Format::E2M3>{}); break;
    case Format::E2M1: fn(FormatTag<Format::E2M1>{}); break;
    case Format::E8M0: fn(FormatTag<Format::E8M0>{}); break;
  }
}
template <typename Fn>
void with_mx_format(Format f, Fn&& fn) {
  switch (f) {
    case Format::E4M3: fn(FormatTag<Format::E4M3>{}); break;
    case Format::E5M2: fn(FormatTag<Format::E5M2>{}); break;
    case Format::E4M3FNUZ: fn(FormatTag<Format::E4M3FNUZ>{}); break;
    case Format::E5M2FNUZ: fn(FormatTag<Format::E5M2FNUZ>{}); break;
    case Format::E3M2: fn(FormatTag<Format::E3M2>{}); break;
    case Format::E2M3: fn(FormatTag<Format::E2M3>{}); break;
    case Format::E2M1: fn(FormatTag<Format::E2M1>{}); break;
    default:
      throw std::invalid_argument(std::string("mx_quantize_rowwise: ") + spec_of(f).name + " is not an MX element format");
  }
}
template <typename Fn>
void with_mode(RoundMode m, Fn&& fn) {
  switch (m) {
    case RoundMode::RNE: fn(ModeTag<RoundMode::RNE>{}); break;
    case RoundMode::RZ: fn(ModeTag<RoundMode::RZ>{}); break;
    case RoundMode::Stochastic: fn(ModeTag<RoundMode::Stochastic>{}); break;
    case RoundMode::RU: throw std::invalid_argument("round up (ru) is for single conversions, not quantization");
  }
}

void check_mx_spec(const QuantSpec& spec) {
  if (spec.block_rows != 1 || spec.block_cols != 32)
    throw std::invalid_argument("mx_quantize_rowwise: needs 1x32 blocks, got " + std::to_string(spec.block_rows) +
                                "x" + std::to_string(spec.block_cols));
  if (spec.scale_kind != ScaleKind::E8M0)
    throw std::invalid_argument(std::string("mx_quantize_rowwise: needs E8M0 scales, got ") + name_of(spec.scale_kind));
  if (spec.hadamard16) throw std::invalid_argument("mx_quantize_rowwise: the Hadamard transform is not supported");
  if (!hd::quant_elem(spec.elem))
    throw std::invalid_argument(std::string("mx_quantize_rowwise: ") + spec_of(spec.elem).name +
                                " is not an MX element format");
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

void mx_quantize_rowwise_device(const float* d_x, size_t rows, size_t cols, const QuantSpec& spec, uint8_t* d_data,
                                uint8_t* d_scales, void* stream) {
  check_mx_spec(spec);
  const size_t nbc = (cols + 31) / 32, nblk = rows * nbc;
  if (nblk == 0) return;
  const hipStream_t s = stream_of(stream);
  const size_t rb = mx_row_bytes(spec.elem, cols);
  // QuantSpec::sr_index_base offsets the Philox element index (grouped
  // wgrad operands, numerics.md §2.5); the vector kernel draws whole counter
  // blocks, so it needs the base to be a multiple of 4.
  const uint64_t sr_base = spec.sr_index_base;
  const bool vec = cols % 4 == 0 && sr_base % 4 == 0 && aligned(d_x, 16) && aligned(d_data, 4);
  with_mx_format(spec.elem, [&](auto ft) {
    constexpr Format F = decltype(ft)::value;
    with_mode(spec.round, [&](auto mt) {
      constexpr RoundMode M = decltype(mt)::value;
      if (vec)
        mx_rowwise_vec_kernel<F, M><<<grid_for((nblk + 3) / 4 * 32), kThreads, 0, s>>>(d_x, d_data, d_scales, rows,
                                                                                      cols, rb, nbc, spec);
      else
        mx_rowwise_kernel<F, M><<<grid_for(nblk * 32), kThreads, 0, s>>>(d_x, d_data, d_scales, rows, cols, rb, nbc,
                                                                         spec);
    });
  });
  MXSIM_HIP_CHECK_LAUNCH("mx_rowwise_kernel");
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
