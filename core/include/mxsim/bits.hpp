// Bit-level helpers on IEEE binary32, usable on host and device.
#pragma once
#include <cstdint>

#include "mxsim/hd.hpp"

namespace mxsim {

/// Bit pattern of an FP32 value (no conversion).
MXSIM_HD inline uint32_t f32_bits(float x) {
#if defined(MXSIM_DEVICE_CODE) && defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return __builtin_bit_cast(uint32_t, x);
#endif
}

/// FP32 value of a bit pattern (no conversion).
MXSIM_HD inline float f32_from_bits(uint32_t b) {
#if defined(MXSIM_DEVICE_CODE) && defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  return __builtin_bit_cast(float, b);
#endif
}

/// Bit pattern of an FP64 value and back (no conversion).
MXSIM_HD inline uint64_t f64_bits(double x) {
#if defined(MXSIM_DEVICE_CODE) && defined(__CUDA_ARCH__)
  return uint64_t(__double_as_longlong(x));
#else
  return __builtin_bit_cast(uint64_t, x);
#endif
}
MXSIM_HD inline double f64_from_bits(uint64_t b) {
#if defined(MXSIM_DEVICE_CODE) && defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(b));
#else
  return __builtin_bit_cast(double, b);
#endif
}

/// x, or the canonical quiet NaN (FP32 0x7FC00000, FP64 0x7FF8000000000000)
/// when x is any NaN. The bits of a NaN that an IEEE operation produces are
/// the hardware's choice (x86 SSE: 0xFFC00000 for an invalid operation, else
/// the first NaN operand's payload, quieted; NVIDIA GPUs: 0x7FFFFFFF), so
/// every value a training-step op computes arithmetically is stored through
/// this and the CPU and a GPU agree bit for bit on NaNs too (docs/numerics.md
/// §1, rule 6, which also names the values copied rather than computed:
/// amax's first NaN, round_bf16's and the element encoders' own NaN codes).
inline constexpr uint32_t kCanonicalNan32 = 0x7FC00000u;
inline constexpr uint64_t kCanonicalNan64 = 0x7FF8000000000000ull;
MXSIM_HD inline float canonical_nan(float x) { return x != x ? f32_from_bits(kCanonicalNan32) : x; }
MXSIM_HD inline double canonical_nan(double x) { return x != x ? f64_from_bits(kCanonicalNan64) : x; }

/// Exact 2^e as FP32: normal for -126 <= e <= 127, subnormal down to 2^-149,
/// +0 below that, +Inf above 127. Built from bits, never by shifting a biased
/// exponent into the field alone (which would turn 2^-127 into 0; see
/// reference/formats-and-scaling.md section 6).
MXSIM_HD inline float pow2f(int e) {
  if (e > 127) return f32_from_bits(0x7F800000u);
  if (e >= -126) return f32_from_bits(uint32_t(e + 127) << 23);
  if (e >= -149) return f32_from_bits(1u << (e + 149));
  return 0.0f;
}

/// Number of leading zero bits of a non-zero 32-bit word.
MXSIM_HD inline int clz32(uint32_t v) {
#if defined(MXSIM_DEVICE_CODE) && defined(__CUDA_ARCH__)
  return __clz(int(v));
#else
  return __builtin_clz(v);
#endif
}

/// Number of leading zero bits of a non-zero 64-bit word.
MXSIM_HD inline int clz64(uint64_t v) {
#if defined(MXSIM_DEVICE_CODE) && defined(__CUDA_ARCH__)
  return __clzll(static_cast<long long>(v));
#else
  return __builtin_clzll(v);
#endif
}

/// floor(log2 |x|) of a finite non-zero FP32 value, exact for subnormals.
MXSIM_HD inline int f32_floor_log2(uint32_t bits) {
  const uint32_t e = (bits >> 23) & 0xFFu, m = bits & 0x7FFFFFu;
  if (e != 0) return int(e) - 127;
  return (31 - clz32(m)) - 149;
}

}  // namespace mxsim
