// CPU quantization: quantize, dequantize, quantize-dequantize (QDQ) and error
// statistics, exactly as docs/numerics.md §2-§4 defines them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "mxsim/hd/reduce.hpp"
#include "mxsim/quant_stats.hpp"
#include "mxsim/quantized_tensor.hpp"
#include "mxsim/tensor.hpp"

namespace mxsim::emu {

/// Quantize x ([groups, rows, cols] FP32; BF16/FP16 inputs are exact in FP32)
/// by `spec`, with 1-D blocks along `axis` (ignored for 2-D tiles and
/// per-tensor scaling).
/// FP32-scaled specs follow spec.scale_convention (docs/numerics.md §3.4):
/// TE (default) stores scale_inv; Torchao / TorchaoCuda store torchao
/// Float8Tensor's `scale` (a multiplier, MultiplyScaleInv) and divide each
/// element by it; TorchaoTraining stores Float8TrainingTensor's `_scale`
/// (fp32_scale_use = DivideByScale) and multiplies by it. The torchao
/// conventions need blocks that divide the stored extent.
/// Throws std::invalid_argument for a spec the shape cannot take (a Hadamard
/// run that does not divide the blocked extent, a negative block size, FP32
/// scale kinds on E8M0 elements, a ragged block under a torchao convention,
/// ...), naming the problem.
QuantizedTensor quantize(const Tensor3f& x, const QuantSpec& spec, Axis axis = Axis::Cols);
QuantizedTensor quantize(const Tensor2f& x, const QuantSpec& spec, Axis axis = Axis::Cols);

/// Streamed quantization of a tensor too large to hold (mxsim quantize): the
/// whole-tensor amaxes a slice cannot see by itself, as FP32 bits of |x|
/// folded with hd::amax_step (a max: order-free, NaN/Inf propagate).
struct SliceAmax {
  /// Per-tensor specs: the amax of the slice's whole group (in the domain of
  /// the codes: after the Hadamard transform when the spec has it).
  std::optional<uint32_t> group_amax_bits;
  /// NVFP4 (UE4M3 scales): the global amax of the whole tensor, source domain.
  std::optional<uint32_t> tensor_amax_bits;
  /// Columnwise blocks of a whole column (block_cols = 0 with Axis::Rows:
  /// per-column scaling): each column's amax over its whole group, [cols],
  /// in the domain of the codes (fold_column_amax).
  std::vector<uint32_t> column_amax_bits;
};

/// quantize() of a slice of whole block rows of a larger tensor ([1, n, C],
/// consecutive logical rows of one group, or for rowwise 1-D blocks of
/// consecutive groups): the codes and scales the whole tensor's quantize()
/// gives those rows, when spec.sr_index_base is the slice's first logical
/// index and `amax` carries the whole-tensor amaxes the spec needs
/// (per-tensor: group_amax_bits; UE4M3: tensor_amax_bits; whole-column
/// blocks: column_amax_bits). Slices are those of row_slices: rowwise 1-D
/// blocks any whole rows; 2-D tiles whole tile rows; columnwise 1-D blocks
/// (Axis::Rows, codes stored transposed [C, n]) bands of whole blocks of
/// block_cols rows (unless the band ends the group). Throws
/// std::invalid_argument for a missing amax the spec needs, and as quantize().
QuantizedTensor quantize_slice(const Tensor3f& x, const QuantSpec& spec, Axis axis, const SliceAmax& amax);

/// One slice of streamed quantization: flat rows [row0, row0 + rows) of the
/// [groups * rows, cols] view, inside group `group` (2-D tiles, per-tensor
/// and columnwise specs; 1-D rowwise slices may span groups, group is then
/// that of row0). index_base = row0 * cols: the logical index of its first
/// element (spec.sr_index_base of the slice) and its element offset in the file.
struct RowSlice {
  uint64_t row0 = 0, rows = 0, group = 0, index_base = 0;
};
/// The rows of one slicing unit of a [G, R, C] tensor: 1 for rowwise 1-D
/// blocks and per-tensor specs; the tile height for 2-D tiles (R for a tile
/// of a whole group's height); for columnwise 1-D blocks (Axis::Rows) the
/// block length (whole-column blocks: 16 with the Hadamard transform, else
/// 1), doubled for E2M1 when odd (two codes per byte along the band).
uint64_t slice_unit(uint64_t R, const QuantSpec& spec, Axis axis);
/// The slices of a [G, R, C] tensor for quantize_slice, in order, each of
/// whole units (slice_unit) and at most max(max_elems, one unit) elements;
/// slices of tiles, per-tensor and columnwise specs never cross a group.
/// Every count is 64-bit.
std::vector<RowSlice> row_slices(uint64_t G, uint64_t R, uint64_t C, const QuantSpec& spec, uint64_t max_elems,
                                 Axis axis = Axis::Cols);

/// The amax fold of quantize() over x (groups folded together): amax_step
/// over the FP32 bits of every element, after the 16-point Hadamard transform
/// along the rows when spec.hadamard16 and `coded_domain` (the per-tensor
/// amax of the codes; NVFP4's global amax of a rowwise quantization, TE's
/// post-RHT amax), of the source as read otherwise.
/// `running` is the fold so far, so slices chain.
uint32_t amax_bits(const Tensor3f& x, const QuantSpec& spec, bool coded_domain, uint32_t running = 0);

/// NVFP4's tensor amax (docs/numerics.md §3.3) folded over x [G, R, C] in the domain its blocks
/// see: the source, or under spec.hadamard16 each run of 16 along the storage rows (down the
/// columns when `transposed`, a columnwise quantization) transformed as the quantizer does it
/// (TE's post-RHT amax). quantize() and the CLI's streamed quantizer (slices chained through
/// `running`) take it from here.
uint32_t tensor_amax_bits(const Tensor3f& x, const QuantSpec& spec, bool transposed, uint32_t running = 0);

/// Each column's amax fold of x ([1, n, C], a band of one group), in the
/// domain of columnwise codes (after the Hadamard transform down the columns,
/// runs of 16 rows, when spec.hadamard16), into running[c] (resized to C
/// from empty), so bands chain. Throws std::invalid_argument for hadamard16
/// with n not a multiple of 16.
void fold_column_amax(const Tensor3f& x, const QuantSpec& spec, std::vector<uint32_t>& running);

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
/// Throws std::invalid_argument as quantize() does, for an overflowing
/// shape or null data with a non-zero size, and for a torchao scale
/// convention (torchao takes a float64 tensor's amax and scale in float64).
QuantizedTensor quantize_f64(const double* data, size_t groups, size_t rows, size_t cols, const QuantSpec& spec,
                             Axis axis = Axis::Cols, size_t* rounded = nullptr);
/// quantize_f64 of a slice ([1, rows, cols] FP64 values, as quantize_slice
/// takes them): the FP32-rounded values quantized by quantize_slice, then
/// (f64_rounds_once) each element the rounding changed re-encoded once from
/// FP64 with its block's scale and the Philox word of its global index.
QuantizedTensor quantize_slice_f64(const double* data, size_t rows, size_t cols, const QuantSpec& spec, Axis axis,
                                   const SliceAmax& amax, size_t* rounded = nullptr);
/// True when quantize_f64 rounds elements once from FP64 for this spec (E8M0
/// scales, no Hadamard); false when they go through FP32 first.
bool f64_rounds_once(const QuantSpec& spec);

/// Dequantize to the logical shape, FP32. E8M0: code * 2^s exactly; FP32
/// scales: fl32(code * scale_inv), or fl32(code / scale) when they are divisors
/// (q.fp32_scale_use == DivideByScale: torchao Float8TrainingTensor); NVFP4:
/// fl32(fl32(code * s_block) * S_dec). A block with a NaN scale dequantizes to
/// NaN throughout.
Tensor3f dequantize3(const QuantizedTensor& q);
/// Same, for groups == 1 (throws std::invalid_argument otherwise).
Tensor2f dequantize(const QuantizedTensor& q);

/// QDQ: dequantize(quantize(x)).
Tensor2f qdq(const Tensor2f& x, const QuantSpec& spec, Axis axis = Axis::Cols);

/// The 16-point Walsh-Hadamard transform scaled by 1/4, in place on runs of 16
/// consecutive floats: four butterfly stages (a + b, a - b, FP32 RNE) in the
/// order of docs/numerics.md §2.6, then an exact multiply by 0.25.
void hadamard16_inplace(float* v, uint16_t signs = 0);

/// Error statistics of a quantized tensor against its source (docs/numerics.md
/// §4.6; the type is core's mxsim::QuantStats, quant_stats.hpp). Sums are
/// FP64 hd::tree_sum (hd/reduce.hpp) over the row-major logical order. For a spec with hadamard16
/// the reference is the transformed source H x (dequantize does not undo H).
/// Throws std::invalid_argument when x's shape differs from q's.
using QuantStats = ::mxsim::QuantStats;
QuantStats quant_stats(const Tensor3f& x, const QuantizedTensor& q);
QuantStats quant_stats(const Tensor2f& x, const QuantizedTensor& q);

/// quant_stats fed in slices (streamed quantization): add(x_k, q_k) for
/// consecutive slices of whole logical rows, in row-major order, then
/// result(). The sums run through one hd::TreeSum in flat index order, so the
/// result is bit for bit quant_stats of the whole tensor (quant_stats is this
/// with one slice). Throws std::invalid_argument when x's shape differs from q's.
class QuantStatsAccumulator {
 public:
  void add(const Tensor3f& x, const QuantizedTensor& q);
  QuantStats result() const;

