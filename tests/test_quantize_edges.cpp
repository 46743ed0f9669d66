// Edge cases of the quantizer found by trying to break it: statistics with no
// element finite on both sides, FP32 scales whose reciprocal overflows
// (fixed / delayed scales), FP32- and UE4M3-scaled recipes across the whole
// FP32 amax range (subnormal to FLT_MAX), degenerate shapes (0 rows / cols,
// 1x1, blocks larger than the tensor, huge block sizes), and stochastic
// rounding of the shapes the fast path takes.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <climits>
#include <cmath>
#include <string>
#include <vector>

#include "../emu/src/quantize_fast.hpp"
#include "mxsim/delayed_scaling.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/philox.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/scale_rule.hpp"

using namespace mxsim;

namespace {

Tensor3f filled(size_t g, size_t r, size_t c, float v) {
  Tensor3f x = Tensor3f::from_shape({g, r, c});
  x.fill(v);
  return x;
}

}  // namespace

// An all-NaN tensor, or a per-tensor FP8 tensor with one NaN (the whole tensor
// then dequantizes to NaN, numerics §3.3), leaves no element finite on both
// sides: MSE, max abs error, signal power and SQNR are undefined (NaN), not
// "exact" (0 and +inf), which is what an empty sum would otherwise report.
TEST(QuantizeEdges, StatsWithNoFinitePairAreNaN) {
  const Tensor3f all_nan = filled(1, 2, 32, NAN);
  Tensor3f one_nan = filled(1, 2, 32, 1.5f);
  one_nan(0, 1, 7) = NAN;
  struct Case {
    const char* recipe;
    const Tensor3f* x;
  } cases[] = {{"mxfp4", &all_nan}, {"mxfp8", &all_nan}, {"fp8_tensor", &all_nan}, {"nvfp4", &all_nan},
               {"fp8_tensor", &one_nan}, {"nvfp4", &one_nan}};
  for (const auto& c : cases) {
    const QuantizedTensor q = emu::quantize(*c.x, tensor_recipe(c.recipe));
    const emu::QuantStats s = emu::quant_stats(*c.x, q);
    EXPECT_EQ(s.count, 64u) << c.recipe;
    EXPECT_EQ(s.nan_out, 64u) << c.recipe;
    EXPECT_TRUE(std::isnan(s.mse)) << c.recipe << " mse " << s.mse;
    EXPECT_TRUE(std::isnan(s.max_abs_err)) << c.recipe;
    EXPECT_TRUE(std::isnan(s.signal_power)) << c.recipe;
    EXPECT_TRUE(std::isnan(s.sqnr_db)) << c.recipe << " sqnr " << s.sqnr_db;
  }
  // An exact quantization still reports +inf and 0 (one finite pair suffices).
  Tensor3f half_nan = filled(1, 2, 32, 1.0f);
  for (size_t c = 0; c < 32; ++c) half_nan(0, 0, c) = NAN;
  const auto s = emu::quant_stats(half_nan, emu::quantize(half_nan, tensor_recipe("mxfp8")));
  EXPECT_EQ(s.nan_out, 32u);
  EXPECT_EQ(s.mse, 0.0);
  EXPECT_EQ(s.sqnr_db, INFINITY);
  EXPECT_EQ(s.signal_power, 1.0);
}

