// Independent exact oracle for element conversion (tests only).
//
// Method (deliberately unlike rounding.hpp, which works on the bits of the
// input): every code of the target format is decoded from first principles
// into an exact integer multiple of 2^-K (Boost.Multiprecision fixed-width
// cpp_int, K = 300, so every FP32 value times any 2^-s, |s| <= 127, and every
// value of every format is an exact integer). The finite non-negative values
// are sorted; the exact input |x| * 2^-s is located between its two
// neighbours by binary search; the rounding decision is made by exact integer
// comparison with the midpoint, and the stochastic threshold is computed as
// floor((|x| - lo) * 2^32 / (hi - lo)) by exact integer division.
//
// The oracle knows nothing of format.hpp: each format's specials (NaN, Inf,
// signedness) are written out here from ../shared/reference/formats-and-scaling.md
// §1 (OCP OFP8 v1.0, OCP MX v1.0 §5, PyTorch c10 Float8_e4m3fnuz.h, IEEE 754).
#pragma once
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <boost/multiprecision/cpp_int.hpp>

namespace oracle {

namespace mp = boost::multiprecision;
using Big = mp::number<mp::cpp_int_backend<704, 704, mp::signed_magnitude, mp::checked, void>>;
inline constexpr int K = 300;  // values are integers in units of 2^-K

/// 2^e in units of 2^-K (e >= -K).
inline Big pow2(int e) { return Big(1) << (e + K); }

enum class Kind { IeeeLike, E4M3FN, Fnuz, NoSpecials, E8M0 };

struct Fmt {
  std::string name;
  int bits, ebits, mbits, bias;
  Kind kind;
  bool is_signed() const { return kind != Kind::E8M0; }
  uint32_t sign_bit() const { return is_signed() ? 1u << (bits - 1) : 0u; }
  bool is_nan(uint32_t c) const {
    const uint32_t mag = c & ~sign_bit();
    switch (kind) {
      case Kind::IeeeLike: return (mag >> mbits) == ((1u << ebits) - 1) && (mag & ((1u << mbits) - 1)) != 0;
      case Kind::E4M3FN: return mag == 0x7F;
      case Kind::Fnuz: return c == 0x80;
      case Kind::NoSpecials: return false;
      case Kind::E8M0: return c == 0xFF;
    }
    return false;
  }
  bool is_inf(uint32_t c) const {
    return kind == Kind::IeeeLike && (c & ~sign_bit()) == ((1u << ebits) - 1) << mbits;
  }
  /// Exact magnitude of a finite code, in units of 2^-K.
  Big value(uint32_t c) const {
    if (kind == Kind::E8M0) return pow2(int(c) - 127);
    const uint32_t mag = c & ~sign_bit();
    const int e = int(mag >> mbits);
    const uint32_t m = mag & ((1u << mbits) - 1);
    if (e == 0) return Big(m) * pow2(1 - bias - mbits);
    return Big((1u << mbits) + m) * pow2(e - bias - mbits);
  }
  /// Canonical NaN this project documents (docs/numerics.md §2.3).
  uint32_t nan(uint32_t neg) const {
    switch (kind) {
      case Kind::IeeeLike: return (neg ? sign_bit() : 0u) | (((1u << ebits) - 1) << mbits) | (1u << (mbits - 1));
      case Kind::E4M3FN: return (neg ? 0x80u : 0u) | 0x7Fu;
      case Kind::Fnuz: return 0x80u;
      case Kind::E8M0: return 0xFFu;
      case Kind::NoSpecials: return 0;  // no NaN: callers use +max
    }
    return 0;
  }
};

inline std::vector<Fmt> all_formats() {
  return {
      {"bf16", 16, 8, 7, 127, Kind::IeeeLike},  {"fp16", 16, 5, 10, 15, Kind::IeeeLike},
      {"e4m3", 8, 4, 3, 7, Kind::E4M3FN},       {"e5m2", 8, 5, 2, 15, Kind::IeeeLike},
      {"e4m3fnuz", 8, 4, 3, 8, Kind::Fnuz},     {"e5m2fnuz", 8, 5, 2, 16, Kind::Fnuz},
      {"e3m2", 6, 3, 2, 3, Kind::NoSpecials},   {"e2m3", 6, 2, 3, 1, Kind::NoSpecials},
      {"e2m1", 4, 2, 1, 1, Kind::NoSpecials},   {"e8m0", 8, 8, 0, 127, Kind::E8M0},
  };
}

/// FP32 bits of the exact magnitude a (units of 2^-K) with the given sign, when
/// binary32 holds it exactly (IEEE 754: 24-bit significand, normal exponents
/// -126..127, subnormals down to 2^-149); false otherwise. Integer work only.
inline bool f32_bits_exact(const Big& a, bool neg, uint32_t& out) {
  const uint32_t s = neg ? 0x80000000u : 0u;
  if (a == 0) {
    out = s;
    return true;
  }
  const int e = int(mp::msb(a)) - K;  // floor(log2 a)
  if (e > 127) return false;
  const int lsb = e >= -126 ? e - 23 : -149;  // weight of the significand's last bit
  if (lsb + K < 0 || (a & ((Big(1) << (lsb + K)) - 1)) != 0) return false;  // bits below it: not exact
  const Big sig = a >> (lsb + K);
  out = s | (e >= -126 ? (uint32_t(e + 127) << 23) | (uint32_t(sig) & 0x7FFFFFu) : uint32_t(sig));
  return true;
}

/// What decoding code c of f gives as FP32 bits, from the definitions above
/// (never mxsim's decoder): the exact value (every value of these formats is
/// an FP32 value), +-Inf for Inf codes, and for every NaN code the one
/// canonical quiet NaN 0x7FC00000 (docs/numerics.md §1 rule 6, §2.4).
inline uint32_t decoded_f32_bits(const Fmt& f, uint32_t c) {
  if (f.is_nan(c)) return 0x7FC00000u;
  const bool neg = (c & f.sign_bit()) != 0;
  if (f.is_inf(c)) return (neg ? 0x80000000u : 0u) | 0x7F800000u;
  uint32_t b = 0;
  if (!f32_bits_exact(f.value(c), neg, b)) throw std::logic_error(f.name + ": a value FP32 does not hold");
  return b;
}

/// Sorted table of a format's finite non-negative values.
struct Table {
  Fmt f;
  std::vector<Big> vals;       ///< ascending
  std::vector<uint32_t> codes; ///< code of each value (the +0 code for zero)
  Big virt;                    ///< max + one ulp of the top binade (the first value past max)
  uint32_t max_code = 0;

