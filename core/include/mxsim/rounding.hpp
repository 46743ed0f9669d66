// The one rounding routine and the one decoder.
//
// encode() converts an FP32 value (encode_f64(): an FP64 value, rounded once), optionally divided by an exact power of two
// (the block scale), to any format of the table in format.hpp. It works on
// integers only, so host and device produce the same bits and no FP32
// intermediate (which could underflow and lose sticky bits) is ever formed.
//
// Rounding (RoundMode):
//   RNE         round to nearest, ties to even (IEEE 754 roundTiesToEven);
//               E8M0 has no mantissa bit to make even: its ties round up
//               (1.5 -> 2, 3 -> 4), as PyTorch Float8_e8m0fnu and ml_dtypes do.
//   RZ          round toward zero (truncate).
//   RU          round toward +Inf (IEEE 754 roundTowardPositive): ceil; for
//               negative values that is toward zero. Single conversions only.
//   Stochastic  the discarded bits, read as a binary fraction f in [0, 1) and
//               truncated to 32 bits (f32 = floor(f * 2^32)), are compared with
//               a 32-bit random word r: the magnitude rounds away from zero
//               iff r < f32. So P(round up) = f32 / 2^32, unbiased up to 2^-32.
//               r comes from Philox4x32-10 (philox.hpp).
//
// The contract is docs/numerics.md §2; tests/test_formats_exhaustive.cpp proves
// it bit for bit against an independent exact oracle.
//
// Overflow (finite values beyond the largest finite value after rounding):
//   Saturate    clamp to +-max finite (CUDA __NV_SATFINITE, OCP MX element rule).
//   Ieee        +-Inf if the format has Inf, else NaN if it has one, else +-max
//               (PyTorch .to(float8_e4m3fn) in 2.11 / ml_dtypes astype).
//   Under RZ a finite value never overflows to Inf (IEEE 754 §7.4): +-max;
//   under RU neither does a negative one (-max).
//
// Special inputs:
//   NaN  -> the format's canonical NaN (nan_code, sign kept where the format
//           can). Formats without NaN (E2M1, E2M3, E3M2) give +max, as PTX
//           cvt.rn.satfinite.e2m1x2.f32 does (TransformerEngine ptx.cuh note).
//   Inf  -> Saturate: +-max. Ieee: as overflow above.
//   -0   -> -0 where the format has a sign and a -0 code; +0 in FNUZ formats.
//   Unsigned E8M0: negative inputs give NaN (0xFF); zero and values below
//           2^-127 give 0x00 (the format has no zero).
#pragma once
#include <cstdint>

#include "mxsim/bits.hpp"
#include "mxsim/format.hpp"

