// Golden vectors: values published by (or derived from the documented
// behaviour of) other libraries, with the source beside each group. These pin
// mxsim to the conventions docs/numerics.md §2-§3 and docs/formats.md state;
// where mxsim deliberately differs from a library the test says so.
#include <gtest/gtest.h>

#include <cmath>

#include "mxsim/emu/quantize.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/scale_rule.hpp"

using namespace mxsim;

namespace {
uint32_t rne(Format f, float x, Overflow ov = Overflow::Saturate) { return encode_f32(f, x, RoundMode::RNE, ov); }
uint32_t bits(float x) { return f32_bits(x); }
}  // namespace

// --- E2M1 -----------------------------------------------------------------
// PyTorch torch/headeronly/util/Float4_e2m1fn_x2.h (fp4e2m1_from_fp32_value:
// RNE, clamp to 6); OCP MX v1.0 §5.3.3 code table; ml_dtypes float4_e2m1fn.
// Decision midpoints 0.25 0.75 1.25 1.75 2.5 3.5 5 go to the even code.
TEST(Golden, E2M1TiesAndCodes) {
  const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint32_t c = 0; c < 8; ++c) {
    EXPECT_EQ(rne(Format::E2M1, grid[c]), c);
    EXPECT_EQ(rne(Format::E2M1, -grid[c]), c | 8u);
    EXPECT_EQ(decode(Format::E2M1, c), grid[c]);
  }
  EXPECT_EQ(rne(Format::E2M1, 0.25f), 0x0u);  // tie 0 | 0.5 -> 0
  EXPECT_EQ(rne(Format::E2M1, 0.75f), 0x2u);  // tie 0.5 | 1 -> 1
  EXPECT_EQ(rne(Format::E2M1, 1.25f), 0x2u);  // tie 1 | 1.5 -> 1
  EXPECT_EQ(rne(Format::E2M1, 1.75f), 0x4u);  // tie 1.5 | 2 -> 2
  EXPECT_EQ(rne(Format::E2M1, 2.5f), 0x4u);   // tie 2 | 3 -> 2
  EXPECT_EQ(rne(Format::E2M1, 3.5f), 0x6u);   // tie 3 | 4 -> 4
  EXPECT_EQ(rne(Format::E2M1, 5.0f), 0x6u);   // tie 4 | 6 -> 4
  EXPECT_EQ(rne(Format::E2M1, 5.01f), 0x7u);
  EXPECT_EQ(rne(Format::E2M1, 0.2499f), 0x0u);
  EXPECT_EQ(rne(Format::E2M1, 0.2501f), 0x1u);  // strict RNE: (0.25, 0.5) -> 0.5 (formats-and-scaling.md §5)
  // Saturation (PyTorch clamps to 6; PTX cvt.rn.satfinite.e2m1x2.f32).
  EXPECT_EQ(rne(Format::E2M1, 7.0f), 0x7u);
  EXPECT_EQ(rne(Format::E2M1, -100.0f), 0xFu);
  EXPECT_EQ(rne(Format::E2M1, INFINITY), 0x7u);
  EXPECT_EQ(rne(Format::E2M1, -INFINITY), 0xFu);
  // No Inf/NaN in E2M1: Ieee overflow also gives +-max (ml_dtypes float4_e2m1fn: +-6).
  EXPECT_EQ(rne(Format::E2M1, 7.0f, Overflow::Ieee), 0x7u);
  // NaN -> +6: PTX satfinite behaviour as noted in TransformerEngine
  // transformer_engine/common/util/ptx.cuh (mxsim convention; ml_dtypes gives 0x8).
  EXPECT_EQ(rne(Format::E2M1, NAN), 0x7u);
  // Negative zero keeps its sign (PyTorch / ml_dtypes: -0.0 -> 0x8).
  EXPECT_EQ(rne(Format::E2M1, -0.0f), 0x8u);
  EXPECT_EQ(rne(Format::E2M1, -0.1f), 0x8u);
}

