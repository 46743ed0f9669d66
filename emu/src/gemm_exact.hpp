// Internal: exact binary arithmetic for the fast paths' rare-case fallback and
// the matrix-unit models, and the adapter from its terms to the shared fused
// group of hd/gemm_block.hpp. A value is sig * 2^exp with an
// arbitrary-precision signed integer significand, or a special (NaN, +-Inf).
// Zero has no sign (+0).
#pragma once
#include <bit>
#include <boost/multiprecision/cpp_int.hpp>
#include <cstdint>
#include <limits>
#include <vector>

#include "mxsim/bits.hpp"
#include "mxsim/format.hpp"
#include "mxsim/hd/gemm_block.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::emu::gemm {

using boost::multiprecision::cpp_int;

struct Ex {
  enum Sp : uint8_t { Fin, NaN, PInf, NInf } sp = Fin;
  cpp_int sig = 0;
  int exp = 0;
  static Ex zero() { return Ex{}; }
  static Ex nan() { Ex e; e.sp = NaN; return e; }
  bool is_zero() const { return sp == Fin && sig == 0; }
};

inline Ex ex_from_float(float v) {
  const uint32_t b = f32_bits(v);
  const uint32_t ef = (b >> 23) & 0xFF, mf = b & 0x7FFFFF;
  Ex e;
  if (ef == 0xFF) {
    e.sp = mf ? Ex::NaN : ((b >> 31) ? Ex::NInf : Ex::PInf);
    return e;
  }
  e.sig = ef ? (mf | 0x800000u) : mf;
  e.exp = (ef ? int(ef) : 1) - 127 - 23;
  if (b >> 31) e.sig = -e.sig;
  return e;
}

inline Ex ex_add(const Ex& a, const Ex& b) {
  if (a.sp == Ex::NaN || b.sp == Ex::NaN) return Ex::nan();
  if (a.sp != Ex::Fin || b.sp != Ex::Fin) {
    if (a.sp != Ex::Fin && b.sp != Ex::Fin && a.sp != b.sp) return Ex::nan();
    return a.sp != Ex::Fin ? a : b;
  }
  if (a.sig == 0) return b;
  if (b.sig == 0) return a;
  Ex r;
  r.exp = std::min(a.exp, b.exp);
  r.sig = (a.sig << (a.exp - r.exp)) + (b.sig << (b.exp - r.exp));
  return r;
}

inline int sgn(const Ex& a) {
  if (a.sp == Ex::PInf) return 1;
  if (a.sp == Ex::NInf) return -1;
  return a.sig > 0 ? 1 : (a.sig < 0 ? -1 : 0);
}

inline Ex ex_mul(const Ex& a, const Ex& b) {
  if (a.sp == Ex::NaN || b.sp == Ex::NaN) return Ex::nan();
  if (a.sp != Ex::Fin || b.sp != Ex::Fin) {
    const int s = sgn(a) * sgn(b);
    if (s == 0) return Ex::nan();  // Inf * 0
    Ex r;
    r.sp = s > 0 ? Ex::PInf : Ex::NInf;
    return r;
  }
  Ex r;
  r.sig = a.sig * b.sig;
  r.exp = a.exp + b.exp;
  return r;
}

inline Ex ex_elem(const FormatSpec& f, uint32_t code) {
  if (f.bits == 16) return ex_from_float(f32_from_bits(code << 16));  // BF16 pattern
  return ex_from_float(decode(f, code));
}
/// E8M0 byte: 2^(b - 127); 0xFF is NaN.
inline Ex ex_e8m0(uint8_t b) {
  if (b == 0xFF) return Ex::nan();
  Ex e;
  e.sig = 1;
  e.exp = int(b) - 127;
  return e;
}

inline int msb(const cpp_int& v) { return int(boost::multiprecision::msb(v)); }

/// floor(log2 |x|) of a finite non-zero element (subnormals normalized);
/// -126 for zero (the MMA-Sim placeholder); 0 for specials (unused).
inline int elem_exp(const FormatSpec& f, uint32_t code) {
  const Ex e = ex_elem(f, code);
  if (e.sp != Ex::Fin) return 0;
  if (e.sig == 0) return -126;
  return e.exp + msb(abs(e.sig));
}

/// Round a value to FP32-range binary with `frac` fraction bits
/// (23: FP32; 13: e8m13), RNE or RZ, subnormal quantum 2^(-126-frac).
/// Overflow: RNE -> Inf, RZ -> largest finite of that precision.
/// Exact zero -> +0. Returns the value as float (exactly representable).
inline float round_f32(const Ex& v, bool rz, int frac) {
  if (v.sp == Ex::NaN) return std::bit_cast<float>(0x7FC00000u);
  if (v.sp == Ex::PInf) return std::numeric_limits<float>::infinity();
  if (v.sp == Ex::NInf) return -std::numeric_limits<float>::infinity();
  if (v.sig == 0) return 0.0f;
  const bool neg = v.sig < 0;
  const cpp_int mag = abs(v.sig);
  const int e = v.exp + msb(mag);
  const int q = std::max(e, -126) - frac;
  const int shift = q - v.exp;
  cpp_int kept;
  if (shift <= 0) {
    kept = mag << -shift;
  } else {
    kept = mag >> shift;
    const cpp_int rem = mag - (kept << shift);
    if (!rz) {
      const cpp_int half = cpp_int(1) << (shift - 1);
      if (rem > half || (rem == half && (kept & 1) != 0)) kept += 1;
    }
  }
  // value = kept * 2^q, kept <= 2^(frac+1)
  const double d = std::ldexp(double(kept.convert_to<uint64_t>()), q);
  const double maxf = std::ldexp(double((uint64_t(1) << (frac + 1)) - 1), 127 - frac);
  float r;
  if (d > maxf) r = rz ? float(maxf) : std::numeric_limits<float>::infinity();
  else r = float(d);
  return neg ? -r : r;
}

/// One product (exact value) with its alignment exponent e_a + e_b (+ scale
/// exponents where a model folds them in).
struct Term {
  Ex v;
  int align;
};

/// The truncated fused dot-product group (docs/numerics.md §5.3) over exact
/// terms: hd::fused_group of core/include/mxsim/hd/gemm_block.hpp, the one
/// definition the reference, the fast paths' exact fallback, the matrix-unit
/// models and the GPU kernels share (terms' alignment exponents already at
/// least x.align_floor). The terms' significands are products of
/// element significands (below 2^48), so they fit the int64 of hd::ExactVal.
inline float fused_group(const std::vector<Term>& terms, float c, int F, bool e8m13,
                         hd::FusedEdges x = hd::mma_sim_edges()) {
  auto term_at = [&](int k) {
    const Term& t = terms[size_t(k)];
    hd::Term h;
    h.align = t.align;
    switch (t.v.sp) {
      case Ex::NaN: h.v.kind = hd::ExKind::NaN; break;
      case Ex::PInf: h.v.kind = hd::ExKind::PosInf; break;
      case Ex::NInf: h.v.kind = hd::ExKind::NegInf; break;
      case Ex::Fin:
        h.v.sig = t.v.sig.convert_to<int64_t>();
        h.v.exp = t.v.exp;
        break;
    }
    return h;
  };
  return hd::fused_group(int(terms.size()), term_at, c, F, e8m13, x);
}

}  // namespace mxsim::emu::gemm
