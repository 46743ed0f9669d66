// Quantizer tests (emu::quantize / dequantize / quant_stats / block_stats)
// against expectations computed independently: block scales by the rule's
// written formula on doubles / frexp (not scale_rule.hpp), element codes by the
// exact oracle (test_formats_oracle.hpp), FP32 scales by the TransformerEngine
// formulas written out here (formats-and-scaling.md §8, §9), and small cases
// computed by hand.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <climits>
#include <cmath>
#include <functional>
#include <random>

#include "mxsim/hd/quant_block.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/rounding.hpp"
#include "test_formats_oracle.hpp"

using namespace mxsim;

namespace {

const oracle::Table& table_of(Format f) {
  static std::vector<oracle::Table> ts;
  static std::vector<Format> fs;
  for (size_t i = 0; i < fs.size(); ++i)
    if (fs[i] == f) return ts[i];
  for (const auto& of : oracle::all_formats())
    if (of.name == short_name(f)) {
      ts.emplace_back(of);
      fs.push_back(f);
      return ts.back();
    }
  throw std::runtime_error("no oracle table");
}

uint32_t oracle_code(Format f, float x, int s) {
  const auto& t = table_of(f);
  return oracle::expect(t, oracle::decide(t, std::bit_cast<uint32_t>(x), s), oracle::Mode::RNE, oracle::Ov::Sat, 0);
}

double max_finite(Format f) {
  const auto& t = table_of(f);
  const int e = int(boost::multiprecision::msb(t.vals.back())) - oracle::K;
  return std::ldexp(double(t.vals.back() >> (oracle::K + e - 30)), e - 30);
}
int emax_of(Format f) { return std::ilogb(max_finite(f)); }
int mbits_of(Format f) { return table_of(f).f.mbits; }

/// Scale exponent by the rule's formula, on doubles (finite amax > 0).
int ref_scale_exp(ScaleRule r, float amax, Format f) {
  const double a = amax;
  const int E = std::ilogb(a);  // exact floor(log2) for FP32 values held in double
  int s = 0;
  switch (r) {
    case ScaleRule::Floor: s = E - emax_of(f); break;
    case ScaleRule::Ceil: s = (std::ldexp(1.0, E) == a ? E : E + 1) - emax_of(f); break;
    case ScaleRule::Even: s = std::max(-127, std::ilogb(a + std::ldexp(1.0, std::max(E, -126) - mbits_of(f) - 1))) - emax_of(f); break;
    case ScaleRule::Rceil: {
      const float d = amax * (1.0f / float(max_finite(f)));
      if (d == 0.0f) { s = -127; break; }
      const int Ed = std::ilogb(double(d));
      s = std::ldexp(1.0, Ed) == double(d) ? Ed : Ed + 1;
      break;
    }
  }
  return std::clamp(s, -127, 127);
}

/// Reference MX quantization of one logical 2-D tensor: scale bytes in block
/// order (storage coordinates) and the dequantized values in logical order.
struct RefMx {
  std::vector<uint8_t> scales;
  std::vector<uint32_t> codes;  // storage order
  std::vector<float> deq;       // logical order
};
RefMx ref_mx(const Tensor2f& x, Format f, ScaleRule rule, size_t br, size_t bc, bool transposed) {
  const size_t R = x.shape(0), C = x.shape(1);
  const size_t SR = transposed ? C : R, SC = transposed ? R : C;
  auto at = [&](size_t r, size_t c) { return transposed ? x(c, r) : x(r, c); };
  RefMx out;
  out.codes.assign(SR * SC, 0);
  out.deq.assign(R * C, 0);
  for (size_t bi = 0; bi < (SR + br - 1) / br; ++bi)
    for (size_t bj = 0; bj < (SC + bc - 1) / bc; ++bj) {
      bool nan = false;
      float amax = 0;
      for (size_t r = bi * br; r < std::min(SR, bi * br + br); ++r)
        for (size_t c = bj * bc; c < std::min(SC, bj * bc + bc); ++c) {
          const float v = at(r, c);
          if (!std::isfinite(v)) nan = true;
          else amax = std::max(amax, std::fabs(v));
        }
      const int s = nan ? 0 : (amax == 0 ? -127 : ref_scale_exp(rule, amax, f));
      out.scales.push_back(nan ? 0xFF : uint8_t(s + 127));
      for (size_t r = bi * br; r < std::min(SR, bi * br + br); ++r)
        for (size_t c = bj * bc; c < std::min(SC, bj * bc + bc); ++c) {
          const uint32_t code = nan ? 0u : oracle_code(f, at(r, c), s);
          out.codes[r * SC + c] = code;
          const size_t lr = transposed ? c : r, lc = transposed ? r : c;
          out.deq[lr * C + lc] = nan ? NAN : float(decode(f, code) * std::ldexp(1.0, s));
        }
    }
  return out;
}

Tensor2f random_tensor(size_t R, size_t C, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-20, 20);
  Tensor2f x = Tensor2f::from_shape({R, C});
  for (size_t r = 0; r < R; ++r) {
    const float row_scale = std::ldexp(1.0f, ex(rng));
    for (size_t c = 0; c < C; ++c) x(r, c) = nd(rng) * row_scale;
  }
  if (specials && R > 2 && C > 40) {
    for (size_t c = 0; c < std::min<size_t>(C, 32); ++c) x(0, c) = 0.0f;  // all-zero block
    x(1, 3) = NAN;
    x(2, 35) = INFINITY;
    for (size_t c = 32; c < std::min<size_t>(C, 64); ++c) x(1, c) = std::ldexp(float(c), -140);  // subnormal amax
  }
  return x;
}