// --- OCP FP8 ----------------------------------------------------------------
// OCP OFP8 v1.0 (arXiv:2209.05433) Table 1; CUDA cuda_fp8.hpp __NV_SATFINITE;
// ml_dtypes float8_e4m3fn / float8_e5m2 (RNE, non-saturating astype);
// PyTorch c10/util/Float8_e4m3fn.h, Float8_e5m2.h.
TEST(Golden, E4M3) {
  EXPECT_EQ(rne(Format::E4M3, 448.0f), 0x7Eu);
  EXPECT_EQ(rne(Format::E4M3, -448.0f), 0xFEu);
  EXPECT_EQ(decode(Format::E4M3, 0x7E), 448.0f);
  EXPECT_EQ(rne(Format::E4M3, 1.0f), 0x38u);
  EXPECT_EQ(rne(Format::E4M3, 0x1p-9f), 0x01u);  // smallest subnormal
  EXPECT_EQ(rne(Format::E4M3, 0x1p-10f), 0x00u);  // tie with 0 -> even (0)
  EXPECT_EQ(rne(Format::E4M3, 0x1.8p-10f), 0x01u);
  EXPECT_EQ(rne(Format::E4M3, 0x1p-6f), 0x08u);  // smallest normal
  // At and beyond 464 = 448 + ulp/2: the tie keeps 448 (even mantissa 110).
  EXPECT_EQ(rne(Format::E4M3, 464.0f, Overflow::Ieee), 0x7Eu);  // ml_dtypes, PyTorch 2.11
  EXPECT_EQ(rne(Format::E4M3, 464.0f, Overflow::Saturate), 0x7Eu);
  EXPECT_EQ(rne(Format::E4M3, 464.0001f, Overflow::Ieee), 0x7Fu);  // non-saturating: NaN
  EXPECT_EQ(rne(Format::E4M3, 465.0f, Overflow::Ieee), 0x7Fu);
  EXPECT_EQ(rne(Format::E4M3, -465.0f, Overflow::Ieee), 0xFFu);
  EXPECT_EQ(rne(Format::E4M3, 465.0f, Overflow::Saturate), 0x7Eu);  // __NV_SATFINITE
  EXPECT_EQ(rne(Format::E4M3, 1e30f, Overflow::Saturate), 0x7Eu);
  EXPECT_EQ(rne(Format::E4M3, INFINITY, Overflow::Ieee), 0x7Fu);  // no Inf: NaN
  EXPECT_EQ(rne(Format::E4M3, INFINITY, Overflow::Saturate), 0x7Eu);
  EXPECT_EQ(rne(Format::E4M3, NAN), 0x7Fu);
  EXPECT_EQ(rne(Format::E4M3, -NAN), 0xFFu);
  EXPECT_EQ(rne(Format::E4M3, -0.0f), 0x80u);
  EXPECT_TRUE(std::isnan(decode(Format::E4M3, 0x7F)));
  EXPECT_TRUE(std::isnan(decode(Format::E4M3, 0xFF)));
}

TEST(Golden, E5M2) {
  EXPECT_EQ(rne(Format::E5M2, 57344.0f), 0x7Bu);
  EXPECT_EQ(rne(Format::E5M2, 1.0f), 0x3Cu);
  EXPECT_EQ(rne(Format::E5M2, 0x1p-16f), 0x01u);
  // 61440 = 57344 + ulp/2 is a tie whose even neighbour is 65536: overflow.
  EXPECT_EQ(rne(Format::E5M2, 61440.0f, Overflow::Ieee), 0x7Cu);  // ml_dtypes / PyTorch: +Inf
  EXPECT_EQ(rne(Format::E5M2, -61440.0f, Overflow::Ieee), 0xFCu);
  EXPECT_EQ(rne(Format::E5M2, 61439.996f, Overflow::Ieee), 0x7Bu);
  EXPECT_EQ(rne(Format::E5M2, 61440.0f, Overflow::Saturate), 0x7Bu);  // __NV_SATFINITE
  EXPECT_EQ(rne(Format::E5M2, INFINITY, Overflow::Ieee), 0x7Cu);
  EXPECT_EQ(rne(Format::E5M2, -INFINITY, Overflow::Saturate), 0xFBu);
  EXPECT_EQ(rne(Format::E5M2, NAN), 0x7Eu);
  EXPECT_EQ(rne(Format::E5M2, -0.0f), 0x80u);
  EXPECT_TRUE(std::isinf(decode(Format::E5M2, 0x7C)));
  // RZ never produces Inf from a finite value (IEEE 754 §7.4).
  EXPECT_EQ(encode_f32(Format::E5M2, 1e9f, RoundMode::RZ, Overflow::Ieee), 0x7Bu);
}