  explicit Table(const Fmt& fmt) : f(fmt) {
    std::vector<std::pair<Big, uint32_t>> v;
    const uint32_t n = 1u << f.bits;
    for (uint32_t c = 0; c < n; ++c) {
      if (f.is_signed() && (c & f.sign_bit())) continue;
      if (f.is_nan(c) || f.is_inf(c)) continue;
      v.emplace_back(f.value(c), c);
    }
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first < b.first; });
    for (auto& [val, c] : v) {
      vals.push_back(val);
      codes.push_back(c);
    }
    max_code = codes.back();
    // top binade exponent: floor(log2 max)
    int top = -K;
    while (pow2(top + 1) <= vals.back()) ++top;
    virt = vals.back() + pow2(top - f.mbits);
  }
};

/// The code of format t that holds exactly the value of code c of f: what a
/// widening cast must give (the sign kept, -0 included; Inf as t's Inf; a NaN
/// as t's positive canonical NaN, since decoding makes every NaN 0x7FC00000).
/// False when t has no such code: t does not hold every value of f.
inline bool widened_code(const Fmt& f, uint32_t c, const Table& t, uint32_t& out) {
  const Fmt& g = t.f;
  if (f.is_nan(c)) {
    out = g.nan(0);
    return g.kind != Kind::NoSpecials;
  }
  const bool neg = (c & f.sign_bit()) != 0;
  if (neg && !g.is_signed()) return false;
  const uint32_t sgn = neg ? g.sign_bit() : 0u;
  if (f.is_inf(c)) {
    out = sgn | (((1u << g.ebits) - 1) << g.mbits);
    return g.kind == Kind::IeeeLike;
  }
  const Big v = f.value(c);
  const auto it = std::lower_bound(t.vals.begin(), t.vals.end(), v);
  if (it == t.vals.end() || *it != v) return false;
  if (v == 0) {  // a zero: -0 needs a format with one (FNUZ and E8M0 have none)
    out = sgn;
    return !(neg && (g.kind == Kind::Fnuz || g.kind == Kind::E8M0));
  }
  out = sgn | t.codes[size_t(it - t.vals.begin())];
  return true;
}

