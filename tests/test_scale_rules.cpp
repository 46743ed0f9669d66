// E8M0 scale rules against an independent computation: exact log2 on
// Boost.Multiprecision integers (test_formats_oracle.hpp units), never the
// bit tricks of scale_rule.hpp. Every FP32 exponent (subnormal amax
// included), mantissas at and around each rule's thresholds, a seeded random
// sample, zero, NaN, Inf, and clamping at both ends, for every element format.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "mxsim/quant_spec.hpp"
#include "mxsim/scale_rule.hpp"
#include "test_formats_oracle.hpp"

using namespace mxsim;
using oracle::Big;

namespace {

/// floor(log2 v) for v > 0 in oracle units.
int floor_log2(const Big& v) { return int(boost::multiprecision::msb(v)) - oracle::K; }
bool is_pow2(const Big& v) { return (v & (v - 1)) == 0; }
int ceil_log2(const Big& v) { return floor_log2(v) + (is_pow2(v) ? 0 : 1); }
/// ceil(log2(a / b)) exactly: the least k with a <= b * 2^k.
int ceil_log2_ratio(const Big& a, const Big& b) {
  int k = floor_log2(a) - floor_log2(b) - 2;
  auto le = [&](int kk) { return kk >= 0 ? a <= (b << kk) : (a << -kk) <= b; };
  while (!le(k)) ++k;
  while (le(k - 1)) --k;
  return k;
}

struct Elem {
  Format fmt;
  oracle::Fmt of;
};

std::vector<Elem> elems() {
  std::vector<Elem> v;
  for (const auto& f : oracle::all_formats()) {
    if (f.kind == oracle::Kind::E8M0) continue;
    Format F{};
    format_from_name(f.name, F);
    v.push_back({F, f});
  }
  return v;
}

/// The expected byte under `rule` for a finite amax > 0 (FP32 bits).
int expected_byte(ScaleRule rule, uint32_t amax_bits, const oracle::Table& t) {
  const Big a = oracle::exact_abs(amax_bits, 0);
  const Big& maxe = t.vals.back();
  const int emax = floor_log2(maxe);
  int s = 0;
  switch (rule) {
    case ScaleRule::Floor: s = floor_log2(a) - emax; break;
    case ScaleRule::Ceil: s = ceil_log2(a) - emax; break;
    case ScaleRule::Rceil: {
      // d = fl32(amax * fl32(1/maxe)): IEEE FP32 arithmetic is the definition.
      float maxe_f = 0;
      {
        const int e = floor_log2(maxe);
        maxe_f = std::ldexp(float(maxe >> (oracle::K + e - 23)) , e - 23);
      }
      const float d = std::fabs(std::bit_cast<float>(amax_bits)) * (1.0f / maxe_f);
      if (d == 0.0f) { s = -1000; break; }
      s = ceil_log2(oracle::exact_abs(std::bit_cast<uint32_t>(d), 0));
      break;
    }
    case ScaleRule::Even: {
      // Add half an ulp at (m_elem + 1) significant bits, read floor(log2).
      // For FP32-subnormal amax the unit is that of the smallest normal binade.
      const int e = floor_log2(a);
      const Big bump = oracle::pow2(std::max(e, -126) - t.f.mbits - 1);
      s = std::max(-127, floor_log2(a + bump)) - emax;
      break;
    }
  }
  return std::clamp(s, -127, 127) + 127;
}

std::vector<uint32_t> amax_inputs() {
  std::vector<uint32_t> v;
  for (uint32_t e = 0; e < 255; ++e) {
    for (uint32_t m : {0u, 1u, 0x7FFFFFu, 0x400000u, 0x3FFFFFu, 0x555555u, 0x600000u, 0x5FFFFFu, 0x700000u,
                       0x6FFFFFu, 0x780000u, 0x77FFFFu, 0x7C0000u, 0x7BFFFFu, 0x7E0000u, 0x7DFFFFu, 0x200000u,
                       0x100000u, 0x0FFFFFu})
      if (e || m) v.push_back((e << 23) | m);
  }
  for (int i = 0; i < 23; ++i) v.push_back(1u << i);  // every subnormal binade
  std::mt19937 rng(7);
  for (int i = 0; i < 40000; ++i) {
    const uint32_t x = rng() & 0x7FFFFFFFu;
    if (x && x < 0x7F800000u) v.push_back(x);
  }
  return v;
}

}  // namespace

