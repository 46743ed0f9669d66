// Block and element maps of a snapshot layer (docs/trace-format.md "Element and block
// maps"): what the inspector's per-block error map and element views read. Host
// computations over downloaded tensors, at snapshot steps only.
#pragma once
#include <cstdint>
#include <vector>

#include "mxsim/quantized_tensor.hpp"

namespace mxsim::sim {

/// Per-block maps of one quantized tensor [G, R, C] in its recipe's block grid, in logical
/// orientation: BR block rows over the R logical rows, BC block columns over the C columns.
struct BlockMaps {
  size_t G = 0, BR = 0, BC = 0;        ///< groups and blocks per group (rows, columns)
  std::vector<float> mse, sqnr_db, amax;  ///< [G, BR, BC], FP32 of FP64 sums
  std::vector<uint8_t> scale_bytes;    ///< [G, BR, BC] E8M0 / UE4M3 bytes (empty for FP32 scales)
  std::vector<float> scale_inv;        ///< [G, BR, BC] FP32 scale_inv (empty for byte scales)
  std::vector<uint8_t> codes;          ///< [G, R, C] element codes, one per byte (logical layout)
};

/// Logical block extents of a quantization by `spec` stored transposed or not (0 = the whole
/// extent): a column-wise (Axis::Rows) quantization's blocks run along the logical rows.
struct BlockExtent {
  size_t rows = 0, cols = 0;
};
BlockExtent logical_block_extent(const QuantSpec& spec, bool transposed);
/// ceil(n / extent), or 1 when the extent is 0 (one block over the whole axis) or n = 0.
size_t blocks_along(size_t n, size_t extent);

/// x: the tensor that was quantized (host, logical [G, R, C] row-major), q: its quantization
/// (host copy; either orientation). Per block of the logical grid (a transposed q's storage
/// block (g, bj, bi) is logical block (g, bi, bj)), over its elements with the reference
/// finite and d = dequantize(q) not NaN (the same elements as quant_stats): mse = sum (ref -
/// d)^2 / n, sqnr_db = 10 log10(sum ref^2 / sum (ref - d)^2) (+inf when exact, NaN when no
/// element counts), sums in FP64 in ascending logical (row, column) order; amax = max |ref|
/// (NaN when the block holds a NaN). The reference is x, or for a spec with hadamard16 the
/// transformed source H x (runs of 16 along the storage rows, as quant_stats measures it).
/// d is hd::dequant_value of each code (the one dequantization of numerics.md §2.4).
BlockMaps block_maps(const float* x, const QuantizedTensor& q);

/// Per-group maps of a tensor whose groups have a varying number of rows, in the fixed
/// layout of the trace: [G, BR, BC] blocks and [G, R, C] codes, group g's maps (one group
/// each, at most BR block rows and R rows) in its first rows, the rest NaN (floats) or 0
/// (bytes). An empty group's BlockMaps (G = 0) leaves its slot all padding. fp32_scales says
/// which of scale_inv / scale_bytes the result holds.
BlockMaps padded_group_maps(const std::vector<BlockMaps>& groups, size_t BR, size_t BC, size_t R, size_t C,
                            bool fp32_scales);

/// dist_q / max(dist_w, 1e-12) per element where dist_w > 0, else 0 (hd::osc_dist_ratio), as FP32.
std::vector<float> dist_ratio_map(const std::vector<float>& dist_q, const std::vector<float>& dist_w);

}  // namespace mxsim::sim
