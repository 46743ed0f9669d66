// round_bf16_code / round_bf16 (core/include/mxsim/rounding.hpp) against the
// format table's encoder, encode(spec_of(BF16), x, 0, RNE, Ieee), which
// tests/test_formats_exhaustive.cpp proves against an exact oracle.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>

#include "mxsim/rounding.hpp"

using namespace mxsim;

namespace {

uint32_t ref_code(uint32_t b) { return encode(spec_of(Format::BF16), b, 0, RoundMode::RNE, Overflow::Ieee); }

void check(uint32_t b) {
  const uint32_t want = ref_code(b);
  ASSERT_EQ(round_bf16_code(b), want) << std::hex << "x = 0x" << b;
  ASSERT_EQ(std::bit_cast<uint32_t>(round_bf16(std::bit_cast<float>(b))), want << 16) << std::hex << "x = 0x" << b;
}

}  // namespace

// Every upper half (every BF16 value: both signs, zeros, subnormals, normals,
// the largest finite, Inf, every NaN class) with the low halves at and around
// the rounding boundaries: exact, just above, just below the tie, the tie, just
// above the tie, the largest.
TEST(FormatRoundBf16, EveryBf16Neighbourhood) {
  size_t n = 0;
  for (uint32_t hi = 0; hi < 0x10000u; ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      check((hi << 16) | lo);
      ++n;
    }
  EXPECT_EQ(n, 6u * 65536u);
}

TEST(FormatRoundBf16, StridedAndRandomFp32) {
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += 9973) check(uint32_t(b));
  std::mt19937 g(2024);
  for (int i = 0; i < 2000000; ++i) check(uint32_t(g()));
}

// Published / hand-derived values (IEEE 754 RNE to 8 significant bits):
// 1 + 2^-8 is the tie between 1 and 1 + 2^-7 -> 1 (even); 1 + 3 * 2^-8 is
// the tie between 1 + 2^-7 and 1 + 2^-6 -> 1 + 2^-6; FLT_MAX -> +Inf (IEEE
// overflow); NaN payloads -> 0x7FC0 / 0xFFC0 with the sign kept.
TEST(FormatRoundBf16, KnownValues) {
  EXPECT_EQ(round_bf16_code(0x3F808000u), 0x3F80u);
  EXPECT_EQ(round_bf16_code(0x3F818000u), 0x3F82u);
  EXPECT_EQ(round_bf16_code(0x7F7FFFFFu), 0x7F80u);
  EXPECT_EQ(round_bf16_code(0xFF7FFFFFu), 0xFF80u);
  EXPECT_EQ(round_bf16_code(0x7F800001u), 0x7FC0u);
  EXPECT_EQ(round_bf16_code(0xFFFFFFFFu), 0xFFC0u);
  EXPECT_EQ(round_bf16_code(0x80000001u), 0x8000u);  // -tiny subnormal -> -0
  EXPECT_EQ(round_bf16_code(0x00008000u), 0x0000u);  // tie at 0 -> even (0)
  EXPECT_EQ(round_bf16_code(0x00018000u), 0x0002u);  // tie -> even (2)
}
