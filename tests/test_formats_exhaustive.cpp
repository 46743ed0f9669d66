// Bit-exact proof of the element codecs against the independent oracle in
// test_formats_oracle.hpp: every BF16 and every FP16 bit pattern, a large
// seeded sample of FP32 bit patterns, and constructed ties and their FP32
// neighbours, through every element format, every rounding mode (RNE, RZ,
// stochastic with fixed words and at the exact threshold), both overflow
// policies, and with scale offsets (encode(x, s) = x * 2^-s as the MX block
// path uses).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <iterator>
#include <utility>
#include <cstdio>
#include <random>

#include "mxsim/rounding.hpp"
#include "test_formats_oracle.hpp"

using namespace mxsim;

namespace {

Format to_format(const std::string& n) {
  Format f{};
  if (!format_from_name(n, f)) throw std::runtime_error("unknown format " + n);
  return f;
}

constexpr uint32_t kFixedWords[] = {0u, 1u, 0x55555555u, 0x80000000u, 0xC0000000u, 0xFFFFFFFFu};

struct Checker {
  std::vector<oracle::Table> tables;
  std::vector<FormatSpec> specs;
  uint64_t compared = 0;
  int failures = 0;

  Checker() {
    for (const auto& f : oracle::all_formats()) {
      tables.emplace_back(f);
      specs.push_back(spec_of(to_format(f.name)));
    }
  }
  // One checker for all tests (its tables are costly); each test starts with its own count of
  // mismatches, so a failing test never silences the ones after it.
  static Checker& get() {
    static Checker c;
    c.failures = 0;
    return c;
  }

  void cmp(uint32_t got, uint32_t want, const oracle::Table& t, uint32_t x, int s, const char* mode, int ov,
           uint32_t r) {
    ++compared;
    if (got == want) return;
    if (++failures == 21) ADD_FAILURE() << "further mismatches in this test not shown";
    if (failures <= 20)
      ADD_FAILURE() << t.f.name << " x=0x" << std::hex << x << std::dec << " s=" << s << " mode=" << mode
                    << " ov=" << (ov ? "ieee" : "sat") << " r=0x" << std::hex << r << ": got 0x" << got
                    << " want 0x" << want;
  }

