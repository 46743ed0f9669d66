// The per-block quantize step of docs/numerics.md §2-§4, written once for the
// CPU emulator (emu/src/quantize.cpp) and the GPU kernels
// (backends/hip/src/quantize.hip, codec.hip): amax, the block's scale by its
// rule, the element encoder, E2M1 packing, the Philox word of an element, and
// the 16-point Hadamard transform.
//
// A caller walks the elements of one block twice: first folding amax_step
// over their FP32 bits, then, with the BlockQuant that block_quant() returns
// for that amax, calling encode() on each. How the walk is laid out (loops on
// the CPU, lanes and shuffles on a GPU) is the caller's; the arithmetic is
// here. Every function is MXSIM_HD and uses only integer and IEEE FP32
// operations whose results are fixed by IEEE 754 (+, *, /, no contraction).
#pragma once
#include <cfloat>
#include <cstddef>
#include <cstdint>

#include "mxsim/bits.hpp"
#include "mxsim/format.hpp"
#include "mxsim/hd.hpp"
#include "mxsim/philox.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/scale_rule.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace mxsim::hd {

/// One step of a block's amax: the maximum of |x| taken on FP32 bit patterns
/// (sign cleared), so NaN and Inf compare above every finite value and the
/// result does not depend on the order of the steps (numerics.md §4.1).
MXSIM_HD constexpr uint32_t amax_step(uint32_t amax_bits, uint32_t x_bits) {
  const uint32_t a = x_bits & 0x7FFFFFFFu;
  return a > amax_bits ? a : amax_bits;
}

/// True when an amax (bits from amax_step) says the block holds a NaN or Inf.
MXSIM_HD constexpr bool amax_nonfinite(uint32_t amax_bits) { return amax_bits >= 0x7F800000u; }

/// Largest finite value of an element format, as FP32.
MXSIM_HD inline float elem_max(const FormatSpec& ef) { return decode(ef, ef.max_code()); }

/// The FP32 scale of a block with FP32 scales (numerics.md §3.3): the fixed
/// (delayed-scaling) scale when the spec has one, else current scaling.
MXSIM_HD inline float fp32_block_scale(const QuantSpec& s, float amax, float emax_value) {
  if (s.fixed_scale != 0.0f) return s.fixed_scale;
  return current_scale(emax_value, amax, s.amax_epsilon, s.pow2_scale);
}

/// NVFP4's per-tensor scale pair (numerics.md §3.3, TE cast/nvfp4):
/// S_enc = fl32(2688 / global_amax) (FLT_MAX for +Inf, 1 for global_amax = 0),
/// S_dec = fl32(1 / S_enc), stored as tensor_scale_inv. A tensor holding any
/// NaN or Inf (global amax bits >= 0x7F800000) has S_dec = NaN and every block
/// marked NaN.
struct Nvfp4TensorScale {
  float s_enc = 1.0f;
  float s_dec = 1.0f;
  bool nonfinite = false;
};
MXSIM_HD inline Nvfp4TensorScale nvfp4_tensor_scale(uint32_t global_amax_bits) {
  Nvfp4TensorScale t;
  if (amax_nonfinite(global_amax_bits)) {
    t.nonfinite = true;
    t.s_dec = f32_from_bits(kCanonicalNan32);
    return t;
  }
  const float gamax = f32_from_bits(global_amax_bits);
  float s_enc = (448.0f * 6.0f) / gamax;  // gamax == 0 gives +Inf, handled below
  if (s_enc > FLT_MAX) s_enc = FLT_MAX;
  if (gamax == 0.0f || s_enc == 0.0f) s_enc = 1.0f;
  t.s_enc = s_enc;
  t.s_dec = 1.0f / s_enc;
  return t;
}

/// What one block stores and how its elements are encoded.
struct BlockQuant {
  uint8_t scale_byte = 0;   ///< E8M0 byte (s + 127) or NVFP4's UE4M3 byte
  float scale_inv = 1.0f;   ///< FP32 scales: the stored scale_inv
  bool zero_codes = false;  ///< NaN/Inf block: every code is 0, the scale marks the block NaN
  bool e8m0 = true;         ///< elements are x / 2^scale_exp (exact) ...
  int scale_exp = 0;
  float mul = 1.0f;         ///< ... or fl32(x * mul) (FP32 and UE4M3 scales)