// --- AMD FNUZ ---------------------------------------------------------------
// PyTorch c10/util/Float8_e4m3fnuz.h, Float8_e5m2fnuz.h; arXiv:2206.02915;
// openxla/stablehlo rfcs/20230321-fp8_fnuz.md: no -0, NaN = 0x80, bias 8 / 16.
TEST(Golden, Fnuz) {
  EXPECT_EQ(rne(Format::E4M3FNUZ, 240.0f), 0x7Fu);
  EXPECT_EQ(decode(Format::E4M3FNUZ, 0x7F), 240.0f);
  EXPECT_EQ(decode(Format::E4M3FNUZ, 0xFF), -240.0f);
  EXPECT_EQ(rne(Format::E4M3FNUZ, 1.0f), 0x40u);
  EXPECT_EQ(rne(Format::E4M3FNUZ, 0x1p-10f), 0x01u);
  EXPECT_EQ(rne(Format::E4M3FNUZ, -0.0f), 0x00u);  // no negative zero
  EXPECT_EQ(rne(Format::E4M3FNUZ, -0x1p-12f), 0x00u);  // negative underflow -> +0, never 0x80
  EXPECT_EQ(rne(Format::E4M3FNUZ, NAN), 0x80u);
  EXPECT_EQ(rne(Format::E4M3FNUZ, -NAN), 0x80u);
  EXPECT_EQ(rne(Format::E4M3FNUZ, 1000.0f, Overflow::Saturate), 0x7Fu);
  EXPECT_EQ(rne(Format::E4M3FNUZ, 1000.0f, Overflow::Ieee), 0x80u);  // no Inf: NaN
  EXPECT_EQ(rne(Format::E4M3FNUZ, 248.0f, Overflow::Ieee), 0x80u);  // tie 240 (odd) | 256 -> overflow
  EXPECT_TRUE(std::isnan(decode(Format::E4M3FNUZ, 0x80)));
  EXPECT_EQ(rne(Format::E5M2FNUZ, 57344.0f), 0x7Fu);
  EXPECT_EQ(rne(Format::E5M2FNUZ, 1.0f), 0x40u);
  EXPECT_EQ(rne(Format::E5M2FNUZ, 0x1p-17f), 0x01u);
  EXPECT_EQ(rne(Format::E5M2FNUZ, -0.0f), 0x00u);
  EXPECT_EQ(rne(Format::E5M2FNUZ, NAN), 0x80u);
}

// --- FP6 ---------------------------------------------------------------------
// OCP MX v1.0 §5.3.2 (E2M3 max 7.5, min subnormal 0.125; E3M2 max 28, min
// subnormal 0.0625); torchao custom_fp_utils.py (RNE, saturating).
TEST(Golden, Fp6) {
  EXPECT_EQ(rne(Format::E2M3, 7.5f), 0x1Fu);
  EXPECT_EQ(rne(Format::E2M3, 7.75f), 0x1Fu);  // tie past max: saturates
  EXPECT_EQ(rne(Format::E2M3, 0.125f), 0x01u);
  EXPECT_EQ(rne(Format::E2M3, 1.0f), 0x08u);
  EXPECT_EQ(rne(Format::E2M3, -7.5f), 0x3Fu);
  EXPECT_EQ(rne(Format::E3M2, 28.0f), 0x1Fu);
  EXPECT_EQ(rne(Format::E3M2, 30.0f), 0x1Fu);
  EXPECT_EQ(rne(Format::E3M2, 0.0625f), 0x01u);
  EXPECT_EQ(rne(Format::E3M2, 1.0f), 0x0Cu);
  EXPECT_EQ(decode(Format::E3M2, 0x1F), 28.0f);
  EXPECT_EQ(decode(Format::E2M3, 0x1F), 7.5f);
}