namespace mxsim {

/// RU (round up: IEEE 754 roundTowardPositive) is for single conversions
/// (`mxsim cast --round ru`, Python encode(rounding="ru"): ceil for the
/// unsigned E8M0); quantization specs take RNE, RZ and Stochastic only.
enum class RoundMode : uint8_t { RNE, RZ, Stochastic, RU };
enum class Overflow : uint8_t { Saturate, Ieee };

namespace detail {
MXSIM_HD constexpr uint32_t overflow_code(const FormatSpec& f, uint32_t sign, RoundMode mode, Overflow ov) {
  const uint32_t s = sign ? f.sign_bit() : 0u;
  // RZ, and RU for negative values, round toward zero here: never past max.
  if (mode == RoundMode::RZ || (mode == RoundMode::RU && sign) || ov == Overflow::Saturate) return s | f.max_code();
  if (f.has_inf) return s | f.inf_code();
  if (f.nan != NanKind::None) return f.nan_code(sign);
  return s | f.max_code();
}
MXSIM_HD constexpr uint32_t zero_code(const FormatSpec& f, uint32_t sign) {
  if (!f.has_sign || f.nan == NanKind::NegZero) return 0u;
  return sign ? f.sign_bit() : 0u;
}
}  // namespace detail

namespace detail {
/// The rounding proper, shared by every input width: the finite, non-zero
/// magnitude sig * 2^lsb_exp (0 < sig < 2^63, msb = floor(log2 sig)) with the
/// given sign, rounded to format f. FP32 inputs bring 24-bit significands,
/// FP64 inputs 53-bit ones; the rounding sees the exact value either way, so
/// an FP64 input is rounded once, never through an FP32 intermediate.
MXSIM_HD constexpr uint32_t encode_magnitude(const FormatSpec& f, uint32_t sign, uint64_t sig, int lsb_exp, int msb,
                                             RoundMode mode, Overflow ov, uint32_t rand32) {
  const int vexp = lsb_exp + msb;  // floor(log2 |value|)
  const int man = f.man_bits;
  int qexp = (vexp > f.emin() ? vexp : f.emin()) - man;  // exponent of one ulp
  const int shift = qexp - lsb_exp;                       // bits of sig below one ulp

  uint64_t kept;
  bool up = false;
  if (shift <= 0) {
    kept = sig << -shift;  // exact: the value has no bits below one ulp (kept < 2^(man+1))
  } else {
    uint64_t rem;
    if (shift < 64) {
      kept = sig >> shift;
      rem = sig & ((uint64_t(1) << shift) - 1);
    } else {
      kept = 0;
      rem = sig;
    }
    switch (mode) {
      case RoundMode::RNE: {
        if (shift < 64) {
          const uint64_t half = uint64_t(1) << (shift - 1);
          up = rem > half || (rem == half && (kept & 1u));
        }
        break;
      }
      case RoundMode::RZ: break;
      case RoundMode::Stochastic: {
        uint64_t frac32 = 0;
        if (shift <= 32) frac32 = rem << (32 - shift);
        else if (shift - 32 < 64) frac32 = rem >> (shift - 32);
        up = uint64_t(rand32) < frac32;
        break;
      }
      case RoundMode::RU: up = !sign && rem != 0; break;
    }
  }
  kept += up ? 1u : 0u;
  if (kept >> (man + 1)) {  // rounded up into the next binade
    kept >>= 1;
    ++qexp;
  }
  if (kept == 0) return zero_code(f, sign);

  const uint32_t s = sign ? f.sign_bit() : 0u;
  const bool normal = (kept >> man) != 0;
  const int exp_field = normal ? qexp + man + f.bias : 0;
  const uint32_t mant = uint32_t(kept) & ((1u << man) - 1);
  if (exp_field > f.max_exp_field() || (exp_field == f.max_exp_field() && mant > f.max_mant()))
    return overflow_code(f, sign, mode, ov);
  return s | (uint32_t(exp_field) << man) | mant;
}

/// Infinite input: saturate to +-max, else as an overflow (RU: -Inf keeps -Inf
/// under Ieee, as roundTowardPositive does with an infinite operand).
MXSIM_HD constexpr uint32_t encode_inf(const FormatSpec& f, uint32_t sign, Overflow ov) {
  if (!f.has_sign && sign) return f.nan_code(0);
  if (ov == Overflow::Saturate) return (sign ? f.sign_bit() : 0u) | f.max_code();
  return overflow_code(f, sign, RoundMode::RNE, ov);
}

constexpr int kScaleExpLimit = 1 << 20;
MXSIM_HD constexpr int clamp_scale_exp(int e) {
  return e < -kScaleExpLimit ? -kScaleExpLimit : (e > kScaleExpLimit ? kScaleExpLimit : e);
}
}  // namespace detail

/// Encode x * 2^(-scale_exp) (x given as FP32 bits) into format f.
///
/// scale_exp is any integer; the division is exact (done on the exponent).
/// Beyond +-2^20 every result is already settled (below every format's
/// smallest subnormal by far more than 64 bits, or above its maximum), so
/// scale_exp is clamped there first: INT_MIN / INT_MAX cause no signed overflow.
/// rand32 is used only by RoundMode::Stochastic. Returns the code in the low
/// f.bits bits.
MXSIM_HD constexpr uint32_t encode(const FormatSpec& f, uint32_t x_bits, int scale_exp = 0,
                                   RoundMode mode = RoundMode::RNE, Overflow ov = Overflow::Saturate,
                                   uint32_t rand32 = 0) {
  scale_exp = detail::clamp_scale_exp(scale_exp);
  const uint32_t sign = x_bits >> 31;
  const uint32_t ef = (x_bits >> 23) & 0xFFu, mf = x_bits & 0x7FFFFFu;
  if (ef == 0xFFu) return mf != 0 ? f.nan_code(sign) : detail::encode_inf(f, sign, ov);
  if (!f.has_sign && sign && (ef | mf) != 0) return f.nan_code(0);
  if ((ef | mf) == 0) return detail::zero_code(f, sign);

  // |x| * 2^-scale_exp = sig * 2^(lsb_exp), sig < 2^24.
  const uint64_t sig = ef ? (mf | 0x800000u) : mf;
  const int lsb_exp = (ef ? int(ef) - 127 : -126) - 23 - scale_exp;
  return detail::encode_magnitude(f, sign, sig, lsb_exp, 31 - clz32(uint32_t(sig)), mode, ov, rand32);
}

/// Encode x * 2^(-scale_exp), x given as FP64 (IEEE binary64) bits, into
/// format f with ONE rounding of the exact value: the same rounding, overflow
/// and special-value rules as encode() (the same code, fed a 53-bit
/// significand), with no FP32 intermediate. So for every x that is an FP32
/// value, encode_f64(f, bits of double(x), ...) == encode(f, bits of x, ...),
/// and for FP32 as the target it is IEEE convertFormat binary64 -> binary32
/// (RNE / RZ / RU) with the chosen overflow policy. Stochastic: the discarded
/// bits of the exact FP64 value, read as a binary fraction of one ulp of the
/// target and truncated to 32 bits, are compared with rand32, exactly as for
/// FP32 inputs (docs/numerics.md §2.2); an FP64 value can have up to ~1100
/// discarded bits, all but the top 32 are dropped by the truncation.
MXSIM_HD constexpr uint32_t encode_f64(const FormatSpec& f, uint64_t x_bits, int scale_exp = 0,
                                       RoundMode mode = RoundMode::RNE, Overflow ov = Overflow::Saturate,
                                       uint32_t rand32 = 0) {
  scale_exp = detail::clamp_scale_exp(scale_exp);
  const uint32_t sign = uint32_t(x_bits >> 63);
  const uint32_t ef = uint32_t(x_bits >> 52) & 0x7FFu;
  const uint64_t mf = x_bits & ((uint64_t(1) << 52) - 1);
  if (ef == 0x7FFu) return mf != 0 ? f.nan_code(sign) : detail::encode_inf(f, sign, ov);
  if (!f.has_sign && sign && (ef != 0 || mf != 0)) return f.nan_code(0);
  if (ef == 0 && mf == 0) return detail::zero_code(f, sign);

  // |x| * 2^-scale_exp = sig * 2^(lsb_exp), sig < 2^53.
  const uint64_t sig = ef ? (mf | (uint64_t(1) << 52)) : mf;
  const int lsb_exp = (ef ? int(ef) - 1023 : -1022) - 52 - scale_exp;
  return detail::encode_magnitude(f, sign, sig, lsb_exp, 63 - clz64(sig), mode, ov, rand32);
}

/// True when encode_by_add() gives encode()'s code: RNE or RZ, a signed
/// format with subnormals, 1..22 mantissa bits and a range whose rounding
/// constant fits FP32 (emax + 24 - man_bits <= 127: every FP8, FP6 and FP4
/// format and FP16; not BF16, FP32 or E8M0), |scale_exp| <= 127 (every E8M0
/// block scale).
MXSIM_HD constexpr bool encode_by_add_applies(const FormatSpec& f, int scale_exp, RoundMode mode) {
  return (mode == RoundMode::RNE || mode == RoundMode::RZ) && f.has_sign && f.has_subnormals && f.man_bits >= 1 &&
         f.man_bits <= 22 && f.emax() + 24 - f.man_bits <= 127 && scale_exp >= -127 && scale_exp <= 127;
}

/// The same code as encode(f, x_bits, scale_exp, mode, Overflow::Saturate)
/// for every x that is not NaN, where encode_by_add_applies(f, scale_exp,
/// mode): the quantizers' per-element step in a dozen FP32 and integer
/// operations instead of encode()'s 64-bit integer rounding.
///
/// Why it is exact. v = |x| * 2^-scale_exp is one FP32 multiply, exact
/// unless v < 2^-126, and every such v rounds to zero in every format here
/// (their smallest subnormal is 2^-17 or more), as its FP32 rounding does.
/// Values of 2^(emax + 1) and up (Inf included) are clamped there: they
/// saturate either way. With ee = max(biased exponent of v, that of the
/// format's smallest normal binade), the target's ulp at v is
/// 2^(ee - 127 - man_bits); the FP32 constant M = 2^(ee - 127 + 23 - man_bits)
/// has exactly that ulp and v < M, so the FP32 sum v + M, rounded by the
/// hardware (RNE), is M + k ulps with k = v / ulp rounded to nearest even:
/// the target's rounding. k's parity is the code's, so the ties agree; a
/// carry into the next binade (k = 2^(man_bits + 1)) is the next code. The
/// code's magnitude is k plus (ee - emin field) << man_bits. RZ truncates v
/// to the target's ulp first (a mask on its bits); the sum is then exact.
/// Magnitudes past max saturate; the sign is OR'ed in (no -0 in FNUZ).
/// tests/test_round_by_add.cpp compares it with encode() on every BF16 value
/// and the FP32 rounding neighbourhoods under every scale; the GPU suite on
/// every FP32 bit pattern.
MXSIM_HD inline uint32_t encode_by_add(const FormatSpec& f, uint32_t x_bits, int scale_exp, RoundMode mode) {
  const uint32_t sign = x_bits >> 31;
  // 2^-scale_exp, an FP32 subnormal (2^-127) at scale_exp = 127.
  const uint32_t p_bits = scale_exp <= 126 ? uint32_t(127 - scale_exp) << 23 : 0x00400000u;
  uint32_t a = f32_bits(f32_from_bits(x_bits & 0x7FFFFFFFu) * f32_from_bits(p_bits));
  const uint32_t clamp = uint32_t(f.emax() + 128) << 23;  // 2^(emax + 1)
  a = a < clamp ? a : clamp;
  const int e = int(a >> 23);
  const int emin_field = 127 + f.emin();
  const int ee = e > emin_field ? e : emin_field;
  const uint32_t magic_bits = uint32_t(ee + 23 - f.man_bits) << 23;
  if (mode == RoundMode::RZ) {
    const int drop = ee - f.man_bits + 23 - (e > 1 ? e : 1);  // bits of v below the target's ulp, >= 1
    a = drop >= 31 ? 0u : a & ~((1u << drop) - 1u);
  }
  const uint32_t k = f32_bits(f32_from_bits(a) + f32_from_bits(magic_bits)) - magic_bits;
  uint32_t mag = k + (uint32_t(ee - emin_field) << f.man_bits);
  mag = mag < f.max_code() ? mag : f.max_code();
  if (mag == 0 && f.nan == NanKind::NegZero) return 0u;  // FNUZ: one zero
  return sign ? (mag | f.sign_bit()) : mag;
}

/// True when format `to` holds every value of format `from`: every finite
/// value, -0 where `from` has one, Inf where it has it, and a NaN where it has
/// one, so converting a code of `from` into `to` is exact (a widening: E4M3 ->
/// FP16 / BF16 / FP32, FP16 -> FP32, E8M0 -> BF16 / FP32, any format -> itself).
/// Such a conversion has nothing to saturate: casts apply Overflow::Ieee to it
/// whatever policy was asked (widening_overflow), so an Inf stays Inf.
MXSIM_HD constexpr bool holds_every_value(const FormatSpec& from, const FormatSpec& to) {
  const bool from_neg_zero = from.has_sign && from.nan != NanKind::NegZero;
  const bool to_neg_zero = to.has_sign && to.nan != NanKind::NegZero;
  if ((from.has_sign && !to.has_sign) || (from_neg_zero && !to_neg_zero) || (from.has_inf && !to.has_inf) ||
      (from.nan != NanKind::None && to.nan == NanKind::None) || to.man_bits < from.man_bits)
    return false;
  // The top: to's largest finite value >= from's (same binade: compare the mantissas at one scale).
  if (to.emax() < from.emax() ||
      (to.emax() == from.emax() && (uint64_t(to.max_mant()) << from.man_bits) < (uint64_t(from.max_mant()) << to.man_bits)))
    return false;
  // The bottom: with at least as many mantissa bits, to holds every value of from iff its
  // smallest step (one ulp of its lowest binade) is no coarser than from's. A format
  // without subnormals (E8M0) holds nothing below 2^emin: only itself then.
  if (!to.has_subnormals)
    return from.bits == to.bits && from.exp_bits == to.exp_bits && from.man_bits == to.man_bits &&
           from.bias == to.bias && from.has_sign == to.has_sign && from.has_subnormals == to.has_subnormals;
  return to.emin() - to.man_bits <= from.emin() - from.man_bits;
}

/// The overflow policy of a conversion of values of format `from` into `to`:
/// `ov` when it narrows; Overflow::Ieee when `to` holds every value of `from`
/// (holds_every_value), since saturation and the overflow policy apply to
/// narrowing only (docs/numerics.md §2.3): an Inf of E5M2 cast to FP16 stays Inf.
MXSIM_HD constexpr Overflow widening_overflow(const FormatSpec& from, const FormatSpec& to, Overflow ov) {
  return holds_every_value(from, to) ? Overflow::Ieee : ov;
}

/// Convenience: encode an FP32 value.
MXSIM_HD inline uint32_t encode_f32(Format fmt, float x, RoundMode mode = RoundMode::RNE,
                                    Overflow ov = Overflow::Saturate, uint32_t rand32 = 0) {
  return encode(spec_of(fmt), f32_bits(x), 0, mode, ov, rand32);
}

/// BF16 code (16 bits) of an FP32 value by RNE with IEEE overflow: the same
/// code as encode(spec_of(Format::BF16), x_bits, 0, RoundMode::RNE,
/// Overflow::Ieee) for every one of the 2^32 inputs, in a few integer ops.
/// The rounding keeps the upper 16 bits and adds 0x7FFF plus the kept lsb
/// (ties to even); a carry moves into the next binade or to Inf, which is
/// IEEE overflow; FP32 subnormals round the same way (BF16 has FP32's
/// exponent range). NaN (any payload) -> the canonical quiet NaN with the
/// input's sign (0x7FC0 / 0xFFC0), as encode gives it. Inf keeps its sign.
/// tests/test_round_bf16.cpp checks it against encode on every BF16 value's
/// rounding neighbourhood (low halves 0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF
/// under each of the 65536 upper halves: both signs, subnormals, ties, the
/// overflow edge, Inf, every NaN class) and on a strided and a random sample.
MXSIM_HD constexpr uint32_t round_bf16_code(uint32_t x_bits) {
  if ((x_bits & 0x7FFFFFFFu) > 0x7F800000u) return ((x_bits >> 16) & 0x8000u) | 0x7FC0u;
  return (x_bits + 0x7FFFu + ((x_bits >> 16) & 1u)) >> 16;
}

/// The value of a BF16 bit pattern (code < 2^16: a bf16 tensor's element, round_bf16_code's result): the
/// upper half of an FP32, exact.
MXSIM_HD inline float bf16_value(uint32_t code) { return f32_from_bits(code << 16); }

/// FP32 value rounded to BF16 (RNE, IEEE overflow): decode(BF16,
/// round_bf16_code(x)), i.e. the BF16 bits in the upper half of an FP32.
/// NaN keeps its sign and loses its payload (see round_bf16_code); callers
/// that need one canonical NaN (the GEMM output, docs/numerics.md §5) make
/// NaN canonical themselves.
MXSIM_HD inline float round_bf16(float x) { return bf16_value(round_bf16_code(f32_bits(x))); }

/// True if the code is NaN in format f.
MXSIM_HD constexpr bool is_nan_code(const FormatSpec& f, uint32_t code) {
  const uint32_t mag = code & ~f.sign_bit();
  switch (f.nan) {
    case NanKind::Ieee: return (mag >> f.man_bits) == ((1u << f.exp_bits) - 1) && (mag & ((1u << f.man_bits) - 1));
    case NanKind::AllOnes: return mag == (f.nan_code(0) & ~f.sign_bit());
    case NanKind::NegZero: return code == f.nan_code(1);
    case NanKind::None: return false;
  }
  return false;
}

/// Exact FP32 value of a code of format f (every value of every format in the
/// table is exactly representable in FP32, E8M0's 2^-127 as an FP32 subnormal).
/// Every NaN code, whatever its sign or payload (FNUZ's 0x80, E4M3's 0xFF,
/// FP32's 0xFFC12345), decodes to the one canonical NaN 0x7FC00000
/// (docs/numerics.md §1 rule 6, §2.4): the CLI, Python, the emulator and the
/// GPU kernels all decode here, so they write the same NaN bits.
MXSIM_HD inline float decode(const FormatSpec& f, uint32_t code) {
  if (f.bits == 32) return canonical_nan(f32_from_bits(code));
  if (is_nan_code(f, code)) return f32_from_bits(kCanonicalNan32);
  const uint32_t sign = code & f.sign_bit();
  const uint32_t mag = code & ~f.sign_bit() & ((1u << f.bits) - 1);
  const int exp_field = int(mag >> f.man_bits);
  const uint32_t mant = mag & ((1u << f.man_bits) - 1);
  float v;
  if (f.has_inf && exp_field == (1 << f.exp_bits) - 1) {
    v = f32_from_bits(0x7F800000u);
  } else if (exp_field == 0 && f.has_subnormals) {
    v = float(mant) * pow2f(f.emin() - f.man_bits);  // exact: mant < 2^23
  } else {
    // (2^man + mant) * 2^(e - man): split the power so no step underflows.
    const int e = exp_field - f.bias;
    v = float((1u << f.man_bits) + mant) * pow2f(-f.man_bits) * pow2f(e);
  }
  return sign ? -v : v;
}

MXSIM_HD inline float decode(Format fmt, uint32_t code) { return decode(spec_of(fmt), code); }

}  // namespace mxsim