  /// Code of one element (FP32 bits) of this block; rnd is its Philox word
  /// (RoundMode::Stochastic only). Elements always saturate (numerics.md §2.3).
  /// RNE and RZ take encode_by_add, the same code in a dozen operations (the
  /// quantizers' hot loop) for every input but NaN: an E8M0 block that is
  /// not zero_codes holds none; x * mul can be NaN only as 0 * Inf, which
  /// takes encode's path.
  /// True when every element of this block takes encode_by_add with
  /// scale_exp (an E8M0 block holding no NaN/Inf, RNE or RZ): kernels test it
  /// once per block and run a loop without per-element branches.
  MXSIM_HD bool by_add(const FormatSpec& ef, RoundMode mode) const {
    return !zero_codes && e8m0 && encode_by_add_applies(ef, scale_exp, mode);
  }
  MXSIM_HD uint32_t encode(const FormatSpec& ef, uint32_t x_bits, RoundMode mode, uint32_t rnd) const {
    if (zero_codes) return 0u;
    const uint32_t v = e8m0 ? x_bits : f32_bits(f32_from_bits(x_bits) * mul);
    const int s = e8m0 ? scale_exp : 0;
    if (encode_by_add_applies(ef, s, mode) && (e8m0 || (v & 0x7FFFFFFFu) <= 0x7F800000u))
      return encode_by_add(ef, v, s, mode);
    return mxsim::encode(ef, v, s, mode, Overflow::Saturate, rnd);
  }
};

/// The E8M0 case of block_quant (the MX recipes): scale byte by `rule`, 0xFF
/// and zero codes for a NaN/Inf block. Kernels specialised on MX call it
/// directly, so the other scale kinds' branches stay out of their code.
MXSIM_HD inline BlockQuant block_quant_e8m0(ScaleRule rule, const FormatSpec& ef, uint32_t amax_bits) {
  BlockQuant q;
  q.scale_byte = e8m0_scale(rule, amax_bits, ef);  // 0xFF for a NaN/Inf block
  q.scale_exp = int(q.scale_byte) - 127;
  q.zero_codes = amax_nonfinite(amax_bits);
  return q;
}

/// The block step: from a block's amax (bits from amax_step over the block,
/// Hadamard-transformed values where the spec asks for it) to its scale and
/// encoder, by the spec's scale kind and rule (numerics.md §3). `t` is the
/// tensor's NVFP4 scale (ScaleKind::UE4M3 only; ignored otherwise).
MXSIM_HD inline BlockQuant block_quant(const QuantSpec& s, const FormatSpec& ef, uint32_t amax_bits,
                                       const Nvfp4TensorScale& t = Nvfp4TensorScale{}) {
  BlockQuant q;
  const bool nonfinite = amax_nonfinite(amax_bits);
  switch (s.scale_kind) {
    case ScaleKind::E8M0: return block_quant_e8m0(s.rule, ef, amax_bits);
    case ScaleKind::FP32:
      q.e8m0 = false;
      if (nonfinite) {
        q.scale_inv = f32_from_bits(kCanonicalNan32);
        q.zero_codes = true;
        break;
      }
      q.mul = fp32_block_scale(s, f32_from_bits(amax_bits), elem_max(ef));
      q.scale_inv = 1.0f / q.mul;
      break;
    case ScaleKind::UE4M3: {
      q.e8m0 = false;
      const FormatSpec e4m3 = spec_of(Format::E4M3);
      if (nonfinite || t.nonfinite) {
        q.scale_byte = uint8_t(e4m3.nan_code(0));
        q.zero_codes = true;
        break;
      }
      // s_block = e4m3(block_amax * fl32(S_enc * fl32(1/6))), RNE, saturating;
      // element factor min(fl32(1 / fl32(s_block * S_dec)), FLT_MAX).
      const float tt = t.s_enc * (1.0f / 6.0f);
      q.scale_byte = uint8_t(mxsim::encode(e4m3, f32_bits(f32_from_bits(amax_bits) * tt)));
      const float denom = decode(e4m3, q.scale_byte) * t.s_dec;
      const float f = 1.0f / denom;
      q.mul = f > FLT_MAX ? FLT_MAX : f;
      break;
    }
  }
  return q;
}

