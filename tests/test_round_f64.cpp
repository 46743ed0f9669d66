// FP64 inputs are rounded ONCE to the target (encode_f64), and round up (RU).
//
// 1. Hand cases: FP64 values built from integer bit patterns that sit just
//    above or below a tie of the target after FP32 rounding (so rounding to
//    FP32 first would make them exact ties or exact grid values and round the
//    wrong way), for E4M3, E2M1, BF16, FP16 and FP32 targets under RNE and RZ.
//    Each expected code is worked out by hand in the comment beside it; each
//    case also checks that the double-rounding path really differs (that the
//    vector discriminates).
// 2. The exact oracle (test_formats_oracle.hpp: rational comparison on big
//    integers, independent of rounding.hpp) over seeded random FP64 values,
//    constructed ties and their FP64 neighbours, every element format, RNE /
//    RZ / RU / SR, both overflow policies, several scale offsets.
// 3. RU by hand (E8M0 ceil, negative values, overflow).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "mxsim/rounding.hpp"
#include "test_formats_oracle.hpp"

using namespace mxsim;

namespace {

double d_of(uint64_t b) {
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}
uint64_t b_of(double d) {
  uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}
// FP64 bits of (1 + frac / 2^52) * 2^e, e a normal FP64 exponent.
constexpr uint64_t f64(int e, uint64_t frac) { return (uint64_t(e + 1023) << 52) | frac; }

struct Hand {
  const char* what;
  Format to;
  RoundMode mode;
  uint64_t x;
  uint32_t want;
  bool differs_via_fp32 = true;  ///< an RNE rounding to FP32 first gives another code
};

// Fractions of the FP64 significand (52 bits).
constexpr uint64_t kBit(int i) { return uint64_t(1) << (52 - i); }  // 2^-i of the significand

const Hand kHand[] = {
    // E4M3 (3 mantissa bits) near 1: grid 1, 1.125 (0x39), 1.25 (0x3A). Tie 1.0625 = 1 + 2^-4.
    // x = 1.0625 + 2^-40: above the tie -> 1.125 (0x39). Through FP32 (2^-40 < half an FP32
    // ulp 2^-24) it is the exact tie 1.0625 -> even 1.0 (0x38).
    {"e4m3 rne above tie", Format::E4M3, RoundMode::RNE, f64(0, kBit(4) + kBit(40)), 0x39},
    // Tie 1.1875 between 1.125 (0x39, odd) and 1.25 (0x3A, even); x = 1.1875 - 2^-40: below the
    // tie -> 1.125 (0x39). Through FP32: the tie -> even 0x3A.
    {"e4m3 rne below tie", Format::E4M3, RoundMode::RNE, f64(0, kBit(4) + kBit(3) - kBit(40)), 0x39},
    // RZ: x = 1.25 - 2^-40 -> truncates to 1.125 (0x39). Through FP32 it becomes 1.25 exactly (0x3A).
    {"e4m3 rz below grid", Format::E4M3, RoundMode::RZ, f64(0, kBit(2) - kBit(40)), 0x39},
    // E2M1: grid 1 (0x2), 1.5 (0x3), 2 (0x4). Tie 1.25 + 2^-40 -> 1.5 (0x3); via FP32: tie -> 1 (0x2).
    {"e2m1 rne above tie", Format::E2M1, RoundMode::RNE, f64(0, kBit(2) + kBit(40)), 0x3},
    // Tie 1.75 (1.5 odd / 2 even) - 2^-40 -> 1.5 (0x3); via FP32: tie -> 2 (0x4).
    {"e2m1 rne below tie", Format::E2M1, RoundMode::RNE, f64(0, kBit(1) + kBit(2) - kBit(40)), 0x3},
    // RZ: 2 - 2^-40 = 1.111...1 -> 1.5 (0x3); via FP32 it is 2.0 -> 0x4.
    {"e2m1 rz below grid", Format::E2M1, RoundMode::RZ, f64(0, (uint64_t(1) << 52) - kBit(40)), 0x3},
    // Negative, scaled case of the same: -(1.25 + 2^-40) -> -1.5 (0xB).
    {"e2m1 rne above tie negative", Format::E2M1, RoundMode::RNE, (uint64_t(1) << 63) | f64(0, kBit(2) + kBit(40)), 0xB},
    // BF16 (7 mantissa bits): grid 1 (0x3F80), 1 + 2^-7 (0x3F81). Tie 1 + 2^-8; + 2^-40 -> 0x3F81;
    // via FP32 (exact tie) -> even 0x3F80.
    {"bf16 rne above tie", Format::BF16, RoundMode::RNE, f64(0, kBit(8) + kBit(40)), 0x3F81},
    // Tie 1 + 3 * 2^-8 (between 0x3F81 odd and 0x3F82 even) - 2^-40 -> 0x3F81; via FP32 -> 0x3F82.
    {"bf16 rne below tie", Format::BF16, RoundMode::RNE, f64(0, kBit(7) + kBit(8) - kBit(40)), 0x3F81},
    // RZ: 1 + 2^-6 - 2^-40 -> 1 + 2^-7 (0x3F81); via FP32 it is 1 + 2^-6 exactly (0x3F82).
    {"bf16 rz below grid", Format::BF16, RoundMode::RZ, f64(0, kBit(6) - kBit(40)), 0x3F81},
    // FP16 (10 mantissa bits): 1 = 0x3C00, 1 + 2^-10 = 0x3C01. Tie 1 + 2^-11; + 2^-40 -> 0x3C01;
    // via FP32 -> even 0x3C00.
    {"fp16 rne above tie", Format::FP16, RoundMode::RNE, f64(0, kBit(11) + kBit(40)), 0x3C01},
    // Tie 1 + 3 * 2^-11 - 2^-40 -> 0x3C01; via FP32 -> 0x3C02.
    {"fp16 rne below tie", Format::FP16, RoundMode::RNE, f64(0, kBit(10) + kBit(11) - kBit(40)), 0x3C01},
    // RZ: 1 + 2^-9 - 2^-40 -> 0x3C01; via FP32 -> 0x3C02.
    {"fp16 rz below grid", Format::FP16, RoundMode::RZ, f64(0, kBit(9) - kBit(40)), 0x3C01},
    // FP32 itself (one IEEE conversion): 1 = 0x3F800000, 1 + 2^-23 = 0x3F800001. x = 1 + 2^-24 +
    // 2^-50 is above the tie -> 0x3F800001; x = 1 + 2^-24 exactly is the tie -> even 0x3F800000.
    // (Here there is no FP32 intermediate to differ from.)
    {"fp32 rne above tie", Format::FP32, RoundMode::RNE, f64(0, kBit(24) + kBit(50)), 0x3F800001, false},
    {"fp32 rne tie", Format::FP32, RoundMode::RNE, f64(0, kBit(24)), 0x3F800000, false},
    // RZ: 1 + 2^-23 - 2^-50 -> 0x3F800000 (an RNE rounding to FP32 first would give 0x3F800001).
    {"fp32 rz below grid", Format::FP32, RoundMode::RZ, f64(0, kBit(23) - kBit(50)), 0x3F800000},
};

TEST(RoundF64, HandTiesRoundOnce) {
  for (const Hand& h : kHand) {
    const FormatSpec f = spec_of(h.to);
    EXPECT_EQ(encode_f64(f, h.x, 0, h.mode), h.want) << h.what;
    // The vector discriminates: rounding to FP32 first (RNE) gives another code.
    const float via32 = static_cast<float>(d_of(h.x));
    uint32_t b32;
    std::memcpy(&b32, &via32, 4);
    if (h.differs_via_fp32) EXPECT_NE(encode(f, b32, 0, h.mode), h.want) << h.what << ": not a double-rounding case";
  }
  // FP32 target, FP64 beyond FP32's range: saturate -> FLT_MAX (0x7F7FFFFF), ieee -> Inf;
  // 2^-150 (half FP32's smallest subnormal, an exact tie with 0) -> +0 under RNE; 2^-150 + 2^-200 -> 2^-149.
  const FormatSpec f32 = spec_of(Format::FP32);
  EXPECT_EQ(encode_f64(f32, b_of(1e300)), 0x7F7FFFFFu);
  EXPECT_EQ(encode_f64(f32, b_of(1e300), 0, RoundMode::RNE, Overflow::Ieee), 0x7F800000u);
  EXPECT_EQ(encode_f64(f32, f64(-150, 0)), 0u);
  EXPECT_EQ(encode_f64(f32, f64(-150, kBit(50))), 1u);
}

TEST(RoundF64, ScaleExpAppliedExactly) {
  // A block scale 2^-142 on an FP64 value inside FP32's subnormal range: x = 1.6 * 2^-149, and
  // x * 2^142 = 6.4 * 2^-9, which in E4M3 (subnormals k * 2^-9) rounds to 6 * 2^-9 = code 0x06.
  // Through FP32 the value would first become 2 * 2^-149 (RNE; -> 8 * 2^-9 = 0x08) or 1 * 2^-149
  // (round-to-odd; -> 0x04): FP32 subnormals hold fewer bits than the scaled target needs.
  const uint64_t x = f64(-149, 0x999999999999Aull);  // 1.6000000000000001 * 2^-149
  EXPECT_EQ(encode_f64(spec_of(Format::E4M3), x, -142), 0x06u);
}

TEST(RoundF64, RoundUpByHand) {
  const FormatSpec e8 = spec_of(Format::E8M0), e4 = spec_of(Format::E4M3);
  EXPECT_EQ(encode_f64(e8, b_of(1.01), 0, RoundMode::RU), 128u);  // ceil -> 2^1
  EXPECT_EQ(encode_f64(e8, b_of(2.0), 0, RoundMode::RU), 128u);   // exact
  EXPECT_EQ(encode_f64(e8, b_of(3.0), 0, RoundMode::RU), 129u);   // 2^2
  EXPECT_EQ(encode_f64(e8, b_of(0.75), 0, RoundMode::RU), 127u);  // 2^0
  EXPECT_EQ(encode_f64(e8, b_of(1e-60), 0, RoundMode::RU), 0u);   // below 2^-127: the smallest scale
  EXPECT_EQ(encode(e8, 0x3F800001u, 0, RoundMode::RU), 128u);     // FP32 1 + 2^-23 -> 2
  // E4M3: 1.01 -> 1.125 (0x39); -1.01 -> toward +Inf = -1 (0xB8); 449 overflows: saturate 0x7E,
  // ieee NaN 0x7F; -449 never overflows under RU: -448 (0xFE), also with ieee.
  EXPECT_EQ(encode_f64(e4, b_of(1.01), 0, RoundMode::RU), 0x39u);
  EXPECT_EQ(encode_f64(e4, b_of(-1.01), 0, RoundMode::RU), 0xB8u);
  EXPECT_EQ(encode_f64(e4, b_of(449.0), 0, RoundMode::RU), 0x7Eu);
  EXPECT_EQ(encode_f64(e4, b_of(449.0), 0, RoundMode::RU, Overflow::Ieee), 0x7Fu);
  EXPECT_EQ(encode_f64(e4, b_of(-449.0), 0, RoundMode::RU, Overflow::Ieee), 0xFEu);
  // Tiny positive -> smallest subnormal 2^-9 (0x01); tiny negative -> -0 (0x80).
  EXPECT_EQ(encode_f64(e4, b_of(1e-30), 0, RoundMode::RU), 0x01u);
  EXPECT_EQ(encode_f64(e4, b_of(-1e-30), 0, RoundMode::RU), 0x80u);
}

Format to_format(const std::string& n) {
  Format f{};
  if (!format_from_name(n, f)) throw std::runtime_error("unknown format " + n);
  return f;
}

TEST(RoundF64, OracleRandomAndTies) {
  std::mt19937_64 rng(20260112);
  const int kScales[] = {0, -6, 9, 120};
  const uint32_t kWords[] = {0u, 1u, 0x55555555u, 0x80000000u, 0xFFFFFFFFu};
  int failures = 0;
  uint64_t compared = 0;
  for (const auto& of : oracle::all_formats()) {
    const oracle::Table t(of);
    const FormatSpec f = spec_of(to_format(of.name));
    std::vector<uint64_t> xs;
    // Random significands over exponents the oracle's integers hold (x * 2^-s within
    // [2^-240, 2^380]), both signs; plus NaN, Inf, zeros, FP64 subnormal-free tiny values.
    for (int i = 0; i < 4000; ++i) {
      const int e = int(rng() % 300) - 120;
      xs.push_back((rng() & (uint64_t(1) << 63)) | f64(e, rng() & ((uint64_t(1) << 52) - 1)));
    }
    // Every finite grid value of the target, its ties, and their FP64 neighbours at distances
    // 1 ulp(FP64) and 2^-20 of an FP32 ulp (which the FP32 rounding would erase).
    for (size_t i = 0; i + 1 < t.vals.size(); ++i) {
      for (const oracle::Big& v : {t.vals[i], (t.vals[i] + t.vals[i + 1]) / 2}) {
        if (v == 0) continue;
        // v in units of 2^-K -> a double (exact: at most 11 significant bits)
        const double d = std::ldexp(double(v >> (oracle::K - 160)), -160);
        for (double delta : {0.0, 1.0, -1.0}) {
          const uint64_t b = b_of(d) + uint64_t(int64_t(delta));
          xs.push_back(b);
          xs.push_back(b | (uint64_t(1) << 63));
        }
        xs.push_back(b_of(d * (1 + std::ldexp(1.0, -44))));
        xs.push_back(b_of(d * (1 - std::ldexp(1.0, -44))));
      }
    }
    for (uint64_t sp : {0x7FF8000000000000ull, 0xFFF8000000000001ull, 0x7FF0000000000000ull, 0xFFF0000000000000ull,
                        0ull, 0x8000000000000000ull})
      xs.push_back(sp);
    for (int s : kScales) {
      for (uint64_t x : xs) {
        const int ex = int((x >> 52) & 0x7FF) - 1023;
        if (((x >> 52) & 0x7FF) != 0x7FF && ((x << 1) != 0) && (ex - s < -240 || ex - s > 380)) continue;
        const oracle::Decision d = oracle::decide_f64(t, x, s);
        auto check = [&](RoundMode m, oracle::Mode om, Overflow ov, oracle::Ov oov, uint32_t r) {
          ++compared;
          const uint32_t got = encode_f64(f, x, s, m, ov, r), want = oracle::expect(t, d, om, oov, r);
          if (got != want && ++failures <= 20)
            ADD_FAILURE() << of.name << " x=0x" << std::hex << x << std::dec << " s=" << s << " mode=" << int(m)
                          << " ov=" << int(ov) << " r=" << r << ": got 0x" << std::hex << got << " want 0x" << want;
        };
        for (auto [ov, oov] : {std::pair{Overflow::Saturate, oracle::Ov::Sat}, std::pair{Overflow::Ieee, oracle::Ov::Ieee}}) {
          check(RoundMode::RNE, oracle::Mode::RNE, ov, oov, 0);
          check(RoundMode::RZ, oracle::Mode::RZ, ov, oov, 0);
          check(RoundMode::RU, oracle::Mode::RU, ov, oov, 0);
          for (uint32_t r : kWords) check(RoundMode::Stochastic, oracle::Mode::SR, ov, oov, r);
          if (!d.fixed && !d.exact) {  // SR at the exact threshold: r = f32 - 1 rounds up, r = f32 does not
            if (d.f32 > 0 && d.f32 <= 0xFFFFFFFFull) check(RoundMode::Stochastic, oracle::Mode::SR, ov, oov, uint32_t(d.f32 - 1));
            if (d.f32 <= 0xFFFFFFFFull) check(RoundMode::Stochastic, oracle::Mode::SR, ov, oov, uint32_t(d.f32));
          }
        }
      }
    }
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GT(compared, 1000000u);
}

TEST(RoundF64, RoundUpFp32InputsAgainstOracle) {
  // RU is new for FP32 inputs too: the oracle on a seeded FP32 sample, every format.
  std::mt19937 rng(7);
  int failures = 0;
  for (const auto& of : oracle::all_formats()) {
    const oracle::Table t(of);
    const FormatSpec f = spec_of(to_format(of.name));
    for (int i = 0; i < 20000; ++i) {
      const uint32_t x = rng();
      if (((x >> 23) & 0xFF) == 0xFF && (x & 0x7FFFFF)) continue;  // NaN covered by the hand cases
      for (int s : {0, -5, 8}) {
        const oracle::Decision d = oracle::decide(t, x, s);
        for (auto [ov, oov] : {std::pair{Overflow::Saturate, oracle::Ov::Sat}, std::pair{Overflow::Ieee, oracle::Ov::Ieee}}) {
          const uint32_t got = encode(f, x, s, RoundMode::RU, ov), want = oracle::expect(t, d, oracle::Mode::RU, oov, 0);
          if (got != want && ++failures <= 20)
            ADD_FAILURE() << of.name << " x=0x" << std::hex << x << std::dec << " s=" << s << ": got 0x" << std::hex
                          << got << " want 0x" << want;
        }
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

}  // namespace
