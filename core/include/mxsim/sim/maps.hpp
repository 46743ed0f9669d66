// Block and element maps of a snapshot layer (trace format 2, docs/trace-format.md
// "Element and block maps"): what the inspector's per-block error map and element
// views read. Host computations over downloaded tensors, at snapshot steps only.
#pragma once
#include <cstdint>
#include <vector>

#include "mxsim/quantized_tensor.hpp"

namespace mxsim::sim {

/// Per-block maps of one quantized tensor [G, R, C] in its recipe's block grid.
struct BlockMaps {
  size_t G = 0, BR = 0, BC = 0;        ///< groups and blocks per group (rows, columns)
  std::vector<float> mse, sqnr_db, amax;  ///< [G, BR, BC], FP32 of FP64 sums
  std::vector<uint8_t> scale_bytes;    ///< [G, BR, BC] E8M0 / UE4M3 bytes (empty for FP32 scales)
  std::vector<float> scale_inv;        ///< [G, BR, BC] FP32 scale_inv (empty for byte scales)
  std::vector<uint8_t> codes;          ///< [G, R, C] element codes, one per byte
};

/// x: the tensor that was quantized (host, [G, R, C] row-major), d: dequantize(q), q: the
/// quantization (host copy; storage in the logical layout, not transposed). Per block, over
/// its elements with x finite and d not NaN (the same elements as quant_stats): mse = sum
/// (x - d)^2 / n, sqnr_db = 10 log10(sum x^2 / sum (x - d)^2) (+inf when exact, NaN when no
/// element counts), sums in FP64 in ascending (row, column) order; amax = max |x| (NaN when
/// the block holds a NaN). Throws std::invalid_argument for a transposed q.
BlockMaps block_maps(const float* x, const float* d, const QuantizedTensor& q);

/// dist_q / max(dist_w, 1e-12) per element where dist_w > 0, else 0 (hd::osc_dist_ratio), as FP32.
std::vector<float> dist_ratio_map(const std::vector<float>& dist_q, const std::vector<float>& dist_w);

}  // namespace mxsim::sim
