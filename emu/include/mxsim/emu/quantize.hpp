// CPU quantization: quantize, dequantize, quantize-dequantize (QDQ) and error
// statistics, exactly as docs/numerics.md §2-§4 defines them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "mxsim/quant_stats.hpp"
#include "mxsim/quantized_tensor.hpp"
#include "mxsim/tensor.hpp"

namespace mxsim::emu {

/// Quantize x ([groups, rows, cols] FP32; BF16/FP16 inputs are exact in FP32)
/// by `spec`, with 1-D blocks along `axis` (ignored for 2-D tiles and
/// per-tensor scaling).
/// Throws std::invalid_argument for a spec the shape cannot take (a Hadamard
/// run that does not divide the blocked extent, a negative block size, FP32
/// scale kinds on E8M0 elements, ...), naming the problem.
QuantizedTensor quantize(const Tensor3f& x, const QuantSpec& spec, Axis axis = Axis::Cols);
QuantizedTensor quantize(const Tensor2f& x, const QuantSpec& spec, Axis axis = Axis::Cols);

/// Quantize BF16 input: `data` holds groups*rows*cols BF16 bit patterns
/// (FP32's top 16 bits), row-major [groups, rows, cols]. The result is
/// bit-identical to quantize() of the same values widened to FP32 (exact).
/// MX E8M0 / RNE / 1x32 rowwise (Axis::Cols) or 32x32 tiles of E2M1, E2M3,
/// E3M2, E4M3, E5M2 without Hadamard run vectorized, single-threaded kernels
/// (emu/src/quantize_fast.cpp); every other spec goes through the reference.
/// Throws std::invalid_argument for a shape whose element count overflows
/// size_t, for null data with a non-zero size, and as
/// quantize() does for specs the shape cannot take.
QuantizedTensor quantize_bf16(const uint16_t* data, size_t groups, size_t rows, size_t cols, const QuantSpec& spec,
                              Axis axis = Axis::Cols);

/// Quantize FP64 input: `data` holds groups*rows*cols IEEE binary64 values,
/// row-major [groups, rows, cols] (docs/numerics.md §4.7).
///   amax and scales: from the values rounded once to FP32 (RNE; beyond
///     FP32's range to +-Inf, so such a block gets the NaN scale): the amax a
///     TransformerEngine / torchao kernel sees when given the FP32 tensor.
///   elements, E8M0 specs without Hadamard (every MX recipe): each element is
///     encode_f64(x, s) -- the exact FP64 value divided by the block scale
///     2^s and rounded ONCE to the element format (RNE / RZ / SR with the
///     same Philox word as the FP32 path), never through FP32.
///   elements, every other spec (FP32 / UE4M3 scales, Hadamard): their
///     element step is FP32 arithmetic (fl32(x * scale), the FP32 Hadamard
///     butterflies), so it takes the FP32-rounded values, as quantize().
/// For input that is all FP32 values the result equals quantize() of them.
/// `rounded`, when given, receives how many values the FP32 rounding changed.
/// Throws std::invalid_argument as quantize() does, and for an overflowing
/// shape or null data with a non-zero size.
QuantizedTensor quantize_f64(const double* data, size_t groups, size_t rows, size_t cols, const QuantSpec& spec,
                             Axis axis = Axis::Cols, size_t* rounded = nullptr);
/// True when quantize_f64 rounds elements once from FP64 for this spec (E8M0
/// scales, no Hadamard); false when they go through FP32 first.
bool f64_rounds_once(const QuantSpec& spec);

/// Dequantize to the logical shape, FP32. E8M0: code * 2^s exactly; FP32
/// scales: fl32(code * scale_inv); NVFP4: fl32(fl32(code * s_block) * S_dec).
/// A block with a NaN scale dequantizes to NaN throughout.
Tensor3f dequantize3(const QuantizedTensor& q);
/// Same, for groups == 1 (throws std::invalid_argument otherwise).
Tensor2f dequantize(const QuantizedTensor& q);

/// QDQ: dequantize(quantize(x)).
Tensor2f qdq(const Tensor2f& x, const QuantSpec& spec, Axis axis = Axis::Cols);

/// The 16-point Walsh-Hadamard transform scaled by 1/4, in place on runs of 16
/// consecutive floats: four butterfly stages (a + b, a - b, FP32 RNE) in the
/// order of docs/numerics.md §2.6, then an exact multiply by 0.25.
void hadamard16_inplace(float* v);

/// Error statistics of a quantized tensor against its source (docs/numerics.md
/// §4.6; the type is core's mxsim::QuantStats, quant_stats.hpp). Sums are
/// FP64 hd::tree_sum (hd/reduce.hpp) over the row-major logical order. For a spec with hadamard16
/// the reference is the transformed source H x (dequantize does not undo H).
/// Throws std::invalid_argument when x's shape differs from q's.
using QuantStats = ::mxsim::QuantStats;
QuantStats quant_stats(const Tensor3f& x, const QuantizedTensor& q);
QuantStats quant_stats(const Tensor2f& x, const QuantizedTensor& q);

/// Per-block statistics, one entry per block in storage order
/// (group, block row, block column); same reference and errors as quant_stats.
struct BlockStat {
  float amax = 0;       ///< source amax of the block (NaN if it holds a NaN)
  int scale_exp = 0;    ///< E8M0: s; FP32/UE4M3: floor(log2 scale_inv); INT32_MIN for NaN
  double sq_err = 0;    ///< sum of squared errors (same elements as QuantStats::mse)
  uint64_t saturated = 0;  ///< 64-bit: a per-tensor block can hold more than 2^32 elements
  uint64_t underflow = 0;
};
std::vector<BlockStat> block_stats(const Tensor3f& x, const QuantizedTensor& q);

}  // namespace mxsim::emu
