// Reference CPU quantizer: the literal form of docs/numerics.md §2-§4. The
// per-block step (amax, scale rule, element encoder, Hadamard) is the shared
// one of core/include/mxsim/hd/quant_block.hpp, which the GPU quantizer runs too.
#include "mxsim/emu/quantize.hpp"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "mxsim/bits.hpp"
#include "mxsim/hd/quant_block.hpp"
#include "mxsim/hd/reduce.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/scale_rule.hpp"
#include "mxsim/torchao_scale.hpp"
#include "quantize_fast.hpp"  // fast-path dispatch hook (qspeed)

namespace mxsim::emu {
namespace {

size_t ceil_div(size_t a, size_t b) { return b == 0 ? 0 : (a + b - 1) / b; }

}  // namespace

void hadamard16_inplace(float* v, uint16_t signs) { hd::hadamard16(v, signs); }

namespace {
/// quantize() with the whole-tensor amaxes optionally given (quantize_slice).
QuantizedTensor quantize_impl(const Tensor3f& x, const QuantSpec& spec, Axis axis, const SliceAmax& given) {
  QuantizedTensor q;
  q.spec = spec;
  q.groups = x.shape(0);
  q.rows = x.shape(1);
  q.cols = x.shape(2);
  const bool one_d = !spec.is_2d_tile() && !spec.per_tensor();
  q.transposed = one_d && axis == Axis::Rows;
  const size_t G = q.groups, SR = q.srows(), SC = q.scols();
  hd::validate_quant_spec(spec, SC);
  hd::validate_torchao_blocks(spec, SR, SC);
  const bool torchao = is_torchao(spec.scale_convention);  // torchao's arithmetic (torchao_scale.hpp)
  if (spec.scale_convention == ScaleConvention::TorchaoTraining) q.fp32_scale_use = Fp32ScaleUse::DivideByScale;
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

  // Storage-ordered copy of one group (the transpose for Axis::Rows), with the
  // Hadamard transform applied along storage rows.
  std::vector<float> buf(SR * SC);

  // NVFP4 tensor scale: S_enc = (448 * 6) / global_amax over the whole tensor,
  // transformed as its blocks are under hadamard16 (TE's post-RHT amax).
  hd::Nvfp4TensorScale ts;
  if (has_tensor_scale(spec.scale_kind)) {
    uint32_t gamax = 0;
    if (given.tensor_amax_bits) gamax = *given.tensor_amax_bits;
    else gamax = tensor_amax_bits(x, spec, q.transposed);
    ts = hd::nvfp4_tensor_scale(gamax);
    q.tensor_scale_inv = ts.s_dec;
  }

  // The per-block step of hd/quant_block.hpp, walked block by block.
  for (size_t g = 0; g < G; ++g) {
    for (size_t r = 0; r < SR; ++r)
      for (size_t c = 0; c < SC; ++c) buf[r * SC + c] = q.transposed ? x(g, c, r) : x(g, r, c);
    if (spec.hadamard16)
      for (size_t r = 0; r < SR; ++r)
        for (size_t c = 0; c < SC; c += 16) hd::hadamard16(&buf[r * SC + c], spec.hadamard16_signs);

    for (size_t bi = 0; bi < nbr; ++bi) {
      for (size_t bj = 0; bj < nbc; ++bj) {
        const size_t r0 = bi * br, r1 = std::min(SR, r0 + br);
        const size_t c0 = bj * bc, c1 = std::min(SC, c0 + bc);
        uint32_t amax_bits = 0;
        for (size_t r = r0; r < r1; ++r)
          for (size_t c = c0; c < c1; ++c) amax_bits = hd::amax_step(amax_bits, f32_bits(buf[r * SC + c]));
        if (spec.per_tensor() && given.group_amax_bits) amax_bits = *given.group_amax_bits;  // a slice's group
        if (q.transposed && spec.block_cols == 0 && !given.column_amax_bits.empty())
          amax_bits = given.column_amax_bits[r0];  // a band of whole-column blocks: the column's amax
        if (torchao) {  // scale and codes as torchao computes them: no NaN-block shortcut
          const torchao::Block tb = torchao::block(spec, amax_bits);
          q.scale_inv(g, bi, bj) = tb.scale;
          for (size_t r = r0; r < r1; ++r)
            for (size_t c = c0; c < c1; ++c) q.set_code(g, r, c, tb.code(spec.elem, buf[r * SC + c]));
          continue;
        }
        const hd::BlockQuant bq = hd::block_quant(spec, ef, amax_bits, ts);
        if (spec.scale_kind == ScaleKind::FP32) q.scale_inv(g, bi, bj) = bq.scale_inv;
        else q.scale_bytes(g, bi, bj) = bq.scale_byte;
        if (bq.zero_codes) continue;  // codes stay 0; the NaN scale marks the block
        for (size_t r = r0; r < r1; ++r) {
          for (size_t c = c0; c < c1; ++c) {
            const size_t lr = q.transposed ? c : r, lc = q.transposed ? r : c;
            const uint32_t rnd = hd::sr_word(spec, hd::logical_index(g, lr, lc, q.rows, q.cols));
            q.set_code(g, r, c, bq.encode(ef, f32_bits(buf[r * SC + c]), spec.round, rnd));
          }
        }
      }
    }
  }
  return q;
}
}  // namespace

QuantizedTensor quantize(const Tensor3f& x, const QuantSpec& spec, Axis axis) {
  SliceAmax given;
  if (spec.whole_tensor_scale) given.group_amax_bits = amax_bits(x, spec, false);  // every group's block: one amax
  else if (auto fq = fast::try_quantize(x, spec, axis)) return std::move(*fq);     // bit-identical fast path
  return quantize_impl(x, spec, axis, given);  // validates the spec (a whole-tensor scale included)
}

QuantizedTensor quantize_slice(const Tensor3f& x, const QuantSpec& spec, Axis axis, const SliceAmax& amax) {
  const bool whole_columns = !spec.is_2d_tile() && !spec.per_tensor() && axis == Axis::Rows && spec.block_cols == 0;
  if (x.shape(0) != 1) throw std::invalid_argument("quantize_slice: a slice is rows of one group ([1, n, C])");
  if (spec.per_tensor() && !amax.group_amax_bits)
    throw std::invalid_argument("quantize_slice: a per-tensor spec needs the group's amax");
  if (has_tensor_scale(spec.scale_kind) && !amax.tensor_amax_bits)
    throw std::invalid_argument("quantize_slice: NVFP4 needs the tensor's global amax");
  if (whole_columns && amax.column_amax_bits.size() != x.shape(2))
    throw std::invalid_argument("quantize_slice: columnwise blocks of whole columns need each column's amax");
  // Specs without a whole-tensor amax are block-local: quantize() of the
  // slice is the whole tensor's bits (the fast path included).
  if (!spec.per_tensor() && !has_tensor_scale(spec.scale_kind) && !whole_columns) return quantize(x, spec, axis);
  return quantize_impl(x, spec, axis, amax);
}

uint64_t slice_unit(uint64_t R, const QuantSpec& spec, Axis axis) {
  if (spec.is_2d_tile()) return spec.block_rows > 0 ? uint64_t(spec.block_rows) : std::max<uint64_t>(R, 1);
  if (spec.per_tensor() || axis == Axis::Cols) return 1;
  uint64_t u = spec.block_cols > 0 ? uint64_t(spec.block_cols) : spec.hadamard16 ? 16 : 1;
  if (spec.elem == Format::E2M1 && u % 2) u *= 2;  // a band's codes start on a byte of the packed storage row
  return u;
}

std::vector<RowSlice> row_slices(uint64_t G, uint64_t R, uint64_t C, const QuantSpec& spec, uint64_t max_elems,
                                 Axis axis) {
  std::vector<RowSlice> v;
  if (G == 0 || R == 0 || C == 0) return v;
  const bool rowwise_1d = !spec.is_2d_tile() && !spec.per_tensor() && axis == Axis::Cols;
  const uint64_t unit = slice_unit(R, spec, axis);
  const uint64_t units = std::max<uint64_t>(1, max_elems / C / unit), step = units * unit;
  const uint64_t span = rowwise_1d ? G * R : R;  // rows a slice may run through
  for (uint64_t base = 0; base < G * R; base += span)
    for (uint64_t r = 0; r < span; r += step) {
      const uint64_t row0 = base + r, n = std::min(step, span - r);
      v.push_back({row0, n, row0 / R, row0 * C});
    }
  return v;
}

uint32_t tensor_amax_bits(const Tensor3f& x, const QuantSpec& spec, bool transposed, uint32_t running) {
  if (!spec.hadamard16) {
    for (float v : x) running = hd::amax_step(running, f32_bits(v));
    return running;
  }
  const size_t G = x.shape(0), SR = transposed ? x.shape(2) : x.shape(1), SC = transposed ? x.shape(1) : x.shape(2);
  float run[16];
  for (size_t g = 0; g < G; ++g)
    for (size_t r = 0; r < SR; ++r)
      for (size_t c0 = 0; c0 + 16 <= SC; c0 += 16) {
        for (size_t k = 0; k < 16; ++k) run[k] = transposed ? x(g, c0 + k, r) : x(g, r, c0 + k);
        hd::hadamard16(run, spec.hadamard16_signs);
        for (size_t k = 0; k < 16; ++k) running = hd::amax_step(running, f32_bits(run[k]));
      }
  return running;
}

uint32_t amax_bits(const Tensor3f& x, const QuantSpec& spec, bool coded_domain, uint32_t running) {
  const size_t G = x.shape(0), R = x.shape(1), C = x.shape(2);
  if (!(coded_domain && spec.hadamard16)) {
    for (float v : x) running = hd::amax_step(running, f32_bits(v));
    return running;
  }
  if (C % 16 != 0) throw std::invalid_argument("amax_bits: hadamard16 needs the row length a multiple of 16");
  float run[16];
  for (size_t g = 0; g < G; ++g)
    for (size_t r = 0; r < R; ++r)
      for (size_t c0 = 0; c0 < C; c0 += 16) {
        for (size_t k = 0; k < 16; ++k) run[k] = x(g, r, c0 + k);
        hd::hadamard16(run, spec.hadamard16_signs);
        for (size_t k = 0; k < 16; ++k) running = hd::amax_step(running, f32_bits(run[k]));
      }
  return running;
}

void fold_column_amax(const Tensor3f& x, const QuantSpec& spec, std::vector<uint32_t>& running) {
  const size_t R = x.shape(1), C = x.shape(2);
  if (running.empty()) running.assign(C, 0);
  if (!spec.hadamard16) {
    for (size_t r = 0; r < R; ++r)
      for (size_t c = 0; c < C; ++c) running[c] = hd::amax_step(running[c], f32_bits(x(0, r, c)));
    return;
  }
  if (R % 16 != 0) throw std::invalid_argument("fold_column_amax: hadamard16 needs bands of a multiple of 16 rows");
  float run[16];
  for (size_t c = 0; c < C; ++c)
    for (size_t r0 = 0; r0 < R; r0 += 16) {
      for (size_t k = 0; k < 16; ++k) run[k] = x(0, r0 + k, c);
      hd::hadamard16(run, spec.hadamard16_signs);
      for (size_t k = 0; k < 16; ++k) running[c] = hd::amax_step(running[c], f32_bits(run[k]));
    }
}

bool f64_rounds_once(const QuantSpec& spec) { return spec.scale_kind == ScaleKind::E8M0 && !spec.hadamard16; }

namespace {
/// quantize_f64 with `quantize32` (quantize or quantize_slice) quantizing the FP32 rounding.
template <class Quantize32>
QuantizedTensor f64_impl(const double* data, size_t groups, size_t rows, size_t cols, const QuantSpec& spec,
                         size_t* rounded, const Quantize32& quantize32) {
  size_t n = 0;
  if (__builtin_mul_overflow(groups, rows, &n) || __builtin_mul_overflow(n, cols, &n))
    throw std::invalid_argument("quantize_f64: shape overflows size_t");
  if (!data && n) throw std::invalid_argument("quantize_f64: null data");
  if (is_torchao(spec.scale_convention))
    throw std::invalid_argument(std::string("quantize_f64: scale convention ") + name_of(spec.scale_convention) +
                                ": torchao takes a float64 tensor's amax and scale in float64, not from its float32 "
                                "rounding; convert the tensor to float32 (as torchao's .to(float32) of the elements) "
                                "first");
  // The FP32 rounding (RNE) of every value: the amax the scale rules see, and
  // the elements of the specs whose arithmetic is FP32 (see the header).
  Tensor3f x = Tensor3f::from_shape({groups, rows, cols});
  size_t changed = 0;
  float* px = x.data();
  for (size_t i = 0; i < n; ++i) {
    px[i] = static_cast<float>(data[i]);
    if (!(double(px[i]) == data[i]) && data[i] == data[i]) ++changed;
  }
  if (rounded) *rounded = changed;
  QuantizedTensor q = quantize32(x);
  if (!f64_rounds_once(spec) || changed == 0) return q;

  // E8M0 elements are x / 2^s exactly: re-encode each value the FP32
  // rounding changed from its FP64 bits, so it is rounded once.
  const FormatSpec ef = spec_of(spec.elem);
  const size_t br = q.block_rows(), bc = q.block_cols();
  for (size_t g = 0; g < groups; ++g)
    for (size_t lr = 0; lr < rows; ++lr)
      for (size_t lc = 0; lc < cols; ++lc) {
        const size_t i = (g * rows + lr) * cols + lc;
        if (double(px[i]) == data[i] || data[i] != data[i]) continue;
        const size_t r = q.transposed ? lc : lr, c = q.transposed ? lr : lc;  // storage position
        const uint8_t byte = q.scale_bytes(g, r / br, c / bc);
        if (byte == kE8M0Nan) continue;  // a NaN/Inf block keeps its zero codes
        uint64_t bits;
        std::memcpy(&bits, data + i, 8);
        const uint32_t rnd = hd::sr_word(spec, hd::logical_index(g, lr, lc, q.rows, q.cols));
        q.set_code(g, r, c, encode_f64(ef, bits, int(byte) - 127, spec.round, Overflow::Saturate, rnd));
      }
  return q;
}
}  // namespace

QuantizedTensor quantize_f64(const double* data, size_t groups, size_t rows, size_t cols, const QuantSpec& spec,
                             Axis axis, size_t* rounded) {
  return f64_impl(data, groups, rows, cols, spec, rounded, [&](const Tensor3f& x) { return quantize(x, spec, axis); });
}

QuantizedTensor quantize_slice_f64(const double* data, size_t rows, size_t cols, const QuantSpec& spec, Axis axis,
                                   const SliceAmax& amax, size_t* rounded) {
  return f64_impl(data, 1, rows, cols, spec, rounded,
                  [&](const Tensor3f& x) { return quantize_slice(x, spec, axis, amax); });
}

QuantizedTensor quantize(const Tensor2f& x, const QuantSpec& spec, Axis axis) {
  Tensor3f x3 = xt::view(x, xt::newaxis(), xt::all(), xt::all());
  return quantize(x3, spec, axis);
}

Tensor3f dequantize3(const QuantizedTensor& q) {
  Tensor3f out = Tensor3f::from_shape({q.groups, q.rows, q.cols});
  const FormatSpec ef = spec_of(q.spec.elem);
  const size_t br = q.block_rows(), bc = q.block_cols();
  // FP32 values that are divisors (torchao Float8TrainingTensor): fl32(code / s).
  const bool divide = q.divides_by_scale();
  // Element values from a code table (formats of at most 8 bits): the same
  // decode() values, computed once instead of per element. All 256 bytes: a
  // 6-bit format's byte with its top bits set reads as decode() reads it, never
  // an unfilled entry.
  float lut[256];
  const bool use_lut = ef.bits <= 8;
  if (use_lut)
    for (uint32_t c = 0; c < 256; ++c) lut[c] = decode(ef, c);
  for (size_t g = 0; g < q.groups; ++g) {
    for (size_t r = 0; r < q.srows(); ++r) {
      for (size_t c = 0; c < q.scols(); ++c) {
        const size_t bi = r / br, bj = c / bc;
        const uint32_t code = q.code(g, r, c);
        const float e = use_lut ? lut[code & 0xFFu] : decode(ef, code);
        const bool fp32 = q.spec.scale_kind == ScaleKind::FP32;
        const float v = divide ? hd::dequant_value_divide(e, q.scale_inv(g, bi, bj))
                               : hd::dequant_value(q.spec.scale_kind, e, fp32 ? uint8_t(0) : q.scale_bytes(g, bi, bj),
                                                   fp32 ? q.scale_inv(g, bi, bj) : 0.0f, q.tensor_scale_inv);
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
/// Largest magnitude block (g, bi, bj) can represent (hd::block_max_value).
float block_max(const QuantizedTensor& q, size_t g, size_t bi, size_t bj, float elem_max) {
  if (q.divides_by_scale()) return hd::dequant_value_divide(elem_max, q.scale_inv(g, bi, bj));
  const bool fp32 = q.spec.scale_kind == ScaleKind::FP32;
  return hd::block_max_value(q.spec.scale_kind, elem_max, fp32 ? uint8_t(0) : q.scale_bytes(g, bi, bj),
                             fp32 ? q.scale_inv(g, bi, bj) : 0.0f, q.tensor_scale_inv);
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
        hadamard16_inplace(run, q.spec.hadamard16_signs);
        for (size_t k = 0; k < 16; ++k) (q.transposed ? h(g, c0 + k, r) : h(g, r, c0 + k)) = run[k];
      }
  return h;
}
}  // namespace

BlockStatsAccumulator::BlockStatsAccumulator(const QuantizedTensor& whole)
    : rows_(whole.rows), cols_(whole.cols), br_(whole.block_rows()), bc_(whole.block_cols()),
      nbr_(ceil_div(whole.srows(), whole.block_rows())), nbc_(ceil_div(whole.scols(), whole.block_cols())),
      transposed_(whole.transposed), b_(whole.groups * nbr_ * nbc_) {}

void BlockStatsAccumulator::add(const Tensor3f& x_in, const QuantizedTensor& q, uint64_t row0) {
  const Tensor3f x = stats_source(x_in, q, "block_stats");
  const Tensor3f d = dequantize3(q);
  const size_t br = q.block_rows(), bc = q.block_cols();
  const size_t nbr = ceil_div(q.srows(), br), nbc = ceil_div(q.scols(), bc);
  const float elem_max = decode(spec_of(q.spec.elem), spec_of(q.spec.elem).max_code());
  // Each of the slice's blocks lies in one block of the whole tensor (slices
  // are whole block rows / bands); its elements, walked in storage order,
  // continue that block's sums in the whole tensor's storage order.
  const auto whole_block = [&](size_t g, size_t r, size_t c) {  // slice storage (g, r, c) -> whole block index
    const uint64_t lr = q.transposed ? c : r, lc = q.transposed ? r : c;
    const uint64_t fr = row0 + uint64_t(g) * q.rows + lr, wg = fr / rows_, wr = fr % rows_;
    const uint64_t sr = transposed_ ? lc : wr, sc = transposed_ ? wr : lc;
    return size_t((wg * nbr_ + sr / br_) * nbc_ + sc / bc_);
  };
  for (size_t g = 0; g < q.groups; ++g)
    for (size_t bi = 0; bi < nbr; ++bi)
      for (size_t bj = 0; bj < nbc; ++bj) {
        BlockStat& s = b_.at(whole_block(g, bi * br, bj * bc));
        const float bmax = block_max(q, g, bi, bj, elem_max);
        switch (q.spec.scale_kind) {
          case ScaleKind::E8M0: {
            const uint8_t b = q.scale_bytes(g, bi, bj);
            s.scale_exp = b == kE8M0Nan ? INT_MIN : int(b) - 127;
            break;
          }
          case ScaleKind::FP32: {
            // A divisor s applies as 1 / s: floor(log2(fl32(1 / s))) (numerics.md §4.6).
            const float si = q.divides_by_scale() ? 1.0f / q.scale_inv(g, bi, bj) : q.scale_inv(g, bi, bj);
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
              s.sq_src += double(xv) * double(xv);
              ++s.count;
            }
            if (std::isfinite(xv) && xv != 0.0f && dv == 0.0f) ++s.underflow;
            if (std::isfinite(xv) && std::fabs(xv) > bmax) ++s.saturated;
          }
      }
}

std::vector<BlockStat> block_stats(const Tensor3f& x, const QuantizedTensor& q) {
  BlockStatsAccumulator a(q);
  a.add(x, q);
  return a.take();
}

void QuantStatsAccumulator::add(const Tensor3f& x_in, const QuantizedTensor& q) {
  const Tensor3f x = stats_source(x_in, q, "quant_stats");
  const Tensor3f d = dequantize3(q);
  const size_t br = q.block_rows(), bc = q.block_cols();
  const FormatSpec ef = spec_of(q.spec.elem);
  const float elem_max = decode(ef, ef.max_code());
  QuantStats& s = s_;
  s.count += x.size();
  s.tensor_scale_inv = q.tensor_scale_inv;  // every slice of a streamed tensor carries the whole one's
  // Whole-tensor sums: hd::tree_sum in flat index order; an excluded pair's
  // terms are +0.0 (adding +0.0 leaves every partial sum as it was: skipping it).
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
          se_.add(e * e);
          sx_.add(double(xv) * double(xv));
          sd_.add(double(dv) - double(xv));
          s.max_abs_err = std::max(s.max_abs_err, std::fabs(e));
          ++pairs_;
        } else {
          se_.add(0.0);
          sx_.add(0.0);
          sd_.add(0.0);
        }
        const bool fp32 = q.spec.scale_kind == ScaleKind::FP32;
        const hd::RoundingChoice rc =
            hd::rounding_choice(q.spec.scale_kind, ef, xv, q.code(g, sr, sc),
                                fp32 ? uint8_t(0) : q.scale_bytes(g, sr / br, sc / bc), q.tensor_scale_inv);
        sp_.add(rc.between ? rc.p_up : 0.0);
        s.rounded += rc.between;
        s.rounded_up += rc.between && rc.up;
      }
}

QuantStats QuantStatsAccumulator::result() const {
  // No pair to compare (all NaN, a NaN-scaled per-tensor FP8 / NVFP4 tensor,
  // or an empty tensor) leaves the five NaN (mse, max_abs_err, signal_power, sqnr_db, mean_err).
  QuantStats s = s_;
  set_error_stats(s, pairs_, se_.result(), sx_.result(), s.max_abs_err, sd_.result());
  s.expected_up = sp_.result();
  return s;
}

QuantStats quant_stats(const Tensor3f& x_in, const QuantizedTensor& q) {
  QuantStatsAccumulator a;
  a.add(x_in, q);
  return a.result();
}

QuantStats quant_stats(const Tensor2f& x, const QuantizedTensor& q) {
  Tensor3f x3 = xt::view(x, xt::newaxis(), xt::all(), xt::all());
  return quant_stats(x3, q);
}

}  // namespace mxsim::emu