// --- BF16 / FP16 -------------------------------------------------------------
// IEEE 754 roundTiesToEven; PyTorch c10/util/BFloat16.h round_to_nearest_even.
TEST(Golden, Bf16Fp16) {
  EXPECT_EQ(encode(spec_of(Format::BF16), 0x3F808000u), 0x3F80u);  // 1 + 2^-8: tie -> even
  EXPECT_EQ(encode(spec_of(Format::BF16), 0x3F818000u), 0x3F82u);  // 1 + 3*2^-8: tie -> even (up)
  EXPECT_EQ(encode(spec_of(Format::BF16), 0x3F808001u), 0x3F81u);
  EXPECT_EQ(encode(spec_of(Format::BF16), 0x7F7FFFFFu, 0, RoundMode::RNE, Overflow::Ieee), 0x7F80u);  // FLT_MAX -> Inf
  EXPECT_EQ(encode(spec_of(Format::BF16), 0x7F7FFFFFu, 0, RoundMode::RNE, Overflow::Saturate), 0x7F7Fu);
  EXPECT_EQ(encode(spec_of(Format::BF16), 0x00000001u), 0x0000u);  // FP32 min subnormal -> 0
  EXPECT_EQ(encode(spec_of(Format::BF16), 0x80000000u), 0x8000u);
  EXPECT_EQ(encode(spec_of(Format::BF16), 0x7FC00000u), 0x7FC0u);
  EXPECT_EQ(rne(Format::FP16, 65504.0f), 0x7BFFu);
  EXPECT_EQ(rne(Format::FP16, 65519.996f, Overflow::Ieee), 0x7BFFu);
  EXPECT_EQ(rne(Format::FP16, 65520.0f, Overflow::Ieee), 0x7C00u);  // tie -> even = Inf
  EXPECT_EQ(rne(Format::FP16, 0x1p-24f), 0x0001u);
  EXPECT_EQ(rne(Format::FP16, 0x1p-25f), 0x0000u);  // tie with 0 -> 0
  EXPECT_EQ(rne(Format::FP16, 0x1.8p-25f), 0x0001u);
  EXPECT_EQ(rne(Format::FP16, 1.0f), 0x3C00u);
  EXPECT_EQ(rne(Format::FP16, NAN), 0x7E00u);
}

// --- E8M0 --------------------------------------------------------------------
// OCP MX v1.0 §5.4.1; PyTorch c10/util/Float8_e8m0fnu.h (round to nearest,
// ties up: 1.5 -> 2); TransformerEngine util/ptx.cuh exp2f decode; 0x00 is
// 2^-127, an FP32 subnormal (formats-and-scaling.md §6).
TEST(Golden, E8M0) {
  EXPECT_EQ(bits(decode(Format::E8M0, 0x00)), 0x00400000u);
  EXPECT_EQ(decode(Format::E8M0, 0x7F), 1.0f);
  EXPECT_EQ(decode(Format::E8M0, 0xFE), 0x1p127f);
  EXPECT_TRUE(std::isnan(decode(Format::E8M0, 0xFF)));
  EXPECT_EQ(rne(Format::E8M0, 1.0f), 0x7Fu);
  EXPECT_EQ(rne(Format::E8M0, 1.5f), 0x80u);  // PyTorch: ties up
  EXPECT_EQ(rne(Format::E8M0, 3.0f), 0x81u);  // ties up, not to an even code
  EXPECT_EQ(rne(Format::E8M0, 1.4999999f), 0x7Fu);
  EXPECT_EQ(rne(Format::E8M0, 0x1p-127f), 0x00u);
  EXPECT_EQ(rne(Format::E8M0, 0.0f), 0x00u);  // mxsim: the smallest scale (PyTorch 0x00; ml_dtypes NaN)
  EXPECT_EQ(rne(Format::E8M0, NAN), 0xFFu);
  EXPECT_EQ(rne(Format::E8M0, INFINITY, Overflow::Ieee), 0xFFu);
  EXPECT_EQ(rne(Format::E8M0, -1.0f), 0xFFu);  // mxsim: unsigned, negatives are NaN (PyTorch drops the sign)
  EXPECT_EQ(rne(Format::E8M0, 0x1.8p127f, Overflow::Ieee), 0xFFu);
  EXPECT_EQ(rne(Format::E8M0, 0x1.8p127f, Overflow::Saturate), 0xFEu);
}

// --- Scale rules on whole blocks ---------------------------------------------
// FLOOR: OCP MX v1.0 §6.3 / torchao ScaleCalculationMode.FLOOR; RCEIL:
// TransformerEngine common/utils.cuh float_to_e8m0 / torchao RCEIL; EVEN:
// aiter quant.py, Primus-Turbo quantization_mxfp4.cu / torchao EVEN.
TEST(Golden, MxBlockAmax7FloorClipsRceilDoesNot) {
  Tensor2f x = xt::zeros<float>({size_t(1), size_t(32)});
  x(0, 0) = 7.0f;
  x(0, 1) = 1.0f;
  QuantSpec s = tensor_recipe("mxfp4_ocp");
  s.rule = ScaleRule::Floor;
  auto q = emu::quantize(x, s);
  EXPECT_EQ(int(q.scale_bytes(0, 0, 0)), 127);  // s = floor(log2 7) - 2 = 0
  EXPECT_EQ(q.code(0, 0, 0), 0x7u);             // 7 clips to 6
  auto st = emu::quant_stats(x, q);
  EXPECT_EQ(st.saturated, 1u);
  EXPECT_EQ(emu::dequantize(q)(0, 0), 6.0f);
  s.rule = ScaleRule::Rceil;
  q = emu::quantize(x, s);
  EXPECT_EQ(int(q.scale_bytes(0, 0, 0)), 128);  // d = 7/6 -> s = 1
  EXPECT_EQ(q.code(0, 0, 0), 0x6u);             // 3.5 ties to 4
  EXPECT_EQ(emu::dequantize(q)(0, 0), 8.0f);
  EXPECT_EQ(emu::quant_stats(x, q).saturated, 0u);
  s.rule = ScaleRule::Even;  // 7 = 1.75 * 2^2 bumps the exponent
  q = emu::quantize(x, s);
  EXPECT_EQ(int(q.scale_bytes(0, 0, 0)), 128);
  // 6.5 = 1.625 * 2^2: EVEN keeps s = 0 and clips, RCEIL does not.
  x(0, 0) = 6.5f;
  q = emu::quantize(x, s);
  EXPECT_EQ(int(q.scale_bytes(0, 0, 0)), 127);
  EXPECT_EQ(emu::quant_stats(x, q).saturated, 1u);
}

