// torchao's FP8 scale conventions (ScaleConvention::Torchao, TorchaoCuda,
// TorchaoTraining; docs/numerics.md §3.4): the block scale from the block's
// amax and the code of one element, as torchao's PyTorch code computes them
// in eager mode. Host code (the CPU reference quantizer); the GPU quantizer
// refuses these conventions.
//
// Sources (facts, restated):
//  - torchao/quantization/quant_primitives.py `_choose_scale_float8`:
//    max_abs = amax over the block in the tensor's own dtype; when hp_value_lb
//    or hp_value_ub is given, torch.clamp(max_abs, min=lb, max=ub); scale =
//    max_abs / torch.finfo(float8_dtype).max, a tensor divided by a Python
//    number (so in that dtype), returned .to(float32). `_quantize_affine_float8`:
//    x.to(float32) / scale (a tensor division), .clamp(-max, max), cast.
//    Its dequantize multiplies: qdata.to(float32) * scale.
//  - PyTorch's division of a tensor by a Python number: on the CPU an IEEE
//    division in FP32 (aten/src/ATen/native/cpu/BinaryOpsKernel.cpp
//    div_true_kernel; BF16 / FP16 tensors in FP32, the result rounded to the
//    dtype), on CUDA a * fl32(1 / b) (aten/src/ATen/native/cuda/
//    BinaryDivTrueKernel.cu, "compute a * reciprocal(b)"). Checked with
//    PyTorch 2.11 on a CPU and an H200 over 2^20 random amaxes: the CPU
//    quotient equals fl32(amax / 448) in all, CUDA's fl32(amax * fl32(1/448))
//    in all, and the two differ in 55% of them.
//  - torchao/float8/float8_utils.py `amax_to_scale`: amax.to(float64);
//    torch.finfo(fp8).max / torch.clamp(amax, min=EPS) with EPS = 1e-12, which
//    is Tensor.__rtruediv__ (torch/_tensor.py `__rdiv__`: self.reciprocal() *
//    other), .to(float32); with round_scales_to_power_of_2
//    `_round_scale_down_to_power_of_2`: torch.exp2(torch.floor(torch.log2(s)))
//    in FP32. float8_training_tensor.py `_ToFloat8ConstrFunc.forward`:
//    tensor.to(float32) * scale, then to_fp8_saturated (clamp(-max, max),
//    cast); _scale is that scale and decodes divide by it.
//  - The casts to FP8 are c10's (RNE; NaN gives 0x7F | sign for e4m3fn and
//    e5m2, 0x80 for the fnuz types). A NaN made by 0/0 or Inf/Inf is
//    0x7FFFFFFF on CUDA and 0xFFC00000 (negative) on x86 CPUs, a -NaN input
//    keeps its sign on the CPU and is canonical on CUDA: torchao writes 0x7F
//    for every NaN on CUDA, 0xFF for most on the CPU (checked on both).
//    mxsim writes CUDA's positive code for every NaN.
#pragma once
#include <cmath>
#include <cstdint>

#include "mxsim/bits.hpp"
#include "mxsim/format.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::torchao {

/// torch.finfo(dtype).max of an FP8 element format (448, 57344, 240, 57344).
inline float fp8_max(Format elem) { return decode(spec_of(elem), spec_of(elem).max_code()); }

/// v rounded to nearest even in `hp` (FP32: v itself; BF16, FP16: PyTorch's
/// float -> bfloat16 / half conversions, RNE, Inf and NaN kept), as FP32.
inline float round_to_hp(Format hp, float v) {
  if (hp == Format::FP32 || std::isnan(v)) return v;
  const FormatSpec f = spec_of(hp);
  return decode(f, encode(f, f32_bits(v), 0, RoundMode::RNE, Overflow::Ieee, 0));
}

/// torchao Float8Tensor's scale of a block (ScaleConvention::Torchao when
/// !cuda, TorchaoCuda when cuda): a = amax in hp; a = max(a, hp(lb)) when
/// lb > 0 (torch.clamp, NaN propagates); scale = hp(fl32(a / fp8_max)) (CPU)
/// or hp(fl32(a * fl32(1 / fp8_max))) (CUDA). A zero amax gives 0, an infinite
/// one +Inf, a NaN one NaN (IEEE; torchao has no special case).
inline float float8_scale(uint32_t amax_bits, Format elem, float lb, Format hp, bool cuda) {
  const float m = fp8_max(elem);
  float a = f32_from_bits(amax_bits);  // an amax of hp values is an hp value
  if (lb > 0.0f) {
    const float l = round_to_hp(hp, lb);
    if (a < l) a = l;  // false for NaN: clamp keeps it
  }
  const float s = cuda ? a * (1.0f / m) : a / m;
  return round_to_hp(hp, s);
}