// A fixed (delayed) FP32 scale below 1 / FLT_MAX has scale_inv = 1 / scale =
// +inf, so every element would dequantize to Inf or NaN (0 * inf): rejected by
// name, like a zero or non-finite fixed scale.
TEST(QuantizeEdges, FixedScaleWhoseReciprocalOverflowsIsRejected) {
  const Tensor3f x = filled(1, 1, 32, 1.0f);
  QuantSpec s = tensor_recipe("fp8_tensor");
  // 2^-128 (subnormal): 1 / 2^-128 = 2^128 > FLT_MAX.
  s.fixed_scale = std::ldexp(1.0f, -128);
  ASSERT_TRUE(std::isinf(1.0f / s.fixed_scale));
  try {
    (void)emu::quantize(x, s);
    FAIL() << "accepted a fixed scale whose reciprocal is +inf";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("fixed scale"), std::string::npos) << e.what();
  }
  s.fixed_scale = std::numeric_limits<float>::denorm_min();
  EXPECT_THROW((void)emu::quantize(x, s), std::invalid_argument);
  // 2^-127 is the smallest power of two with a finite reciprocal (2^127):
  // accepted, and 1.0 * 2^-127 encodes to E4M3 0 (underflow), dequantizing to 0.
  s.fixed_scale = std::ldexp(1.0f, -127);
  const QuantizedTensor q = emu::quantize(x, s);
  EXPECT_EQ(q.scale_inv(0, 0, 0), std::ldexp(1.0f, 127));
  const auto st = emu::quant_stats(x, q);
  EXPECT_EQ(st.underflow, 32u);
  EXPECT_EQ(st.nan_out, 0u);
  // FLT_MAX: every element saturates to 448, scale_inv = fl32(1 / FLT_MAX) is
  // a subnormal; the dequantized values are finite.
  s.fixed_scale = FLT_MAX;
  const QuantizedTensor q2 = emu::quantize(x, s);
  EXPECT_GT(q2.scale_inv(0, 0, 0), 0.0f);
  const Tensor3f d = emu::dequantize3(q2);
  for (float v : d) EXPECT_TRUE(std::isfinite(v));
}

// DelayedScaling keeps its previous scale when the new one's reciprocal would
// overflow (amax near FLT_MAX with a margin), as it already does for a scale
// that underflows to 0: its spec must always be one quantize() accepts.
TEST(QuantizeEdges, DelayedScaleKeepsAFiniteReciprocal) {
  DelayedScaling d(Format::E4M3, 4, 20, AmaxAlgo::Max);
  d.record(FLT_MAX);
  d.update();
  // fl32(448 / FLT_MAX) = 1.3e-36; / 2^20 = 1.25e-42 < 1 / FLT_MAX: kept at 1.
  const QuantSpec s = d.spec(tensor_recipe("fp8_tensor"));
  EXPECT_EQ(s.fixed_scale, 1.0f);
  EXPECT_TRUE(std::isfinite(1.0f / s.fixed_scale));
  EXPECT_NO_THROW((void)emu::quantize(filled(1, 1, 32, 1.0f), s));
  // A margin that keeps the reciprocal finite is taken: 448 / 2^100 / 2^20.
  DelayedScaling d2(Format::E4M3, 1, 20, AmaxAlgo::Max);
  d2.record(std::ldexp(1.0f, 100));
  d2.update();
  EXPECT_EQ(d2.scale(), 448.0f * std::ldexp(1.0f, -120));
}

