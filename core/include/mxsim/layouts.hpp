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
//   torchao   NVFP4Tensor (torchao/prototype/mx_formats/nvfp4_tensor.py):
//             qdata [..., K/2] E2M1 packed as float4_e2m1fn_x2 (kernels.py
//             pack_uint4: element 2i in the low nibble), _scale_e4m3
//             [..., K/16] float8_e4m3fn (or the same bytes flattened, as its
//             slicing leaves them; or swizzled, _is_swizzled_scales), blocks of
//             16 along the last axis, optional FP32 _per_tensor_scale: the
//             decode scale amax / (448 * 6) (per_tensor_amax_to_scale),
//             element = code * e4m3(scale) * per_tensor_scale.
//   te        NVFP4Tensor (transformer_engine/pytorch/tensor/nvfp4_tensor.py,
//             NVFP4Quantizer.get_scale_shape): rowwise data [..., K/2] (E2M1
//             packed, element 2i in the low nibble: custom_recipes/
//             quantization_nvfp4.py cast_to_fp4x2), rowwise scale_inv U8
//             E4M3 bytes [roundup(M, 128), roundup(ceil(K/16), 4)]; columnwise
//             data [K, M/2] (the transpose, packed along M), columnwise
//             scale_inv [roundup(K, 128), roundup(ceil(M/16), 4)]; FP32
//             _amax_rowwise / _amax_columnwise [1] (the tensor amax; the
//             decode scale is derived from it as mxsim's quantizer does,
//             docs/numerics.md §3.3). Scales may be GEMM-swizzled
//             (_with_gemm_swizzled_scales: the 128 x 4 tile layout below).
//             Float8BlockwiseQTensor (float8_blockwise_tensor.py
//             Float8BlockQuantizer.get_scale_shape, storage/
//             float8_blockwise_tensor_storage.py dequantize): FP32 scale_inv,
//             blocks of 128; rowwise data [..., K]; columnwise data [K, ...]
//             (the transpose). 1-D blocks (block_scaling_dim 1, 1 x 128):
//             rowwise scale_inv [ceil(K/128), roundup(M, 4)] (scale of row m,
//             block kb at [kb, m]), columnwise [ceil(M/128), roundup(K, 4)]
//             (column k, block mb at [mb, k]). 2-D (128 x 128 tiles): rowwise
//             [ceil(M/128), roundup(ceil(K/128), 4)] (tile (mb, kb)),
//             columnwise [ceil(K/128), roundup(ceil(M/128), 4)] (tile (kb, mb)).
//             The padding columns are not read.
//   torchao   Float8Tensor (torchao/quantization/quantize_/workflows/float8/
//             float8_tensor.py): qdata [...] float8_e4m3fn / float8_e5m2, FP32
//             scale of the rank of qdata with scale.shape[i] = qdata.shape[i] /
//             block_size[i] (quant_primitives.py _choose_scale_float8): per
//             tensor (all ones; also any one-element shape, e.g. []), per row
//             ([..., 1]: PerRow), blockwise (PerBlock, e.g. [M, K/128] for
//             1 x 128, [M/128, K/128] for 128 x 128), exact divisors only.
//             dequantize() is _dequantize_affine_float8 (quant_primitives.py):
//             qdata.to(float32) * scale broadcast by block
//             (_maybe_expand_scale_to_tensor_shape), i.e. fl32(code * scale):
//             torchao's `scale` is a scale_inv.
//   torchao   Float8TrainingTensor (torchao/float8/float8_training_tensor.py):
//             _data float8, FP32 _scale: tensorwise one value (0-D), axiswise
//             the rank of _data with one axis kept (amax keepdim: [M, 1] for
//             axiswise_dim -1, [1, K] for axiswise_dim 0). The value is
//             _FromFloat8ConstrFunc.forward's `_data.to(orig_dtype) / _scale`:
//             _scale is the quantization scale (fp8_max / amax, float8_utils.py
//             amax_to_scale), so each code is DIVIDED by it: fl32(code / _scale)
//             (Fp32ScaleUse::DivideByScale; docs/numerics.md §2.4).
//   Both torchao FP8 layouts: 1-D to 3-D (3-D [G, R, K]: G groups), FP8 codes
//             one per byte. An axis whose scale extent is 1 shares one scale,
//             one whose extent equals the data's has one per index. Blocks that
//             run down the columns (a scale [1, K] or [M/b, K]) are stored
//             transposed, as mxsim stores columnwise blocks (quantized_tensor.hpp).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxsim/quantized_tensor.hpp"

namespace mxsim::layout {

/// The transposes of `groups` row-major [rows, cols] matrices stored one after
/// another in `src`: each group's [cols, rows] transpose, in the same order.
/// Between a logical layout and mxsim's storage of blocks that run down the
/// columns (QuantizedTensor::transposed), either way. Throws
/// std::invalid_argument unless src.size() == groups x rows x cols.
template <class T>
std::vector<T> transpose_groups(std::span<const T> src, size_t groups, size_t rows, size_t cols) {
  size_t n = 0;
  if (__builtin_mul_overflow(groups, rows, &n) || __builtin_mul_overflow(n, cols, &n) || n != src.size())
    throw std::invalid_argument("transpose_groups: " + std::to_string(src.size()) + " values for " +
                                std::to_string(groups) + " x [" + std::to_string(rows) + ", " + std::to_string(cols) +
                                "]");
  std::vector<T> out(n);
  for (size_t g = 0; g < groups; ++g)
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols; ++c) out[(g * cols + c) * rows + r] = src[(g * rows + r) * cols + c];
  return out;
}