 private:
  QuantStats s_;
  hd::TreeSum se_, sx_, sd_, sp_;  ///< sum e^2, x^2, d - x, p_up (numerics.md §4.6)
  size_t pairs_ = 0;
};

/// Per-block statistics, one entry per block in storage order
/// (group, block row, block column); same reference and errors as quant_stats.
/// Each sum runs over the block's elements in storage order (sequentially).
struct BlockStat {
  float amax = 0;       ///< source amax of the block (NaN if it holds a NaN)
  int scale_exp = 0;    ///< E8M0: s; FP32/UE4M3: floor(log2 scale_inv) (a divisor s: of fl32(1 / s)); INT32_MIN for NaN
  double sq_err = 0;    ///< sum of squared errors (same elements as QuantStats::mse)
  double sq_src = 0;    ///< sum of x^2 over the same elements (the signal power of the block's SQNR)
  uint64_t count = 0;   ///< those elements: finite source, non-NaN result
  uint64_t saturated = 0;  ///< 64-bit: a per-tensor block can hold more than 2^32 elements
  uint64_t underflow = 0;
};
std::vector<BlockStat> block_stats(const Tensor3f& x, const QuantizedTensor& q);

/// block_stats fed in slices (streamed quantization): constructed with the
/// whole tensor's geometry (spec, groups, rows, cols, transposed; its storage
/// is not read), then add(x_k, q_k, row0_k) for the slices of row_slices in
/// order (q_k = quantize_slice of x_k, row0_k its first flat logical row),
/// then take(). A block that spans slices (per-tensor, whole-column blocks)
/// continues its sums where the previous slice left them, so every entry is
/// bit for bit block_stats of the whole tensor (block_stats is this with one
/// slice). Holds one BlockStat per block of the whole tensor.
class BlockStatsAccumulator {
 public:
  explicit BlockStatsAccumulator(const QuantizedTensor& whole);
  void add(const Tensor3f& x, const QuantizedTensor& q, uint64_t row0 = 0);
  std::vector<BlockStat> take() { return std::move(b_); }

 private:
  uint64_t rows_, cols_, br_, bc_, nbr_, nbc_;
  bool transposed_;
  std::vector<BlockStat> b_;
};

}  // namespace mxsim::emu
