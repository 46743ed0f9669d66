// Every FP32 input of exp_f32, log_f32 and erf_f32 (all 2^32 bit patterns),
// and pow_int_f32 over the AdamW betas x t = 1..2^20, checked for correct
// rounding. Run by hand (minutes to hours); docs/numerics.md §6.1 records the
// result.
//
//   hd_math_exhaustive exp|log|erf|adamw [threads] [first_bits last_bits]
//
// Per input the correctly rounded FP32 result is taken from the x87 long
// double libm value L (64-bit significand, glibc error a few units in 2^-64)
// when L lies farther than 2^-40 |L| from every FP32 midpoint, which no libm
// error comes near; otherwise, and whenever our result differs, from the
// exact MPFR oracle (hd_math_oracle.hpp). The run also counts how often the
// host's FP32 libm (expf, logf, erff, powf) is not correctly rounded, and
// lists the inputs closest to a midpoint (hard cases for test_hd_math.cpp).
#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hd_math_oracle.hpp"
#include "mxsim/hd/math.hpp"

namespace {

using mxsim_test::bits_of;
using mxsim_test::float_of;
using mxsim_test::Mp;

struct Input {
  float x;
  uint32_t n;  // exponent for pow
};

enum class Fn { Exp, Log, Erf, Pow };

float ours(Fn f, Input in) {
  switch (f) {
    case Fn::Exp: return mxsim::exp_f32(in.x);
    case Fn::Log: return mxsim::log_f32(in.x);
    case Fn::Erf: return mxsim::erf_f32(in.x);
    default: return mxsim::pow_int_f32(in.x, in.n);
  }
}
float libm_f32(Fn f, Input in) {
  switch (f) {
    case Fn::Exp: return expf(in.x);
    case Fn::Log: return logf(in.x);
    case Fn::Erf: return erff(in.x);
    default: return powf(in.x, float(in.n));
  }
}
long double libm_ld(Fn f, Input in) {
  const long double x = in.x;
  switch (f) {
    case Fn::Exp: return expl(x);
    case Fn::Log: return logl(x);
    case Fn::Erf: return erfl(x);
    default: return powl(x, static_cast<long double>(in.n));
  }
}
Mp exact(Fn f, Input in) {
  switch (f) {
    case Fn::Exp: return mxsim_test::exact_exp(in.x);
    case Fn::Log: return mxsim_test::exact_log(in.x);
    case Fn::Erf: return mxsim_test::exact_erf(in.x);
    default: return mxsim_test::exact_pow(in.x, in.n);
  }
}

struct Hard {
  double dist;  // |v - nearest midpoint| / FP32 spacing
  Input in;
};

struct Stats {
  uint64_t checked = 0, escalated = 0, wrong = 0, libm_wrong = 0, nan_checked = 0;
  double max_ulp = 0, libm_max_ulp = 0;
  Input max_ulp_in{}, libm_max_in{};
  std::vector<Input> wrong_inputs;  // first few
  std::vector<Hard> hardest;        // kept sorted, kHardest entries
};
constexpr size_t kHardest = 16;

void keep_hard(std::vector<Hard>& v, Hard h) {
  if (v.size() == kHardest && h.dist >= v.back().dist) return;
  v.push_back(h);
  std::sort(v.begin(), v.end(), [](const Hard& a, const Hard& b) { return a.dist < b.dist; });
  if (v.size() > kHardest) v.pop_back();
}

// |got - L| / spacing(L) in long double (L finite, non-zero).
double ulp_err_ld(float got, long double l) {
  if (!std::isfinite(got)) return INFINITY;
  int e = std::ilogb(l);
  if (e < -126) e = -126;
  return static_cast<double>(std::fabs(static_cast<long double>(got) - l) / std::ldexp(1.0L, e - 23));
}

void check(Fn f, Input in, Stats& s) {
  const float got = ours(f, in);
  const float lib = libm_f32(f, in);
  const uint32_t xb = bits_of(in.x);
  ++s.checked;
  if ((xb & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN input: quieted, same bits
    ++s.nan_checked;
    const uint32_t want = (f == Fn::Pow && in.n == 0) ? 0x3F800000u : (xb | 0x00400000u);
    if (bits_of(got) != want) {
      ++s.wrong;
      if (s.wrong_inputs.size() < 8) s.wrong_inputs.push_back(in);
    }
    return;
  }
  const long double l = libm_ld(f, in);
  float want;
  double dist = 0.5;
  bool escalate = false;
  if (std::isnan(l)) {
    want = float_of(0x7FC00000u);  // log of a negative number: our +qNaN
  } else if (std::isinf(l) || l == 0) {
    want = static_cast<float>(l);
  } else {
    want = static_cast<float>(l);  // RNE
    const long double wd = want;
    if (wd != l) {
      // FP32 neighbour of `want` on l's side and the midpoint between them.
      const bool up = std::fabs(l) > std::fabs(wd);
      const uint32_t wb = bits_of(want);
      long double mid;
      if ((wb & 0x7FFFFFFFu) == 0x7F800000u || (up && (wb & 0x7FFFFFFFu) == 0x7F7FFFFFu))
        mid = std::copysign(std::ldexp(static_cast<long double>(0x1FFFFFF), 103), l);
      else
        mid = (wd + static_cast<long double>(float_of(up ? wb + 1 : wb - 1))) / 2;
      const long double margin = std::fabs(l - mid);
      escalate = margin <= std::ldexp(std::fabs(l), -40);
      int e = std::ilogb(l);
      if (e < -126) e = -126;
      dist = static_cast<double>(margin / std::ldexp(1.0L, e - 23));
      if (dist > 0.5) dist = 0.5;
    }
  }
  if (escalate || bits_of(got) != bits_of(want)) {
    ++s.escalated;
    const mxsim_test::Rounded r = mxsim_test::round_exact_f32(exact(f, in));
    if (!std::isnan(l)) {
      want = r.f;
      dist = r.mid_dist;
    }
  }
  keep_hard(s.hardest, {dist, in});
  if (bits_of(got) != bits_of(want)) {
    ++s.wrong;
    if (s.wrong_inputs.size() < 8) s.wrong_inputs.push_back(in);
  }
  if (bits_of(lib) != bits_of(want) && !(std::isnan(lib) && std::isnan(want))) ++s.libm_wrong;
  if (std::isfinite(want) && std::isfinite(l) && l != 0) {  // ULP error where the right result is finite
    const double u = ulp_err_ld(got, l), ul = ulp_err_ld(lib, l);
    if (u > s.max_ulp) s.max_ulp = u, s.max_ulp_in = in;
    if (ul > s.libm_max_ulp) s.libm_max_ulp = ul, s.libm_max_in = in;
  }
}

void merge(Stats& into, const Stats& s) {
  into.checked += s.checked;
  into.escalated += s.escalated;
  into.wrong += s.wrong;
  into.libm_wrong += s.libm_wrong;
  into.nan_checked += s.nan_checked;
  if (s.max_ulp > into.max_ulp) into.max_ulp = s.max_ulp, into.max_ulp_in = s.max_ulp_in;
  if (s.libm_max_ulp > into.libm_max_ulp) into.libm_max_ulp = s.libm_max_ulp, into.libm_max_in = s.libm_max_in;
  for (Input in : s.wrong_inputs)
    if (into.wrong_inputs.size() < 8) into.wrong_inputs.push_back(in);
  for (const Hard& h : s.hardest) keep_hard(into.hardest, h);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s exp|log|erf|adamw [threads] [first_bits last_bits]\n", argv[0]);
    return 2;
  }
  const std::string name = argv[1];
  Fn f;
  if (name == "exp")
    f = Fn::Exp;
  else if (name == "log")
    f = Fn::Log;
  else if (name == "erf")
    f = Fn::Erf;
  else if (name == "adamw")
    f = Fn::Pow;
  else {
    std::fprintf(stderr, "hd_math_exhaustive: unknown function '%s' (exp, log, erf, adamw)\n", name.c_str());
    return 2;
  }
  const int threads = argc > 2 ? std::max(1, std::atoi(argv[2])) : 1;
  uint64_t first = 0, last = 0xFFFFFFFFull;
  if (argc > 4) {
    first = std::strtoull(argv[3], nullptr, 0);
    last = std::strtoull(argv[4], nullptr, 0);
  }
  // Work items: bit patterns first..last, or (beta, t) pairs for adamw.
  static const float kBetas[] = {0.9f, 0.95f, 0.98f, 0.99f, 0.995f, 0.999f, 0.9999f};
  constexpr uint64_t kT = uint64_t(1) << 20;
  const uint64_t count = f == Fn::Pow ? std::size(kBetas) * kT : last - first + 1;
  auto item = [&](uint64_t i) -> Input {
    if (f == Fn::Pow) return {kBetas[i / kT], uint32_t(i % kT) + 1};
    return {float_of(uint32_t(first + i)), 0};
  };

  std::atomic<uint64_t> next{0};
  constexpr uint64_t kChunk = 1 << 16;
  Stats total;
  std::mutex mu;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      Stats s;
      for (;;) {
        const uint64_t b = next.fetch_add(kChunk);
        if (b >= count) break;
        const uint64_t e = std::min(count, b + kChunk);
        for (uint64_t i = b; i < e; ++i) check(f, item(i), s);
      }
      std::lock_guard<std::mutex> lock(mu);
      merge(total, s);
    });
  for (auto& th : pool) th.join();

  // The hardest inputs: their distance from the exact oracle.
  for (Hard& h : total.hardest) h.dist = mxsim_test::round_exact_f32(exact(f, h.in)).mid_dist;
  std::sort(total.hardest.begin(), total.hardest.end(), [](const Hard& a, const Hard& b) { return a.dist < b.dist; });

  std::printf("%s: %" PRIu64 " inputs (%" PRIu64 " NaN), %" PRIu64 " escalated to the oracle\n", name.c_str(),
              total.checked, total.nan_checked, total.escalated);
  std::printf("  mxsim: %" PRIu64 " not correctly rounded, max error %.9f ULP at x = %a n = %u\n", total.wrong,
              total.max_ulp, total.max_ulp_in.x, total.max_ulp_in.n);
  std::printf("  libm FP32: %" PRIu64 " not correctly rounded, max error %.9f ULP at x = %a n = %u\n",
              total.libm_wrong, total.libm_max_ulp, total.libm_max_in.x, total.libm_max_in.n);
  for (Input in : total.wrong_inputs) std::printf("  WRONG: x = %a [0x%08x] n = %u\n", in.x, bits_of(in.x), in.n);
  std::printf("  closest to an FP32 midpoint (distance in FP32 spacings):\n");
  for (const Hard& h : total.hardest)
    std::printf("    x = %a [0x%08x] n = %u  2^%.2f\n", h.in.x, bits_of(h.in.x), h.in.n, std::log2(h.dist));
  return total.wrong == 0 ? 0 : 1;
}