TEST(Golden, ScaleRuleBytes) {
  const FormatSpec e2m1 = spec_of(Format::E2M1), e4m3 = spec_of(Format::E4M3), e5m2 = spec_of(Format::E5M2);
  // EVEN, E2M1: s = E - 2 + [m >= 1.75]  (formats-and-scaling.md §4)
  EXPECT_EQ(e8m0_scale(ScaleRule::Even, bits(1.75f), e2m1), 127 - 1);
  EXPECT_EQ(e8m0_scale(ScaleRule::Even, bits(1.7499999f), e2m1), 127 - 2);
  EXPECT_EQ(e8m0_scale(ScaleRule::Even, bits(0x1.cp20f), e2m1), 127 + 19);
  // EVEN, E4M3 bumps at m >= 1.9375 (Primus-Turbo quantization_mxfp8.cu)
  EXPECT_EQ(e8m0_scale(ScaleRule::Even, bits(0x1.fp0f), e4m3), 127 + 1 - 8);
  EXPECT_EQ(e8m0_scale(ScaleRule::Even, bits(0x1.ep0f), e4m3), 127 - 8);
  // EVEN, E5M2 bumps at m >= 1.875
  EXPECT_EQ(e8m0_scale(ScaleRule::Even, bits(1.875f), e5m2), 127 + 1 - 15);
  // RCEIL (TE MXFP8): amax 448 -> s = 0; amax 449 -> 1; amax 1 -> ceil(log2(1/448)) = -8
  EXPECT_EQ(e8m0_scale(ScaleRule::Rceil, bits(448.0f), e4m3), 127);
  EXPECT_EQ(e8m0_scale(ScaleRule::Rceil, bits(449.0f), e4m3), 128);
  EXPECT_EQ(e8m0_scale(ScaleRule::Rceil, bits(1.0f), e4m3), 119);
  // FLOOR (OCP): 448 -> 0; 511 -> 0; 512 -> 1
  EXPECT_EQ(e8m0_scale(ScaleRule::Floor, bits(511.0f), e4m3), 127);
  EXPECT_EQ(e8m0_scale(ScaleRule::Floor, bits(512.0f), e4m3), 128);
  // Special blocks: all-zero -> 0x00, NaN/Inf -> 0xFF (torchao, TE NaN path)
  EXPECT_EQ(e8m0_scale(ScaleRule::Floor, 0u, e2m1), 0x00);
  EXPECT_EQ(e8m0_scale(ScaleRule::Rceil, 0x7FC00000u, e2m1), 0xFF);
  EXPECT_EQ(e8m0_scale(ScaleRule::Even, 0x7F800000u, e2m1), 0xFF);
}

// --- Packing -------------------------------------------------------------------
// PyTorch float4_e2m1fn_x2: element 2i in bits 3..0, 2i+1 in bits 7..4.
TEST(Golden, Fp4Packing) {
  Tensor2f x = {{1.0f, -6.0f, 0.5f}};
  QuantSpec s = tensor_recipe("mxfp4");
  auto q = emu::quantize(x, s);
  ASSERT_EQ(int(q.scale_bytes(0, 0, 0)), 127);  // amax 6: s = 0 under EVEN
  EXPECT_EQ(q.data(0, 0, 0), 0xF2u);            // low nibble 1.0 (0x2), high nibble -6 (0xF)
  EXPECT_EQ(q.data(0, 0, 1) & 0x0Fu, 0x1u);     // 0.5
}