// Every recipe, for amax at every FP32 binade from the smallest subnormal to
// FLT_MAX: the scales are finite and positive, no finite input dequantizes to
// NaN, only inputs >= 2^127 may overflow to Inf (and the statistics then say
// so), nothing dequantizes above amax by more than
// the scale's own rounding (E4M3 block scales round up by at most 2^-4
// relative; a scale clamped at FLT_MAX leaves elements in the subnormals, up
// to 2x), and a block whose amax is an FP32 normal with an unclamped scale
// keeps its largest element within the element format's relative step.
TEST(QuantizeEdges, ScalesAndDequantizationSaneAcrossTheWholeAmaxRange) {
  std::vector<float> amaxes;
  for (int e = -149; e <= 127; ++e) {
    amaxes.push_back(std::ldexp(1.0f, e));
    if (e > -149) amaxes.push_back(std::ldexp(1.5f, e));
  }
  amaxes.push_back(FLT_MAX);
  amaxes.push_back(std::nextafter(FLT_MAX, 0.0f));
  amaxes.push_back(std::numeric_limits<float>::denorm_min() * 3);
  for (const std::string& name : tensor_recipe_names()) {
    const QuantSpec spec = tensor_recipe(name);
    for (float amax : amaxes) {
      // Row: amax, -amax/3, amax/7, ..., 0 (values below amax at several ratios).
      Tensor3f x = Tensor3f::from_shape({1, 32, 32});
      for (size_t r = 0; r < 32; ++r)
        for (size_t c = 0; c < 32; ++c) {
          const float div = float(1 + 2 * ((r + c) % 9));
          x(0, r, c) = ((r + c) % 2 ? -amax : amax) / div;
        }
      const QuantizedTensor q = emu::quantize(x, spec);
      const std::string where = name + " amax " + std::to_string(amax) + " (" +
                                std::to_string(std::bit_cast<uint32_t>(amax)) + ")";
      if (spec.scale_kind == ScaleKind::FP32) {
        for (float si : q.scale_inv) ASSERT_TRUE(std::isfinite(si) && si > 0) << where << " scale_inv " << si;
      } else if (spec.scale_kind == ScaleKind::UE4M3) {
        ASSERT_TRUE(std::isfinite(q.tensor_scale_inv) && q.tensor_scale_inv > 0) << where;
      } else {
        for (uint8_t b : q.scale_bytes) ASSERT_NE(b, 0xFF) << where;
      }
      // Clamped regime (numerics §3.3): the scale stops at FLT_MAX (E8M0: s at
      // -127), so x * scale lands in the element format's subnormals, where RNE
      // may round a value up to at most twice itself.
      const float emax = decode(spec_of(spec.elem), spec_of(spec.elem).max_code());
      const bool clamped = spec.scale_kind == ScaleKind::FP32    ? double(amax) < double(emax) / double(FLT_MAX)
                           : spec.scale_kind == ScaleKind::UE4M3 ? double(amax) < 2688.0 / double(FLT_MAX)
                                                                 : double(amax) < 0x1p-100;
      // E2M1 under EVEN rounds amax / 2^s = 3.5 up to 4 (8/7); FP8 by half a step.
      const double bound = clamped ? 2.0 * (1 + 0x1p-20) : 8.0 / 7.0;
      const Tensor3f d = emu::dequantize3(q);
      bool overflowed = false;
      for (size_t i = 0; i < d.size(); ++i) {
        const float v = d.data()[i];
        ASSERT_FALSE(std::isnan(v)) << where << " element " << i;
        if (std::isinf(v)) {
          // Only an element in FP32's top binade rounding up to 2^128 (§2.4).
          ASSERT_GE(std::fabs(x.data()[i]), 0x1p127f) << where << " element " << i;
          overflowed = true;
          continue;
        }
        ASSERT_LE(std::fabs(double(v)), double(amax) * bound) << where << " element " << i;
      }
      // The statistics must show an overflow, never drop it.
      const emu::QuantStats st = emu::quant_stats(x, q);
      if (overflowed) {
        EXPECT_EQ(st.mse, INFINITY) << where;
        EXPECT_EQ(st.sqnr_db, -INFINITY) << where;
      } else {
        EXPECT_TRUE(std::isfinite(st.mse)) << where;
      }
      // FP8 with an unclamped scale (amax >= fp8_max / FLT_MAX, normal): the
      // largest element is within half an E4M3/E5M2 step (2^-4 / 2^-3 relative).
      if (spec.scale_kind == ScaleKind::FP32 && amax >= FLT_MIN * 448.0f && !overflowed) {
        const double rel = std::fabs(double(d(0, 0, 0)) - double(amax)) / double(amax);
        EXPECT_LE(rel, spec.elem == Format::E5M2 ? 0.125 : 0.0625) << where;
      }
    }
  }
}

