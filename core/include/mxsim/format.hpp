// One table of format semantics.
//
// Every element and scale format the project knows is described by one
// FormatSpec, in the spirit of LLVM APFloat's fltSemantics and ml_dtypes'
// format traits. The single rounding routine (rounding.hpp) and the single
// decoder read nothing but this table; there is no per-format conversion code.
//
// Sources for the values (see ../shared/reference/formats-and-scaling.md §1):
//   OCP 8-bit Floating Point Specification (OFP8) v1.0, arXiv:2209.05433
//     (E4M3 "fn": no Inf, NaN = S.1111.111, max 448; E5M2: IEEE-like, max 57344);
//   OCP Microscaling Formats (MX) v1.0 §5.2 Table 1, §5.3.3, §5.4.1
//     (E2M1, E2M3, E3M2: no Inf/NaN; E8M0: unsigned, bias 127, 0xFF = NaN);
//   AMD FNUZ types: arXiv:2206.02915, PyTorch c10/util/Float8_e4m3fnuz.h
//     (no -0, NaN = 0x80, bias one above IEEE practice);
//   IEEE 754-2019 for FP32/FP16, and bfloat16 as FP32's top 16 bits.
#pragma once
#include <cfloat>
#include <cstdint>
#include <string_view>

#include "mxsim/bits.hpp"
#include "mxsim/hd.hpp"

namespace mxsim {

/// How a format encodes NaN.
enum class NanKind : uint8_t {
  None,     ///< no NaN (E2M1, E2M3, E3M2)
  Ieee,     ///< exponent all ones, mantissa != 0 (FP32, BF16, FP16, E5M2)
  AllOnes,  ///< only S.1111.111 (OCP E4M3 "fn"), or 0xFF for E8M0
  NegZero,  ///< only the pattern of -0, 0x80 (AMD FNUZ)
};

/// Every format of the project, in storage order of the table below.
enum class Format : uint8_t {
  FP32, BF16, FP16,
  E4M3, E5M2,            ///< OCP FP8 ("float8_e4m3fn", "float8_e5m2")
  E4M3FNUZ, E5M2FNUZ,    ///< AMD CDNA3 FP8
  E3M2, E2M3,            ///< OCP FP6
  E2M1,                  ///< OCP FP4
  E8M0,                  ///< OCP MX scale ("float8_e8m0fnu")
};
inline constexpr int kNumFormats = 11;

/// The roles a format plays, as bits of FormatSpec::roles: which blocks,
/// quantizers and GEMM classes take it as an element format. One column of the
/// table, read by every check of membership (no switch over formats elsewhere).
enum FormatRole : uint8_t {
  /// An element format of E8M0-scaled (MX) blocks: the quantizer's MX elements (OCP MX v1.0
  /// §5.2 Table 1's FP8, FP6 and FP4 formats, and the AMD FNUZ FP8s with the same block rule).
  kRoleMxElem = 1u << 0,
  /// An element format of the OCP MX v1.0 specification (§5.2 Table 1: E4M3, E5M2, E3M2, E2M3,
  /// E2M1): the element formats of the MX GEMM contract (numerics.md §5.2) and of the fast
  /// MX quantizers.
  kRoleOcpMx = 1u << 1,
  /// An FP8 element format (OCP or FNUZ): the elements of FP32-scaled (per-tensor, per-row,
  /// per-block) quantization.
  kRoleFp8 = 1u << 2,
  /// Its 32-element block dot is an exact integer sum (the mx-exact GEMM class, numerics.md
  /// §5.2): E2M1 and E2M3, whose values times 2 resp. 8 are integers.
  kRoleMxExact = 1u << 3,
  /// An mx-exact element whose 32-element block dot an FP8 tensor-core MMA group computes exactly
  /// (one k32 Hopper wgmma on E4M3 images from a zero accumulator, whose group result keeps 13
  /// fraction bits, MMA-Sim's F = 13): E2M1, whose products are multiples of 2^-2 below 2^6, so
  /// every partial sum of 32 is below 2^11 with at most 13 significant bits. Not E2M3 (products
  /// are multiples of 2^-6 below 2^6: a sum can need 17 bits). The formats the tensor-core
  /// mx-exact kernel takes (backends/hip/src/gemm_sm90.hip).
  kRoleFp8GroupExact = 1u << 4,
};

/// Semantics of one binary floating-point format.
///
/// Value of a finite code with sign s, exponent field E and mantissa field M:
///   normal    (E >= 1 or !has_subnormals): (-1)^s * (1 + M/2^man_bits) * 2^(E - bias)
///   subnormal (E == 0 and has_subnormals): (-1)^s * (M/2^man_bits) * 2^(1 - bias)
struct FormatSpec {
  const char* name;      ///< ml_dtypes / PyTorch style name
  uint8_t bits;          ///< total bits of one code
  uint8_t exp_bits;
  uint8_t man_bits;
  int16_t bias;
  bool has_sign;
  bool has_inf;          ///< IEEE Inf at exponent all ones, mantissa 0
  NanKind nan;
  bool has_subnormals;   ///< false only for E8M0 (exponent field 0 is 2^-127)
  uint8_t roles;         ///< FormatRole bits