/// Refuses (std::invalid_argument) an element format whose codes cannot be
/// the bytes a QuantizedTensor stores: one code per byte (E2M1 two), so a
/// format of more than 8 bits (fp32, bf16, fp16) would decode each byte as a
/// fraction of a code: garbage (fp32 "code" 0x38 is 7.8e-44). `declared` says
/// where the format was named (an option, a file's key), `data` what the codes
/// are (a tensor and its dtype); both go into the message. Every layout below
/// checks its element format with it; readers call it first to name the source.
void check_elem_width(Format elem, const std::string& declared, const std::string& data);

/// Refuses (std::invalid_argument) a code byte with bits set above the width
/// of a sub-8-bit element format stored one code per byte (E2M3, E3M2: 6 bits
/// in the low bits of each byte): such a byte is no code of the format, and
/// decoding it would mask the top bits or read past the format's codes. The
/// message names `data` (the tensor and its file), the first offending index
/// and byte, and the format. E2M1 is stored packed two per byte, where every
/// byte value is two valid codes, and 8-bit formats use every byte: nothing to
/// refuse there. from_mxsim checks its data with it (so every layout does);
/// readers call it first to name the file.
void check_code_width(Format elem, std::span<const uint8_t> codes, const std::string& data);

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

/// torchao NVFP4Tensor: qdata [..., K/2] packed E2M1 bytes (1-D to 3-D, leading
/// axes as from_torchao), scale the E4M3 block-scale bytes of blocks of 16
/// along the last axis: shape [..., ceil(K/16)] or 1-D with that many bytes,
/// or (blocked_scales) the swizzled layout of unswizzle_blocked_scales.
/// per_tensor_scale: the FP32 decode scale (torchao's _per_tensor_scale; 1 when
/// the tensor has none), stored as tensor_scale_inv. The values then follow
/// docs/numerics.md §2.4: fl32(fl32(code * e4m3(s)) * per_tensor_scale)
/// (torchao's to_dtype multiplies the two scales first; see docs/python.md).
QuantizedTensor from_torchao_nvfp4(const std::vector<size_t>& qdata_shape, std::span<const uint8_t> qdata,
                                   const std::vector<size_t>& scale_shape, std::span<const uint8_t> scale,
                                   float per_tensor_scale, bool blocked_scales = false);

/// TransformerEngine NVFP4Tensor rowwise (columnwise = false: data [..., K/2],
/// leading axes folded into M) or columnwise (data [K, M/2]) bytes with the
/// padded E4M3 scale_inv bytes and the FP32 amax of that copy. The tensor's
/// decode scale is S_dec of docs/numerics.md §3.3 from amax (hd::nvfp4_tensor_scale:
/// NaN or Inf amax gives NaN); a negative amax is refused. swizzled_scales:
/// scale_inv holds the same byte count in the 128 x 4 tile layout.
QuantizedTensor from_te_nvfp4(bool columnwise, const std::vector<size_t>& data_shape, std::span<const uint8_t> data,
                              const std::vector<size_t>& scale_shape, std::span<const uint8_t> scale, float amax,
                              bool swizzled_scales = false);

/// TransformerEngine Float8BlockwiseQTensor rowwise or columnwise FP8 data with
/// its FP32 scale_inv (shapes above). elem: E4M3 or E5M2. block_scaling_dim:
/// 1 (1 x 128), 2 (128 x 128), or 0: taken from the scale_inv shape, refused
/// naming both candidates when the shape fits both (small tensors) or neither.
QuantizedTensor from_te_fp8_blockwise(Format elem, bool columnwise, int block_scaling_dim,
                                      const std::vector<size_t>& data_shape, std::span<const uint8_t> data,
                                      const std::vector<size_t>& scale_shape, std::span<const float> scale_inv);

/// TransformerEngine Float8Tensor: data [.., K] with one FP32 scale_inv.
QuantizedTensor from_te_fp8(Format elem, const std::vector<size_t>& data_shape, std::span<const uint8_t> data,
                            float scale_inv);

/// torchao Float8Tensor: qdata (FP8 codes, one per byte; elem E4M3, E5M2,
/// E4M3FNUZ or E5M2FNUZ) with its FP32 `scale` (shapes above). block_size:
/// torchao's `block_size` attribute when known (the rank of qdata, or empty for
/// per tensor): the scale shape must then be qdata / block_size exactly;
/// nullopt takes the blocks from the two shapes. Values fl32(code * scale)
/// (Fp32ScaleUse::MultiplyScaleInv). Throws std::invalid_argument naming both
/// shapes when the scale is neither one value, per row / per axis nor an exact
/// block divisor of qdata, or its value count differs from its shape.
QuantizedTensor from_torchao_float8(Format elem, const std::vector<size_t>& qdata_shape, std::span<const uint8_t> qdata,
                                    const std::vector<size_t>& scale_shape, std::span<const float> scale,
                                    const std::optional<std::vector<size_t>>& block_size = std::nullopt);

/// torchao Float8TrainingTensor: _data (FP8 codes as for from_torchao_float8)
/// with its FP32 _scale: one value (tensorwise) or, at the rank of _data, each
/// axis either 1 or the data's extent (axiswise). Values fl32(code / _scale)
/// (Fp32ScaleUse::DivideByScale): a zero _scale gives +-Inf (0 / 0 NaN), an
/// infinite one +-0, a NaN one NaN; a negative one flips the sign. Throws
/// std::invalid_argument naming both shapes otherwise.
QuantizedTensor from_torchao_float8_training(Format elem, const std::vector<size_t>& data_shape,
                                             std::span<const uint8_t> data, const std::vector<size_t>& scale_shape,
                                             std::span<const float> scale);

}  // namespace mxsim::layout