TEST(ScaleRules, EveryRuleEveryFormatEveryExponent) {
  const auto ins = amax_inputs();
  uint64_t n = 0;
  for (const auto& el : elems()) {
    const oracle::Table t(el.of);
    const FormatSpec fs = spec_of(el.fmt);
    for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Rceil, ScaleRule::Even, ScaleRule::Ceil}) {
      int fails = 0;
      for (uint32_t a : ins) {
        const int want = expected_byte(rule, a, t);
        // sign of amax is ignored (the block amax is a magnitude)
        for (uint32_t sa : {a, a | 0x80000000u}) {
          ++n;
          const int got = e8m0_scale(rule, sa, fs);
          if (got != want && ++fails <= 5)
            ADD_FAILURE() << el.of.name << " rule " << name_of(rule) << " amax 0x" << std::hex << sa << std::dec
                          << ": got " << got << " want " << want;
        }
      }
    }
  }
  std::printf("scale rules: %llu bytes compared\n", (unsigned long long)n);
}

TEST(ScaleRules, SpecialAmax) {
  for (const auto& el : elems()) {
    const FormatSpec fs = spec_of(el.fmt);
    for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Rceil, ScaleRule::Even, ScaleRule::Ceil}) {
      EXPECT_EQ(e8m0_scale(rule, 0u, fs), 0x00) << "all-zero block: smallest scale";
      EXPECT_EQ(e8m0_scale(rule, 0x80000000u, fs), 0x00) << "-0 amax";
      EXPECT_EQ(e8m0_scale(rule, 0x7F800000u, fs), 0xFF) << "Inf amax: NaN scale";
      EXPECT_EQ(e8m0_scale(rule, 0xFF800000u, fs), 0xFF);
      EXPECT_EQ(e8m0_scale(rule, 0x7FC00000u, fs), 0xFF) << "NaN amax: NaN scale";
      EXPECT_EQ(e8m0_scale(rule, 0x7F800001u, fs), 0xFF);
      // Clamping: FLT_MAX with a small-emax element format wants s > 127.
      EXPECT_LE(e8m0_scale(rule, 0x7F7FFFFFu, fs), 0xFE);
      // amax 2^-149 (the smallest subnormal): every rule wants s <= -149 + 1 - emax < -127,
      // so the bottom clamp gives byte 0x00 (numerics §3.2).
      EXPECT_EQ(e8m0_scale(rule, 0x00000001u, fs), 0x00) << "2^-149 amax: bottom clamp";
    }
  }
  const FormatSpec e2m1 = spec_of(Format::E2M1);
  // FLT_MAX = 1.99..*2^127: FLOOR wants 125, EVEN 126, RCEIL ceil(log2(FLT_MAX/6)) = 126.
  EXPECT_EQ(e8m0_scale(ScaleRule::Floor, 0x7F7FFFFFu, e2m1), 127 + 125);
  EXPECT_EQ(e8m0_scale(ScaleRule::Even, 0x7F7FFFFFu, e2m1), 127 + 126);
  EXPECT_EQ(e8m0_scale(ScaleRule::Rceil, 0x7F7FFFFFu, e2m1), 127 + 126);
  // The top clamp is reached by formats with negative emax... none here; BF16
  // (emax 127): FLT_MAX gives s = 0; the bottom clamp: 2^-149 gives -276 -> -127.
  EXPECT_EQ(e8m0_scale(ScaleRule::Floor, 0x00000001u, e2m1), 0x00);
  EXPECT_EQ(e8m0_scale(ScaleRule::Floor, 0x00000001u, spec_of(Format::BF16)), 0x00);
  EXPECT_EQ(e8m0_scale(ScaleRule::Floor, 0x7F7FFFFFu, spec_of(Format::BF16)), 127);
}

TEST(ScaleRules, RceilMultiplyEqualsExactDivisionForMxFormats) {
  // formats-and-scaling.md §4 claim: for maxe in {448, 57344, 6, 7.5, 28} the
  // multiply by the rounded reciprocal gives ceil(log2(amax / maxe)) exactly
  // for every amax whose quotient is an FP32 normal.
  const auto ins = amax_inputs();
  for (const auto& el : elems()) {
    if (el.fmt != Format::E4M3 && el.fmt != Format::E5M2 && el.fmt != Format::E2M1 && el.fmt != Format::E2M3 &&
        el.fmt != Format::E3M2)
      continue;
    const oracle::Table t(el.of);
    const FormatSpec fs = spec_of(el.fmt);
    for (uint32_t a : ins) {
      const Big A = oracle::exact_abs(a, 0);
      const int k = ceil_log2_ratio(A, t.vals.back());
      if (k < -125 || k > 127) continue;
      EXPECT_EQ(e8m0_scale(ScaleRule::Rceil, a, fs), k + 127) << el.of.name << " amax 0x" << std::hex << a;
    }
  }
}