void expect_bits_eq(float a, float b, const std::string& what) {
  if (std::isnan(a) && std::isnan(b)) return;
  EXPECT_EQ(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(b)) << what << ": " << a << " vs " << b;
}

}  // namespace

TEST(QuantizeMx, MatchesReferenceAllFormatsRulesLayouts) {
  const Format fmts[] = {Format::E2M1, Format::E2M3, Format::E3M2, Format::E4M3, Format::E5M2};
  const ScaleRule rules[] = {ScaleRule::Floor, ScaleRule::Rceil, ScaleRule::Even, ScaleRule::Ceil};
  const std::pair<size_t, size_t> shapes[] = {{5, 77}, {33, 65}, {64, 96}, {3, 31}, {37, 41}};
  int n = 0;
  for (auto [R, C] : shapes) {
    const Tensor2f x = random_tensor(R, C, uint32_t(R * 1000 + C), true);
    for (Format f : fmts)
      for (ScaleRule rule : rules)
        for (int layout = 0; layout < 3; ++layout) {  // rowwise, columnwise, 32x32
          QuantSpec s;
          s.elem = f;
          s.rule = rule;
          s.block_rows = layout == 2 ? 32 : 1;
          s.block_cols = 32;
          const Axis ax = layout == 1 ? Axis::Rows : Axis::Cols;
          const auto q = emu::quantize(x, s, ax);
          const RefMx ref = ref_mx(x, f, rule, layout == 2 ? 32 : 1, 32, layout == 1);
          const std::string what = std::string(short_name(f)) + "/" + name_of(rule) + "/layout" +
                                   std::to_string(layout) + " " + std::to_string(R) + "x" + std::to_string(C);
          ASSERT_EQ(q.scale_bytes.size(), ref.scales.size()) << what;
          for (size_t i = 0; i < ref.scales.size(); ++i)
            ASSERT_EQ(q.scale_bytes.data()[i], ref.scales[i]) << what << " block " << i;
          for (size_t r = 0; r < q.srows(); ++r)
            for (size_t c = 0; c < q.scols(); ++c)
              ASSERT_EQ(q.code(0, r, c), ref.codes[r * q.scols() + c]) << what << " at " << r << "," << c;
          const Tensor2f d = emu::dequantize(q);
          for (size_t i = 0; i < R * C; ++i) expect_bits_eq(d.data()[i], ref.deq[i], what);
          ++n;
        }
  }
  EXPECT_EQ(n, 5 * 5 * 4 * 3);
}