// Shapes: 0 rows, 0 cols, 0 groups, 1x1, blocks larger than the tensor,
// block sizes near INT_MAX, ragged 3-D groups. Every recipe on each shape
// must produce arrays of the documented sizes and a dequantization that
// matches the source shape, on the fast path and the reference alike.
TEST(QuantizeEdges, DegenerateShapesEveryRecipe) {
  struct Shape {
    size_t g, r, c;
  } shapes[] = {{1, 0, 0}, {1, 0, 5}, {1, 5, 0}, {0, 3, 3}, {1, 1, 1}, {3, 1, 33}, {2, 33, 1}, {2, 17, 65}};
  for (const auto& name : tensor_recipe_names()) {
    for (const auto& sh : shapes) {
      for (Axis axis : {Axis::Cols, Axis::Rows}) {
        Tensor3f x = Tensor3f::from_shape({sh.g, sh.r, sh.c});
        for (size_t i = 0; i < x.size(); ++i) x.data()[i] = float(int(i % 13) - 6) * 0.37f;
        const QuantSpec spec = tensor_recipe(name);
        const std::string where = name + " [" + std::to_string(sh.g) + "," + std::to_string(sh.r) + "," +
                                  std::to_string(sh.c) + "] axis " + (axis == Axis::Rows ? "rows" : "cols");
        const QuantizedTensor q = emu::quantize(x, spec, axis);
        EXPECT_EQ(q.data.shape()[0], sh.g) << where;
        EXPECT_EQ(q.data.shape()[1], q.srows()) << where;
        EXPECT_EQ(q.data.shape()[2], q.row_bytes()) << where;
        const Tensor3f d = emu::dequantize3(q);
        ASSERT_EQ(d.shape()[0], sh.g) << where;
        ASSERT_EQ(d.shape()[1], sh.r) << where;
        ASSERT_EQ(d.shape()[2], sh.c) << where;
        for (size_t i = 0; i < d.size(); ++i) {
          ASSERT_TRUE(std::isfinite(d.data()[i])) << where;
          // Every value here is far from zero relative to its block's amax
          // (ratio >= 0.37 / 2.22), so no element format flushes it; signs match.
          if (x.data()[i] != 0) {
            EXPECT_EQ(std::signbit(d.data()[i]), std::signbit(x.data()[i])) << where;
          }
        }
        const auto s = emu::quant_stats(x, q);
        EXPECT_EQ(s.count, x.size()) << where;
      }
    }
  }
  // Blocks far larger than the tensor: one block, the same result as a block of
  // exactly the tensor's extent.
  Tensor3f x = Tensor3f::from_shape({1, 3, 5});
  for (size_t i = 0; i < x.size(); ++i) x.data()[i] = float(i) - 7.25f;
  QuantSpec big = tensor_recipe("mxfp8");
  big.block_rows = INT_MAX;
  big.block_cols = INT_MAX;
  QuantSpec exact = big;
  exact.block_rows = 3;
  exact.block_cols = 5;
  const QuantizedTensor qb = emu::quantize(x, big), qe = emu::quantize(x, exact);
  ASSERT_EQ(qb.scale_bytes.size(), 1u);
  EXPECT_EQ(qb.scale_bytes(0, 0, 0), qe.scale_bytes(0, 0, 0));
  EXPECT_EQ(qb.data, qe.data);
}

