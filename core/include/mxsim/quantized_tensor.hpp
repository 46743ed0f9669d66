// QuantizedTensor: packed codes, block scales, logical shape, layout, recipe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "mxsim/quant_spec.hpp"
#include "mxsim/tensor.hpp"

namespace mxsim {
namespace hd {
struct QuantLayout;
}

/// What the FP32 block values of a ScaleKind::FP32 tensor are, i.e. how one
/// decodes (docs/numerics.md §2.4). mxsim's quantizers make MultiplyScaleInv
/// only; DivideByScale exists for tensors read from torchao's float8 training
/// (layout::from_torchao_float8_training).
enum class Fp32ScaleUse : uint8_t {
  /// The value v is scale_inv (the dequantization factor): x = fl32(code * v).
  /// mxsim, TE Float8Tensor / Float8BlockwiseQTensor scale_inv, torchao Float8Tensor `scale`.
  MultiplyScaleInv,
  /// The value v is the quantization scale (x ~= code / v): x = fl32(code / v), one
  /// RNE division, not code * fl32(1 / v). torchao Float8TrainingTensor `_scale`.
  DivideByScale,
};

/// A tensor of shape [groups, rows, cols] (groups = 1 for a plain matrix;
/// grouped MoE weights [G, N, K] quantize each expert on its own, tiles never
/// cross experts) quantized according to `spec`.
///
/// Storage is [groups, srows, scols] with srows x scols = rows x cols, or the
/// transpose when `transposed` (Axis::Rows). Blocks never cross a storage row
/// boundary in 1-D layouts; ragged edges form partial blocks whose missing
/// elements count as zeros.
///
/// data  [groups, srows, row_bytes]: one code per byte, except E2M1 which packs
///       two per byte as PyTorch float4_e2m1fn_x2: element 2i in the low nibble,
///       2i+1 in the high nibble; an odd scols leaves the last high nibble 0
///       (padding: never read).
/// scales (E8M0, UE4M3) [groups, ceil(srows/br), ceil(scols/bc)] bytes in
///       scale_bytes; (FP32) the same shape of FP32 values in scale_inv: the
///       scale_inv itself, or with fp32_scale_use == DivideByScale the
///       quantization scale each code is divided by.
/// tensor_scale_inv: NVFP4's FP32 per-tensor decode scale (S_dec), else 1.
struct QuantizedTensor {
  QuantSpec spec;
  size_t groups = 1, rows = 0, cols = 0;  ///< logical shape
  bool transposed = false;                ///< storage = logical^T per group
  Bytes3 data;
  Bytes3 scale_bytes;
  Tensor3f scale_inv;
  float tensor_scale_inv = 1.0f;
  Fp32ScaleUse fp32_scale_use = Fp32ScaleUse::MultiplyScaleInv;  ///< FP32 scales only

  /// FP32 scales that are divisors (torchao Float8TrainingTensor), not scale_inv.
  bool divides_by_scale() const {
    return spec.scale_kind == ScaleKind::FP32 && fp32_scale_use == Fp32ScaleUse::DivideByScale;
  }
  size_t srows() const { return transposed ? cols : rows; }
  size_t scols() const { return transposed ? rows : cols; }
  /// Block extent in storage coordinates (0 in the spec resolved to the extent).
  size_t block_rows() const { return spec.block_rows == 0 ? srows() : size_t(spec.block_rows); }
  size_t block_cols() const { return spec.block_cols == 0 ? scols() : size_t(spec.block_cols); }
  size_t row_bytes() const { return spec.elem == Format::E2M1 ? (scols() + 1) / 2 : scols(); }

  /// Code of storage element (g, r, c).
  uint32_t code(size_t g, size_t r, size_t c) const {
    const uint8_t b = data(g, r, spec.elem == Format::E2M1 ? c / 2 : c);
    return spec.elem == Format::E2M1 ? ((c & 1) ? b >> 4 : b & 0xFu) : b;
  }
  void set_code(size_t g, size_t r, size_t c, uint32_t v) {
    if (spec.elem == Format::E2M1) {
      uint8_t& b = data(g, r, c / 2);
      b = (c & 1) ? uint8_t((b & 0x0Fu) | (v << 4)) : uint8_t((b & 0xF0u) | (v & 0xFu));
    } else {
      data(g, r, c) = uint8_t(v);
    }
  }
};

/// The logical transpose of q with the same bytes: rows and cols swap and
/// `transposed` flips, so storage (codes and scales, indexed in storage
/// coordinates) is untouched and every logical element (r, c) of the result is
/// element (c, r) of q. Used for operands stored as the transpose of the GEMM's
/// logical operand, e.g. torchao's backward copies `to_mx(w.t().contiguous())`
/// [K, N] (blocks along N) that dgrad reads as W [N, K] quantized along N.
/// Per group; any spec (1-D blocks, 2-D tiles, per-tensor).
QuantizedTensor transpose_logical(QuantizedTensor q);

/// A QuantizedTensor of spec s with the storage of layout L allocated and zero (codes, and the
/// scales of the spec's kind), for a caller to fill with a tensor's bytes kept elsewhere (a
/// caller's buffers in the C interface, a device tensor's host image).
QuantizedTensor allocate_quantized(const QuantSpec& s, const hd::QuantLayout& L);

/// Logical rows [r0, r0 + n) of q (groups = 1) as a tensor of their own: the
/// same codes and the scales of the blocks they lie in. The slice must consist
/// of whole blocks along the logical rows: r0 and r0 + n (unless it is q.rows)
/// must be multiples of the block extent along that axis (a block spanning the
/// whole axis, spec extent 0, is shared: every slice keeps its scale). So a
/// wgrad operand quantized along the tokens as one tensor splits into the
/// per-group operands of emu::grouped_wgrad exactly when every group starts on
/// a block boundary. n = 0 gives an empty tensor (rows = 0). Throws
/// std::invalid_argument naming `what`, the rows and the block extent
/// otherwise, or when q.groups != 1 or the range passes q.rows.
QuantizedTensor slice_rows(const QuantizedTensor& q, size_t r0, size_t n, const std::string& what = "tensor");

}  // namespace mxsim