TEST(QuantizeMx, SpecialBlocks) {
  Tensor2f x = xt::zeros<float>({size_t(4), size_t(32)});
  x(1, 5) = NAN;
  x(1, 6) = 1.0f;
  x(2, 0) = -INFINITY;
  x(3, 0) = std::ldexp(1.5f, -135);  // FP32 subnormal amax
  x(3, 1) = std::ldexp(1.0f, -149);
  for (const char* rec : {"mxfp4", "mxfp4_ocp", "mxfp8"}) {
    const auto q = emu::quantize(x, tensor_recipe(rec));
    const Tensor2f d = emu::dequantize(q);
    EXPECT_EQ(q.scale_bytes(0, 0, 0), 0x00) << rec << ": all-zero block has the smallest scale";
    for (size_t c = 0; c < 32; ++c) EXPECT_EQ(std::bit_cast<uint32_t>(d(0, c)), 0u) << rec;
    EXPECT_EQ(q.scale_bytes(0, 1, 0), 0xFF) << rec << ": NaN block";
    EXPECT_EQ(q.scale_bytes(0, 2, 0), 0xFF) << rec << ": Inf block";
    for (size_t c = 0; c < 32; ++c) {
      EXPECT_TRUE(std::isnan(d(1, c))) << rec << ": whole NaN block dequantizes to NaN";
      EXPECT_TRUE(std::isnan(d(2, c))) << rec;
    }
    // subnormal amax: the scale clamps at 2^-127, elements x * 2^127 are tiny
    EXPECT_EQ(q.scale_bytes(0, 3, 0), 0x00) << rec;
    const auto st = emu::quant_stats(x, q);
    EXPECT_EQ(st.nonfinite_in, 2u);
    EXPECT_EQ(st.nan_out, 64u);
    // 1.0 in the NaN block: finite source, NaN output -> not counted in MSE.
  }
  // E4M3 holds 1.5*2^-135 / 2^-127 = 1.5*2^-8 -> subnormal code 0x03 (3*2^-9); 2^-149*2^127 -> 0.
  const auto q8 = emu::quantize(x, tensor_recipe("mxfp8"));
  EXPECT_EQ(q8.code(0, 3, 0), 0x03u);
  EXPECT_EQ(q8.code(0, 3, 1), 0x00u);
  EXPECT_EQ(emu::dequantize(q8)(3, 0), std::ldexp(1.5f, -135));
  EXPECT_EQ(emu::quant_stats(x, q8).underflow, 1u);
}

TEST(QuantizeMx, OddColumnsPaddingNibbleNeverRead) {
  const Tensor2f x = random_tensor(3, 33, 5, false);
  for (const char* rec : {"mxfp4", "mxfp4_2d", "nvfp4"}) {
    auto q = emu::quantize(x, tensor_recipe(rec));
    ASSERT_EQ(q.row_bytes(), 17u);
    const Tensor2f d0 = emu::dequantize(q);
    const auto st0 = emu::quant_stats(x, q);
    for (size_t r = 0; r < 3; ++r) {
      EXPECT_EQ(q.data(0, r, 16) >> 4, 0u) << "padding nibble written as 0";
      q.data(0, r, 16) = uint8_t((q.data(0, r, 16) & 0x0F) | 0xB0);  // garbage in the padding
    }
    const Tensor2f d1 = emu::dequantize(q);
    for (size_t i = 0; i < d0.size(); ++i) expect_bits_eq(d0.data()[i], d1.data()[i], rec);
    EXPECT_EQ(emu::quant_stats(x, q).mse, st0.mse);
  }
}

TEST(QuantizeMx, ColumnwiseEqualsRowwiseOfTranspose) {
  const Tensor2f x = random_tensor(45, 70, 11, true);
  const Tensor2f xt_ = xt::transpose(x);
  for (const char* rec : {"mxfp4", "mxfp8", "mxfp6_e2m3", "fp8_block"}) {
    const auto qc = emu::quantize(x, tensor_recipe(rec), Axis::Rows);
    const auto qr = emu::quantize(Tensor2f(xt_), tensor_recipe(rec), Axis::Cols);
    EXPECT_TRUE(qc.transposed);
    EXPECT_EQ(qc.data, qr.data) << rec;
    if (qc.scale_bytes.size()) {
      EXPECT_EQ(qc.scale_bytes, qr.scale_bytes) << rec;
    }
    ASSERT_EQ(qc.scale_inv.size(), qr.scale_inv.size());
    for (size_t i = 0; i < qc.scale_inv.size(); ++i) expect_bits_eq(qc.scale_inv.data()[i], qr.scale_inv.data()[i], rec);
    const Tensor2f dc = emu::dequantize(qc), dr = emu::dequantize(qr);
    for (size_t r = 0; r < 45; ++r)
      for (size_t c = 0; c < 70; ++c) expect_bits_eq(dc(r, c), dr(c, r), rec);
  }
}

