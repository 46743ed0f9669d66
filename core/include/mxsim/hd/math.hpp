// The project's own FP32 elementary functions: exp, log, erf and x^n.
//
// Each is correctly rounded (IEEE 754 roundTiesToEven) for every FP32 input,
// and is the same source on host and device (MXSIM_HD), written in plain
// IEEE FP32/FP64 arithmetic: no libm call, no fused multiply-add (the host
// builds with -ffp-contract=off, the device with -fmad=false; the algorithm
// needs no FMA), and constant tables that are hex-float literals
// (math_tables.hpp, generated from MPFR). A GPU result is therefore the same
// bits as the CPU one by construction, and both equal the exact value rounded
// once to FP32. The contract is docs/numerics.md §6.1; tests/test_hd_math.cpp
// checks sampled inputs of every exponent against an MPFR oracle and
// tests/hd_math_exhaustive.cpp every FP32 input.
//
// Method (the route of CORE-MATH's binary32 functions and of Muller,
// "Elementary Functions", ch. 11): each function evaluates f(x) as an
// unevaluated FP64 sum hi + lo (a "double-double", |lo| <= ulp(hi)/2) whose
// relative error is below 2^-59 (exp, log, erf: below 2^-60), then rounds
// that sum once to FP32 (round_dd_f32, exact for any double-double). The
// result is correctly rounded unless f(x) lies within that error of a
// midpoint between two FP32 values; the exhaustive run shows no FP32 input
// does. Error-free transformations: TwoSum (Knuth), Fast2Sum (Dekker),
// TwoProduct by Veltkamp splitting (Dekker 1971), all exact in IEEE FP64.
//
// NaN: a NaN input comes back quieted (quiet bit set, sign and payload kept),
// the same bits on every platform; a NaN made from a number (log of a
// negative value) is +qNaN 0x7FC00000.
#pragma once
#include <cfloat>
#include <cstdint>

#include "mxsim/bits.hpp"
#include "mxsim/hd.hpp"
#include "mxsim/hd/math_tables.hpp"

// The error-free transformations need every FP64 operation rounded once, as
// written: no reassociation, no excess precision. (Contraction into FMA is
// excluded by the build flags above; GCC has no pragma for it.)
#if defined(__FAST_MATH__)
#error "mxsim/hd/math.hpp needs IEEE arithmetic: do not build it with -ffast-math"
#endif
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0
#error "mxsim/hd/math.hpp needs FLT_EVAL_METHOD == 0 (no x87 excess precision)"
#endif