/// Exact |x| * 2^-s for FP32 bits x (finite), in units of 2^-K.
inline Big exact_abs(uint32_t x, int s) {
  const uint32_t e = (x >> 23) & 0xFF, m = x & 0x7FFFFF;
  const uint64_t sig = e ? (m | 0x800000u) : m;
  const int lsb = (e ? int(e) - 150 : -149) - s;
  return Big(sig) << (lsb + K);
}

enum class Mode { RNE, RZ, SR, RU };  // RU: toward +Inf (IEEE roundTowardPositive)
enum class Ov { Sat, Ieee };

/// The oracle's decision for one (input, scale) in one format.
struct Decision {
  bool fixed = false;        ///< result does not depend on rounding
  uint32_t fixed_sat = 0, fixed_ieee = 0;
  uint32_t sign = 0;
  size_t lo = 0;             ///< index of the lower neighbour in the table
  bool hi_virtual = false;   ///< upper neighbour is past max (overflow)
  bool exact = false;
  int cmp_mid = 0;           ///< sign of (|v| - midpoint)
  uint64_t f32 = 0;          ///< floor(fraction * 2^32)
};

inline void locate(const Table& t, Decision& d, const Big& a);

inline Decision decide(const Table& t, uint32_t x, int s) {
  const Fmt& f = t.f;
  Decision d;
  const uint32_t neg = x >> 31;
  const uint32_t ef = (x >> 23) & 0xFF, mf = x & 0x7FFFFF;
  d.sign = neg;
  const uint32_t sgn = neg ? f.sign_bit() : 0u;
  const uint32_t maxc = t.max_code;
  auto set_fixed = [&](uint32_t sat, uint32_t ieee) {
    d.fixed = true;
    d.fixed_sat = sat;
    d.fixed_ieee = ieee;
  };
  auto ieee_overflow = [&]() -> uint32_t {
    if (f.kind == Kind::IeeeLike) return sgn | (((1u << f.ebits) - 1) << f.mbits);
    if (f.kind == Kind::NoSpecials) return sgn | maxc;
    return f.nan(neg);
  };
  if (ef == 0xFF && mf != 0) {  // NaN
    const uint32_t c = f.kind == Kind::NoSpecials ? maxc : f.nan(neg);
    set_fixed(c, c);
    return d;
  }
  if (f.kind == Kind::E8M0 && neg && (ef | mf)) {  // unsigned: negatives are NaN
    set_fixed(0xFF, 0xFF);
    return d;
  }
  if (ef == 0xFF) {  // Inf
    set_fixed(sgn | maxc, ieee_overflow());
    return d;
  }
  const uint32_t zero = (f.kind == Kind::Fnuz || f.kind == Kind::E8M0) ? 0u : sgn;
  if ((ef | mf) == 0) {
    set_fixed(zero, zero);
    return d;
  }
  locate(t, d, exact_abs(x, s));
  return d;
}

/// The neighbours of a finite non-zero exact magnitude a (units of 2^-K) and
/// the rounding facts about it, into d.
inline void locate(const Table& t, Decision& d, const Big& a) {
  const Fmt& f = t.f;
  if (f.kind == Kind::E8M0 && a < t.vals.front()) {  // below 2^-127: the smallest scale
    d.fixed = true;
    d.fixed_sat = d.fixed_ieee = 0x00;
    return;
  }
  auto it = std::upper_bound(t.vals.begin(), t.vals.end(), a);
  d.lo = size_t(it - t.vals.begin()) - 1;
  const Big& lo = t.vals[d.lo];
  d.hi_virtual = (it == t.vals.end());
  const Big& hi = d.hi_virtual ? t.virt : *it;
  if (a == lo) {
    d.exact = true;
    return;
  }
  if (d.hi_virtual && a >= hi) {  // at or past the first value beyond max: every rounding but RZ overflows
    d.cmp_mid = 1;
    d.f32 = uint64_t(1) << 32;
    return;
  }
  const Big twice = 2 * a, sum = lo + hi;
  d.cmp_mid = twice < sum ? -1 : (twice > sum ? 1 : 0);
  d.f32 = uint64_t(((a - lo) << 32) / (hi - lo));
}