TEST(QuantizeMx, GroupedTilesNeverCrossExperts) {
  // 3 experts of 40 x 50 (ragged for 32x32 tiles): each expert quantized
  // alone gives the same bytes as its slice of the grouped tensor.
  Tensor3f w = Tensor3f::from_shape({3, 40, 50});
  for (size_t g = 0; g < 3; ++g) {
    const Tensor2f e = random_tensor(40, 50, uint32_t(100 + g), false) * float(1 << (4 * g));
    xt::view(w, g, xt::all(), xt::all()) = e;
  }
  // (NVFP4 is left out: its FP32 tensor scale spans all groups, docs/numerics.md §4.)
  for (const char* rec : {"mxfp4_2d", "mxfp8_2d", "fp8_block2d", "fp8_tensor", "mxfp4"}) {
    const auto q = emu::quantize(w, tensor_recipe(rec));
    EXPECT_EQ(q.groups, 3u);
    for (size_t g = 0; g < 3; ++g) {
      const Tensor2f e = xt::view(w, g, xt::all(), xt::all());
      const auto qe = emu::quantize(e, tensor_recipe(rec));
      const Bytes3 dg = xt::view(q.data, xt::range(g, g + 1), xt::all(), xt::all());
      EXPECT_EQ(dg, qe.data) << rec << " expert " << g;
      if (q.scale_bytes.size()) {
        const Bytes3 sg = xt::view(q.scale_bytes, xt::range(g, g + 1), xt::all(), xt::all());
        EXPECT_EQ(sg, qe.scale_bytes) << rec << " expert " << g;
      }
      if (q.scale_inv.size()) {
        const Tensor3f sg = xt::view(q.scale_inv, xt::range(g, g + 1), xt::all(), xt::all());
        EXPECT_EQ(sg, qe.scale_inv) << rec << " expert " << g;
      }
    }
  }
  // A 32x32 tile of expert 0 that straddles rows 32..39 holds only expert 0's rows.
  const auto q = emu::quantize(w, tensor_recipe("mxfp4_2d"));
  EXPECT_EQ(q.scale_bytes.shape(1), 2u);
  EXPECT_EQ(q.scale_bytes.shape(2), 2u);
}

TEST(QuantizeFp8, PerTensorCurrentScaling) {
  // TE Float8CurrentScaling: scale = fp8_max / amax (FP32), x_fp8 = RNE(fl32(x*scale)) satfinite,
  // scale_inv = fl32(1/scale).
  Tensor2f x = {{1.0f, -2.0f, 0.5f, 3.0f, 0.001f}};
  const auto q = emu::quantize(x, tensor_recipe("fp8_tensor"));
  const float scale = 448.0f / 3.0f;
  EXPECT_EQ(q.scale_inv(0, 0, 0), 1.0f / scale);
  for (size_t c = 0; c < 5; ++c) EXPECT_EQ(q.code(0, 0, c), oracle_code(Format::E4M3, x(0, c) * scale, 0)) << c;
  EXPECT_EQ(q.code(0, 0, 3), 0x7Eu);  // amax maps to 448 exactly
  const Tensor2f d = emu::dequantize(q);
  for (size_t c = 0; c < 5; ++c) EXPECT_EQ(d(0, c), decode(Format::E4M3, q.code(0, 0, c)) * (1.0f / scale));
  // E5M2 variant: 57344 / 3
  const auto q5 = emu::quantize(x, tensor_recipe("fp8_tensor_e5m2"));
  EXPECT_EQ(q5.scale_inv(0, 0, 0), 1.0f / (57344.0f / 3.0f));
  // amax 0 -> scale 1
  const Tensor2f z = xt::zeros<float>({size_t(2), size_t(3)});
  const auto qz = emu::quantize(z, tensor_recipe("fp8_tensor"));
  EXPECT_EQ(qz.scale_inv(0, 0, 0), 1.0f);
  // tiny amax: 448 / 1e-45 overflows FP32 -> scale FLT_MAX
  Tensor2f t = {{1e-45f, 0.0f}};
  const auto qt = emu::quantize(t, tensor_recipe("fp8_tensor"));
  EXPECT_EQ(qt.scale_inv(0, 0, 0), 1.0f / FLT_MAX);
}