/// 2^floor(log2(s)) as torchao's _round_scale_down_to_power_of_2 computes it:
/// the logarithm rounded to FP32 first (RNE), so a scale just below a power of
/// two (within half an FP32 ulp of the logarithm) goes UP to it, e.g.
/// s = 0x43FFFFFF (512 - 2^-15): log2 s = 9 - 8.6e-8 rounds to 9.0, result 512
/// (clearing the mantissa gives 256). 0 gives 0, NaN NaN, +Inf +Inf.
/// float(log2(double)) is the RNE FP32 logarithm (the FP64 logarithm's error,
/// < 2^-52 relative, cannot move it across an FP32 rounding boundary for an
/// FP32 s other than a power of two, whose logarithm is exact); PyTorch 2.11's
/// torch.log2 / exp2 gave the same bits on a CPU and on CUDA (H200) for
/// 263344 scales, 1200 of them powers of two or up to 11 ulps below one.
inline float round_scale_down_to_pow2(float s) {
  if (!(s > 0.0f) || std::isinf(s)) return s;  // 0, NaN, Inf (negative scales do not occur)
  const float l = float(std::log2(double(s)));
  return std::ldexp(1.0f, int(std::floor(l)));
}

/// torchao float8 training's scale (ScaleConvention::TorchaoTraining):
/// a = max(double(amax), 1e-12) (torch.clamp in FP64, NaN propagates),
/// fl32(fl64(fl64(1 / a) * fp8_max)), then round_scale_down_to_pow2 when pow2.
/// Inf amax gives 0 (1 / Inf = 0), NaN NaN.
inline float training_scale(uint32_t amax_bits, Format elem, bool pow2) {
  double a = double(f32_from_bits(amax_bits));
  if (a < 1e-12) a = 1e-12;  // EPS, an FP64 constant (not its FP32 rounding)
  const double r = 1.0 / a;  // reciprocal() ...
  const double s64 = r * double(fp8_max(elem));  // ... * fp8_max
  const float s = float(s64);                     // .to(torch.float32), RNE
  return pow2 ? round_scale_down_to_pow2(s) : s;
}

/// The NaN code PyTorch writes (positive, as on CUDA): 0x7F for E4M3 and E5M2
/// (c10's e5m2 NaN is 0x7F, not mxsim's canonical 0x7E), 0x80 for the FNUZ types.
inline uint32_t nan_code(Format elem) {
  return (elem == Format::E4M3FNUZ || elem == Format::E5M2FNUZ) ? 0x80u : 0x7Fu;
}

/// The code of an already scaled element v (fl32(x / scale) or fl32(x * scale)):
/// NaN -> nan_code; else clamp(v, -max, max) (Inf -> +-max, -0 stays -0), then
/// the RNE cast to the element format.
inline uint32_t code_of_scaled(Format elem, float v) {
  if (std::isnan(v)) return nan_code(elem);
  const float m = fp8_max(elem);
  if (v > m) v = m;
  if (v < -m) v = -m;
  return encode(spec_of(elem), f32_bits(v), 0, RoundMode::RNE, Overflow::Saturate, 0);
}

/// One block under a torchao convention: the stored FP32 value and the element step.
struct Block {
  float scale = 1.0f;   ///< stored: Float8Tensor `scale` (x ~= code * scale) or Float8TrainingTensor `_scale` (x ~= code / scale)
  bool divide = false;  ///< elements x / scale (Float8Tensor) or x * scale (training)
  uint32_t code(Format elem, float x) const { return code_of_scaled(elem, divide ? x / scale : x * scale); }
};

/// The block of a spec with a torchao convention (precondition: is_torchao(s.scale_convention)).
inline Block block(const QuantSpec& s, uint32_t amax_bits) {
  Block b;
  if (s.scale_convention == ScaleConvention::TorchaoTraining) {
    b.scale = training_scale(amax_bits, s.elem, s.pow2_scale);
    b.divide = false;
  } else {
    b.scale = float8_scale(amax_bits, s.elem, s.amax_epsilon, s.hp_dtype,
                           s.scale_convention == ScaleConvention::TorchaoCuda);
    b.divide = true;
  }
  if (std::isnan(b.scale)) b.scale = f32_from_bits(0x7FC00000u);  // one NaN pattern stored
  return b;
}

}  // namespace mxsim::torchao
