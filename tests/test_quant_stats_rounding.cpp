// The bias and rounding choices of QuantStats (numerics.md §4.6): mean_err, rounded,
// rounded_up, expected_up. Oracles: a block whose every rounding is worked out by hand on the
// E2M1 grid of the OCP MX v1.0 spec (0, 0.5, 1, 1.5, 2, 3, 4, 6), and, for random data under
// every scale kind that records choices, the neighbours found by enumerating every code of the
// element format (not the encoder's round-toward-zero), with the scaled value rebuilt from the
// stored block scale by the formulas of numerics.md §3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "mxsim/emu/quantize.hpp"
#include "mxsim/format.hpp"
#include "mxsim/hd/quant_block.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/spec_args.hpp"

namespace {
using namespace mxsim;

// One MXFP4 block of 32 (EVEN rule, amax 6: scale 2^0), RNE. By hand, on the E2M1 grid:
//   x       lo..hi   p_up = (|x| - lo) / (hi - lo)   RNE
//   6       on the grid                              6
//   1.25    1..1.5   0.5                             1    (tie to the even code 2: down)
//   2.5     2..3     0.5                             2    (tie to even code 4: down)
//   0.75    0.5..1   0.5                             1    (tie to even code 2: up)
//   1.1f    1..1.5   (1.1f - 1) / 0.5                1    (down)
//   3.9f    3..4     (3.9f - 3) / 1                  4    (up)
//   -4.5    4..6     0.25                            -4   (down)
//   0.1f    0..0.5   0.1f / 0.5                      0    (down)
//   0 (24 more)  on the grid
TEST(QuantStatsRounding, HandWorkedMxfp4Block) {
  const std::vector<float> xs = {6.0f, 1.25f, 2.5f, 0.75f, 1.1f, 3.9f, -4.5f, 0.1f};
  const std::vector<float> ds = {6.0f, 1.0f, 2.0f, 1.0f, 1.0f, 4.0f, -4.0f, 0.0f};
  Tensor2f x = xt::zeros<float>({size_t(1), size_t(32)});
  for (size_t i = 0; i < xs.size(); ++i) x(0, i) = xs[i];
  QuantSpec s = named_spec("mxfp4");
  s.rule = ScaleRule::Even;
  const QuantizedTensor q = emu::quantize(x, s);
  const Tensor2f d = emu::dequantize(q);
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(d(0, i), ds[i]) << "element " << i;
  const emu::QuantStats st = emu::quant_stats(x, q);
  EXPECT_EQ(st.rounded, 7u);
  EXPECT_EQ(st.rounded_up, 2u);
  // in index order: one tree_sum chunk holds the 32 terms, summed in order (numerics.md §6)
  const double p[] = {0.5, 0.5, 0.5, (double(1.1f) - 1.0) / 0.5, (double(3.9f) - 3.0) / 1.0, 0.25, double(0.1f) / 0.5};
  double want_p = 0;
  for (double v : p) want_p += v;
  EXPECT_EQ(st.expected_up, want_p);
  double sum_err = 0;
  for (size_t i = 0; i < 32; ++i) sum_err += double(d(0, i)) - double(x(0, i));
  EXPECT_EQ(st.mean_err, sum_err / 32.0);
  EXPECT_LT(st.mean_err, 0.0);  // RNE here shrank more than it grew
}

/// Every finite non-negative value of format f, ascending, with its code.
std::vector<std::pair<double, uint32_t>> grid(const FormatSpec& f) {
  std::vector<std::pair<double, uint32_t>> g;
  for (uint32_t c = 0; c < (1u << (f.bits - 1)); ++c) {
    const float v = decode(f, c);
    if (std::isfinite(v)) g.push_back({double(v), c});
  }
  std::sort(g.begin(), g.end());
  return g;
}

struct Expect {
  size_t rounded = 0, up = 0;
  double p = 0;
};

/// The choices of q (one group, 256 elements: one tree_sum chunk, summed in index order) from the
/// enumerated grid: the scaled |v| of element i is |x| * 2^-s (E8M0) or fl32(|x| * mul) with
/// mul = min(fl32(1 / fl32(scale * S_dec)), FLT_MAX) (UE4M3, numerics.md §3.3).
Expect by_enumeration(const Tensor2f& x, const QuantizedTensor& q) {
  const FormatSpec f = spec_of(q.spec.elem);
  const auto g = grid(f);
  Expect e;
  for (size_t c = 0; c < x.shape(1); ++c) {
    const float xv = x(0, c);
    const uint8_t byte = q.scale_bytes(0, 0, c / q.block_cols());
    double av = 0;
    if (q.spec.scale_kind == ScaleKind::E8M0) {
      if (byte == 0xFF) continue;
      av = std::ldexp(std::fabs(double(xv)), -(int(byte) - 127));
    } else {
      const float f1 = 1.0f / (decode(spec_of(Format::E4M3), byte) * q.tensor_scale_inv);
      av = double(std::fabs(xv) * std::min(f1, 3.4028234663852886e38f));
    }
    size_t k = 0;  // g[k] <= av < g[k + 1]
    while (k + 1 < g.size() && g[k + 1].first <= av) ++k;
    if (g[k].first == av || k + 1 == g.size()) continue;  // on the grid, or at / past the largest value
    ++e.rounded;
    const uint32_t mag = q.code(0, 0, c) & ~f.sign_bit();
    e.up += mag == g[k + 1].second;
    e.p += (av - g[k].first) / (g[k + 1].first - g[k].first);
  }
  return e;
}

// Random data (256 elements, magnitudes over 2^-12 .. 2^4 so blocks hold subnormal and
// saturating elements) under RNE and stochastic rounding, with and without the Hadamard
// transform (whose choices are those of H x, the values the quantizer encoded), for the E8M0
// element formats and NVFP4's UE4M3 scales. Stochastic rounding's rounded_up differs from RNE's
// and stays within a few sigma of its expectation (a sanity bound beside the exact checks).
TEST(QuantStatsRounding, EveryScaleKindAgainstEnumeratedGrids) {
  std::mt19937 rng(7);
  Tensor2f x = xt::zeros<float>({size_t(1), size_t(256)});
  for (size_t i = 0; i < 256; ++i)
    x(0, i) = std::ldexp(std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng),
                         std::uniform_int_distribution<int>(-12, 4)(rng));
  // E5M2 (Inf and NaN codes above its largest value), E2M3, and the FNUZ formats (NaN = 0x80)
  // beside the MX ones: the code order the upper neighbour relies on
  for (const char* name : {"mxfp4", "mxfp8", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp8_e4m3fnuz", "mxfp8_e5m2fnuz",
                           "nvfp4"})
    for (bool sr : {false, true})
      for (bool had : {false, true}) {
        const std::string n(name);
        QuantSpec s = named_spec(n.find("fnuz") != std::string::npos ? "mxfp8" : name);
        if (n == "mxfp8_e4m3fnuz") s.elem = Format::E4M3FNUZ;
        if (n == "mxfp8_e5m2fnuz") s.elem = Format::E5M2FNUZ;
        if (had && s.block_cols % 16 != 0) continue;
        s.hadamard16 = had;
        if (sr) {
          s.round = RoundMode::Stochastic;
          s.sr = PhiloxStream{11, 3};
        }
        const QuantizedTensor q = emu::quantize(x, s);
        Tensor2f src = x;
        if (had) {  // the quantizer's own input: H x in runs of 16 along the row
          for (size_t c0 = 0; c0 < 256; c0 += 16) {
            float v[16];
            for (int k = 0; k < 16; ++k) v[k] = src(0, c0 + size_t(k));
            hd::hadamard16(v);
            for (int k = 0; k < 16; ++k) src(0, c0 + size_t(k)) = v[k];
          }
        }
        const Expect e = by_enumeration(src, q);
        const emu::QuantStats st = emu::quant_stats(x, q);
        const std::string what = std::string(name) + (sr ? " SR" : " RNE") + (had ? " H" : "");
        EXPECT_GT(e.rounded, 100u) << what;
        EXPECT_EQ(st.rounded, e.rounded) << what;
        EXPECT_EQ(st.rounded_up, e.up) << what;
        EXPECT_EQ(st.expected_up, e.p) << what;
        if (sr) {
          EXPECT_LT(std::fabs(double(st.rounded_up) - e.p), 5.0 * std::sqrt(double(e.rounded))) << what;
        }
      }
}

// FP32-scale recipes record no choices (their stored scale_inv does not give the quantizer's
// factor back): rounded stays 0, the bias is still there.
TEST(QuantStatsRounding, Fp32ScalesRecordNoChoices) {
  Tensor2f x = xt::zeros<float>({size_t(1), size_t(128)});
  for (size_t i = 0; i < 128; ++i) x(0, i) = 0.37f * float(i) - 20.0f;
  for (const char* name : {"fp8_block", "fp8_tensor"}) {
    const emu::QuantStats st = emu::quant_stats(x, emu::quantize(x, tensor_recipe(name)));
    EXPECT_EQ(st.rounded, 0u) << name;
    EXPECT_EQ(st.rounded_up, 0u) << name;
    EXPECT_EQ(st.expected_up, 0.0) << name;
    EXPECT_TRUE(std::isfinite(st.mean_err)) << name;
  }
  // nothing to compare: mean_err is NaN with the other error statistics
  Tensor2f n = {{NAN, NAN}};
  EXPECT_TRUE(std::isnan(emu::quant_stats(n, emu::quantize(n, named_spec("fp8_tensor"))).mean_err));
}

}  // namespace