TEST(QuantizeFp8, RowwiseAndBlockwise) {
  Tensor2f x = Tensor2f::from_shape({3, 300});
  for (size_t r = 0; r < 3; ++r)
    for (size_t c = 0; c < 300; ++c) x(r, c) = float(int(c % 17) - 8) * std::ldexp(1.0f, int(r) * 3 - 2);
  x(1, 130) = 100.0f;  // amax of row 1, and of its second 1x128 block
  // rowwise: one FP32 scale per row, not a power of two
  const auto qr = emu::quantize(x, tensor_recipe("fp8_row"));
  ASSERT_EQ(qr.scale_inv.shape(2), 1u);
  EXPECT_EQ(qr.scale_inv(0, 0, 0), 1.0f / (448.0f / 2.0f));  // row 0 amax 8 * 2^-2 = 2
  EXPECT_EQ(qr.scale_inv(0, 1, 0), 1.0f / (448.0f / 100.0f));
  EXPECT_EQ(qr.scale_inv(0, 2, 0), 1.0f / (448.0f / 128.0f));  // 8 * 2^4
  // 1x128 power-of-two scales: scale = 2^floor(log2(448/amax))
  const auto qb = emu::quantize(x, tensor_recipe("fp8_block"));
  ASSERT_EQ(qb.scale_inv.shape(2), 3u);  // 128 + 128 + 44
  EXPECT_EQ(qb.scale_inv(0, 0, 0), 1.0f / 128.0f);   // 448/2 = 224 -> 128
  EXPECT_EQ(qb.scale_inv(0, 1, 0), 1.0f / 16.0f);    // block 0 of row 1: amax 8*2^1 = 16, 448/16 = 28 -> 16
  EXPECT_EQ(qb.scale_inv(0, 1, 1), 1.0f / 4.0f);     // 448/100 = 4.48 -> 4
  EXPECT_EQ(qb.scale_inv(0, 2, 2), 1.0f / 2.0f);     // 448/128 = 3.5 -> 2
  for (size_t r = 0; r < 3; ++r)
    for (size_t c = 0; c < 300; ++c)
      EXPECT_EQ(qb.code(0, r, c), oracle_code(Format::E4M3, x(r, c) / qb.scale_inv(0, r, c / 128), 0));
  // 128x128 over 3 rows: one scale per 128 columns for all rows
  const auto q2 = emu::quantize(x, tensor_recipe("fp8_block2d"));
  ASSERT_EQ(q2.scale_inv.shape(1), 1u);
  EXPECT_EQ(q2.scale_inv(0, 0, 0), 1.0f / 2.0f);  // amax over 3 rows: 8 * 2^4 = 128, 448/128 = 3.5 -> 2
  EXPECT_EQ(q2.scale_inv(0, 0, 1), 1.0f / 2.0f);  // 100 in row 1, 128 in row 2
}

TEST(QuantizeNvfp4, TwoLevelScaling) {
  // formats-and-scaling.md §8 (TE nvfp4): S_enc = 2688 / global_amax,
  // s_block = e4m3(block_amax * (S_enc * fl32(1/6))), element factor
  // min(1 / (s_block * S_dec), FLT_MAX), dequant (e * s_block) * S_dec.
  Tensor2f x = Tensor2f::from_shape({1, 32});
  for (size_t c = 0; c < 16; ++c) x(0, c) = float(c) * 0.375f;       // block amax 5.625
  for (size_t c = 16; c < 32; ++c) x(0, c) = -float(c - 16) * 1.5f;  // block amax 22.5 (global)
  const auto q = emu::quantize(x, tensor_recipe("nvfp4"));
  const float s_enc = 2688.0f / 22.5f;
  const float s_dec = 1.0f / s_enc;
  EXPECT_EQ(q.tensor_scale_inv, s_dec);
  const float t = s_enc * (1.0f / 6.0f);
  for (size_t b = 0; b < 2; ++b) {
    const float bamax = b == 0 ? 5.625f : 22.5f;
    const uint32_t sb = oracle_code(Format::E4M3, bamax * t, 0);
    EXPECT_EQ(q.scale_bytes(0, 0, b), sb) << b;
    const float factor = std::min(1.0f / (decode(Format::E4M3, sb) * s_dec), FLT_MAX);
    for (size_t c = b * 16; c < b * 16 + 16; ++c) {
      const uint32_t code = oracle_code(Format::E2M1, x(0, c) * factor, 0);
      EXPECT_EQ(q.code(0, 0, c), code) << c;
      EXPECT_EQ(emu::dequantize(q)(0, c), (decode(Format::E2M1, code) * decode(Format::E4M3, sb)) * s_dec) << c;
    }
  }
  EXPECT_EQ(q.scale_bytes(0, 0, 1), 0x7Eu);  // global-amax block maps to 448 exactly
  // all-zero tensor: S_enc = 1
  const auto qz = emu::quantize(Tensor2f(xt::zeros<float>({size_t(1), size_t(16)})), tensor_recipe("nvfp4"));
  EXPECT_EQ(qz.tensor_scale_inv, 1.0f);
  EXPECT_EQ(qz.scale_bytes(0, 0, 0), 0u);
}

