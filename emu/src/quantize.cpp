// Reference CPU quantizer: the literal form of docs/numerics.md §2-§4.
#include "mxsim/emu/quantize.hpp"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "mxsim/bits.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/scale_rule.hpp"
#include "quantize_fast.hpp"  // fast-path dispatch hook (qspeed)

namespace mxsim::emu {
namespace {

size_t ceil_div(size_t a, size_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

bool is_finite_bits(uint32_t b) { return (b & 0x7F800000u) != 0x7F800000u; }

void validate(const QuantSpec& s, size_t srows, size_t scols) {
  if (s.block_rows < 0 || s.block_cols < 0)
    throw std::invalid_argument("quantize: negative block size " + std::to_string(s.block_rows) + "x" +
                                std::to_string(s.block_cols));
  if (s.elem == Format::E8M0 || s.elem == Format::FP32)
    throw std::invalid_argument(std::string("quantize: ") + spec_of(s.elem).name + " is not an element format");
  if (s.scale_kind == ScaleKind::UE4M3 && s.elem != Format::E2M1)
    throw std::invalid_argument("quantize: UE4M3 (NVFP4) scales need E2M1 elements");
  if (s.fixed_scale != 0 && !(s.scale_kind == ScaleKind::FP32 && s.per_tensor()))
    throw std::invalid_argument("quantize: a fixed (delayed) scale needs FP32 per-tensor scaling");
  if (s.fixed_scale != 0 && !(std::isfinite(s.fixed_scale) && s.fixed_scale > 0))
    throw std::invalid_argument("quantize: fixed scale must be finite and > 0, got " + std::to_string(s.fixed_scale));
  // scale_inv = fl32(1 / scale) must be finite, or every element dequantizes
  // to Inf or NaN (0 * Inf): a fixed scale below ~2^-128 is unusable.
  if (s.fixed_scale != 0 && !std::isfinite(1.0f / s.fixed_scale)) {
    char b[64];
    std::snprintf(b, sizeof b, "%a", double(s.fixed_scale));
    throw std::invalid_argument(std::string("quantize: fixed scale ") + b +
                                " is too small: its reciprocal scale_inv overflows FP32 (need scale >= 2^-128)");
  }
  if (s.hadamard16 && (scols % 16) != 0)
    throw std::invalid_argument("quantize: the 16-point Hadamard transform needs the blocked extent (" +
                                std::to_string(scols) + ") to be a multiple of 16");
  if (s.hadamard16 && s.block_cols != 0 && s.block_cols % 16 != 0)
    throw std::invalid_argument("quantize: the 16-point Hadamard transform needs blocks that are multiples of 16");
  (void)srows;
}

float fp32_scale(const QuantSpec& s, float amax, float elem_max) {
  if (s.fixed_scale != 0) return s.fixed_scale;
  return current_scale(elem_max, amax, s.amax_epsilon, s.pow2_scale);
}

}  // namespace

void hadamard16_inplace(float* v) {
  for (int h = 1; h < 16; h <<= 1) {
    for (int i = 0; i < 16; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
  for (int i = 0; i < 16; ++i) v[i] *= 0.25f;
}

QuantizedTensor quantize(const Tensor3f& x, const QuantSpec& spec, Axis axis) {
  if (auto fq = fast::try_quantize(x, spec, axis)) return std::move(*fq);  // bit-identical fast path
  QuantizedTensor q;
  q.spec = spec;
  q.groups = x.shape(0);
  q.rows = x.shape(1);
  q.cols = x.shape(2);
  const bool one_d = !spec.is_2d_tile() && !spec.per_tensor();
  q.transposed = one_d && axis == Axis::Rows;
  const size_t G = q.groups, SR = q.srows(), SC = q.scols();
  validate(spec, SR, SC);
  const size_t br = q.block_rows(), bc = q.block_cols();
  const size_t nbr = ceil_div(SR, br), nbc = ceil_div(SC, bc);
  q.data = Bytes3::from_shape({G, SR, q.row_bytes()});
  q.data.fill(0);
  if (spec.scale_kind == ScaleKind::FP32) {
    q.scale_inv = Tensor3f::from_shape({G, nbr, nbc});
  } else {
    q.scale_bytes = Bytes3::from_shape({G, nbr, nbc});
  }
  const FormatSpec ef = spec_of(spec.elem);
  const float elem_max = decode(ef, ef.max_code());
  const FormatSpec e4m3 = spec_of(Format::E4M3);

  // Storage-ordered copy of one group (the transpose for Axis::Rows), with the
  // Hadamard transform applied along storage rows.
  std::vector<float> buf(SR * SC);

  // NVFP4 tensor scale: S_enc = (448 * 6) / global_amax over the whole tensor.
  float s_enc = 1.0f;
  bool tensor_nonfinite = false;
  if (spec.scale_kind == ScaleKind::UE4M3) {
    float gamax = 0.0f;
    for (float v : x) {
      if (!std::isfinite(v)) tensor_nonfinite = true;
      gamax = std::max(gamax, std::fabs(v));
    }
    if (tensor_nonfinite) {
      q.tensor_scale_inv = NAN;
    } else {
      s_enc = (448.0f * 6.0f) / gamax;  // gamax == 0 gives +inf, handled below
      if (s_enc > FLT_MAX) s_enc = FLT_MAX;
      if (gamax == 0.0f || s_enc == 0.0f) s_enc = 1.0f;
      q.tensor_scale_inv = 1.0f / s_enc;
    }
  }

  for (size_t g = 0; g < G; ++g) {
    for (size_t r = 0; r < SR; ++r)
      for (size_t c = 0; c < SC; ++c) buf[r * SC + c] = q.transposed ? x(g, c, r) : x(g, r, c);
    if (spec.hadamard16)
      for (size_t r = 0; r < SR; ++r)
        for (size_t c = 0; c < SC; c += 16) hadamard16_inplace(&buf[r * SC + c]);

    for (size_t bi = 0; bi < nbr; ++bi) {
      for (size_t bj = 0; bj < nbc; ++bj) {
        const size_t r0 = bi * br, r1 = std::min(SR, r0 + br);
        const size_t c0 = bj * bc, c1 = std::min(SC, c0 + bc);
        uint32_t amax_bits = 0;  // max over |x| bits; NaN/Inf compare above every finite
        for (size_t r = r0; r < r1; ++r)
          for (size_t c = c0; c < c1; ++c) amax_bits = std::max(amax_bits, f32_bits(buf[r * SC + c]) & 0x7FFFFFFFu);
        const bool nonfinite = !is_finite_bits(amax_bits) || tensor_nonfinite;
        const float amax = f32_from_bits(amax_bits);

        // Per-element encoder for this block, set by the scale kind.
        int scale_exp = 0;      // E8M0: x / 2^s
        float mul = 1.0f;       // FP32 / UE4M3: fl32(x * mul)
        switch (spec.scale_kind) {
          case ScaleKind::E8M0: {
            const uint8_t byte = e8m0_scale(spec.rule, amax_bits, ef);
            q.scale_bytes(g, bi, bj) = byte;
            scale_exp = int(byte) - 127;
            break;
          }
          case ScaleKind::FP32: {
            if (nonfinite) {
              q.scale_inv(g, bi, bj) = NAN;
              break;
            }
            mul = fp32_scale(spec, amax, elem_max);
            q.scale_inv(g, bi, bj) = 1.0f / mul;
            break;
          }
          case ScaleKind::UE4M3: {
            if (nonfinite) {
              q.scale_bytes(g, bi, bj) = uint8_t(e4m3.nan_code(0));
              break;
            }
            // TE: s_block = e4m3(block_amax * (S_enc * fl32(1/6))), RNE, satfinite.
            const float t = s_enc * (1.0f / 6.0f);
            const uint8_t byte = uint8_t(encode(e4m3, f32_bits(amax * t)));
            q.scale_bytes(g, bi, bj) = byte;
            // Element factor = min(1 / (s_block * S_dec), FLT_MAX).
            const float denom = decode(e4m3, byte) * q.tensor_scale_inv;
            const float f = 1.0f / denom;
            mul = (f > FLT_MAX) ? FLT_MAX : f;
            break;
          }
        }
        if (nonfinite) continue;  // codes stay 0; the NaN scale marks the block
        for (size_t r = r0; r < r1; ++r) {
          for (size_t c = c0; c < c1; ++c) {
            const float v = buf[r * SC + c];
            const size_t lr = q.transposed ? c : r, lc = q.transposed ? r : c;
            const uint64_t index = (uint64_t(g) * q.rows + lr) * q.cols + lc;
            const uint32_t rnd = spec.round == RoundMode::Stochastic ? spec.sr(spec.sr_index_base + index) : 0u;
            uint32_t code;
            if (spec.scale_kind == ScaleKind::E8M0)
              code = encode(ef, f32_bits(v), scale_exp, spec.round, Overflow::Saturate, rnd);
            else
              code = encode(ef, f32_bits(v * mul), 0, spec.round, Overflow::Saturate, rnd);
            q.set_code(g, r, c, code);
          }
        }
      }
    }
  }
  return q;
}

QuantizedTensor quantize(const Tensor2f& x, const QuantSpec& spec, Axis axis) {
  Tensor3f x3 = xt::view(x, xt::newaxis(), xt::all(), xt::all());
  return quantize(x3, spec, axis);
}

Tensor3f dequantize3(const QuantizedTensor& q) {
  Tensor3f out = Tensor3f::from_shape({q.groups, q.rows, q.cols});
  const FormatSpec ef = spec_of(q.spec.elem);
  const FormatSpec e4m3 = spec_of(Format::E4M3);
  const size_t br = q.block_rows(), bc = q.block_cols();
  // Element values from a code table (formats of at most 8 bits): the same
  // decode() values, computed once instead of per element.
  float lut[256];
  const bool use_lut = ef.bits <= 8;
  if (use_lut)
    for (uint32_t c = 0; c < (1u << ef.bits); ++c) lut[c] = decode(ef, c);
  for (size_t g = 0; g < q.groups; ++g) {
    for (size_t r = 0; r < q.srows(); ++r) {
      for (size_t c = 0; c < q.scols(); ++c) {
        const size_t bi = r / br, bj = c / bc;
        const uint32_t code = q.code(g, r, c);
        const float e = use_lut ? lut[code & 0xFFu] : decode(ef, code);
        float v;
        switch (q.spec.scale_kind) {
          case ScaleKind::E8M0: {
            const uint8_t byte = q.scale_bytes(g, bi, bj);
            v = byte == kE8M0Nan ? NAN : e * pow2f(int(byte) - 127);  // exact (numerics.md §2.4)
            break;
          }
          case ScaleKind::FP32: v = e * q.scale_inv(g, bi, bj); break;
          case ScaleKind::UE4M3: v = (e * decode(e4m3, q.scale_bytes(g, bi, bj))) * q.tensor_scale_inv; break;
          default: v = NAN;
        }
        if (q.transposed) out(g, c, r) = v; else out(g, r, c) = v;
      }
    }
  }
  return out;
}

Tensor2f dequantize(const QuantizedTensor& q) {
  if (q.groups != 1) throw std::invalid_argument("dequantize: tensor has " + std::to_string(q.groups) + " groups; use dequantize3");
  Tensor3f d = dequantize3(q);
  return xt::view(d, 0, xt::all(), xt::all());
}

Tensor2f qdq(const Tensor2f& x, const QuantSpec& spec, Axis axis) { return dequantize(quantize(x, spec, axis)); }

namespace {
/// Largest magnitude block (g, bi, bj) can represent.
float block_max(const QuantizedTensor& q, size_t g, size_t bi, size_t bj, float elem_max) {
  switch (q.spec.scale_kind) {
    case ScaleKind::E8M0: {
      const uint8_t b = q.scale_bytes(g, bi, bj);
      return b == kE8M0Nan ? NAN : elem_max * pow2f(int(b) - 127);
    }
    case ScaleKind::FP32: return elem_max * q.scale_inv(g, bi, bj);
    case ScaleKind::UE4M3: return (elem_max * decode(spec_of(Format::E4M3), q.scale_bytes(g, bi, bj))) * q.tensor_scale_inv;
  }
  return NAN;
}
}  // namespace

namespace {
/// The tensor the codes approximate: x itself, or x with the 16-point
/// Hadamard transform applied along the storage rows when the spec asks for
/// it (dequantize does not undo the transform, so errors are measured in the
/// transformed domain). Throws when shapes differ.
Tensor3f stats_source(const Tensor3f& x, const QuantizedTensor& q, const char* who) {
  if (x.shape(0) != q.groups || x.shape(1) != q.rows || x.shape(2) != q.cols)
    throw std::invalid_argument(std::string(who) + ": source and quantized shapes differ");
  Tensor3f h = x;
  if (!q.spec.hadamard16) return h;
  float run[16];
  for (size_t g = 0; g < q.groups; ++g)
    for (size_t r = 0; r < q.srows(); ++r)
      for (size_t c0 = 0; c0 + 16 <= q.scols(); c0 += 16) {
        for (size_t k = 0; k < 16; ++k) run[k] = q.transposed ? x(g, c0 + k, r) : x(g, r, c0 + k);
        hadamard16_inplace(run);
        for (size_t k = 0; k < 16; ++k) (q.transposed ? h(g, c0 + k, r) : h(g, r, c0 + k)) = run[k];
      }
  return h;
}
}  // namespace

std::vector<BlockStat> block_stats(const Tensor3f& x_in, const QuantizedTensor& q) {
  const Tensor3f x = stats_source(x_in, q, "block_stats");
  const Tensor3f d = dequantize3(q);
  const size_t br = q.block_rows(), bc = q.block_cols();
  const size_t nbr = ceil_div(q.srows(), br), nbc = ceil_div(q.scols(), bc);
  const float elem_max = decode(spec_of(q.spec.elem), spec_of(q.spec.elem).max_code());
  std::vector<BlockStat> out(q.groups * nbr * nbc);
  for (size_t g = 0; g < q.groups; ++g)
    for (size_t bi = 0; bi < nbr; ++bi)
      for (size_t bj = 0; bj < nbc; ++bj) {
        BlockStat& s = out[(g * nbr + bi) * nbc + bj];
        const float bmax = block_max(q, g, bi, bj, elem_max);
        switch (q.spec.scale_kind) {
          case ScaleKind::E8M0: {
            const uint8_t b = q.scale_bytes(g, bi, bj);
            s.scale_exp = b == kE8M0Nan ? INT_MIN : int(b) - 127;
            break;
          }
          case ScaleKind::FP32: {
            const float si = q.scale_inv(g, bi, bj);
            s.scale_exp = (std::isfinite(si) && si > 0) ? f32_floor_log2(f32_bits(si)) : INT_MIN;
            break;
          }
          case ScaleKind::UE4M3: {
            const float si = decode(spec_of(Format::E4M3), q.scale_bytes(g, bi, bj)) * q.tensor_scale_inv;
            s.scale_exp = (std::isfinite(si) && si > 0) ? f32_floor_log2(f32_bits(si)) : INT_MIN;
            break;
          }
        }
        for (size_t r = bi * br; r < std::min(q.srows(), (bi + 1) * br); ++r)
          for (size_t c = bj * bc; c < std::min(q.scols(), (bj + 1) * bc); ++c) {
            const size_t lr = q.transposed ? c : r, lc = q.transposed ? r : c;
            const float xv = x(g, lr, lc), dv = d(g, lr, lc);
            // NaN propagates into the block amax (as the quantizer's bit-wise max does)
            if (std::isnan(xv) || (!std::isnan(s.amax) && std::fabs(xv) > s.amax)) s.amax = std::fabs(xv);
            if (std::isfinite(xv) && !std::isnan(dv)) {  // as quant_stats: an overflowed d counts
              const double e = double(xv) - double(dv);
              s.sq_err += e * e;
            }
            if (std::isfinite(xv) && xv != 0.0f && dv == 0.0f) ++s.underflow;
            if (std::isfinite(xv) && std::fabs(xv) > bmax) ++s.saturated;
          }
      }
  return out;
}

QuantStats quant_stats(const Tensor3f& x_in, const QuantizedTensor& q) {
  const Tensor3f x = stats_source(x_in, q, "quant_stats");
  const Tensor3f d = dequantize3(q);
  const size_t br = q.block_rows(), bc = q.block_cols();
  const float elem_max = decode(spec_of(q.spec.elem), spec_of(q.spec.elem).max_code());
  QuantStats s;
  s.count = x.size();
  double se = 0, sx = 0;
  size_t n = 0;
  for (size_t g = 0; g < q.groups; ++g)
    for (size_t r = 0; r < q.rows; ++r)
      for (size_t c = 0; c < q.cols; ++c) {
        const float xv = x(g, r, c), dv = d(g, r, c);
        if (!std::isfinite(xv)) ++s.nonfinite_in;
        if (std::isnan(dv)) ++s.nan_out;
        if (std::isfinite(xv) && xv != 0.0f && dv == 0.0f) ++s.underflow;
        const size_t sr = q.transposed ? c : r, sc = q.transposed ? r : c;
        if (std::isfinite(xv) && std::fabs(xv) > block_max(q, g, sr / br, sc / bc, elem_max)) ++s.saturated;
        // A finite source whose dequantized value overflowed to +-Inf (numerics
        // §2.4) counts with an infinite error: dropping it would hide it.
        if (std::isfinite(xv) && !std::isnan(dv)) {
          const double e = double(xv) - double(dv);
          se += e * e;
          sx += double(xv) * double(xv);
          s.max_abs_err = std::max(s.max_abs_err, std::fabs(e));
          ++n;
        }
      }
  if (n == 0) {
    // No pair to compare (all NaN, a NaN-scaled per-tensor FP8 / NVFP4
    // tensor, or an empty tensor): undefined, not "exact".
    s.mse = s.max_abs_err = s.signal_power = s.sqnr_db = NAN;
    return s;
  }
  s.mse = se / double(n);
  s.signal_power = sx / double(n);
  s.sqnr_db = se == 0 ? INFINITY : 10.0 * std::log10(sx / se);
  return s;
}

QuantStats quant_stats(const Tensor2f& x, const QuantizedTensor& q) {
  Tensor3f x3 = xt::view(x, xt::newaxis(), xt::all(), xt::all());
  return quant_stats(x3, q);
}

}  // namespace mxsim::emu
