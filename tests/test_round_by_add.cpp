// encode_by_add (core/include/mxsim/rounding.hpp), the quantizers' one-add
// formulation of RNE / RZ with saturation, against the format table's
// encoder encode(f, x, scale_exp, mode, Saturate), which
// tests/test_formats_exhaustive.cpp proves against an exact oracle.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "mxsim/rounding.hpp"
#include "../emu/src/quantize_fast_enc.hpp"

using namespace mxsim;

namespace {

const Format kFormats[] = {Format::E4M3, Format::E5M2, Format::E4M3FNUZ, Format::E5M2FNUZ,
                           Format::E3M2, Format::E2M3, Format::E2M1,     Format::FP16};
const RoundMode kModes[] = {RoundMode::RNE, RoundMode::RZ};

bool is_nan32(uint32_t b) { return (b & 0x7FFFFFFFu) > 0x7F800000u; }

// Counts (and reports the first few of) the x where the two disagree.
size_t mismatches(const FormatSpec& f, RoundMode m, int s, const std::vector<uint32_t>& xs) {
  size_t bad = 0;
  for (uint32_t x : xs) {
    if (is_nan32(x)) continue;  // outside encode_by_add's domain
    const uint32_t want = encode(f, x, s, m, Overflow::Saturate), got = encode_by_add(f, x, s, m);
    if (want != got && ++bad <= 3)
      ADD_FAILURE() << f.name << (m == RoundMode::RNE ? " RNE" : " RZ") << " scale_exp " << s << std::hex << " x 0x" << x
                    << ": want 0x" << want << ", got 0x" << got;
  }
  return bad;
}

// Every BF16 value (both signs, zeros, subnormals, Inf) with FP32 low halves at
// and around the rounding boundaries of a finer format.
std::vector<uint32_t> bf16_neighbourhoods() {
  std::vector<uint32_t> xs;
  for (uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) xs.push_back((hi << 16) | lo);
  return xs;
}

}  // namespace

TEST(FormatRoundByAdd, AppliesToTheElementFormatsOnly) {
  for (Format fm : kFormats) EXPECT_TRUE(encode_by_add_applies(spec_of(fm), 0, RoundMode::RNE)) << spec_of(fm).name;
  EXPECT_FALSE(encode_by_add_applies(spec_of(Format::BF16), 0, RoundMode::RNE));
  EXPECT_FALSE(encode_by_add_applies(spec_of(Format::FP32), 0, RoundMode::RNE));
  EXPECT_FALSE(encode_by_add_applies(spec_of(Format::E8M0), 0, RoundMode::RNE));
  EXPECT_FALSE(encode_by_add_applies(spec_of(Format::E4M3), 0, RoundMode::Stochastic));
  EXPECT_FALSE(encode_by_add_applies(spec_of(Format::E4M3), 0, RoundMode::RU));
  EXPECT_FALSE(encode_by_add_applies(spec_of(Format::E4M3), 128, RoundMode::RNE));
  EXPECT_FALSE(encode_by_add_applies(spec_of(Format::E4M3), -128, RoundMode::RNE));
}

// Scales at both ends of E8M0's range (2^-127 is an FP32 subnormal; 2^127
// sends large x to Inf before the clamp), around 0, and in between.
TEST(FormatRoundByAdd, EveryBf16NeighbourhoodUnderChosenScales) {
  const std::vector<uint32_t> xs = bf16_neighbourhoods();
  for (Format fm : kFormats)
    for (RoundMode m : kModes)
      for (int s : {-127, -126, -125, -100, -20, -3, -1, 0, 1, 2, 7, 20, 100, 125, 126, 127})
        ASSERT_EQ(mismatches(spec_of(fm), m, s, xs), 0u);
}

// Every BF16 value under every E8M0 scale, for the MX element formats.
TEST(FormatRoundByAdd, EveryBf16ValueUnderEveryScale) {
  std::vector<uint32_t> xs;
  for (uint32_t hi = 0; hi < 0x10000u; ++hi) xs.push_back(hi << 16);
  for (Format fm : {Format::E4M3, Format::E5M2, Format::E2M3, Format::E2M1})
    for (RoundMode m : kModes)
      for (int s = -127; s <= 127; ++s) ASSERT_EQ(mismatches(spec_of(fm), m, s, xs), 0u);
}

TEST(FormatRoundByAdd, RandomFp32AndScales) {
  std::mt19937 g(77);
  std::vector<uint32_t> xs(4096);
  for (int rep = 0; rep < 200; ++rep) {
    for (auto& x : xs) x = uint32_t(g());
    const int s = int(g() % 255) - 127;
    for (Format fm : kFormats)
      for (RoundMode m : kModes) ASSERT_EQ(mismatches(spec_of(fm), m, s, xs), 0u);
  }
}