TEST(Hadamard16, ButterflyOrderAndOrthogonality) {
  // Columns of H16/4 (Sylvester): entry (i, j) = (-1)^popcount(i & j) / 4.
  for (int j = 0; j < 16; ++j) {
    float v[16] = {};
    v[j] = 1.0f;
    emu::hadamard16_inplace(v);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(v[i], (__builtin_popcount(i & j) & 1) ? -0.25f : 0.25f) << i << "," << j;
  }
  // H H^T = I: applying (H/4) twice to exact small integers returns them.
  float v[16], w[16];
  for (int i = 0; i < 16; ++i) v[i] = w[i] = float(i * 7 % 11) - 5.0f;
  emu::hadamard16_inplace(w);
  emu::hadamard16_inplace(w);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(w[i], v[i]);
  // Rounding order (docs/numerics.md §2.6): stages h = 1, 2, 4, 8, each
  // (a, b) -> (a + b, a - b) in FP32. Written here recursively: H_n(v) =
  // [H(v_lo) + H(v_hi), H(v_lo) - H(v_hi)], which performs the same roundings.
  std::function<void(float*, int)> rec = [&](float* p, int n) {
    if (n == 1) return;
    rec(p, n / 2);
    rec(p + n / 2, n / 2);
    for (int i = 0; i < n / 2; ++i) {
      const float a = p[i], b = p[i + n / 2];
      p[i] = a + b;
      p[i + n / 2] = a - b;
    }
  };
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> ex(-30, 30);
  int order_sensitive = 0;
  for (int trial = 0; trial < 200; ++trial) {
    float a[16], b[16], c[16];
    for (int i = 0; i < 16; ++i) a[i] = b[i] = c[i] = std::ldexp(float(rng() % 4096) / 4096.0f + 1.0f, ex(rng));
    emu::hadamard16_inplace(a);
    rec(b, 16);
    for (int i = 0; i < 16; ++i) b[i] *= 0.25f;
    for (int i = 0; i < 16; ++i) EXPECT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i]));
    // reversed stage order (h = 8, 4, 2, 1) differs on such data: the test can fail
    for (int h = 8; h >= 1; h >>= 1)
      for (int i = 0; i < 16; i += 2 * h)
        for (int j = i; j < i + h; ++j) {
          const float p = c[j], q2 = c[j + h];
          c[j] = p + q2;
          c[j + h] = p - q2;
        }
    for (int i = 0; i < 16; ++i) order_sensitive += std::bit_cast<uint32_t>(c[i] * 0.25f) != std::bit_cast<uint32_t>(a[i]);
  }
  EXPECT_GT(order_sensitive, 0);
}