  void check(uint32_t x, int s) {
    for (size_t i = 0; i < tables.size(); ++i) {
      const auto& t = tables[i];
      const FormatSpec& f = specs[i];
      const oracle::Decision d = oracle::decide(t, x, s);
      for (int ov = 0; ov < 2; ++ov) {
        const Overflow pol = ov ? Overflow::Ieee : Overflow::Saturate;
        const oracle::Ov opol = ov ? oracle::Ov::Ieee : oracle::Ov::Sat;
        cmp(encode(f, x, s, RoundMode::RNE, pol), oracle::expect(t, d, oracle::Mode::RNE, opol, 0), t, x, s, "rne",
            ov, 0);
        cmp(encode(f, x, s, RoundMode::RZ, pol), oracle::expect(t, d, oracle::Mode::RZ, opol, 0), t, x, s, "rz", ov,
            0);
        for (uint32_t r : kFixedWords)
          cmp(encode(f, x, s, RoundMode::Stochastic, pol, r), oracle::expect(t, d, oracle::Mode::SR, opol, r), t, x,
              s, "sr", ov, r);
        if (!d.fixed && !d.exact && d.f32 > 0) {  // the threshold itself: r = f32 - 1 rounds up, r = f32 does not
          const uint32_t r1 = uint32_t(d.f32 - 1), r2 = uint32_t(d.f32);
          cmp(encode(f, x, s, RoundMode::Stochastic, pol, r1), oracle::expect(t, d, oracle::Mode::SR, opol, r1), t,
              x, s, "sr", ov, r1);
          if (d.f32 <= 0xFFFFFFFFu)
            cmp(encode(f, x, s, RoundMode::Stochastic, pol, r2), oracle::expect(t, d, oracle::Mode::SR, opol, r2), t,
                x, s, "sr", ov, r2);
        }
      }
    }
  }
};

// Scale offsets applied to the 16-bit sweeps: 0, small, and both clamps of E8M0.
constexpr int kOffsets16[] = {0, 3, -2, 17, -40, 127, -127};

uint32_t fp16_to_fp32_bits(uint16_t h) {
#ifdef __FLT16_MAX__
  // The compiler's _Float16 conversion (exact widening), independent of mxsim.
  _Float16 v;
  __builtin_memcpy(&v, &h, 2);
  const float f = float(v);
#else
  // No _Float16 (Clang 14 on x86): the IEEE 754 binary16 value written out, also exact.
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  float f = e == 0 ? std::ldexp(float(m), -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(float(1024 + m), e - 25);
  if (h & 0x8000) f = -f;
#endif
  uint32_t b;
  __builtin_memcpy(&b, &f, 4);
  if (std::isnan(f)) b = (b & 0x80000000u) | 0x7FC00000u | (uint32_t(h & 0x1FF) << 13);  // keep NaN-ness
  return b;
}

}  // namespace

TEST(FormatsExhaustive, DecodeEveryCode) {
  auto& c = Checker::get();
  for (size_t i = 0; i < c.tables.size(); ++i) {
    const auto& f = c.tables[i].f;
    for (uint32_t code = 0; code < (1u << f.bits); ++code) {
      const float v = decode(c.specs[i], code);
      if (f.is_nan(code)) {
        EXPECT_TRUE(std::isnan(v)) << f.name << " code " << code;
        continue;
      }
      if (f.is_inf(code)) {
        EXPECT_TRUE(std::isinf(v) && std::signbit(v) == bool(code & f.sign_bit())) << f.name << " code " << code;
        continue;
      }
      ASSERT_TRUE(std::isfinite(v)) << f.name << " code " << code;
      uint32_t b;
      __builtin_memcpy(&b, &v, 4);
      EXPECT_EQ(std::signbit(v), bool(code & f.sign_bit())) << f.name << " code " << code;
      EXPECT_TRUE(oracle::exact_abs(b & 0x7FFFFFFFu, 0) == f.value(code)) << f.name << " code " << code;
    }
  }
}

TEST(FormatsExhaustive, EveryBf16Pattern) {
  auto& c = Checker::get();
  const uint64_t before = c.compared;
  for (uint32_t h = 0; h < 65536; ++h)
    for (int s : kOffsets16) c.check(h << 16, s);
  std::printf("BF16 sweep: %llu encode results compared\n", (unsigned long long)(c.compared - before));
}

TEST(FormatsExhaustive, EveryFp16Pattern) {
  auto& c = Checker::get();
  const uint64_t before = c.compared;
  for (uint32_t h = 0; h < 65536; ++h)
    for (int s : kOffsets16) c.check(fp16_to_fp32_bits(uint16_t(h)), s);
  std::printf("FP16 sweep: %llu encode results compared\n", (unsigned long long)(c.compared - before));
}

TEST(FormatsExhaustive, Fp32SeededSample) {
  auto& c = Checker::get();
  const uint64_t before = c.compared;
  std::mt19937_64 rng(20261130);
  // Uniform bit patterns (all exponents, both signs), and patterns with
  // the exponent drawn uniformly and few low mantissa bits (ties are common).
  for (int i = 0; i < 150000; ++i) {
    const uint32_t x = uint32_t(rng());
    const int s = (i % 4 == 0) ? 0 : int(rng() % 255) - 127;
    c.check(x, s);
  }
  for (int i = 0; i < 100000; ++i) {
    const uint32_t e = uint32_t(rng() % 256), m = uint32_t(rng()) & (0x7FFFFFu << (rng() % 24)) & 0x7FFFFFu;
    const uint32_t x = (uint32_t(rng() & 1) << 31) | (e << 23) | m;
    const int s = (i % 3 == 0) ? 0 : int(rng() % 41) - 20;
    c.check(x, s);
  }
  std::printf("FP32 sample: %llu encode results compared\n", (unsigned long long)(c.compared - before));
}

TEST(FormatsExhaustive, Fp32EveryTieAndItsNeighbours) {
  // For every pair of adjacent finite values of each format (and max with the
  // first value past it), the midpoint and the FP32 values one ulp either
  // side, at several scale offsets, both signs.
  auto& c = Checker::get();
  const uint64_t before = c.compared;
  auto to_double = [](const oracle::Fmt& f, uint32_t code) {
    if (f.kind == oracle::Kind::E8M0) return std::ldexp(1.0, int(code) - 127);
    const int e = int(code >> f.mbits);
    const double m = double(code & ((1u << f.mbits) - 1));
    return e == 0 ? std::ldexp(m, 1 - f.bias - f.mbits) : std::ldexp(double(1u << f.mbits) + m, e - f.bias - f.mbits);
  };
  for (const auto& t : c.tables) {
    std::vector<double> v;
    for (uint32_t code : t.codes) v.push_back(to_double(t.f, code));
    {  // the first value past max: max + ulp of the top binade
      int top;
      std::frexp(v.back(), &top);
      v.push_back(v.back() + std::ldexp(1.0, top - 1 - t.f.mbits));
    }
    const size_t step = v.size() > 4096 ? 37 : 1;  // 16-bit formats: every 37th tie (the sweeps cover the rest)
    for (size_t i = 0; i + 1 < v.size(); i += step) {
      const double mid = 0.5 * (v[i] + v[i + 1]);
      for (int s : {0, 1, -3, 9, -60, 100}) {
        const double xs = std::ldexp(mid, s);
        const float xf = float(xs);
        if (double(xf) != xs || !std::isfinite(xf)) continue;
        for (float y : {xf, std::nextafter(xf, 0.0f), std::nextafter(xf, INFINITY)}) {
          uint32_t b;
          __builtin_memcpy(&b, &y, 4);
          c.check(b, s);
          c.check(b | 0x80000000u, s);
        }
      }
    }
  }
  std::printf("FP32 ties: %llu encode results compared\n", (unsigned long long)(c.compared - before));
}

// FormatSpec::max_value(): the largest finite value, against the published
// maxima (OCP OFP8 v1.0 Table 1: E4M3 448, E5M2 57344; OCP MX v1.0 Table 1:
// E2M1 6, E2M3 7.5, E3M2 28, E8M0 2^127; IEEE binary16 65504, binary32 FLT_MAX;
// AMD FNUZ: E4M3FNUZ 240, E5M2FNUZ 57344) and the decoder's value of max_code().
TEST(FormatsExhaustive, MaxValueOfEveryFormat) {
  const std::pair<Format, float> want[] = {
      {Format::FP32, FLT_MAX},      {Format::BF16, 0x1.FEp127f}, {Format::FP16, 65504.0f},
      {Format::E4M3, 448.0f},       {Format::E5M2, 57344.0f},    {Format::E4M3FNUZ, 240.0f},
      {Format::E5M2FNUZ, 57344.0f}, {Format::E3M2, 28.0f},       {Format::E2M3, 7.5f},
      {Format::E2M1, 6.0f},         {Format::E8M0, 0x1p127f}};
  static_assert(std::size(want) == kNumFormats);
  for (const auto& [f, v] : want) {
    const FormatSpec s = spec_of(f);
    EXPECT_EQ(s.max_value(), v) << s.name;
    EXPECT_EQ(f32_bits(s.max_value()), f32_bits(decode(s, s.max_code()))) << s.name;
  }
}

// decode() of every code of every format of at most 8 bits (and of BF16 and
// FP16) against the oracle's FP32 bits: the exact value, +-Inf, and for every
// NaN code (FNUZ's 0x80, E4M3's 0x7F / 0xFF, E5M2's, E8M0's 0xFF) the one
// canonical NaN 0x7FC00000 (docs/numerics.md §1 rule 6, §2.4). The emulator's
// dequantizer, `mxsim cast --from`, `mxsim dequantize`, Python's decode and the
// GPU kernels all decode through this function; test_cli_cast,
// test_cli_dequantize and tests/python/test_codecs.py check those paths
// against the same table.
TEST(FormatsExhaustive, DecodeEveryCodeBitsAgainstTheOracle) {
  auto& c = Checker::get();
  int bad = 0;
  for (size_t i = 0; i < c.tables.size(); ++i) {
    const auto& f = c.tables[i].f;
    for (uint32_t code = 0; code < (1u << f.bits); ++code) {
      const uint32_t got = f32_bits(decode(c.specs[i], code)), want = oracle::decoded_f32_bits(f, code);
      if (got != want && ++bad <= 20) {
        ADD_FAILURE() << f.name << " code 0x" << std::hex << code << ": decode gives 0x" << got << ", want 0x" << want;
      }
    }
  }
  EXPECT_EQ(bad, 0);
  // FP32 "codes": a NaN of any sign or payload decodes to the canonical NaN; other values are themselves.
  for (uint32_t b : {0xFFC00000u, 0x7F800001u, 0xFFC12345u, 0x7FFFFFFFu})
    EXPECT_EQ(f32_bits(decode(Format::FP32, b)), 0x7FC00000u) << std::hex << b;
  for (uint32_t b : {0x80000000u, 0xFF800000u, 0x00000001u, 0x7F7FFFFFu})
    EXPECT_EQ(f32_bits(decode(Format::FP32, b)), b) << std::hex << b;
}

// Widening casts (docs/numerics.md §2.3): a target that holds every value of
// the source gives exactly that value under every overflow policy and rounding
// mode; saturation is for narrowing. The oracle decides which pairs widen (all
// of the source's codes have an exact code in the target's table) and what each
// code must become; holds_every_value must agree with it on every pair, and
// encode / encode_f64 under widening_overflow must give the oracle's code.
TEST(FormatsExhaustive, WideningCastsAreExactUnderEveryPolicy) {
  auto& c = Checker::get();
  const FormatSpec fp32 = spec_of(Format::FP32);
  int bad = 0;
  auto check = [&](const std::string& what, uint32_t got, uint32_t want) {
    if (got != want && ++bad <= 20) {
      ADD_FAILURE() << what << ": got 0x" << std::hex << got << ", want 0x" << want;
    }
  };
  const RoundMode modes[] = {RoundMode::RNE, RoundMode::RZ, RoundMode::RU, RoundMode::Stochastic};
  size_t widening_pairs = 0;
  for (size_t i = 0; i < c.tables.size(); ++i) {
    const oracle::Fmt& f = c.tables[i].f;
    const FormatSpec& from = c.specs[i];
    // Targets: FP16, BF16 (oracle tables) and FP32 (exact FP32 bits, NaN canonical).
    for (const char* tname : {"fp16", "bf16", "fp32"}) {
      const bool to32 = std::string(tname) == "fp32";
      const oracle::Table* t = nullptr;
      for (const auto& tt : c.tables)
        if (tt.f.name == tname) t = &tt;
      const FormatSpec to = to32 ? fp32 : spec_of(to_format(tname));
      std::vector<uint32_t> want(1u << f.bits);
      bool widens = true;
      for (uint32_t code = 0; code < want.size(); ++code) {
        if (to32) {
          want[code] = oracle::decoded_f32_bits(f, code);  // every value of every format here is an FP32 value
        } else if (!oracle::widened_code(f, code, *t, want[code])) {
          widens = false;
        }
      }
      EXPECT_EQ(holds_every_value(from, to), widens) << f.name << " -> " << tname;
      if (!widens) continue;
      ++widening_pairs;
      for (uint32_t code = 0; code < want.size(); ++code) {
        const float x = decode(from, code);
        for (Overflow ov : {Overflow::Saturate, Overflow::Ieee}) {
          const Overflow pol = widening_overflow(from, to, ov);
          for (RoundMode m : modes) {
            const std::string what = f.name + " code " + std::to_string(code) + " -> " + tname + " ov " +
                                     std::to_string(int(ov)) + " mode " + std::to_string(int(m));
            check(what + " encode", encode(to, f32_bits(x), 0, m, pol, 0xFFFFFFFFu), want[code]);
            check(what + " encode_f64", encode_f64(to, f64_bits(double(x)), 0, m, pol, 0xFFFFFFFFu), want[code]);
          }
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
  // e4m3 e5m2 e4m3fnuz e5m2fnuz e3m2 e2m3 e2m1 into each of fp16 bf16 fp32 (21), fp16 and bf16
  // into themselves and fp32 (4), e8m0 into bf16 and fp32 (2).
  EXPECT_EQ(widening_pairs, 27u);
  // The pairs the oracle has no table for: FP32 holds FP32, nothing narrower holds FP32.
  EXPECT_TRUE(holds_every_value(fp32, fp32));
  EXPECT_FALSE(holds_every_value(fp32, spec_of(Format::BF16)));
  EXPECT_FALSE(holds_every_value(fp32, spec_of(Format::FP16)));
  // Narrowing keeps the asked policy: FP32 Inf into FP16 saturates to 65504 (0x7BFF).
  EXPECT_EQ(encode(spec_of(Format::FP16), 0x7F800000u, 0, RoundMode::RNE,
                   widening_overflow(fp32, spec_of(Format::FP16), Overflow::Saturate)),
            0x7BFFu);
}
