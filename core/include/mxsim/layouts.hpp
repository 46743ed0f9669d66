// Codes and scales as other libraries store them, read into a QuantizedTensor
// so that emu::dequantize3 (the one dequantizer) decodes them. Every function
// checks that the shapes agree with each other and with the block size and
// throws std::invalid_argument naming the operand and both shapes otherwise;
// nothing is read out of bounds.
//
// Layouts (element codes one per byte unless said; E8M0 scales as bytes):
//   mxsim     what `mxsim quantize` writes (docs/cli.md "Output"): data
//             [G, srows, row_bytes] (E2M1 packed two per byte, element 2i in
//             the low nibble: PyTorch float4_e2m1fn_x2), scales [G, ceil(srows/br),
//             ceil(scols/bc)] (E8M0 / UE4M3 bytes or FP32 scale_inv), storage
//             transposed for column-wise blocks.
//   torchao   MXTensor (torchao/prototype/mx_formats/mx_tensor.py): qdata
//             [..., K] (E2M1: [..., K/2] packed as float4_e2m1fn_x2), scale
//             [..., ceil(K/block_size)] E8M0 (float8_e8m0fnu), blocks along the
//             last axis; leading axes are rows (3-D [E, N, K]: E groups).
//             Scales may also be given in the swizzled "blocked" layout the
//             block-scaled GEMMs consume (unswizzle_blocked_scales).
//   te        TransformerEngine MXFP8Tensor: rowwise data [M, K], rowwise
//             scale_inv [roundup(M, 128), roundup(ceil(K/32), 4)] E8M0;
//             columnwise data [M, K] (not transposed), columnwise scale_inv
//             [roundup(ceil(M/32), 4), roundup(K, 128)], blocks of 32 down the
//             columns (TE common/recipe mxfp8 padding: rowwise 128 x 4,
//             columnwise 4 x 128; the padding is not read). Float8Tensor:
//             data [M, K], one FP32 scale_inv. Leading axes of data fold into M.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "mxsim/quantized_tensor.hpp"

namespace mxsim::layout {

/// mxsim's own layout. `spec` gives elem, block shape (0 = whole extent) and
/// scale kind; groups, rows, cols the logical shape; data and scales in
/// storage order as documented above (scale_inv used for FP32 scales,
/// scale_bytes otherwise). tensor_scale_inv: NVFP4's FP32 decode scale.
QuantizedTensor from_mxsim(const QuantSpec& spec, size_t groups, size_t rows, size_t cols, bool transposed,
                           std::span<const uint8_t> data, std::span<const uint8_t> scale_bytes,
                           std::span<const float> scale_inv, float tensor_scale_inv = 1.0f);

/// torchao MXTensor: qdata / scale as stored (shapes as listed above).
/// elem: E4M3, E5M2, E2M3, E3M2 (one code per byte) or E2M1 (packed).
/// blocked_scales: `scale` is in the swizzled layout (unswizzle_blocked_scales,
/// one matrix per group); its shape is then free, its byte count checked.
QuantizedTensor from_torchao(Format elem, int block_size, const std::vector<size_t>& qdata_shape,
                             std::span<const uint8_t> qdata, const std::vector<size_t>& scale_shape,
                             std::span<const uint8_t> scale, bool blocked_scales = false);

/// The plain [rows, cols] E8M0 scales of one matrix from the swizzled layout
/// that cuBLAS / CUTLASS block-scaled GEMMs read and torchao's `to_blocked`
/// writes (cuBLAS docs, "1D Block Scaling Factors Layout"): rows padded to a
/// multiple of 128 and cols to a multiple of 4, cut into 128 x 4 tiles stored
/// one after another in (row tile, col tile) order, 512 bytes each, with
/// scale (r, c) of a tile at byte (r % 32) * 16 + (r / 32) * 4 + c.
/// `blocked` holds `groups` such matrices one after another (3-D weights:
/// one per expert). The padding bytes are never read. Throws
/// std::invalid_argument unless blocked.size() is exactly
/// groups x roundup(rows, 128) x roundup(cols, 4).
std::vector<uint8_t> unswizzle_blocked_scales(std::span<const uint8_t> blocked, size_t groups, size_t rows, size_t cols);

/// TransformerEngine MXFP8Tensor rowwise (columnwise = false) or columnwise data
/// with its padded E8M0 scale_inv. elem: E4M3 or E5M2.
QuantizedTensor from_te_mxfp8(Format elem, bool columnwise, const std::vector<size_t>& data_shape,
                              std::span<const uint8_t> data, const std::vector<size_t>& scale_shape,
                              std::span<const uint8_t> scale);

/// TransformerEngine Float8Tensor: data [.., K] with one FP32 scale_inv.
QuantizedTensor from_te_fp8(Format elem, const std::vector<size_t>& data_shape, std::span<const uint8_t> data,
                            float scale_inv);

}  // namespace mxsim::layout
