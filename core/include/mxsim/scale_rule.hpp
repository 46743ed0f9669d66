// E8M0 block-scale rules: from a block's amax to the scale exponent s, so the
// block stores x / 2^s and the E8M0 byte is s + 127.
//
// Definitions (../shared/reference/formats-and-scaling.md §4), with
// amax = m * 2^E (1 <= m < 2), emax = the element format's emax(), maxe = its
// largest finite value:
//   FLOOR  s = E - emax.  OCP MX v1.0 §6.3, MX paper arXiv:2310.10537 Alg. 1,
//          microxcaling, torchao default. For E2M1, amax / 2^s is in [4, 8):
//          values in (6, 8) * 2^s saturate.
//   RCEIL  d = fl32(amax * fl32(1/maxe)); s = ceil(log2 d). NVIDIA cuBLAS /
//          cuDNN / TransformerEngine MXFP8 (utils.cuh), torchao RCEIL.
//          amax / 2^s lands in (maxe/2, maxe]: never clips.
//   EVEN   add 2^(22 - man_bits) to amax's FP32 bits, clear the mantissa,
//          read the exponent E'; s = E' - emax. AMD aiter, Primus-Turbo
//          (quantization_mxfp4.cu), torchao EVEN. For E2M1: s = E - 2 + [m >= 1.75].
//   CEIL   s = ceil(log2 amax) - emax (torchao option).
// Common to all rules (this project's contract, docs/numerics.md §3.2):
//   amax == 0 (all-zero block)          -> s = -127 (byte 0x00)
//   amax NaN or Inf                     -> byte 0xFF (NaN scale; whole block NaN)
//   s is clamped to [-127, 127]: 0xFF stays reserved for NaN, and s = -127 is
//   the smallest scale (aiter's clamp; Primus-Turbo HIP allows 128, we do not).
#pragma once
#include <cstdint>

#include "mxsim/bits.hpp"
#include "mxsim/format.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim {

enum class ScaleRule : uint8_t { Floor, Rceil, Even, Ceil };

inline constexpr uint8_t kE8M0Nan = 0xFF;

/// Scale exponent s (unclamped) for a finite amax > 0 (FP32 bits).
MXSIM_HD inline int scale_exponent_unclamped(ScaleRule rule, uint32_t amax_bits, const FormatSpec& elem) {
  const int emax = elem.emax();
  switch (rule) {
    case ScaleRule::Floor: return f32_floor_log2(amax_bits) - emax;
    case ScaleRule::Ceil: {
      const int e = f32_floor_log2(amax_bits);
      const bool pow2 = (amax_bits & 0x7FFFFFu) == 0 || ((amax_bits >> 23) == 0 && (amax_bits & (amax_bits - 1)) == 0);
      return e + (pow2 ? 0 : 1) - emax;
    }
    case ScaleRule::Rceil: {
      // fl32(1/maxe) then one FP32 multiply, both round-to-nearest-even.
      const float maxe = elem.max_value();
      const float d = f32_from_bits(amax_bits) * (1.0f / maxe);
      const uint32_t db = f32_bits(d);
      if (db == 0) return -127;
      const int e = f32_floor_log2(db);
      const bool pow2 = (db >> 23) != 0 ? (db & 0x7FFFFFu) == 0 : (db & (db - 1)) == 0;
      return e + (pow2 ? 0 : 1);
    }
    case ScaleRule::Even: {
      const uint32_t bumped = amax_bits + (1u << (22 - elem.man_bits));
      const int e = int((bumped >> 23) & 0xFFu) - 127;
      return e - emax;
    }
  }
  return 0;
}

/// E8M0 scale byte for a block with the given amax (FP32 bits of max |x|).
MXSIM_HD inline uint8_t e8m0_scale(ScaleRule rule, uint32_t amax_bits, const FormatSpec& elem) {
  amax_bits &= 0x7FFFFFFFu;
  if (amax_bits >= 0x7F800000u) return kE8M0Nan;  // Inf or NaN
  if (amax_bits == 0) return 0;
  int s = scale_exponent_unclamped(rule, amax_bits, elem);
  s = s < -127 ? -127 : (s > 127 ? 127 : s);
  return uint8_t(s + 127);
}

}  // namespace mxsim