/// Exact |x| * 2^-s for FP64 bits x (finite), in units of 2^-K. The value
/// must fit the oracle's integers: callers keep the exponent of x - s within
/// about [-240, 380].
inline Big exact_abs_f64(uint64_t x, int s) {
  const uint32_t e = uint32_t(x >> 52) & 0x7FF;
  const uint64_t m = x & ((uint64_t(1) << 52) - 1);
  const uint64_t sig = e ? (m | (uint64_t(1) << 52)) : m;
  const int lsb = (e ? int(e) - 1075 : -1074) - s;
  return Big(sig) << (lsb + K);
}

/// decide() for an FP64 input (the same special-value table, from the FP64 fields).
inline Decision decide_f64(const Table& t, uint64_t x, int s) {
  const Fmt& f = t.f;
  Decision d;
  const uint32_t neg = uint32_t(x >> 63);
  const uint32_t ef = uint32_t(x >> 52) & 0x7FF;
  const uint64_t mf = x & ((uint64_t(1) << 52) - 1);
  d.sign = neg;
  const uint32_t sgn = neg ? f.sign_bit() : 0u;
  auto fixed = [&](uint32_t sat, uint32_t ieee) {
    d.fixed = true;
    d.fixed_sat = sat;
    d.fixed_ieee = ieee;
    return d;
  };
  const uint32_t ieee_ovf = f.kind == Kind::IeeeLike ? sgn | (((1u << f.ebits) - 1) << f.mbits)
                            : f.kind == Kind::NoSpecials ? sgn | t.max_code : f.nan(neg);
  if (ef == 0x7FF && mf != 0) {
    const uint32_t c = f.kind == Kind::NoSpecials ? t.max_code : f.nan(neg);
    return fixed(c, c);
  }
  if (f.kind == Kind::E8M0 && neg && (ef || mf)) return fixed(0xFF, 0xFF);
  if (ef == 0x7FF) return fixed(sgn | t.max_code, ieee_ovf);
  const uint32_t zero = (f.kind == Kind::Fnuz || f.kind == Kind::E8M0) ? 0u : sgn;
  if (ef == 0 && mf == 0) return fixed(zero, zero);
  locate(t, d, exact_abs_f64(x, s));
  return d;
}

/// Expected code under (mode, overflow policy, rand32).
inline uint32_t expect(const Table& t, const Decision& d, Mode mode, Ov ov, uint32_t r) {
  if (d.fixed) return ov == Ov::Sat ? d.fixed_sat : d.fixed_ieee;
  const Fmt& f = t.f;
  const uint32_t sgn = d.sign ? f.sign_bit() : 0u;
  auto code_at = [&](size_t i) -> uint32_t {
    const uint32_t c = t.codes[i];
    if (i == 0 && f.kind != Kind::E8M0) return (f.kind == Kind::Fnuz) ? 0u : sgn;  // zero
    return sgn | c;
  };
  bool up = false;
  if (!d.exact) {
    switch (mode) {
      case Mode::RZ: up = false; break;
      case Mode::RNE:
        if (d.cmp_mid != 0) up = d.cmp_mid > 0;
        else up = f.mbits == 0 ? true : (t.codes[d.lo] & 1u) != 0;  // ties to even; E8M0 ties up
        break;
      case Mode::SR: up = uint64_t(r) < d.f32; break;
      case Mode::RU: up = d.sign == 0; break;
    }
  }
  if (!up) return code_at(d.lo);
  if (!d.hi_virtual) return code_at(d.lo + 1);
  // overflow
  if (ov == Ov::Sat) return sgn | t.max_code;
  if (f.kind == Kind::IeeeLike) return sgn | (((1u << f.ebits) - 1) << f.mbits);
  if (f.kind == Kind::NoSpecials) return sgn | t.max_code;
  return f.nan(d.sign);
}

}  // namespace oracle
