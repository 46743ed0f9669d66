// Kernels and host glue of the GPU codec (include/mxsim/hip/codec.hpp).
// HIP C++: compiled as CUDA by nvcc (-fmad=false) on NVIDIA through
// vendors/cuda.h, and by hipcc (-ffp-contract=off) on AMD.
//
// Numerics: nothing here rounds. Every code comes from mxsim::encode /
// decode / e8m0_scale, the same inline functions the CPU emulator runs; the
// kernels only move data and pick the Philox word of each element.
#include "gpu.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "mxsim/bits.hpp"
#include "mxsim/hip/codec.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/scale_rule.hpp"

namespace mxsim::hip {
namespace {

[[noreturn]] void fail(hipError_t e, const char* call, const char* file, int line) {
  throw Error(std::string("mxsim::hip: ") + call + " failed at " + file + ":" + std::to_string(line) + ": " +
              hipGetErrorName(e) + ": " + hipGetErrorString(e));
}
#define MXSIM_HIP_CHECK(call)                                   \
  do {                                                          \
    const hipError_t mxsim_e_ = (call);                         \
    if (mxsim_e_ != hipSuccess) fail(mxsim_e_, #call, __FILE__, __LINE__); \
  } while (0)
// After a launch: configuration errors surface here, execution errors at the
// next synchronizing call.
#define MXSIM_HIP_CHECK_LAUNCH(what) MXSIM_HIP_CHECK(hipGetLastError())

constexpr int kThreads = 256;

unsigned grid_for(size_t work_items) {
  const size_t g = (work_items + kThreads - 1) / kThreads;
  return unsigned(std::min<size_t>(std::max<size_t>(g, 1), size_t(1) << 30));
}

template <int Bytes> struct CodeOf;
template <> struct CodeOf<1> { using type = uint8_t; };
template <> struct CodeOf<2> { using type = uint16_t; };
template <> struct CodeOf<4> { using type = uint32_t; };

// Four codes stored with one access.
template <typename C> struct alignas(4 * sizeof(C)) Quad { C v[4]; };

// ---- encode ---------------------------------------------------------------
// Thread q converts elements 4q .. 4q+3. When index_base is a multiple of 4
// those four share one Philox counter block (philox.hpp), drawn once.
template <typename C, bool Vec>
__global__ void encode_kernel(const float* __restrict__ x, C* __restrict__ out, size_t n, FormatSpec f,
                              int scale_exp, RoundMode mode, Overflow ov, PhiloxStream sr, uint64_t base) {
  const size_t nq = (n + 3) / 4;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t q = size_t(blockIdx.x) * blockDim.x + threadIdx.x; q < nq; q += stride) {
    const size_t i0 = q * 4;
    const bool full = i0 + 4 <= n;
    uint32_t xb[4];
    if (Vec && full) {
      const uint4 v = reinterpret_cast<const uint4*>(x)[q];
      xb[0] = v.x; xb[1] = v.y; xb[2] = v.z; xb[3] = v.w;
    } else {
      for (int k = 0; k < 4; ++k) xb[k] = i0 + k < n ? f32_bits(x[i0 + k]) : 0u;
    }
    uint32_t rnd[4] = {0u, 0u, 0u, 0u};
    if (mode == RoundMode::Stochastic) {
      if ((base & 3u) == 0) {
        const auto r = sr.block((base + i0) >> 2);
        for (int k = 0; k < 4; ++k) rnd[k] = r[k];
      } else {
        for (int k = 0; k < 4; ++k) rnd[k] = sr(base + i0 + k);
      }
    }
    Quad<C> c;
    for (int k = 0; k < 4; ++k) c.v[k] = C(encode(f, xb[k], scale_exp, mode, ov, rnd[k]));
    if (Vec && full) {
      reinterpret_cast<Quad<C>*>(out)[q] = c;
    } else {
      for (int k = 0; k < 4; ++k)
        if (i0 + k < n) out[i0 + k] = c.v[k];
    }
  }
}

// ---- decode ---------------------------------------------------------------
template <typename C, bool Vec>
__global__ void decode_kernel(const C* __restrict__ codes, float* __restrict__ out, size_t n, FormatSpec f) {
  const size_t nq = (n + 3) / 4;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t q = size_t(blockIdx.x) * blockDim.x + threadIdx.x; q < nq; q += stride) {
    const size_t i0 = q * 4;
    if (Vec && i0 + 4 <= n) {
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
// 32 consecutive lanes own one block (row r, block column bj): lane l holds
// element c = 32 bj + l. amax is the max of |x| bit patterns (NaN/Inf compare
// above every finite, as in emu::quantize), reduced by shuffles; the max of
// integers is exact in any order.
__global__ void mx_rowwise_kernel(const float* __restrict__ x, uint8_t* __restrict__ data,
                                  uint8_t* __restrict__ scales, size_t rows, size_t cols, size_t row_bytes,
                                  size_t nbc, FormatSpec f, ScaleRule rule, RoundMode mode, PhiloxStream sr) {
  const unsigned lane = threadIdx.x & 31u;
  const size_t nblk = rows * nbc;
  const size_t stride = (size_t(gridDim.x) * blockDim.x) >> 5;
  const bool packed = f.bits == 4;
  for (size_t b = ((size_t(blockIdx.x) * blockDim.x) + threadIdx.x) >> 5; b < nblk; b += stride) {
    const size_t r = b / nbc, bj = b - r * nbc;
    const size_t c = bj * 32 + lane;
    const bool in = c < cols;
    const size_t index = r * cols + c;
    const uint32_t xb = in ? f32_bits(x[index]) : 0u;
    uint32_t amax = xb & 0x7FFFFFFFu;
    for (int m = 16; m >= 1; m >>= 1) {
      const uint32_t o = MXSIM_SHFL_XOR32(amax, m);
      amax = o > amax ? o : amax;
    }
    const uint8_t byte = e8m0_scale(rule, amax, f);
    if (lane == 0) scales[b] = byte;
    const bool nonfinite = amax >= 0x7F800000u;  // codes stay 0; the NaN scale marks the block
    uint32_t code = 0;
    if (in && !nonfinite) {
      const uint32_t rnd = mode == RoundMode::Stochastic ? sr(index) : 0u;
      code = encode(f, xb, int(byte) - 127, mode, Overflow::Saturate, rnd);
    }
    if (packed) {
      const uint32_t hi = MXSIM_SHFL_DOWN32(code, 1);  // lane+1's code; 0 past the row's end
      if (in && (lane & 1u) == 0) data[r * row_bytes + c / 2] = uint8_t((code & 0xFu) | ((hi & 0xFu) << 4));
    } else if (in) {
      data[r * row_bytes + c] = uint8_t(code);
    }
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <typename C>
void launch_encode(const float* d_x, void* d_codes, size_t n, const CodecParams& p, hipStream_t s) {
  const FormatSpec f = spec_of(p.format);
  const unsigned grid = grid_for((n + 3) / 4);
  C* out = static_cast<C*>(d_codes);
  if (aligned16(d_x) && aligned16(d_codes))
    encode_kernel<C, true><<<grid, kThreads, 0, s>>>(d_x, out, n, f, p.scale_exp, p.round, p.overflow, p.sr,
                                                     p.index_base);
  else
    encode_kernel<C, false><<<grid, kThreads, 0, s>>>(d_x, out, n, f, p.scale_exp, p.round, p.overflow, p.sr,
                                                      p.index_base);
  MXSIM_HIP_CHECK_LAUNCH("encode_kernel");
}

template <typename C>
void launch_decode(const void* d_codes, Format fmt, float* d_out, size_t n, hipStream_t s) {
  const FormatSpec f = spec_of(fmt);
  const unsigned grid = grid_for((n + 3) / 4);
  const C* in = static_cast<const C*>(d_codes);
  if (aligned16(d_codes) && aligned16(d_out))
    decode_kernel<C, true><<<grid, kThreads, 0, s>>>(in, d_out, n, f);
  else
    decode_kernel<C, false><<<grid, kThreads, 0, s>>>(in, d_out, n, f);
  MXSIM_HIP_CHECK_LAUNCH("decode_kernel");
}

void check_mx_spec(const QuantSpec& spec) {
  if (spec.block_rows != 1 || spec.block_cols != 32)
    throw std::invalid_argument("mx_quantize_rowwise: needs 1x32 blocks, got " + std::to_string(spec.block_rows) +
                                "x" + std::to_string(spec.block_cols));
  if (spec.scale_kind != ScaleKind::E8M0)
    throw std::invalid_argument(std::string("mx_quantize_rowwise: needs E8M0 scales, got ") + name_of(spec.scale_kind));
  if (spec.hadamard16) throw std::invalid_argument("mx_quantize_rowwise: the Hadamard transform is not supported");
  const FormatSpec f = spec_of(spec.elem);
  if (f.bits > 8 || spec.elem == Format::E8M0)
    throw std::invalid_argument(std::string("mx_quantize_rowwise: ") + f.name + " is not an MX element format");
}

}  // namespace

bool available(std::string* reason) {
  int n = 0;
  const hipError_t e = hipGetDeviceCount(&n);
  if (e != hipSuccess) {
    if (reason) *reason = std::string("hipGetDeviceCount: ") + hipGetErrorName(e) + ": " + hipGetErrorString(e);
    (void)hipGetLastError();  // clear the sticky-free error state
    return false;
  }
  if (n <= 0) {
    if (reason) *reason = "hipGetDeviceCount reported 0 devices";
    return false;
  }
  return true;
}

const char* platform() { return MXSIM_GPU_VENDOR; }

DeviceInfo device_info() {
  int dev = 0;
  MXSIM_HIP_CHECK(hipGetDevice(&dev));
  hipDeviceProp_t prop;
  MXSIM_HIP_CHECK(hipGetDeviceProperties(&prop, dev));
  DeviceInfo d;
  d.name = prop.name;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.multiprocessors = prop.multiProcessorCount;
  d.global_mem = prop.totalGlobalMem;
  d.l2_bytes = size_t(prop.l2CacheSize);
  MXSIM_HIP_CHECK(hipDriverGetVersion(&d.driver_version));
  MXSIM_HIP_CHECK(hipRuntimeGetVersion(&d.runtime_version));
  return d;
}

size_t code_bytes(Format f) {
  const int b = spec_of(f).bits;
  return b <= 8 ? 1 : (b <= 16 ? 2 : 4);
}

void encode_device(const float* d_x, void* d_codes, size_t n, const CodecParams& p, void* stream) {
  if (n == 0) return;
  const hipStream_t s = static_cast<hipStream_t>(stream);
  switch (code_bytes(p.format)) {
    case 1: launch_encode<uint8_t>(d_x, d_codes, n, p, s); break;
    case 2: launch_encode<uint16_t>(d_x, d_codes, n, p, s); break;
    default: launch_encode<uint32_t>(d_x, d_codes, n, p, s); break;
  }
}

void decode_device(const void* d_codes, Format f, float* d_out, size_t n, void* stream) {
  if (n == 0) return;
  const hipStream_t s = static_cast<hipStream_t>(stream);
  switch (code_bytes(f)) {
    case 1: launch_decode<uint8_t>(d_codes, f, d_out, n, s); break;
    case 2: launch_decode<uint16_t>(d_codes, f, d_out, n, s); break;
    default: launch_decode<uint32_t>(d_codes, f, d_out, n, s); break;
  }
}

void encode_array(std::span<const float> x, std::span<uint8_t> codes, const CodecParams& p) {
  const size_t n = x.size(), cb = code_bytes(p.format);
  if (codes.size() != n * cb)
    throw std::invalid_argument("encode_array: codes holds " + std::to_string(codes.size()) + " bytes, " +
                                std::to_string(n) + " codes of " + spec_of(p.format).name + " need " +
                                std::to_string(n * cb));
  if (n == 0) return;
  DeviceBuffer dx(n * sizeof(float)), dc(n * cb);
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
  DeviceBuffer dc(n * cb), dy(n * sizeof(float));
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
  const unsigned grid = grid_for(nblk * 32);
  hipLaunchKernelGGL(mx_rowwise_kernel, dim3(grid), dim3(kThreads), 0, static_cast<hipStream_t>(stream), d_x, d_data,
                     d_scales, rows, cols, mx_row_bytes(spec.elem, cols), nbc, spec_of(spec.elem), spec.rule,
                     spec.round, spec.sr);
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
  DeviceBuffer dx(x.size() * sizeof(float)), dd(data.size()), ds(scales.size());
  dx.upload(x.data(), x.size() * sizeof(float));
  MXSIM_HIP_CHECK(hipMemset(dd.get(), 0, data.size()));  // odd cols: the last high nibble stays 0
  mx_quantize_rowwise_device(static_cast<const float*>(dx.get()), rows, cols, spec, static_cast<uint8_t*>(dd.get()),
                             static_cast<uint8_t*>(ds.get()));
  synchronize();
  dd.download(data.data(), data.size());
  ds.download(scales.data(), scales.size());
}

DeviceBuffer::DeviceBuffer(size_t bytes) : n_(bytes) {
  if (bytes) MXSIM_HIP_CHECK(hipMalloc(&p_, bytes));
}
DeviceBuffer::~DeviceBuffer() {
  if (p_) (void)hipFree(p_);
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) (void)hipFree(p_);
    p_ = o.p_; n_ = o.n_;
    o.p_ = nullptr; o.n_ = 0;
  }
  return *this;
}
void DeviceBuffer::upload(const void* src, size_t bytes) {
  if (bytes > n_) throw std::invalid_argument("DeviceBuffer::upload: " + std::to_string(bytes) + " bytes into " + std::to_string(n_));
  if (bytes) MXSIM_HIP_CHECK(hipMemcpy(p_, src, bytes, hipMemcpyHostToDevice));
}
void DeviceBuffer::download(void* dst, size_t bytes) const {
  if (bytes > n_) throw std::invalid_argument("DeviceBuffer::download: " + std::to_string(bytes) + " bytes from " + std::to_string(n_));
  if (bytes) MXSIM_HIP_CHECK(hipMemcpy(dst, p_, bytes, hipMemcpyDeviceToHost));
}

void synchronize() {
  MXSIM_HIP_CHECK(hipDeviceSynchronize());
  MXSIM_HIP_CHECK(hipGetLastError());
}

}  // namespace mxsim::hip