/// Logical row-major index of element (g, lr, lc) of a [groups, rows, cols]
/// tensor: the Philox counter of stochastic rounding (numerics.md §2.5).
MXSIM_HD constexpr uint64_t logical_index(size_t g, size_t lr, size_t lc, size_t rows, size_t cols) {
  return (uint64_t(g) * rows + lr) * cols + lc;
}

/// Philox word of the element with logical index `index` under spec s (0
/// unless s.round is Stochastic): s.sr(s.sr_index_base + index).
MXSIM_HD inline uint32_t sr_word(const QuantSpec& s, uint64_t index) {
  return s.round == RoundMode::Stochastic ? s.sr(s.sr_index_base + index) : 0u;
}

/// Bytes of one storage row of `scols` codes: E2M1 packs two per byte
/// (float4_e2m1fn_x2), every other element format takes one byte.
MXSIM_HD constexpr size_t row_bytes(Format elem, size_t scols) { return elem == Format::E2M1 ? (scols + 1) / 2 : scols; }

/// One byte of packed E2M1: element 2i (lo) in the low nibble, 2i+1 (hi) in
/// the high one; an odd row's last high nibble is 0 (padding).
MXSIM_HD constexpr uint8_t pack_e2m1(uint32_t lo, uint32_t hi) { return uint8_t((lo & 0xFu) | ((hi & 0xFu) << 4)); }

/// Element formats the block quantizer writes: one code per byte (<= 8 bits),
/// E8M0 (a scale format) excluded.
MXSIM_HD constexpr bool quant_elem(Format f) { return spec_of(f).bits <= 8 && f != Format::E8M0; }

/// Storage layout of a quantized [groups, rows, cols] tensor (the
/// QuantizedTensor layout of quantized_tensor.hpp): 1-D blocks along Axis::Rows
/// store the transpose; 2-D tiles and per-tensor scaling keep the logical
/// layout; block extents of 0 in the spec resolve to the storage extent.
struct QuantLayout {
  size_t groups = 1, rows = 0, cols = 0;  ///< logical shape
  bool transposed = false;                ///< storage = logical^T per group
  size_t srows = 0, scols = 0;            ///< storage extents
  size_t br = 0, bc = 0;                  ///< block extents in storage coordinates
  size_t nbr = 0, nbc = 0;                ///< scale grid per group
  size_t rbytes = 0;                      ///< bytes of one storage row of codes
  MXSIM_HD constexpr size_t data_bytes() const { return groups * srows * rbytes; }
  MXSIM_HD constexpr size_t scale_count() const { return groups * nbr * nbc; }
};

MXSIM_HD constexpr QuantLayout quant_layout(const QuantSpec& s, size_t groups, size_t rows, size_t cols, Axis axis) {
  QuantLayout l;
  l.groups = groups;
  l.rows = rows;
  l.cols = cols;
  const bool per_tensor = s.block_rows == 0 && s.block_cols == 0;
  const bool tile_2d = s.block_rows != 1 && s.block_cols != 1 && !per_tensor;
  l.transposed = !tile_2d && !per_tensor && axis == Axis::Rows;
  l.srows = l.transposed ? cols : rows;
  l.scols = l.transposed ? rows : cols;
  l.br = s.block_rows == 0 ? l.srows : size_t(s.block_rows);
  l.bc = s.block_cols == 0 ? l.scols : size_t(s.block_cols);
  l.nbr = l.br == 0 ? 0 : (l.srows + l.br - 1) / l.br;
  l.nbc = l.bc == 0 ? 0 : (l.scols + l.bc - 1) / l.bc;
  l.rbytes = row_bytes(s.elem, l.scols);
  return l;
}

