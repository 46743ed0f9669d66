// The shared block-dot steps of core/include/mxsim/hd/gemm_block.hpp (fixed
// width integers, fmaf) against arbitrary-precision arithmetic: every value
// an exact Boost cpp_int significand with a binary exponent, rounded by the
// literal rules of docs/numerics.md §5.3 / §5.2. The emulator's reference
// GEMM and the GPU kernels both call the hd steps, so this is what proves
// them; tests/test_gemm_exact.cpp checks the reference GEMM built on them
// against a rational oracle, tests/test_gpu_gemm.cpp the GPU against it.
#include <gtest/gtest.h>

#include <algorithm>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "../emu/src/gemm_exact.hpp"
#include "mxsim/hd/gemm_block.hpp"
#include "mxsim/hd/gemm_packed.hpp"

using namespace mxsim;
using namespace mxsim::emu::gemm;

namespace {

/// §5.3 literally on exact values: E = max(align, floor(log2|C|)), zeros as
/// -126; each term and C truncated toward zero to a multiple of 2^(E - F);
/// exact sum; RZ to e8m13 or FP32 (round_f32). Specials by exact arithmetic.
/// hopper: the Hopper BF16 edges instead (numerics.md §5.3; the terms'
/// align already built with the -126 floor: exact_term): C aligns at
/// max(floor(log2|C|), -126), zeros take no part in E (none at all: +0), E
/// is at least -133, a sum of magnitude >= 2^128 is +-Inf, a result that
/// truncates to zero +0.
float oracle_fused_group(const std::vector<Term>& terms, float c, int F, bool e8m13, bool hopper = false) {
  Ex cx = ex_from_float(c);
  Ex special = Ex::zero();
  bool any_special = false;
  for (const auto& t : terms)
    if (t.v.sp != Ex::Fin) {
      special = any_special ? ex_add(special, t.v) : t.v;
      any_special = true;
    }
  if (cx.sp != Ex::Fin) {
    special = any_special ? ex_add(special, cx) : cx;
    any_special = true;
  }
  if (any_special) return round_f32(special, true, 23);
  std::optional<int> E;
  const auto take = [&](int e) { E = E ? std::max(*E, e) : e; };
  if (cx.sig != 0) take(hopper ? std::max(cx.exp + int(msb(abs(cx.sig))), -126) : cx.exp + int(msb(abs(cx.sig))));
  else if (!hopper) take(-126);
  for (const auto& t : terms) {
    if (t.v.sig != 0) take(t.align);
    else if (!hopper) take(-126);
  }
  if (!E) return 0.0f;
  const int lsb = (hopper ? std::max(*E, -133) : *E) - F;  // Hopper: E at least -133
  auto trunc = [&](const Ex& x) -> cpp_int {
    if (x.sig == 0) return 0;
    const cpp_int m = abs(x.sig);
    cpp_int r = x.exp >= lsb ? cpp_int(m << (x.exp - lsb)) : cpp_int(m >> (lsb - x.exp));
    return x.sig < 0 ? cpp_int(-r) : r;
  };
  Ex s;
  s.exp = lsb;
  s.sig = trunc(cx);
  for (const auto& t : terms) s.sig += trunc(t.v);
  if (hopper && s.sig != 0 && s.exp + int(msb(abs(s.sig))) >= 128) return s.sig < 0 ? -INFINITY : INFINITY;
  const float r = round_f32(s, true, e8m13 ? 13 : 23);
  return hopper && r == 0.0f ? 0.0f : r;
}

bool same_bits(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

/// A BF16 code with its exponent field in [lo, hi] (0: subnormal), random
/// sign and fraction: exponent fields 0-7 times 100-119 give tiny groups
/// whose E lies on both sides of the Hopper window floor (E >= -133). (Few of
/// them does the floor decide: GemmBlock.HopperWindowFloorDecides builds those.)
uint32_t bf16_code_in(std::mt19937& g, uint32_t lo, uint32_t hi) {
  return (g() & 0x8000u) | ((lo + g() % (hi - lo + 1)) << 7) | (g() & 0x7Fu);
}

/// Adversarial FP32 values: zeros of both signs, subnormals, the normal
/// boundary, powers of two, FLT_MAX, Inf, NaN, e8m13-exact values and randoms.
float adversarial_float(std::mt19937& g) {
  std::uniform_int_distribution<int> pick(0, 11);
  std::uniform_int_distribution<uint32_t> any;
  const uint32_t sign = (any(g) & 1u) << 31;
  switch (pick(g)) {
    case 0: return std::bit_cast<float>(sign);
    case 1: return std::bit_cast<float>(sign | (any(g) & 0x7FFFFFu));  // subnormal
    case 2: return std::bit_cast<float>(sign | 0x00800000u | (any(g) & 0x7u));
    case 3: return std::bit_cast<float>(sign | ((1u + any(g) % 254u) << 23));  // power of two
    case 4: return std::bit_cast<float>(sign | 0x7F7FFFFFu);
    case 5: return std::bit_cast<float>(sign | 0x7F800000u);
    case 6: return std::bit_cast<float>(0x7FC00000u | (any(g) & 0xFFu));
    case 7: return std::bit_cast<float>((any(g) & 0xFFFFE000u) & 0xFF7FFFFFu);  // e8m13 value (finite)
    case 8: return std::bit_cast<float>(sign | ((100u + any(g) % 56u) << 23) | (any(g) & 0x7FFFFFu));  // near 1
    default: {
      const uint32_t b = any(g);
      return ((b >> 23) & 0xFF) == 0xFF ? 1.5f : std::bit_cast<float>(b);
    }
  }
}

/// A product term; each element's alignment exponent at least align_floor
/// (-126: a subnormal BF16 element aligns at its exponent field).
Term exact_term(Format fa, uint32_t ca, Format fb, uint32_t cb, int scale_exp, int align_floor = -100000) {
  const FormatSpec a = spec_of(fa), b = spec_of(fb);
  Ex p = ex_mul(ex_elem(a, ca), ex_elem(b, cb));
  if (scale_exp != 0 && p.sp == Ex::Fin) p.exp += scale_exp;
  return {p, std::max(elem_exp(a, ca), align_floor) + std::max(elem_exp(b, cb), align_floor) + scale_exp};
}

}  // namespace

// Groups of 0..32 products of every GEMM element format pair (all codes,
// specials included), with C drawn from the adversarial set, for F = 13
// (e8m13 and FP32 output) and F = 25 (FP32): hd::fused_group (through the
// adapter the emulator uses) equals the exact oracle.
TEST(GemmBlock, FusedGroupMatchesExactArithmetic) {
  std::mt19937 g(2024);
  const Format fmts[] = {Format::E4M3, Format::E5M2, Format::E3M2, Format::E2M3, Format::E2M1, Format::BF16};
  size_t cases = 0, bad = 0;
  for (int trial = 0; trial < 60000; ++trial) {
    const Format fa = fmts[g() % 6], fb = fa == Format::BF16 ? Format::BF16 : fmts[g() % 5];
    const int bits_a = spec_of(fa).bits, bits_b = spec_of(fb).bits;
    const int n = int(g() % 33);
    const bool specials = g() % 8 == 0;
    // Folded block scales as the matrix-unit models use them, or none.
    const int se = g() % 4 == 0 ? int(g() % 255) - 254 + int(g() % 3) * 100 : 0;
    // BF16 groups take the Hopper edges (bf16-f25) half the time, unscaled.
    const bool hopper = fa == Format::BF16 && g() % 2 == 0;
    const bool tiny = hopper && g() % 4 == 0;  // subnormal x small elements, E near the window floor
    std::vector<Term> t;
    for (int k = 0; k < n; ++k) {
      uint32_t ca = g() & ((1u << bits_a) - 1), cb = g() & ((1u << bits_b) - 1);
      if (tiny) ca = bf16_code_in(g, 0, 7), cb = bf16_code_in(g, 100, 119);
      if (!specials) {  // keep specials rare unless asked for
        if (!std::isfinite(decode(fa, ca))) ca = 0;
        if (!std::isfinite(decode(fb, cb))) cb = 0;
      }
      if (g() % 5 == 0) ca = 0;  // zero products
      t.push_back(hopper ? exact_term(fa, ca, fb, cb, 0, -126) : exact_term(fa, ca, fb, cb, se));
    }
    float c = g() % 3 == 0 || tiny ? 0.0f : adversarial_float(g);
    if (!specials && !std::isfinite(c)) c = -2.5f;
    const int F = fa == Format::BF16 ? 25 : (g() % 4 == 0 ? 25 : 13);
    const bool e8m13 = F == 13 && g() % 4 != 0;
    const float want = oracle_fused_group(t, c, F, e8m13, hopper);
    const float got = fused_group(t, c, F, e8m13, hopper ? mxsim::hd::hopper_bf16_edges() : mxsim::hd::mma_sim_edges());
    if (!same_bits(want, got) && bad++ < 10)
      ADD_FAILURE() << short_name(fa) << "x" << short_name(fb) << " n=" << n << " F=" << F << " e8m13=" << e8m13
                    << " c=" << std::hexfloat << c << " want " << want << " got " << got;
    ++cases;
  }
  EXPECT_EQ(bad, 0u) << "of " << cases;
}

// Groups the Hopper window floor decides, worked out by hand: a product
// m * 2^-149 (subnormal element m * 2^-133 times 2^-16, alignment -142) and n
// products -2^-159 (2^-133 times -2^-26), C = +0, in shuffled order. With
// the floor the window's lsb is 2^(-133 - 25) = 2^-158, the -2^-159 terms
// truncate to 0 and the result is m * 2^-149 (bits m); without it the lsb is
// 2^-167, the sum m * 2^-149 - n * 2^-159 is exact and RZ gives m - 1.
TEST(GemmBlock, HopperWindowFloorDecides) {
  std::mt19937 g(133);
  size_t groups = 0;
  for (uint32_t m = 1; m <= 127; ++m)
    for (int n = 1; n <= 15; n += 7) {
      std::vector<std::pair<uint32_t, uint32_t>> codes = {{m, 0x3780u}};  // m * 2^-133, 2^-16
      for (int k = 0; k < n; ++k) codes.push_back({0x0001u, 0xB280u});    // 2^-133, -2^-26
      std::shuffle(codes.begin(), codes.end(), g);
      std::vector<Term> t;
      for (auto [a, b] : codes) t.push_back(exact_term(Format::BF16, a, Format::BF16, b, 0, -126));
      const float got = fused_group(t, 0.0f, 25, false, mxsim::hd::hopper_bf16_edges());
      EXPECT_EQ(std::bit_cast<uint32_t>(got), m) << "m " << m << " n " << n;
      mxsim::hd::FusedEdges no_floor = mxsim::hd::hopper_bf16_edges();
      no_floor.e_floor = mxsim::hd::kNoAlignFloor;
      EXPECT_EQ(std::bit_cast<uint32_t>(fused_group(t, 0.0f, 25, false, no_floor)), m - 1) << "m " << m << " n " << n;
      EXPECT_EQ(std::bit_cast<uint32_t>(oracle_fused_group(t, 0.0f, 25, false, true)), m) << "oracle, m " << m;
      ++groups;
    }
  EXPECT_EQ(groups, 127u * 3);
}

// rz_to_frac against round_f32(RZ) on random integers and exponents, across
// the subnormal range, the normal range and overflow.
TEST(GemmBlock, RzToFracMatchesExactRounding) {
  std::mt19937_64 g(7);
  size_t bad = 0;
  for (int trial = 0; trial < 200000; ++trial) {
    const int nb = int(g() % 40);
    int64_t S = int64_t(g() & ((uint64_t(1) << nb) - 1));
    if (g() & 1) S = -S;
    const int lsb = int(g() % 320) - 190;
    const int frac = g() & 1 ? 13 : 23;
    Ex v;
    v.sig = S;
    v.exp = lsb;
    const float want = round_f32(v, true, frac), got = hd::rz_to_frac(S, lsb, frac);
    if (!same_bits(want, got) && bad++ < 10)
      ADD_FAILURE() << "S=" << S << " lsb=" << lsb << " frac=" << frac << std::hexfloat << " want " << want << " got "
                    << got;
  }
  EXPECT_EQ(bad, 0u);
}

// RNE(acc + m * 2^e) by the fmaf split against exact addition and rounding,
// for adversarial acc (zeros, subnormals, FLT_MAX, Inf, NaN), |m| < 2^24 and
// exponents far beyond FP32's range both ways (the clamps).
TEST(GemmBlock, AddScaledRneMatchesExactRounding) {
  std::mt19937 g(11);
  size_t bad = 0;
  for (int trial = 0; trial < 300000; ++trial) {
    const float acc = adversarial_float(g);
    const int nb = int(g() % 25);
    int64_t m = int64_t(g() & ((1u << nb) - 1));
    if (g() & 1) m = -m;
    const int e = int(g() % 800) - 450;
    Ex v;
    v.sig = m;
    v.exp = e;
    const float want = round_f32(ex_add(ex_from_float(acc), v), false, 23);
    const float got = hd::add_scaled_rne(acc, m, e);
    if (!same_bits(want, got) && bad++ < 10)
      ADD_FAILURE() << std::hexfloat << "acc=" << acc << " m=" << std::dec << m << " e=" << e << std::hexfloat
                    << " want " << want << " got " << got;
  }
  EXPECT_EQ(bad, 0u);
}

// The MX block steps: scale bytes over their whole range (0x00 = 2^-127, 0xFE
// = 2^127, 0xFF = NaN), exact block dots and e8m13 block values.
TEST(GemmBlock, MxBlockStepsMatchExactRounding) {
  std::mt19937 g(13);
  size_t bad = 0;
  for (int trial = 0; trial < 200000; ++trial) {
    const float acc = g() % 4 == 0 ? 0.0f : adversarial_float(g);
    const uint8_t sa = g() % 6 == 0 ? uint8_t(g() % 2 ? 0xFF : 0xFE) : uint8_t(g()), sb = uint8_t(g());
    Ex s = ex_mul(ex_e8m0(sa), ex_e8m0(sb));
    if (g() & 1) {  // mx-exact: an integer block dot of E2M1/E2M3 images
      const int shift = int(g() % 3) * 2 + 2;  // 2, 4 or 6: E2M1 x E2M1, E2M1 x E2M3, E2M3 x E2M3
      const int32_t dot = int32_t(g() % 230401) - 115200;
      Ex d;
      d.sig = dot;
      d.exp = -shift;
      const float want = round_f32(ex_add(ex_from_float(acc), ex_mul(d, s)), false, 23);
      const float got = hd::mx_exact_block(acc, dot, sa, sb, shift);
      if (!same_bits(want, got) && bad++ < 10)
        ADD_FAILURE() << "mx-exact acc=" << std::hexfloat << acc << " dot=" << std::dec << dot << " sa=" << int(sa)
                      << " sb=" << int(sb);
    } else {  // mx-f13: an e8m13 block value (finite or not)
      float d = adversarial_float(g);
      d = std::bit_cast<float>(std::bit_cast<uint32_t>(d) & (std::isnan(d) ? 0xFFFFFFFFu : 0xFFFFFC00u));
      const float want = round_f32(ex_add(ex_from_float(acc), ex_mul(ex_from_float(d), s)), false, 23);
      const float got = hd::mx_f13_block(acc, d, sa, sb);
      if (!same_bits(want, got) && bad++ < 10)
        ADD_FAILURE() << "mx-f13 acc=" << std::hexfloat << acc << " d=" << d << std::dec << " sa=" << int(sa)
                      << " sb=" << int(sb) << std::hexfloat << " want " << want << " got " << got;
    }
  }
  EXPECT_EQ(bad, 0u);
}

// fp8-chunk128 promotion: one RNE of the exact chunk * fl32(sa * sb) + acc,
// IEEE fmaf (signed zeros as IEEE 754 §6.3 gives them).
TEST(GemmBlock, Fp8ChunkPromotionMatchesExactRounding) {
  std::mt19937 g(17);
  size_t bad = 0;
  for (int trial = 0; trial < 200000; ++trial) {
    const float acc = adversarial_float(g), chunk = adversarial_float(g);
    const float sa = adversarial_float(g), sb = adversarial_float(g);
    const float s = round_f32(ex_mul(ex_from_float(sa), ex_from_float(sb)), false, 23);
    float want = round_f32(ex_add(ex_from_float(acc), ex_mul(ex_from_float(chunk), ex_from_float(s))), false, 23);
    // IEEE fusedMultiplyAdd keeps the sign of a zero sum of two zeros of the
    // same sign: -0 + (negative zero product) stays -0 (numerics.md §5.4).
    const bool s_neg = std::signbit(sa) != std::signbit(sb);  // the sign IEEE gives fl32(sa * sb)
    const bool prod_neg_zero = (chunk == 0.0f || s == 0.0f) && std::isfinite(chunk) && std::isfinite(s) &&
                               std::signbit(chunk) != s_neg;
    if (acc == 0.0f && std::signbit(acc) && prod_neg_zero) want = -0.0f;
    const float got = hd::fp8_chunk_promote(acc, chunk, sa, sb);
    if (!same_bits(want, got) && bad++ < 10)
      ADD_FAILURE() << std::hexfloat << "acc=" << acc << " chunk=" << chunk << " sa=" << sa << " sb=" << sb;
  }
  EXPECT_EQ(bad, 0u);
}

// Every code of every GEMM element format packs into hd::PackedVal with its
// exact value (or its special kind) and a significand below 2^15: the
// precondition of the tiled GPU kernels' staging.
TEST(GemmPacked, EveryElementCodePacksExactly) {
  const Format fmts[] = {Format::E4M3, Format::E5M2, Format::E3M2, Format::E2M3, Format::E2M1, Format::BF16};
  size_t codes = 0;
  for (Format f : fmts) {
    const FormatSpec fs = spec_of(f);
    for (uint32_t c = 0; c < (1u << fs.bits); ++c, ++codes) {
      const float v = decode(fs, c);
      const hd::PackedVal p = hd::pack_value(hd::exact_elem(fs, c));
      const hd::ExactVal u = hd::unpack_value(p);
      if (std::isnan(v)) {
        ASSERT_EQ(u.kind, hd::ExKind::NaN) << short_name(f) << " code " << c;
      } else if (std::isinf(v)) {
        ASSERT_EQ(u.kind, v > 0 ? hd::ExKind::PosInf : hd::ExKind::NegInf) << short_name(f) << " code " << c;
      } else {
        ASSERT_EQ(u.kind, hd::ExKind::Finite);
        ASSERT_EQ(std::ldexp(double(u.sig), u.exp), double(v)) << short_name(f) << " code " << c;
      }
    }
  }
  EXPECT_EQ(codes, 2u * 256 + 2 * 64 + 16 + 65536);  // E4M3, E5M2; E3M2, E2M3; E2M1; BF16
}

// hd::fused_group_packed (the tiled GPU kernels' group) against the exact
// oracle on the same adversarial groups as above: every format pair, 0-32
// products, zeros, specials, C from the adversarial set, F = 13 / 25.
TEST(GemmPacked, FusedGroupMatchesExactArithmetic) {
  std::mt19937 g(77);
  const Format fmts[] = {Format::E4M3, Format::E5M2, Format::E3M2, Format::E2M3, Format::E2M1, Format::BF16};
  size_t cases = 0, bad = 0, special_groups = 0;
  for (int trial = 0; trial < 60000; ++trial) {
    const Format fa = fmts[g() % 6], fb = fa == Format::BF16 ? Format::BF16 : fmts[g() % 5];
    const FormatSpec sa = spec_of(fa), sb = spec_of(fb);
    const int n = int(g() % 33);
    const bool specials = g() % 8 == 0;
    std::vector<uint32_t> ca(n), cb(n);
    std::vector<Term> t;
    for (int k = 0; k < n; ++k) {
      ca[k] = g() & ((1u << sa.bits) - 1);
      cb[k] = g() & ((1u << sb.bits) - 1);
      if (!specials) {
        if (!std::isfinite(decode(sa, ca[k]))) ca[k] = 0;
        if (!std::isfinite(decode(sb, cb[k]))) cb[k] = 0;
      }
      if (g() % 5 == 0) ca[k] = 0;
    }
    // BF16 groups take the Hopper edges (bf16-f25) half the time, a quarter
    // of those tiny (E near the window floor).
    const bool hopper = fa == Format::BF16 && g() % 2 == 0;
    const bool tiny = hopper && g() % 4 == 0;
    if (tiny)
      for (int k = 0; k < n; ++k) ca[k] = k % 5 ? bf16_code_in(g, 0, 7) : 0, cb[k] = bf16_code_in(g, 100, 119);
    for (int k = 0; k < n; ++k) t.push_back(exact_term(fa, ca[k], fb, cb[k], 0, hopper ? -126 : -100000));
    float c = g() % 3 == 0 || tiny ? 0.0f : adversarial_float(g);
    if (!specials && !std::isfinite(c)) c = -2.5f;
    bool has_special = !std::isfinite(c);
    for (int k = 0; k < n; ++k)
      has_special |= !std::isfinite(decode(sa, ca[k])) || !std::isfinite(decode(sb, cb[k]));
    special_groups += has_special;
    const int F = fa == Format::BF16 ? 25 : (g() % 4 == 0 ? 25 : 13);
    const bool e8m13 = F == 13 && g() % 4 != 0;
    const float want = oracle_fused_group(t, c, F, e8m13, hopper);
    const float got = hd::fused_group_packed(
        n, [&](int k) { return hd::pack_value(hd::exact_elem(sa, ca[k])); },
        [&](int k) { return hd::pack_value(hd::exact_elem(sb, cb[k])); }, c, F, e8m13,
        hopper ? hd::hopper_bf16_edges() : hd::mma_sim_edges());
    if (!same_bits(want, got) && bad++ < 10)
      ADD_FAILURE() << short_name(fa) << "x" << short_name(fb) << " n=" << n << " F=" << F << " e8m13=" << e8m13
                    << " c=" << std::hexfloat << c << " want " << want << " got " << got;
    ++cases;
  }
  EXPECT_EQ(bad, 0u) << "of " << cases;
  EXPECT_GT(special_groups, 1000u) << "groups that take the special fallback";
}

// Published facts the steps must reproduce without the oracle: inside one
// F = 13 group beside 2^16 a term 8 survives and a term 4 is truncated away
// (matrix-units-and-gpu.md §2, MMA-Sim); 2 x E2M1 and 8 x E2M3 images are the
// integers OCP MX v1.0 Table 1 gives (6.0 -> 12, 7.5 -> 60).
TEST(GemmBlock, PublishedValues) {
  const FormatSpec e4m3 = spec_of(Format::E4M3);
  auto code = [&](float v) { return encode(e4m3, std::bit_cast<uint32_t>(v)); };
  // Products 256 * 256 = 2^16 and v * 1: E = 16, so terms are truncated to
  // multiples of 2^(16 - 13) = 8.
  auto group = [&](float v) {
    const uint32_t a[2] = {code(256.0f), code(v)}, b[2] = {code(256.0f), code(1.0f)};
    return hd::fused_group(
        2, [&](int k) { return hd::product_term(hd::exact_elem(e4m3, a[k]), hd::exact_elem(e4m3, b[k])); }, 0.0f, 13,
        true);
  };
  EXPECT_EQ(group(8.0f), 65536.0f + 8);
  EXPECT_EQ(group(4.0f), 65536.0f);
  EXPECT_EQ(group(12.0f), 65536.0f + 8);  // 12 truncates to 8
  EXPECT_EQ(group(-4.0f), 65536.0f);      // toward zero: -4 -> 0
  EXPECT_EQ(hd::mx_int_value(spec_of(Format::E2M1), 1, 0x7), 12);
  EXPECT_EQ(hd::mx_int_value(spec_of(Format::E2M1), 1, 0xF), -12);
  EXPECT_EQ(hd::mx_int_value(spec_of(Format::E2M3), 3, 0x1F), 60);
  EXPECT_EQ(hd::mx_int_value(spec_of(Format::E2M3), 3, 0x01), 1);  // 0.125, the smallest subnormal
  EXPECT_TRUE(hd::e8m0_scale_safe(127 + 50));
  EXPECT_FALSE(hd::e8m0_scale_safe(127 + 51));
  EXPECT_FALSE(hd::e8m0_scale_safe(0xFF));
}

// round_f32 (the exact arithmetic's rounding, the oracle of the tests above) against the format
// table's one rounding routine, encode_f64, into FP32 (frac 23) and into an 8-bit-exponent,
// 13-bit-mantissa format (e8m13, built here as a FormatSpec), RNE with IEEE overflow and RZ:
// in every binade from below the subnormals to past the overflow, at the target's grid points
// k * ulp and around every rounding boundary (an FP64 ulp of the input either side of the
// grid point and of the midpoint, and the midpoint itself), for even and odd k.
TEST(GemmBlock, RoundF32AgreesWithEncodeAtEveryBinadesBoundaries) {
  const FormatSpec e8m13{"e8m13", 22, 8, 13, 127, true, true, NanKind::Ieee, true, 0};
  auto ex_of = [](double d) {  // the exact value of a finite double
    const uint64_t b = std::bit_cast<uint64_t>(d);
    const uint64_t ef = (b >> 52) & 0x7FF, mf = b & ((uint64_t(1) << 52) - 1);
    Ex e;
    e.sig = ef ? (mf | (uint64_t(1) << 52)) : mf;
    e.exp = (ef ? int(ef) : 1) - 1075;
    if (b >> 63) e.sig = -e.sig;
    return e;
  };
  size_t bad = 0, compared = 0;
  std::mt19937_64 g(11);
  for (int frac : {13, 23}) {
    const FormatSpec f = frac == 23 ? spec_of(Format::FP32) : e8m13;
    for (int binade = -126 - frac - 3; binade <= 129; ++binade) {
      // target ulp 2^q in this binade (the subnormal quantum below 2^-126)
      const int q = std::max(binade, -126) - frac;
      const uint64_t top = uint64_t(1) << (frac + 1);
      for (uint64_t k : {uint64_t(0), uint64_t(1), uint64_t(2), uint64_t(3), top / 2, top / 2 + 1, top - 2, top - 1,
                         (g() % top) | 1, (g() % top) & ~uint64_t(1)}) {
        const double grid = std::ldexp(double(k), q), half = std::ldexp(1.0, q - 1);
        for (double base : {grid, grid + half}) {
          const double eps = base == 0 ? std::ldexp(1.0, q - 40) : std::ldexp(std::abs(base), -52);
          for (double d : {base, base + eps, base - eps})
            for (double s : {1.0, -1.0})
              for (bool rz : {false, true}) {
                const double x = s * d;
                if (!std::isfinite(x) || x == 0.0) continue;
                const float want =
                    decode(f, encode_f64(f, std::bit_cast<uint64_t>(x), 0, rz ? RoundMode::RZ : RoundMode::RNE,
                                         Overflow::Ieee));
                const float got = round_f32(ex_of(x), rz, frac);
                ++compared;
                if (!same_bits(want, got) && bad++ < 10)
                  ADD_FAILURE() << "frac " << frac << (rz ? " RZ " : " RNE ") << std::hexfloat << x << ": encode "
                                << want << ", round_f32 " << got;
              }
        }
      }
    }
  }
  EXPECT_EQ(bad, 0u) << "of " << compared;
  EXPECT_GT(compared, 20000u);
  std::printf("[round_f32] %zu values compared\n", compared);
}