// Stochastic rounding never takes the fast path; on the shapes the fast path
// takes for RNE (1x32 rowwise, 32x32 tiles, ragged), with fast kernels on and
// off, SR gives the same bits, and RNE on both paths too. Since both SR runs are
// the reference, SR is also checked against codes recomputed here from the
// contract: scale s from the block amax by the recipe's rule (§3.1), word
// PhiloxStream{seed, stream}(sr_index_base + (g * rows + r) * cols + c) for
// logical element (g, r, c) (§2.5), code encode(x, s, SR, saturating) -- the
// group term and the logical (not storage) index included: rowwise, columnwise
// and tiles, three groups, a non-zero index base.
TEST(QuantizeEdges, StochasticRoundingSameWithFastPathOnOrOffAndFollowsTheStreamFormula) {
  Tensor3f x = Tensor3f::from_shape({3, 33, 70});
  for (size_t i = 0; i < x.size(); ++i) x.data()[i] = std::sin(float(i) * 0.7f) * float(1 + i % 5);
  const size_t G = x.shape(0), R = x.shape(1), C = x.shape(2);
  for (const char* name : {"mxfp4", "mxfp4_2d", "mxfp8", "mxfp8_2d"}) {
    for (RoundMode m : {RoundMode::RNE, RoundMode::Stochastic}) {
      QuantSpec s = tensor_recipe(name);
      s.round = m;
      s.sr.seed = 12345;
      s.sr.stream = 3;
      emu::fast::set_enabled(true);
      const QuantizedTensor a = emu::quantize(x, s);
      emu::fast::set_enabled(false);
      const QuantizedTensor b = emu::quantize(x, s);
      emu::fast::set_enabled(true);
      EXPECT_EQ(a.data, b.data) << name;
      EXPECT_EQ(a.scale_bytes, b.scale_bytes) << name;
      if (m != RoundMode::Stochastic) continue;
      s.sr_index_base = 1000003;
      for (Axis axis : {Axis::Cols, Axis::Rows}) {
        const QuantizedTensor q = emu::quantize(x, s, axis);
        const bool tile = s.block_rows > 1;
        const bool tr = !tile && axis == Axis::Rows;  // 1-D columnwise: storage is the transpose
        ASSERT_EQ(q.transposed, tr) << name;
        const FormatSpec fe = spec_of(s.elem);
        size_t checked = 0, group_term_matters = 0;
        for (size_t g = 0; g < G; ++g)
          for (size_t r = 0; r < R; ++r)
            for (size_t c = 0; c < C; ++c) {
              const size_t sr = tr ? c : r, sc = tr ? r : c;  // storage coordinates
              // The block: rows [br0, br1) x cols [bc0, bc1) of storage.
              const size_t bh = tile ? 32 : 1, bw = 32;
              const size_t br0 = sr / bh * bh, bc0 = sc / bw * bw;
              float amax = 0;
              for (size_t i = br0; i < std::min(br0 + bh, tr ? C : R); ++i)
                for (size_t j = bc0; j < std::min(bc0 + bw, tr ? R : C); ++j)
                  amax = std::max(amax, std::fabs(tr ? x(g, j, i) : x(g, i, j)));
              const int se = int(e8m0_scale(s.rule, f32_bits(amax), fe)) - 127;
              const uint64_t index = s.sr_index_base + (g * R + r) * C + c;
              const uint32_t want = encode(fe, f32_bits(x(g, r, c)), se, RoundMode::Stochastic, Overflow::Saturate,
                                           PhiloxStream{s.sr.seed, s.sr.stream}(index));
              ASSERT_EQ(q.code(g, sr, sc), want) << name << (tr ? " columnwise" : " rowwise") << " g=" << g
                                                 << " r=" << r << " c=" << c;
              ++checked;
              // Without the group term (index (r * cols + c)) the code would differ here.
              const uint32_t no_group = encode(fe, f32_bits(x(g, r, c)), se, RoundMode::Stochastic,
                                               Overflow::Saturate,
                                               PhiloxStream{s.sr.seed, s.sr.stream}(s.sr_index_base + r * C + c));
              group_term_matters += g > 0 && no_group != want;
            }
        EXPECT_EQ(checked, G * R * C);
        EXPECT_GT(group_term_matters, 100u) << name << ": the data must tell the group term apart";
      }
    }
  }
}

