// Stochastic rounding: the random words (Philox4x32-10 mapping of
// philox.hpp, checked against Random123's published known-answer vectors),
// reproducibility per (seed, stream, index), and unbiasedness of the mean.
#include <gtest/gtest.h>

#include <cmath>

#include "mxsim/emu/quantize.hpp"
#include "mxsim/philox.hpp"
#include "mxsim/rounding.hpp"

using namespace mxsim;

// Random123 tests/kat_vectors, philox4x32 10: (ctr, key) -> out.
// PhiloxStream: key = (seed lo, seed hi), ctr = (i/4 lo, i/4 hi, stream lo, stream hi).
TEST(Stochastic, PhiloxKnownAnswers) {
  const PhiloxStream zero{0, 0};
  const uint32_t z[4] = {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(zero(uint64_t(i)), z[i]);
  // The other two vectors need counter words 0-1 above 2^62, beyond an element
  // index: they go through block(b), the words of elements 4b .. 4b+3.
  const PhiloxStream ones{~uint64_t(0), ~uint64_t(0)};
  const uint32_t o[4] = {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu};
  const auto ob = ones.block(~uint64_t(0));
  for (int j = 0; j < 4; ++j) EXPECT_EQ(ob[j], o[j]);
  // pi digits: ctr = (243f6a88, 85a308d3, 13198a2e, 03707344), key = (a4093822, 299f31d0)
  const PhiloxStream pi{0x299f31d0a4093822ull, 0x0370734413198a2eull};
  const uint32_t p[4] = {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u};
  const auto pb = pi.block(0x85a308d3243f6a88ull);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(pb[j], p[j]);
  // and block(b)[j] is the word of element 4b + j
  const PhiloxStream any{77, 5};
  for (uint64_t i = 0; i < 64; ++i) EXPECT_EQ(any(i), any.block(i / 4)[i % 4]);
}

TEST(Stochastic, SameKeySameBitsDifferentStreamsDiffer) {
  Tensor2f x = Tensor2f::from_shape({8, 64});
  for (size_t i = 0; i < x.size(); ++i) x.data()[i] = std::sin(float(i)) * 5.0f;
  QuantSpec s = tensor_recipe("mxfp4");
  s.round = RoundMode::Stochastic;
  s.sr = PhiloxStream{1234, make_stream(7, 3)};
  const auto a = emu::quantize(x, s), b = emu::quantize(x, s);
  EXPECT_EQ(a.data, b.data);
  EXPECT_EQ(a.scale_bytes, b.scale_bytes);
  QuantSpec s2 = s;
  s2.sr.stream = make_stream(7, 4);  // next step
  EXPECT_NE(emu::quantize(x, s2).data, a.data);
  QuantSpec s3 = s;
  s3.sr.seed = 1235;
  EXPECT_NE(emu::quantize(x, s3).data, a.data);
  // The word of element (r, c) is sr(r * cols + c): check every code.
  for (size_t r = 0; r < 8; ++r)
    for (size_t c = 0; c < 64; ++c) {
      const int sexp = int(a.scale_bytes(0, r, c / 32)) - 127;
      EXPECT_EQ(a.code(0, r, c), encode(spec_of(Format::E2M1), f32_bits(x(r, c)), sexp, RoundMode::Stochastic,
                                        Overflow::Saturate, s.sr(r * 64 + c)));
    }
  // Columnwise storage draws by logical index too: element (r, c) uses the same word.
  const auto t = emu::quantize(x, s, Axis::Rows);
  for (size_t r = 0; r < 8; ++r)
    for (size_t c = 0; c < 64; ++c) {
      const int sexp = int(t.scale_bytes(0, c, r / 32)) - 127;
      EXPECT_EQ(t.code(0, c, r), encode(spec_of(Format::E2M1), f32_bits(x(r, c)), sexp, RoundMode::Stochastic,
                                        Overflow::Saturate, s.sr(r * 64 + c)));
    }
}

TEST(Stochastic, MeanIsUnbiased) {
  // For v between grid points lo < v < hi, P(up) = floor(f * 2^32) / 2^32
  // with f = (v - lo) / (hi - lo). Over N draws the count of "up" has mean
  // N p and standard deviation sqrt(N p (1 - p)); with a fixed seed the count
  // is deterministic, and the bound of 6 standard deviations (probability of
  // exceedance < 2e-9 for a fair generator) is checked. The mean of the
  // decoded values must then be v within (hi - lo) * 6 sd / N.
  struct Case {
    Format f;
    float v;
    int s;
  };
  const Case cases[] = {
      {Format::E2M1, 1.3f, 0},   {Format::E2M1, 5.9f, 0},    {Format::E2M1, 0.1f, 0},
      {Format::E4M3, 300.0f, 0}, {Format::E4M3, 0.001f, 0},  {Format::E5M2, 3.3f, 0},
      {Format::BF16, 1.00390625f + 1e-4f, 0}, {Format::E2M1, 13.0f, 1},  // 13 / 2 = 6.5 > 6 -> saturates, biased
  };
  const uint64_t N = 400000;
  for (const auto& k : cases) {
    const FormatSpec fs = spec_of(k.f);
    const PhiloxStream sr{42, make_stream(1, 0)};
    const uint32_t dn = encode(fs, f32_bits(k.v), k.s, RoundMode::RZ);
    const double lo = decode(fs, dn), hi_code_v = decode(fs, dn + 1);
    uint64_t up = 0;
    double sum = 0;
    for (uint64_t i = 0; i < N; ++i) {
      const uint32_t c = encode(fs, f32_bits(k.v), k.s, RoundMode::Stochastic, Overflow::Saturate, sr(i));
      up += c != dn;
      sum += decode(fs, c);
    }
    const double target = std::ldexp(double(k.v), -k.s);
    if (target > decode(fs, fs.max_code())) {  // beyond max: every draw saturates (documented bias)
      EXPECT_EQ(up, 0u);
      continue;
    }
    const double p = (target - lo) / (hi_code_v - lo);
    const double sd = std::sqrt(double(N) * p * (1 - p));
    EXPECT_LE(std::fabs(double(up) - double(N) * p), 6 * sd + 1) << short_name(k.f) << " " << k.v;
    EXPECT_LE(std::fabs(sum / double(N) - target), (hi_code_v - lo) * (6 * sd + 1) / double(N))
        << short_name(k.f) << " " << k.v;
  }
}

TEST(Stochastic, QuantizedBlockMeanIsUnbiased) {
  // MXFP4 FLOOR blocks: element 0 = 6 pins s = 0; the other 31 elements are
  // 1.3 (between 1 and 1.5). Over 4096 rows the mean of the dequantized 1.3s
  // is 1.3 within 6 sd; RNE would give 1.5 everywhere (bias 0.2).
  const size_t R = 4096;
  Tensor2f x = Tensor2f::from_shape({R, 32});
  x.fill(1.3f);
  for (size_t r = 0; r < R; ++r) x(r, 0) = 6.0f;
  QuantSpec s = tensor_recipe("mxfp4_ocp");
  s.round = RoundMode::Stochastic;
  s.sr = PhiloxStream{99, 5};
  const Tensor2f d = emu::dequantize(emu::quantize(x, s));
  double sum = 0;
  for (size_t r = 0; r < R; ++r)
    for (size_t c = 1; c < 32; ++c) sum += d(r, c);
  const double n = double(R * 31), p = (double(1.3f) - 1.0) / 0.5;
  const double sd_mean = 0.5 * std::sqrt(p * (1 - p) / n);
  EXPECT_LE(std::fabs(sum / n - double(1.3f)), 6 * sd_mean);
  s.round = RoundMode::RNE;
  EXPECT_EQ(emu::dequantize(emu::quantize(x, s))(0, 1), 1.5f);
}