/// The exact value of one stored element (numerics.md §2.4, §3.3): its
/// decoded code `e` times its block's scale: 2^(byte - 127) for E8M0 (0xFF:
/// NaN), scale_inv for FP32 scales, UE4M3 byte value times the tensor's
/// S_dec for NVFP4; a NaN is the canonical 0x7FC00000 (bits.hpp canonical_nan).
/// The arguments a kind does not use are ignored.
MXSIM_HD inline float dequant_value(ScaleKind kind, float e, uint8_t scale_byte, float scale_inv,
                                    float tensor_scale_inv) {
  switch (kind) {
    case ScaleKind::E8M0:
      return scale_byte == kE8M0Nan ? canonical_nan(__builtin_nanf("")) : canonical_nan(e * pow2f(int(scale_byte) - 127));
    case ScaleKind::FP32: return canonical_nan(e * scale_inv);
    case ScaleKind::UE4M3: return canonical_nan((e * decode(spec_of(Format::E4M3), scale_byte)) * tensor_scale_inv);
  }
  return canonical_nan(__builtin_nanf(""));
}

/// The exact value of one element whose FP32 block value is a divisor (a
/// quantization scale, Fp32ScaleUse::DivideByScale; numerics.md §2.4):
/// fl32(e / scale), one IEEE RNE division. Not e * fl32(1 / scale): that rounds
/// twice and differs in the last bit for some pairs (e = 5, scale = 3). torchao
/// Float8TrainingTensor (torchao/float8/float8_training_tensor.py,
/// _FromFloat8ConstrFunc.forward: `_data.to(orig_dtype) / _scale`). NaN as
/// dequant_value: canonical.
MXSIM_HD inline float dequant_value_divide(float e, float scale) { return canonical_nan(e / scale); }

/// How one element was rounded (numerics.md §4.6, "rounding choices"): whether the value the
/// quantizer encoded, v, lay strictly between two neighbouring magnitudes lo < |v| < hi of the
/// element grid (the rounding had a choice), whether the stored code took hi (away from zero,
/// "up"), and the probability stochastic rounding gives hi, p_up = (|v| - lo) / (hi - lo), one
/// FP64 division of exact operands. v is the quantizer's own: x / 2^s for E8M0 scales (exact),
/// fl32(x * mul) for NVFP4's UE4M3 scales with mul rebuilt from the stored byte and S_dec as
/// block_quant makes it. Not recorded (between = false): FP32-scale blocks (the stored scale_inv
/// does not give the quantizer's factor back; the FP8 recipes never round stochastically), NaN
/// blocks, non-finite x, values on the grid and values at or past the largest finite magnitude.
struct RoundingChoice {
  bool between = false, up = false;
  double p_up = 0;
};
MXSIM_HD inline RoundingChoice rounding_choice(ScaleKind kind, const FormatSpec& ef, float x, uint32_t code,
                                               uint8_t scale_byte, float tensor_scale_inv) {
  RoundingChoice r;
  const uint32_t ax = f32_bits(x) & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u) return r;  // NaN / Inf
  double av = 0;                     // |v|, exact
  uint32_t lo_code = 0;
  if (kind == ScaleKind::E8M0) {
    if (scale_byte == kE8M0Nan) return r;
    const int s = int(scale_byte) - 127;
    av = double(f32_from_bits(ax)) * double(pow2f(-s));
    lo_code = mxsim::encode(ef, ax, s, RoundMode::RZ, Overflow::Saturate, 0);
  } else if (kind == ScaleKind::UE4M3) {
    const FormatSpec e4m3 = spec_of(Format::E4M3);
    const float sd = decode(e4m3, scale_byte);
    if (!(sd == sd) || !(tensor_scale_inv == tensor_scale_inv)) return r;  // a NaN block or tensor scale
    const float f = 1.0f / (sd * tensor_scale_inv);
    const float v = f32_from_bits(ax) * (f > FLT_MAX ? FLT_MAX : f);
    av = double(v);
    lo_code = mxsim::encode(ef, f32_bits(v), 0, RoundMode::RZ, Overflow::Saturate, 0);
  } else {
    return r;
  }
  const double lo = double(decode(ef, lo_code));
  if (av == lo || lo_code >= ef.max_code()) return r;
  const double hi = double(decode(ef, lo_code + 1));
  r.between = true;
  r.up = (code & ~ef.sign_bit()) == lo_code + 1;
  r.p_up = (av - lo) / (hi - lo);
  return r;
}