namespace mxsim {

namespace hd_math_detail {

/// An unevaluated sum hi + lo of two FP64 values.
struct DD {
  double hi, lo;
};

/// s + e = a + b exactly, s = RN(a + b) (Knuth's TwoSum, any a, b).
MXSIM_HD inline DD two_sum(double a, double b) {
  const double s = a + b;
  const double bb = s - a;
  const double e = (a - (s - bb)) + (b - bb);
  return {s, e};
}

/// s + e = a + b exactly, for |a| >= |b| or a == 0 (Dekker's Fast2Sum).
MXSIM_HD inline DD fast_two_sum(double a, double b) {
  const double s = a + b;
  return {s, b - (s - a)};
}

/// p + e = a * b exactly (Dekker's TwoProduct, Veltkamp split by 2^27 + 1):
/// valid while |a|, |b| < 2^995 and a * b does not underflow FP64, which
/// holds for every use here (|values| < 2^140, products > 2^-600).
MXSIM_HD inline DD two_prod(double a, double b) {
  constexpr double kSplit = 134217729.0;  // 2^27 + 1
  const double p = a * b;
  const double ca = kSplit * a, cb = kSplit * b;
  const double ah = ca - (ca - a), al = a - ah;
  const double bh = cb - (cb - b), bl = b - bh;
  const double e = (((ah * bh - p) + ah * bl) + al * bh) + al * bl;
  return {p, e};
}

MXSIM_HD inline double abs_d(double v) { return v < 0 ? -v : v; }

MXSIM_HD inline uint64_t f64_bits(double x) {
#if defined(MXSIM_DEVICE_CODE) && defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(x));
#else
  return __builtin_bit_cast(uint64_t, x);
#endif
}

/// Exact 2^e as FP64 for -1022 <= e <= 1023.
MXSIM_HD inline double pow2d(int e) {
  const uint64_t b = static_cast<uint64_t>(e + 1023) << 52;
#if defined(MXSIM_DEVICE_CODE) && defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(b));
#else
  return __builtin_bit_cast(double, b);
#endif
}

MXSIM_HD inline float quiet_nan(uint32_t bits) { return f32_from_bits(bits | 0x00400000u); }

/// RNE(hi + lo) to FP32 for a double-double with hi = RN(hi + lo): exact.
/// The FP64->FP32 conversion rounds hi correctly (RNE, subnormals, overflow to
/// Inf). hi + lo rounds like hi unless hi is itself a midpoint between two
/// FP32 neighbours (every such midpoint is an FP64 value), where lo breaks
/// the tie that the conversion broke to even.
MXSIM_HD inline float round_dd_f32(double hi, double lo) {
  const float f = static_cast<float>(hi);
  const double fd = f;
  if (lo == 0 || fd == hi) return f;
  const uint32_t fb = f32_bits(f);
  const bool up = abs_d(hi) > abs_d(fd);  // hi lies beyond f, away from zero
  const float n = f32_from_bits(up ? fb + 1u : fb - 1u);  // FP32 neighbour on hi's side
  double mid;
  if ((fb & 0x7FFFFFFFu) == 0x7F800000u)  // f = +-Inf, n = +-FLT_MAX
    mid = hi < 0 ? -0x1.ffffffp127 : 0x1.ffffffp127;
  else
    mid = 0.5 * (fd + static_cast<double>(n));  // exact: adjacent FP32 values
  if (hi != mid) return f;
  const bool lo_away = (lo > 0) == (hi > 0);  // hi + lo lies beyond mid, away from zero
  return lo_away == up ? n : f;
}

/// exp(y_hi + y_lo) as a double-double, relative error < 2^-62, for
/// -110 < y_hi < 95 and |y_lo| <= 2^-40.
///
/// y = k ln2/64 + r, k = nearest integer to y 64/ln2, |r| <= ln2/128 (+ 2^-40);
/// r = (y_hi - k L1) - k L2 + y_lo with ln2/64 = L1 + L2, L1 of 39 bits so
/// that k L1 and y_hi - k L1 are exact. exp(y) = 2^(k>>6) 2^((k&63)/64) exp(r):
/// the table holds 2^(j/64) as a double-double, exp(r) = 1 + r + r^2 P(r)
/// with the Taylor polynomial P of degree 5 (truncation < 2^-75), and the
/// product T (1 + r + r^2 P) is formed with T_hi r exact (TwoProduct).
MXSIM_HD inline DD exp_dd(double y_hi, double y_lo) {
  constexpr double kShifter = 0x1.8p52;  // adding it rounds to an integer (RNE)
  const double kd = (y_hi * kExpInvLn2x64 + kShifter) - kShifter;
  const int k = static_cast<int>(kd);
  const double r1 = y_hi - kd * kExpLn2x64Hi;
  DD r = two_sum(r1, -(kd * kExpLn2x64Lo));
  r.lo = r.lo + y_lo;
  const double x = r.hi;
  const double p5 = 1.0 / 5040;
  const double p = 0.5 + x * (1.0 / 6 + x * (1.0 / 24 + x * (1.0 / 120 + x * (1.0 / 720 + x * p5))));
  const double tail = (x * x) * p;
  const double* t = exp2_j64_table();
  const int j = k & 63;
  const double th = t[2 * j], tl = t[2 * j + 1];
  const DD tr = two_prod(th, x);
  const double small = ((tl + tr.lo) + th * (r.lo + tail)) + tl * x;
  const DD s = fast_two_sum(th, tr.hi);
  const DD out = fast_two_sum(s.hi, s.lo + small);
  const double scale = pow2d(k >> 6);  // arithmetic shift: floor(k / 64)
  return {out.hi * scale, out.lo * scale};
}

/// ln(x) as a double-double, relative error < 2^-66, for x > 0 finite given
/// as FP32 bits (subnormals included).
///
/// x = 2^e m, m in [1, 2) (subnormals normalised first). With i the top 7
/// fraction bits of m: for i = 127, m -> m/2, e -> e+1 and c = 1; else c = c_i
/// of the table (c_0 = 1, otherwise 1/(1 + (i+1/2)/128) to 20 bits). Then
/// z = m c - 1 is exact, |z| < 2^-7, and ln x = e ln2 - ln c + log1p(z) with
/// log1p(z) = z - z^2/2 + z^3 Q(z), Q the Taylor polynomial of degree 7
/// (truncation < 2^-73 |z|). Inputs near 1 get c = 1, so z = x - 1 exactly
/// and ln x keeps full relative accuracy. z^2 is exact (TwoProduct); the sum
/// is accumulated by TwoSum.
MXSIM_HD inline DD log_dd(uint32_t bits) {
  const uint32_t ef = bits >> 23, mf = bits & 0x7FFFFFu;
  uint32_t m;
  int e;
  if (ef == 0) {  // subnormal: normalise the significand
    const int sh = clz32(mf) - 8;
    m = mf << sh;
    e = -126 - sh;
  } else {
    m = mf | 0x800000u;
    e = static_cast<int>(ef) - 127;
  }
  const uint32_t i = (m >> 16) & 127u;
  double md = static_cast<double>(m) * 0x1p-23;  // exact, in [1, 2)
  if (i == 127) {  // m in [2 - 2^-7, 2): use m/2 in [1 - 2^-8, 1), row 127 has c = 1
    md = md * 0.5;
    e = e + 1;
  }
  const double* t = log_inv_table() + 3 * i;
  const double z = md * t[0] - 1.0;  // exact: m c has <= 44 bits, m c in [1 - 2^-7, 1 + 2^-7]
  const DD zz = two_prod(z, z);
  const double q =
      1.0 / 3 +
      z * (-1.0 / 4 + z * (1.0 / 5 + z * (-1.0 / 6 + z * (1.0 / 7 + z * (-1.0 / 8 + z * (1.0 / 9 + z * (-1.0 / 10)))))));
  const double z3q = (z * zz.hi) * q;
  const double ed = static_cast<double>(e);
  const DD s1 = two_sum(ed * kLogLn2Hi, t[1]);  // e ln2_hi exact
  const double lo1 = (ed * kLogLn2Lo + t[2]) + s1.lo;
  const DD s2 = two_sum(s1.hi, z);
  const DD s3 = two_sum(s2.hi, -0.5 * zz.hi);
  const double lo = (((lo1 + s2.lo) + s3.lo) + -0.5 * zz.lo) + z3q;
  return two_sum(s3.hi, lo);
}

/// erf(a) as a double-double, relative error < 2^-60, for 0 <= a < 3.96875
/// (a an FP32 value).
///
/// j = nearest integer to 16 a, t = a - j/16 (exact, |t| <= 1/32); erf is
/// evaluated by its Taylor polynomial of degree 12 about c_j = j/16 (table:
/// a0 = erf(c_j), a1 = erf'(c_j) as double-doubles, a2..a12 as doubles;
/// truncation < 2^-73 relative): a0 + a1 t + t^2 P(t), a1_hi t exact.
MXSIM_HD inline DD erf_dd(float a) {
  const double ad = a;
  const int j = static_cast<int>(ad * 16.0 + 0.5);
  const double t = ad - static_cast<double>(j) * 0.0625;
  const double* row = erf_taylor_table() + j * kErfRow;
  double p = row[kErfDegree + 2];
  for (int n = kErfDegree - 1; n >= 2; --n) p = p * t + row[n + 2];
  const DD a1t = two_prod(row[2], t);
  const double tail = row[3] * t + (t * t) * p;
  const DD s = two_sum(row[0], a1t.hi);
  const double lo = ((row[1] + s.lo) + a1t.lo) + tail;
  return two_sum(s.hi, lo);
}

/// Exact A * 2^s rounded to FP32, for 0 < A < 2^63 and -214 <= s <= 128.
MXSIM_HD inline float round_u63_f32(uint64_t a, int s) {
  const double hi = static_cast<double>(a);  // RNE to 53 bits; <= 2^63
  const double lo = static_cast<double>(static_cast<int64_t>(a - static_cast<uint64_t>(hi)));
  const double sc = pow2d(s);
  return round_dd_f32(hi * sc, lo * sc);  // exact scalings in FP64
}

}  // namespace hd_math_detail

/// e^x, correctly rounded (RNE) FP32 for every FP32 x.
/// exp(+-0) = 1, exp(+Inf) = +Inf, exp(-Inf) = +0; overflow (x >= 88.72284)
/// gives +Inf, results below 2^-126 are correctly rounded subnormals, below
/// 2^-150 (x < -103.97208) +0; NaN comes back quieted.
MXSIM_HD inline float exp_f32(float x) {
  const uint32_t b = f32_bits(x);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return hd_math_detail::quiet_nan(b);
  if (x > 89.0f) return f32_from_bits(0x7F800000u);  // e^89 > FLT_MAX: +Inf, also x = +Inf
  if (x < -104.0f) return 0.0f;                      // e^-104 < 2^-150: +0, also x = -Inf
  const hd_math_detail::DD r = hd_math_detail::exp_dd(static_cast<double>(x), 0.0);
  return hd_math_detail::round_dd_f32(r.hi, r.lo);
}

/// Natural logarithm, correctly rounded (RNE) FP32 for every FP32 x.
/// log(+-0) = -Inf, log(1) = +0, log(+Inf) = +Inf, log(x < 0) = +qNaN
/// (0x7FC00000, also for -Inf); NaN comes back quieted. Subnormal x are exact
/// inputs like any other.
MXSIM_HD inline float log_f32(float x) {
  const uint32_t b = f32_bits(x);
  const uint32_t mag = b & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return hd_math_detail::quiet_nan(b);
  if (mag == 0) return f32_from_bits(0xFF800000u);
  if (b >> 31) return f32_from_bits(0x7FC00000u);
  if (b == 0x7F800000u) return x;
  const hd_math_detail::DD r = hd_math_detail::log_dd(b);
  return hd_math_detail::round_dd_f32(r.hi, r.lo);
}

/// Error function, correctly rounded (RNE) FP32 for every FP32 x.
/// erf(-x) = -erf(x) exactly (so erf(-0) = -0); erf(+-Inf) = +-1, and
/// |x| >= 3.96875 gives +-1 (erf rounds to 1 from |x| = 3.9192059 on);
/// NaN comes back quieted.
MXSIM_HD inline float erf_f32(float x) {
  const uint32_t b = f32_bits(x);
  const uint32_t mag = b & 0x7FFFFFFFu, sign = b & 0x80000000u;
  if (mag > 0x7F800000u) return hd_math_detail::quiet_nan(b);
  const float a = f32_from_bits(mag);
  if (a >= 3.96875f) return f32_from_bits(sign | 0x3F800000u);
  const hd_math_detail::DD r = hd_math_detail::erf_dd(a);
  return f32_from_bits(sign | f32_bits(hd_math_detail::round_dd_f32(r.hi, r.lo)));
}

/// x^n for an integer n >= 0, correctly rounded (RNE) FP32 (the bias
/// correction 1 - beta^t of AdamW, t the step). Special values as C's pow:
/// x^0 = 1 for every x (NaN included); (+-0)^n = +-0 for odd n, +0 for even;
/// (+-Inf)^n likewise +-Inf / +Inf; NaN^n (n > 0) comes back quieted; a
/// negative x gives the sign of x for odd n.
///
/// x = M 2^E with M odd. When M^n < 2^63 the result M^n 2^(nE) is formed
/// exactly in integers and rounded once; this covers every x^n that is an
/// FP32 value or an FP32 midpoint (both have at most 25 significant bits).
/// Otherwise x^n = exp(n ln|x|), ln|x| from log_dd, n ln|x| a double-double,
/// exp_dd: relative error < 2^-59 for results above 2^-150 (|n ln|x|| <= 104
/// times log_dd's 2^-66, plus exp_dd's 2^-62). That is correctly rounded
/// unless x^n lies within the error of a midpoint; the domain (2^64 pairs)
/// is too large to rule that out exhaustively: tests/test_hd_math.cpp and
/// tests/hd_math_exhaustive.cpp check AdamW's betas over t = 1..2^20 and
/// sampled x, n of every exponent against the oracle.
MXSIM_HD inline float pow_int_f32(float x, uint32_t n) {
  using namespace hd_math_detail;
  if (n == 0) return 1.0f;
  const uint32_t b = f32_bits(x);
  const uint32_t mag = b & 0x7FFFFFFFu;
  if (mag > 0x7F800000u) return quiet_nan(b);
  const uint32_t sign = (n & 1u) ? (b & 0x80000000u) : 0u;
  if (mag == 0 || mag == 0x7F800000u) return f32_from_bits(sign | mag);
  // |x| = M 2^E, M odd.
  const uint32_t ef = mag >> 23;
  uint32_t m = ef ? ((mag & 0x7FFFFFu) | 0x800000u) : mag;
  int e = ef ? static_cast<int>(ef) - 150 : -149;
  while ((m & 1u) == 0) {
    m >>= 1;
    ++e;
  }
  // acc = M^done for the largest done <= n with M^done < 2^63 (M = 1: done = n).
  uint64_t acc = 1;
  uint32_t done = m == 1 ? n : 0;
  const uint64_t limit = m == 1 ? 0 : ((uint64_t(1) << 63) - 1) / m;  // acc <= limit <=> acc * M < 2^63
  while (done < n && acc <= limit) {
    acc *= m;
    ++done;
  }
  float r;
  if (done == n) {
    // Exact: acc 2^(nE), acc < 2^63 with bl significant bits.
    const int bl = 64 - clz64(acc);
    const int64_t s = static_cast<int64_t>(n) * e;
    if (s + bl - 1 >= 128)
      r = f32_from_bits(0x7F800000u);
    else if (s + bl < -150)
      r = 0.0f;  // below 2^-150 (and 2^-150 itself, a tie, rounds to +0 too)
    else
      r = round_u63_f32(acc, static_cast<int>(s));
  } else {
    const DD l = log_dd(mag);
    const double nd = static_cast<double>(n);
    DD y = two_prod(nd, l.hi);
    y = fast_two_sum(y.hi, y.lo + nd * l.lo);
    if (y.hi > 89.0)
      r = f32_from_bits(0x7F800000u);
    else if (y.hi < -104.0)
      r = 0.0f;
    else {
      const DD v = exp_dd(y.hi, y.lo);
      r = round_dd_f32(v.hi, v.lo);
    }
  }
  return f32_from_bits(sign | f32_bits(r));
}

}  // namespace mxsim