TEST(QuantStats, HandComputed) {
  // MXFP4 FLOOR, one block of 32: amax 7 -> s = 0.
  Tensor2f x = xt::zeros<float>({size_t(1), size_t(32)});
  x(0, 0) = 7.0f;    // saturates to 6: err 1
  x(0, 1) = 0.2f;    // underflows to 0: err 0.2
  x(0, 2) = 1.25f;   // tie -> 1: err 0.25
  x(0, 3) = -3.0f;   // exact
  QuantSpec s = tensor_recipe("mxfp4_ocp");
  const auto q = emu::quantize(x, s);
  const auto st = emu::quant_stats(x, q);
  EXPECT_EQ(st.count, 32u);
  EXPECT_EQ(st.saturated, 1u);
  EXPECT_EQ(st.underflow, 1u);
  EXPECT_EQ(st.nan_out, 0u);
  const double e2 = 1.0 + double(0.2f) * double(0.2f) + 0.0625;
  const double x2 = 49.0 + double(0.2f) * double(0.2f) + 1.5625 + 9.0;
  // numerics §4.6: FP64 sums in row-major order, so these are exact (the zero terms of the
  // other 28 elements add nothing); sqnr_db is 10 log10 of the ratio of the two sums.
  EXPECT_EQ(st.mse, e2 / 32.0);
  EXPECT_EQ(st.max_abs_err, 1.0);
  EXPECT_EQ(st.signal_power, x2 / 32.0);
  EXPECT_EQ(st.sqnr_db, 10.0 * std::log10(x2 / e2));
  const auto bs = emu::block_stats(Tensor3f(xt::view(x, xt::newaxis(), xt::all(), xt::all())), q);
  ASSERT_EQ(bs.size(), 1u);
  EXPECT_EQ(bs[0].amax, 7.0f);
  EXPECT_EQ(bs[0].scale_exp, 0);
  EXPECT_EQ(bs[0].sq_err, e2);
  EXPECT_EQ(bs[0].saturated, 1u);
  EXPECT_EQ(bs[0].underflow, 1u);
  // exact tensor: SQNR +inf
  Tensor2f y = {{1.0f, 2.0f, -4.0f}};
  EXPECT_TRUE(std::isinf(emu::quant_stats(y, emu::quantize(y, s)).sqnr_db));
}

// The random signs (numerics.md §2.6): y = H (D x), D = diag(+-1) from the mask. A unit vector
// e_j gives column j of H/4 times D's entry j; TE's NVFP4 wgrad vector as a mask.
TEST(Hadamard16, RandomSignsNegateInputsBeforeTheTransform) {
  const int te[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};  // TE get_wgrad_sign_vector
  uint16_t mask = 0;
  for (int k = 0; k < 16; ++k) mask |= uint16_t(te[k] < 0) << k;
  EXPECT_EQ(mask, kTeNvfp4WgradSigns);
  for (int j = 0; j < 16; ++j) {
    float v[16] = {};
    v[j] = 1.0f;
    emu::hadamard16_inplace(v, kTeNvfp4WgradSigns);
    for (int i = 0; i < 16; ++i)
      EXPECT_EQ(v[i], float(te[j]) * ((__builtin_popcount(i & j) & 1) ? -0.25f : 0.25f)) << i << "," << j;
  }
  // not the signs applied after the transform, (D H) x: differs for x = e_0 (all of H's column 0 is +1/4)
  float v[16] = {1.0f};
  emu::hadamard16_inplace(v, kTeNvfp4WgradSigns);
  EXPECT_EQ(v[3], 0.25f);  // D H e_0 would have -1/4 here
}

// NVFP4 with the transform: S_enc comes from the transformed tensor's amax (TE's post-RHT amax).
// x = ones(16): H x = [4, 0, ..., 0], so the amax is 4, not 1: S_enc = 2688 / 4 = 672, the block
// scale 4 * 672 / 6 = 448 exactly, the element 4 / (448 / 672) = 6: dequantized 4, exactly. With
// the source's amax (1) the block scale would saturate at 448 and the element read 1.
TEST(QuantizeNvfp4, HadamardTakesTheTransformedTensorsAmax) {
  QuantSpec s = tensor_recipe("nvfp4");
  s.hadamard16 = true;
  for (Axis axis : {Axis::Cols, Axis::Rows}) {
    const Tensor2f x = axis == Axis::Cols ? Tensor2f(xt::ones<float>({size_t(1), size_t(16)}))
                                          : Tensor2f(xt::ones<float>({size_t(16), size_t(1)}));
    const QuantizedTensor q = emu::quantize(x, s, axis);
    EXPECT_EQ(q.tensor_scale_inv, 1.0f / 672.0f);
    EXPECT_EQ(q.scale_bytes(0, 0, 0), 0x7Eu);
    const Tensor2f d = emu::dequantize(q);
    for (size_t i = 0; i < 16; ++i) EXPECT_EQ(d.data()[i], i == 0 ? 4.0f : 0.0f) << i;
  }
}