// Published values: the OCP MX v1.0 E2M1 grid {0, 0.5, 1, 1.5, 2, 3, 4, 6}
// (§5.3.3) under IEEE round to nearest even, and truncation (RZ).
TEST(FormatRoundByAdd, E2M1KnownValues) {
  const FormatSpec f = spec_of(Format::E2M1);
  auto rne = [&](float x, int s = 0) { return encode_by_add(f, std::bit_cast<uint32_t>(x), s, RoundMode::RNE); };
  auto rz = [&](float x, int s = 0) { return encode_by_add(f, std::bit_cast<uint32_t>(x), s, RoundMode::RZ); };
  EXPECT_EQ(rne(0.25f), 0x0u);   // tie 0 / 0.5 -> 0 (even)
  EXPECT_EQ(rne(0.2500001f), 0x1u);
  EXPECT_EQ(rne(0.75f), 0x2u);   // tie 0.5 / 1 -> 1 (even code 2)
  EXPECT_EQ(rne(1.25f), 0x2u);   // tie 1 / 1.5 -> 1
  EXPECT_EQ(rne(1.75f), 0x4u);   // tie 1.5 / 2 -> 2
  EXPECT_EQ(rne(2.5f), 0x4u);    // tie 2 / 3 -> 2
  EXPECT_EQ(rne(3.5f), 0x6u);    // tie 3 / 4 -> 4
  EXPECT_EQ(rne(5.0f), 0x6u);    // tie 4 / 6 -> 4
  EXPECT_EQ(rne(1e30f), 0x7u);   // saturates to 6
  EXPECT_EQ(rne(-0.1f), 0x8u);   // -0
  EXPECT_EQ(rne(-5.5f), 0xFu);   // -6
  EXPECT_EQ(rne(24.0f, 2), 0x7u);  // 24 / 2^2 = 6
  EXPECT_EQ(rne(0.375f, -1), 0x2u);  // 0.375 * 2 = 0.75 -> 1
  EXPECT_EQ(rz(5.9f), 0x6u);
  EXPECT_EQ(rz(0.49f), 0x0u);
  EXPECT_EQ(rz(-2.99f), 0xCu);
}

// The fast MX quantizer's encoder (emu/src/quantize_fast_enc.hpp: Enc, RNE with saturation in
// FP32 bit arithmetic, given mul = 2^-s as the quantizer forms it) against encode(): every BF16
// value under every E8M0 scale, and the FP32 rounding neighbourhoods under chosen scales, for
// every MX element format it takes. NaN is outside its domain (a NaN block's codes are zeros).
namespace {
size_t fast_mismatches(Format fm, int s, const std::vector<uint32_t>& xs) {
  const mxsim::emu::fast::Enc enc = mxsim::emu::fast::enc_of(mxsim::emu::fast::elem_of(fm));
  const FormatSpec f = spec_of(fm);
  const float mul = pow2f(-s);
  size_t bad = 0;
  for (uint32_t x : xs) {
    if (is_nan32(x)) continue;
    const uint32_t want = encode(f, x, s, RoundMode::RNE, Overflow::Saturate), got = enc(x, mul);
    if (want != got && ++bad <= 3)
      ADD_FAILURE() << f.name << " scale_exp " << s << std::hex << " x 0x" << x << ": want 0x" << want << ", got 0x"
                    << got;
  }
  return bad;
}
const Format kMxElements[] = {Format::E4M3, Format::E5M2, Format::E3M2, Format::E2M3, Format::E2M1};
}  // namespace

TEST(FastQuantizerEncoder, EveryBf16ValueUnderEveryScale) {
  std::vector<uint32_t> xs;
  for (uint32_t hi = 0; hi < 0x10000u; ++hi) xs.push_back(hi << 16);
  for (Format fm : kMxElements)
    for (int s = -127; s <= 127; ++s) ASSERT_EQ(fast_mismatches(fm, s, xs), 0u);
}

TEST(FastQuantizerEncoder, EveryBf16NeighbourhoodUnderChosenScales) {
  const std::vector<uint32_t> xs = bf16_neighbourhoods();
  for (Format fm : kMxElements)
    for (int s : {-127, -126, -100, -20, -1, 0, 1, 2, 7, 20, 100, 126, 127}) ASSERT_EQ(fast_mismatches(fm, s, xs), 0u);
}
