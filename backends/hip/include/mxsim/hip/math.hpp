// The FP32 elementary functions of mxsim/hd/math.hpp (exp_f32, log_f32,
// erf_f32, pow_int_f32) over GPU arrays. The kernels call the same inline
// functions as the CPU, so a GPU result is defined to be the CPU's bits (the
// correctly rounded value, docs/numerics.md §6.1); tests/test_gpu_math.cpp
// checks that on every FP32 input.
//
// Plain C++ (no vendor runtime types), like codec.hpp. Errors: a failed
// runtime call throws mxsim::hip::Error (call, file:line, runtime error name
// and string); arrays of different sizes throw std::invalid_argument.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

namespace mxsim::hip {

/// Which function math_array / math_device evaluates.
enum class MathFn : uint8_t { Exp, Log, Erf };

/// y[i] = f(x[i]) for i < x.size(): host arrays of FP32, y.size() == x.size().
void math_array(MathFn fn, std::span<const float> x, std::span<float> y);

/// y[i] = pow_int_f32(x[i], n[i]): host arrays of one size.
void pow_int_array(std::span<const float> x, std::span<const uint32_t> n, std::span<float> y);

/// Device-pointer forms: `count` elements, asynchronous on `stream`
/// (hipStream_t / cudaStream_t as void*, nullptr = default stream).
void math_device(MathFn fn, const float* d_x, float* d_y, size_t count, void* stream = nullptr);
void pow_int_device(const float* d_x, const uint32_t* d_n, float* d_y, size_t count, void* stream = nullptr);

}  // namespace mxsim::hip