// API misuse of the one rounding routine: scale exponents far outside any
// E8M0 range, up to INT_MIN / INT_MAX. x * 2^-s is then far below every
// format's smallest subnormal (a signed zero under RNE / RZ / SR) or far above
// its maximum (saturation, or Inf/NaN under the IEEE-like policy), exactly as
// at s = +-1000; no signed overflow inside encode (UBSan-clean).
TEST(QuantizeEdges, EncodeWithExtremeScaleExponents) {
  const int huge[] = {1000, 4096, 1 << 20, (1 << 20) + 1, 1 << 30, INT_MAX - 200, INT_MAX};
  for (Format fmt : {Format::E2M1, Format::E4M3, Format::E5M2, Format::E5M2FNUZ, Format::BF16, Format::FP32}) {
    const FormatSpec f = spec_of(fmt);
    for (float x : {1.0f, -3.5f, FLT_MAX, std::numeric_limits<float>::denorm_min(), -FLT_MIN}) {
      const uint32_t b = f32_bits(x);
      for (RoundMode m : {RoundMode::RNE, RoundMode::RZ, RoundMode::Stochastic}) {
        const uint32_t small = encode(f, b, 1000, m, Overflow::Saturate, 0xFFFFFFFFu);
        const uint32_t big_sat = encode(f, b, -1000, m, Overflow::Saturate, 0xFFFFFFFFu);
        const uint32_t big_ieee = encode(f, b, -1000, m, Overflow::Ieee, 0xFFFFFFFFu);
        EXPECT_EQ(decode(f, small), 0.0f) << f.name << " " << x;
        for (int s : huge) {
          EXPECT_EQ(encode(f, b, s, m, Overflow::Saturate, 0xFFFFFFFFu), small) << f.name << " " << x << " s=" << s;
          EXPECT_EQ(encode(f, b, -s, m, Overflow::Saturate, 0xFFFFFFFFu), big_sat) << f.name << " " << x << " s=-" << s;
          EXPECT_EQ(encode(f, b, -s, m, Overflow::Ieee, 0xFFFFFFFFu), big_ieee) << f.name << " " << x << " s=-" << s;
        }
        EXPECT_EQ(encode(f, b, INT_MIN, m, Overflow::Saturate, 0xFFFFFFFFu), big_sat) << f.name << " " << x;
        EXPECT_EQ(encode(f, b, INT_MIN, m, Overflow::Ieee, 0xFFFFFFFFu), big_ieee) << f.name << " " << x;
      }
    }
  }
}

// quantize_bf16 with a shape whose element count wraps around size_t (here to
// exactly 0, which would pass the null-data check) is rejected by name.
TEST(QuantizeEdges, Bf16ShapeOverflowIsRejected) {
  const size_t half = size_t(1) << 32;
  for (const QuantSpec& s : {tensor_recipe("mxfp8"), tensor_recipe("fp8_tensor")}) {
    try {
      (void)emu::quantize_bf16(nullptr, 1, half, half, s);
      FAIL() << "accepted a [1, 2^32, 2^32] shape";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("overflows"), std::string::npos) << e.what();
    }
    EXPECT_THROW((void)emu::quantize_bf16(nullptr, half, half, 1, s), std::invalid_argument);
  }
  // An empty shape whose other extents still overflow the strides is refused too (building
  // it overflowed xtensor's signed strides: undefined behaviour); realistic empty shapes stay
  // fine with null data.
  for (const QuantSpec& s : {tensor_recipe("mxfp8"), tensor_recipe("fp8_tensor"), tensor_recipe("mxfp4")}) {
    try {
      (void)emu::quantize_bf16(nullptr, 0, half, half, s);
      FAIL() << "accepted a [0, 2^32, 2^32] shape";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("overflows"), std::string::npos) << e.what();
    }
    EXPECT_EQ(emu::quantize_bf16(nullptr, 0, size_t(1) << 20, 64, s).data.size(), 0u);
    EXPECT_EQ(emu::quantize_bf16(nullptr, 3, 0, size_t(1) << 20, s).data.size(), 0u);
  }
}