/// The bin of one block scale in the scale exponent histogram (the trace's scale_exp_hist,
/// numerics.md §4.6): 127 + e for the block's scale exponent e clamped to [-127, 127], 255 for a
/// NaN scale. e is the E8M0 byte's exponent, or floor(log2) of the decode scale for FP32 scales
/// (scale_inv as applied) and NVFP4's UE4M3 ones (the byte's value times the tensor scale_inv,
/// one FP32 multiply). A zero decode scale (NVFP4's all-zero block, byte 0) is bin 0, as an
/// all-zero MX block's E8M0 0x00 is; a NaN, infinite or negative one counts as NaN (bin 255).
MXSIM_HD inline unsigned scale_exp_bin(ScaleKind kind, uint8_t scale_byte, float scale_inv, float tensor_scale_inv) {
  float si = scale_inv;
  if (kind == ScaleKind::E8M0) return scale_byte == kE8M0Nan ? 255u : unsigned(scale_byte);
  if (kind == ScaleKind::UE4M3) si = decode(spec_of(Format::E4M3), scale_byte) * tensor_scale_inv;
  const uint32_t b = f32_bits(si);
  if (b == 0u) return 0u;                 // +0: the exponent clamped to -127
  if (!(b < 0x7F800000u)) return 255u;    // NaN, Inf, negative (sign: b >= 2^31)
  const int e = f32_floor_log2(b);
  return unsigned((e < -127 ? -127 : e > 127 ? 127 : e) + 127);
}

/// Largest magnitude a block can represent (saturation in numerics.md §4.6):
/// dequant_value of the element format's largest finite value.
MXSIM_HD inline float block_max_value(ScaleKind kind, float elem_max_value, uint8_t scale_byte, float scale_inv,
                                      float tensor_scale_inv) {
  return dequant_value(kind, elem_max_value, scale_byte, scale_inv, tensor_scale_inv);
}

