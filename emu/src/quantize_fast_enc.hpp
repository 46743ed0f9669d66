// Internal to the emulator: the fast MX quantizer's per-element encoder
// (quantize_fast.cpp), a specialisation of encode() for RNE with saturation
// in FP32 bit arithmetic, proved there (notes 1-3) and checked against
// encode() by tests/test_round_by_add.cpp. In an anonymous namespace on
// purpose: quantize_fast.cpp inlines it into each of its CPU paths (AVX-512,
// AVX2, baseline), and a test includes it too; internal linkage keeps the
// linker from merging copies compiled for different instruction sets.
#pragma once
#include <algorithm>
#include <cstdint>

#include "mxsim/bits.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::emu::fast {
namespace {

/// FP32 bit-arithmetic constants of one element format (quantize_fast.cpp, note 3).
struct Elem {
  FormatSpec spec;
  uint32_t max_bits;         // FP32 bits of maxe
  uint32_t min_normal_bits;  // FP32 bits of 2^emin
  int shift;                 // 23 - M
  int sign_shift;            // bits - 1
};

inline Elem elem_of(Format f) {
  Elem e;
  e.spec = spec_of(f);
  const int M = e.spec.man_bits;
  e.max_bits = f32_bits(decode(e.spec, e.spec.max_code()));
  e.min_normal_bits = f32_bits(pow2f(e.spec.emin()));
  e.shift = 23 - M;
  e.sign_shift = e.spec.bits - 1;
  return e;
}

/// Code of one element from its FP32 bits b, scaled by mul = 2^-s, RNE,
/// saturating (quantize_fast.cpp, notes 1-3). The constants live in a small value type so the
/// loops keep them in registers.
struct Enc {
  uint32_t max_bits, min_normal_bits, magic_offset;  // magic_offset = (23 - M) << 23
  int shift, sign_shift;                              // 23 - M, bits - 1
  [[gnu::always_inline]] uint32_t operator()(uint32_t b, float mul) const {
    const uint32_t a = std::min(f32_bits(f32_from_bits(b & 0x7FFFFFFFu) * mul), max_bits);
    const uint32_t ebits = std::max(a & 0x7F800000u, min_normal_bits);  // bits of 2^E
    const uint32_t magic = ebits + magic_offset;
    const uint32_t k = f32_bits(f32_from_bits(a) + f32_from_bits(magic)) - magic;
    return (((ebits - min_normal_bits) >> shift) + k) | ((b >> 31) << sign_shift);
  }
};

inline Enc enc_of(const Elem& e) { return {e.max_bits, e.min_normal_bits, uint32_t(e.shift) << 23, e.shift, e.sign_shift}; }

}  // namespace
}  // namespace mxsim::emu::fast