  /// Whether the format plays every role of `r` (FormatRole bits).
  MXSIM_HD constexpr bool is(unsigned r) const { return (roles & r) == r; }

  /// Unbiased exponent of the smallest normal binade.
  MXSIM_HD constexpr int emin() const { return has_subnormals ? 1 - bias : -bias; }
  /// Top exponent field that holds finite values.
  MXSIM_HD constexpr int max_exp_field() const {
    // IEEE-like formats reserve the top field for Inf/NaN; so does E8M0,
    // whose only NaN (0xFF) is the top field with no mantissa to spare.
    const bool top_reserved = has_inf || nan == NanKind::Ieee || (nan == NanKind::AllOnes && man_bits == 0);
    return top_reserved ? (1 << exp_bits) - 2 : (1 << exp_bits) - 1;
  }
  /// Unbiased exponent of the largest finite binade ("emax_elem" of the MX spec).
  MXSIM_HD constexpr int emax() const { return max_exp_field() - bias; }
  /// Largest mantissa field in the top finite binade.
  MXSIM_HD constexpr uint32_t max_mant() const {
    const uint32_t all = (1u << man_bits) - 1;
    return nan == NanKind::AllOnes && man_bits > 0 ? all - 1 : all;
  }
  /// Code of +max finite.
  MXSIM_HD constexpr uint32_t max_code() const {
    return (uint32_t(max_exp_field()) << man_bits) | max_mant();
  }
  /// Largest finite value (the value of max_code()) as FP32, built from its
  /// bits: (1 + max_mant / 2^man_bits) * 2^emax. Exact for every format of the
  /// table (man_bits <= 23, -126 <= emax <= 127). E4M3: 448, E5M2: 57344,
  /// E2M1: 6, E8M0: 2^127.
  MXSIM_HD inline float max_value() const {
    return f32_from_bits((uint32_t(emax() + 127) << 23) | (max_mant() << (23 - man_bits)));
  }
  MXSIM_HD constexpr uint32_t sign_bit() const { return has_sign ? 1u << (bits - 1) : 0u; }
  /// Code of +Inf (only meaningful when has_inf).
  MXSIM_HD constexpr uint32_t inf_code() const { return ((1u << exp_bits) - 1) << man_bits; }
  /// Canonical NaN code with the given sign (quiet bit set for IEEE formats).
  MXSIM_HD constexpr uint32_t nan_code(uint32_t sign) const {
    switch (nan) {
      case NanKind::Ieee: return (sign ? sign_bit() : 0u) | inf_code() | (1u << (man_bits - 1));
      case NanKind::AllOnes: return (sign ? sign_bit() : 0u) | ((1u << (bits - (has_sign ? 1 : 0))) - 1);
      case NanKind::NegZero: return 1u << (bits - 1);
      case NanKind::None: return max_code();  // no NaN: see rounding.hpp
    }
    return 0;
  }
};

/// The table. One row per Format, in enum order.
MXSIM_HD constexpr FormatSpec spec_of(Format f) {
  constexpr uint8_t ocp8 = kRoleMxElem | kRoleOcpMx | kRoleFp8, fnuz8 = kRoleMxElem | kRoleFp8,
                    fp6 = kRoleMxElem | kRoleOcpMx, exact = kRoleMxElem | kRoleOcpMx | kRoleMxExact,
                    fp4 = exact | kRoleFp8GroupExact;
  switch (f) {
    //                        name             bits e  m  bias  sign   inf    nan               subn   roles
    case Format::FP32:     return {"float32",        32, 8, 23, 127, true,  true,  NanKind::Ieee,    true,  0};
    case Format::BF16:     return {"bfloat16",       16, 8,  7, 127, true,  true,  NanKind::Ieee,    true,  0};
    case Format::FP16:     return {"float16",        16, 5, 10,  15, true,  true,  NanKind::Ieee,    true,  0};
    case Format::E4M3:     return {"float8_e4m3fn",   8, 4,  3,   7, true,  false, NanKind::AllOnes, true,  ocp8};
    case Format::E5M2:     return {"float8_e5m2",     8, 5,  2,  15, true,  true,  NanKind::Ieee,    true,  ocp8};
    case Format::E4M3FNUZ: return {"float8_e4m3fnuz", 8, 4,  3,   8, true,  false, NanKind::NegZero, true,  fnuz8};
    case Format::E5M2FNUZ: return {"float8_e5m2fnuz", 8, 5,  2,  16, true,  false, NanKind::NegZero, true,  fnuz8};
    case Format::E3M2:     return {"float6_e3m2fn",   6, 3,  2,   3, true,  false, NanKind::None,    true,  fp6};
    case Format::E2M3:     return {"float6_e2m3fn",   6, 2,  3,   1, true,  false, NanKind::None,    true,  exact};
    case Format::E2M1:     return {"float4_e2m1fn",   4, 2,  1,   1, true,  false, NanKind::None,    true,  fp4};
    case Format::E8M0:     return {"float8_e8m0fnu",  8, 8,  0, 127, false, false, NanKind::AllOnes, false, 0};
  }
  return {"float32", 32, 8, 23, 127, true, true, NanKind::Ieee, true, 0};
}

/// Whether format f plays every role of r (FormatRole bits): spec_of(f).is(r).
MXSIM_HD constexpr bool has_role(Format f, unsigned r) { return spec_of(f).is(r); }

/// The FP32 current-scaling factor (TransformerEngine's rule; the one rule
/// for per-tensor and per-block FP32 scales, used by emu::quantize and the
/// training simulator): elem_max / max(amax, amax_epsilon), capped at
/// FLT_MAX; 1 when that maximum is 0 or the quotient underflows to 0; rounded
/// down to a power of two when pow2_scale (TE Float8BlockScaling). elem_max is
/// the element format's largest finite value. A NaN or infinite amax has no
/// finite scale: the result is NaN (callers refuse it or mark the block NaN).
MXSIM_HD inline float current_scale(float elem_max, float amax, float amax_epsilon, bool pow2_scale) {
  if (!(amax - amax == 0.0f)) return f32_from_bits(0x7FC00000u);  // NaN or +-inf
  const float a = amax > amax_epsilon ? amax : amax_epsilon;
  if (a == 0.0f) return 1.0f;
  float scale = elem_max / a;
  if (scale > FLT_MAX) scale = FLT_MAX;
  if (scale == 0.0f) return 1.0f;
  if (pow2_scale) scale = f32_from_bits(f32_bits(scale) & 0xFF800000u);  // clear the mantissa
  return scale;
}

/// Format by name: accepts the table's names, the short ones
/// (fp32, bf16, fp16, e4m3, e5m2, e4m3fnuz, e5m2fnuz, e3m2, e2m3, e2m1, e8m0),
/// PyTorch dtype strings with their "torch." prefix, and torchao's element
/// names float4_e2m1fn_x2 (the packed FP4 storage type), fp6_e2m3, fp6_e3m2.
/// Returns false when the name is unknown.
bool format_from_name(std::string_view name, Format& out);
/// Short name ("e2m1", "bf16", ...).
const char* short_name(Format f);

}  // namespace mxsim