// The scale-exponent histogram's bin of an NVFP4 block scale (hd::scale_exp_bin): floor(log2) of
// the E4M3 value times the tensor scale; a zero scale (an all-zero block) in bin 0 as MX's 0x00,
// not among the NaN scales (the inspector showed every all-zero dy block as a "NaN scale").
TEST(QuantizeNvfp4, ScaleExponentBinsOfBothLevels) {
  EXPECT_EQ(hd::scale_exp_bin(ScaleKind::UE4M3, 0x38, 0.0f, 0.25f), 127u - 2u);  // 1.0 x 1/4
  EXPECT_EQ(hd::scale_exp_bin(ScaleKind::UE4M3, 0x7E, 0.0f, 1.0f), 127u + 8u);   // 448
  EXPECT_EQ(hd::scale_exp_bin(ScaleKind::UE4M3, 0x01, 0.0f, 1.0f), 127u - 9u);   // 2^-9, E4M3's smallest
  EXPECT_EQ(hd::scale_exp_bin(ScaleKind::UE4M3, 0x00, 0.0f, 1.0f), 0u);          // zero block
  EXPECT_EQ(hd::scale_exp_bin(ScaleKind::UE4M3, 0x7F, 0.0f, 1.0f), 255u);        // NaN
  EXPECT_EQ(hd::scale_exp_bin(ScaleKind::UE4M3, 0x38, 0.0f, NAN), 255u);         // a NaN tensor
  EXPECT_EQ(hd::scale_exp_bin(ScaleKind::E8M0, 0x00, 0.0f, 1.0f), 0u);           // MX's zero block
  // a quantized all-zero block lands there too
  const QuantizedTensor q = emu::quantize(Tensor2f(xt::zeros<float>({size_t(2), size_t(16)})), tensor_recipe("nvfp4"));
  EXPECT_EQ(hd::scale_exp_bin(ScaleKind::UE4M3, q.scale_bytes(0, 0, 0), 0.0f, q.tensor_scale_inv), 0u);
}

TEST(QuantStats, HadamardRecipeMeasuredInTransformedDomain) {
  // A recipe with hadamard16 quantizes H x; dequantize does not undo H, so the
  // statistics compare against H x. Data: one run of 16 with H x exact.
  Tensor2f x = xt::zeros<float>({size_t(1), size_t(32)});
  x(0, 0) = 4.0f;  // H x = 1.0 in every position of the first run
  QuantSpec s = tensor_recipe("mxfp4");
  s.hadamard16 = true;
  const auto q = emu::quantize(x, s);
  const Tensor2f d = emu::dequantize(q);
  for (size_t c = 0; c < 16; ++c) EXPECT_EQ(d(0, c), 1.0f);
  const auto st = emu::quant_stats(x, q);
  EXPECT_EQ(st.mse, 0.0);  // exact in the transformed domain
  EXPECT_TRUE(std::isinf(st.sqnr_db));
  EXPECT_EQ(st.underflow, 0u);
  const auto bs = emu::block_stats(Tensor3f(xt::view(x, xt::newaxis(), xt::all(), xt::all())), q);
  EXPECT_EQ(bs[0].amax, 1.0f);
  EXPECT_EQ(bs[0].sq_err, 0.0);
  // Columnwise (wgrad operand): the transform runs down the columns.
  Tensor2f y = xt::zeros<float>({size_t(32), size_t(2)});
  y(0, 1) = 4.0f;
  const auto qy = emu::quantize(y, s, Axis::Rows);
  const Tensor2f dy = emu::dequantize(qy);
  for (size_t r = 0; r < 16; ++r) EXPECT_EQ(dy(r, 1), 1.0f);
  EXPECT_EQ(emu::quant_stats(y, qy).mse, 0.0);
}

TEST(QuantStats, BlockStatsNanAmaxAndShapeCheck) {
  Tensor3f x = xt::zeros<float>({size_t(1), size_t(1), size_t(32)});
  x(0, 0, 0) = 2.0f;
  x(0, 0, 1) = NAN;
  x(0, 0, 2) = 1.0f;
  const auto q = emu::quantize(x, tensor_recipe("mxfp4"));
  const auto bs = emu::block_stats(x, q);
  EXPECT_TRUE(std::isnan(bs[0].amax));
  EXPECT_EQ(bs[0].scale_exp, INT_MIN);
  Tensor3f other = xt::zeros<float>({size_t(1), size_t(2), size_t(32)});
  EXPECT_THROW(emu::block_stats(other, q), std::invalid_argument);
  EXPECT_THROW(emu::quant_stats(other, q), std::invalid_argument);
}
