// Kernels and host glue of the GPU elementary functions
// (include/mxsim/hip/math.hpp). Nothing here computes: each element is one
// call of the shared MXSIM_HD function of mxsim/hd/math.hpp (FP64 arithmetic,
// no FMA contraction under -fmad=false / -ffp-contract=off, tables in device
// memory), so the bits are the CPU's.
#include "gpu.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "mxsim/hd/math.hpp"
#include "mxsim/hip/codec.hpp"
#include "mxsim/hip/math.hpp"

namespace mxsim::hip {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(size_t n) {
  const size_t g = (n + kThreads - 1) / kThreads;
  return unsigned(std::min<size_t>(std::max<size_t>(g, 1), size_t(1) << 20));  // grid-stride beyond
}

template <MathFn F>
__global__ void math_kernel(const float* __restrict__ x, float* __restrict__ y, size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (F == MathFn::Exp)
      y[i] = exp_f32(x[i]);
    else if constexpr (F == MathFn::Log)
      y[i] = log_f32(x[i]);
    else
      y[i] = erf_f32(x[i]);
  }
}

__global__ void pow_int_kernel(const float* __restrict__ x, const uint32_t* __restrict__ e, float* __restrict__ y,
                               size_t n) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = pow_int_f32(x[i], e[i]);
}

void same_size(size_t a, size_t b, const char* what) {
  if (a != b)
    throw std::invalid_argument(std::string(what) + ": arrays of " + std::to_string(a) + " and " +
                                std::to_string(b) + " elements");
}

}  // namespace

void math_device(MathFn fn, const float* d_x, float* d_y, size_t count, void* stream) {
  if (count == 0) return;
  const hipStream_t s = static_cast<hipStream_t>(stream);
  const unsigned grid = grid_for(count);
  switch (fn) {
    case MathFn::Exp: math_kernel<MathFn::Exp><<<grid, kThreads, 0, s>>>(d_x, d_y, count); break;
    case MathFn::Log: math_kernel<MathFn::Log><<<grid, kThreads, 0, s>>>(d_x, d_y, count); break;
    case MathFn::Erf: math_kernel<MathFn::Erf><<<grid, kThreads, 0, s>>>(d_x, d_y, count); break;
    default: throw std::invalid_argument("math_device: unknown MathFn " + std::to_string(int(fn)));
  }
}

void pow_int_device(const float* d_x, const uint32_t* d_n, float* d_y, size_t count, void* stream) {
  if (count == 0) return;
  pow_int_kernel<<<grid_for(count), kThreads, 0, static_cast<hipStream_t>(stream)>>>(d_x, d_n, d_y, count);
}

void math_array(MathFn fn, std::span<const float> x, std::span<float> y) {
  same_size(x.size(), y.size(), "math_array");
  if (x.empty()) return;
  const size_t bytes = x.size() * sizeof(float);
  DeviceBuffer dx(bytes, "math_array x"), dy(bytes, "math_array y");
  dx.upload(x.data(), bytes);
  math_device(fn, static_cast<const float*>(dx.get()), static_cast<float*>(dy.get()), x.size());
  synchronize();  // also reports a failed launch
  dy.download(y.data(), bytes);
}

void pow_int_array(std::span<const float> x, std::span<const uint32_t> n, std::span<float> y) {
  same_size(x.size(), n.size(), "pow_int_array");
  same_size(x.size(), y.size(), "pow_int_array");
  if (x.empty()) return;
  const size_t bytes = x.size() * sizeof(float);
  DeviceBuffer dx(bytes, "pow_int_array x"), dn(bytes, "pow_int_array n"), dy(bytes, "pow_int_array y");
  dx.upload(x.data(), bytes);
  dn.upload(n.data(), bytes);
  pow_int_device(static_cast<const float*>(dx.get()), static_cast<const uint32_t*>(dn.get()),
                 static_cast<float*>(dy.get()), x.size());
  synchronize();
  dy.download(y.data(), bytes);
}

}  // namespace mxsim::hip
