// Exact oracle for the FP32 elementary functions of mxsim/hd/math.hpp:
// Boost.Multiprecision over MPFR at 266 bits (MPFR rounds each function
// correctly at that precision), and its own rounding to FP32 that shares
// nothing with the code under test: it brackets the value between two FP32
// neighbours (std::nextafter) and compares it with their exact midpoint.
#pragma once
#include <boost/multiprecision/mpfr.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace mxsim_test {

using Mp = boost::multiprecision::number<boost::multiprecision::mpfr_float_backend<80>,
                                         boost::multiprecision::et_off>;

inline uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
inline float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

inline Mp exact_exp(float x) { return exp(Mp(x)); }
inline Mp exact_log(float x) { return log(Mp(x)); }
inline Mp exact_erf(float x) { return erf(Mp(x)); }
inline Mp exact_pow(float x, uint32_t n) { return pow(Mp(x), Mp(n)); }

/// The FP32 rounding (RNE) of an exact finite or infinite value v, with the
/// distance of v to the nearest FP32 midpoint in units of the FP32 spacing
/// there (0.5 = v is an FP32 value; 0 = v is a midpoint, a tie).
struct Rounded {
  float f;
  double mid_dist;  // |v - nearest midpoint| / spacing, in [0, 0.5]
};

inline Rounded round_exact_f32(const Mp& v) {
  if (isnan(v)) return {std::numeric_limits<float>::quiet_NaN(), 0.5};
  const bool neg = v < 0;
  const Mp a = neg ? Mp(-v) : v;
  const float inf = std::numeric_limits<float>::infinity();
  float r;
  double dist;
  // FLT_MAX + half its spacing: from here on RNE gives Inf (FLT_MAX is odd).
  const Mp overflow = ldexp(Mp(0x1ffffff), 103);
  if (isinf(a) || a >= overflow) {
    r = inf;
    dist = isinf(a) ? 0.5 : 0.0;
    if (!isinf(a)) {
      const Mp d = (a - overflow) / ldexp(Mp(1), 104);
      dist = d < 0.5 ? d.convert_to<double>() : 0.5;
    }
  } else if (a >= Mp(std::numeric_limits<float>::max())) {
    r = std::numeric_limits<float>::max();  // below the overflow midpoint
    dist = ((overflow - a) / ldexp(Mp(1), 104)).convert_to<double>();
  } else {
    float lo = static_cast<float>(a.convert_to<double>());
    while (lo > 0 && Mp(lo) > a) lo = std::nextafter(lo, 0.0f);
    while (Mp(std::nextafter(lo, inf)) <= a) lo = std::nextafter(lo, inf);
    const float hi = std::nextafter(lo, inf);  // lo <= a < hi
    const Mp mid = (Mp(lo) + Mp(hi)) / 2;      // exact
    const Mp spacing = Mp(hi) - Mp(lo);
    if (a < mid)
      r = lo;
    else if (a > mid)
      r = hi;
    else
      r = (bits_of(lo) & 1u) ? hi : lo;  // tie: even significand
    const Mp d = abs(a - mid) / spacing;
    dist = d.convert_to<double>();
  }
  return {neg ? -r : r, dist};
}

/// |f - v| in units of the FP32 spacing at v (ulp(v) = 2^(max(e, -126) - 23),
/// e = floor(log2 |v|)); Inf if f is not finite while v is, 0 if both equal.
inline double ulp_error(float f, const Mp& v) {
  if (isinf(v) || isnan(v)) return (Mp(f) == v) ? 0.0 : std::numeric_limits<double>::infinity();
  if (!std::isfinite(f)) return std::numeric_limits<double>::infinity();
  if (v == 0) return f == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  int e = ilogb(v);
  if (e < -126) e = -126;
  const Mp err = abs(Mp(f) - v) / ldexp(Mp(1), e - 23);
  return err.convert_to<double>();
}

}  // namespace mxsim_test