/// The 16-point Walsh-Hadamard transform scaled by 1/4, in place
/// (numerics.md §2.6): element k negated first where bit k of `signs` is set
/// (exact), butterfly stages h = 1, 2, 4, 8, each pair (a + b, a - b) in
/// FP32, then every value times 0.25 (exact).
MXSIM_HD inline void hadamard16(float* v, uint16_t signs = 0) {
  // The sign bit flipped without a branch: negation, bit for bit. (A branch per element let
  // clang 15 for gfx90a unswitch the loop into 2^16 copies: a compile that did not end.)
  for (int k = 0; k < 16; ++k) v[k] = f32_from_bits(f32_bits(v[k]) ^ (uint32_t((signs >> k) & 1u) << 31));
  for (int h = 1; h < 16; h <<= 1)
    for (int i = 0; i < 16; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
  for (int i = 0; i < 16; ++i) v[i] *= 0.25f;
}

/// Host check of a spec against the storage extent it blocks (scols = the
/// blocked axis): what emu::quantize and the GPU quantizer both refuse, with
/// one message each. Throws std::invalid_argument naming `who` and the problem.
inline void validate_quant_spec(const QuantSpec& s, size_t scols, const char* who = "quantize") {
  const std::string w(who);
  if (s.block_rows < 0 || s.block_cols < 0)
    throw std::invalid_argument(w + ": negative block size " + std::to_string(s.block_rows) + "x" +
                                std::to_string(s.block_cols));
  if (s.elem == Format::E8M0 || s.elem == Format::FP32)
    throw std::invalid_argument(w + ": " + spec_of(s.elem).name + " is not an element format");
  if (s.scale_kind == ScaleKind::UE4M3 && s.elem != Format::E2M1)
    throw std::invalid_argument(w + ": UE4M3 (NVFP4) scales need E2M1 elements");
  if (s.fixed_scale != 0 && !(s.scale_kind == ScaleKind::FP32 && s.per_tensor()))
    throw std::invalid_argument(w + ": a fixed (delayed) scale needs FP32 per-tensor scaling");
  if (s.whole_tensor_scale && !s.takes_whole_tensor_scale())
    throw std::invalid_argument(w + ": " + QuantSpec::kWholeTensorScaleRule);
  if (s.fixed_scale != 0 && !(std::isfinite(s.fixed_scale) && s.fixed_scale > 0))
    throw std::invalid_argument(w + ": fixed scale must be finite and > 0, got " + std::to_string(s.fixed_scale));
  // scale_inv = fl32(1 / scale) must be finite, or every element dequantizes
  // to Inf or NaN (0 * Inf): a fixed scale below ~2^-128 is unusable.
  if (s.fixed_scale != 0 && !std::isfinite(1.0f / s.fixed_scale)) {
    char b[64];
    std::snprintf(b, sizeof b, "%a", double(s.fixed_scale));
    throw std::invalid_argument(w + ": fixed scale " + b +
                                " is too small: its reciprocal scale_inv overflows FP32 (need scale >= 2^-128)");
  }
  if (s.scale_convention != ScaleConvention::TE) {
    // The torchao conventions (docs/numerics.md §3.4) reproduce torchao's FP8
    // quantizers, which have FP8 elements, RNE casts and no Hadamard step.
    const std::string c = std::string("scale convention ") + name_of(s.scale_convention);
    if (s.scale_kind != ScaleKind::FP32) throw std::invalid_argument(w + ": " + c + " needs FP32 scales");
    if (!has_role(s.elem, kRoleFp8))
      throw std::invalid_argument(w + ": " + c + " needs FP8 elements (e4m3, e5m2, e4m3fnuz, e5m2fnuz), not " +
                                  spec_of(s.elem).name);
    if (s.fixed_scale != 0) throw std::invalid_argument(w + ": " + c + " has no delayed (fixed) scale");
    if (s.round != RoundMode::RNE)
      throw std::invalid_argument(w + ": " + c + " casts RNE (torchao's .to(float8)); rounding " + name_of(s.round) +
                                  " is not torchao's");
    if (s.hadamard16) throw std::invalid_argument(w + ": " + c + " has no Hadamard transform");
    const bool training = s.scale_convention == ScaleConvention::TorchaoTraining;
    if (training && !(s.per_tensor() || (s.block_rows == 1 && s.block_cols == 0)))
      throw std::invalid_argument(w + ": " + c + " is tensorwise or axiswise (per row / per column) only, as torchao's "
                                  "Float8TrainingTensor; this spec has " + std::to_string(s.block_rows) + "x" +
                                  std::to_string(s.block_cols) + " blocks");
    if (training && s.amax_epsilon != 0.0f)
      throw std::invalid_argument(w + ": " + c + " has a fixed epsilon (EPS = 1e-12); amax_epsilon must be 0");
    if (!training && s.pow2_scale) throw std::invalid_argument(w + ": " + c + " has no power-of-two scales");
    if (s.hp_dtype != Format::FP32 && (training || (s.hp_dtype != Format::BF16 && s.hp_dtype != Format::FP16)))
      throw std::invalid_argument(w + ": " + c + ": hp_dtype " + spec_of(s.hp_dtype).name + " is not one it takes");
  }
  if (s.hadamard16 && (scols % 16) != 0)
    throw std::invalid_argument(w + ": the 16-point Hadamard transform needs the blocked extent (" +
                                std::to_string(scols) + ") to be a multiple of 16");
  if (s.hadamard16 && s.block_cols != 0 && s.block_cols % 16 != 0)
    throw std::invalid_argument(w + ": the 16-point Hadamard transform needs blocks that are multiples of 16");
}

/// The torchao conventions' blocks divide the tensor: torchao's
/// _choose_scale_float8 views the tensor as whole blocks (and its layouts,
/// layout::from_torchao_float8, hold exact divisors only), so a ragged edge has
/// no torchao counterpart. srows x scols is the storage extent of one group.
/// Throws std::invalid_argument naming `who`, the extent and the block; a
/// no-op for ScaleConvention::TE.
inline void validate_torchao_blocks(const QuantSpec& s, size_t srows, size_t scols, const char* who = "quantize") {
  if (s.scale_convention == ScaleConvention::TE) return;
  const size_t br = s.block_rows == 0 ? srows : size_t(s.block_rows), bc = s.block_cols == 0 ? scols : size_t(s.block_cols);
  if ((br && srows % br) || (bc && scols % bc))
    throw std::invalid_argument(std::string(who) + ": scale convention " + name_of(s.scale_convention) + ": blocks " +
                                std::to_string(br) + "x" + std::to_string(bc) + " do not divide the stored extent " +
                                std::to_string(srows) + "x" + std::to_string(scols) +
                                " (torchao's blocks are exact divisors of the tensor; ragged edges have no torchao form)");
}

}  // namespace mxsim::hd
