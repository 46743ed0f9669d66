// Error statistics of a quantized tensor against its source: the one stats
// type of the project (emu::quant_stats and Backend::quant_stats return it;
// the trace's /layers/<l>/quant/* rows are its fields). Definitions:
// docs/numerics.md §4.6.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace mxsim {

/// Sums are FP64 hd::tree_sum (hd/reduce.hpp) over the row-major logical
/// order (numerics.md §4.6). For a spec with
/// hadamard16 the reference is the transformed source H x (dequantize does
/// not undo H).
struct QuantStats {
  size_t count = 0;           ///< elements
  size_t nonfinite_in = 0;    ///< NaN/Inf in the source
  size_t nan_out = 0;         ///< NaN after dequantization
  size_t underflow = 0;       ///< finite non-zero sources that dequantize to 0
  size_t saturated = 0;       ///< finite sources beyond their block's largest representable magnitude
  /// The next four are taken over the elements with x finite and d not NaN (a
  /// finite x whose d overflowed to +-Inf counts, with an infinite error); when
  /// there are none (all NaN, a NaN-scaled per-tensor tensor, empty) all four are NaN.
  double mse = 0;             ///< mean squared error
  double max_abs_err = 0;     ///< same elements
  double signal_power = 0;    ///< mean x^2 over those elements
  double sqnr_db = 0;         ///< 10 log10(signal / noise); +inf when exact, -inf when d overflowed
  /// Mean of d - x over the same elements: the quantization's bias (near 0 under stochastic
  /// rounding, not in general under RNE); NaN as the four above.
  double mean_err = 0;
  /// Rounding choices (hd::rounding_choice): elements whose encoded value lay strictly between
  /// two grid neighbours (E8M0 and UE4M3 scales only), how many of them took the upper one, and
  /// the sum of their stochastic-rounding probabilities of doing so (what rounded_up is expected
  /// to be under stochastic rounding).
  size_t rounded = 0;
  size_t rounded_up = 0;
  double expected_up = 0;
  /// The second level of a two-level scale: q's FP32 per-tensor decode scale (NVFP4's S_dec,
  /// numerics.md §3.3), copied, not summed; 1 for every one-level scale. The block-scale histogram
  /// bins the product of both levels, so this is what tells a tensor-scale shift from the blocks'.
  float tensor_scale_inv = 1.0f;
};

/// A GEMM output against its reference, e.g. the same GEMM on BF16 operands (numerics.md §4.8):
/// over the n elements where both are finite, FP64 tree sums in row-major order of (t - r)^2 and
/// r^2 (+0.0 at an excluded element), the largest |t - r| and the first index holding it.
struct OutputError {
  size_t count = 0;          ///< elements
  size_t nonfinite = 0;      ///< elements where either value is NaN or Inf (not compared)
  double rel_l2 = 0;         ///< sqrt(sum (t - r)^2 / sum r^2); NaN when sum r^2 = 0 or n = 0
  double sqnr_db = 0;        ///< 10 log10(sum r^2 / sum (t - r)^2); +inf when equal, NaN when n = 0
  double max_abs_err = 0;    ///< max |t - r| (0 when equal; NaN when n = 0)
  int64_t max_index = -1;    ///< row-major index of the first element with max_abs_err > 0; -1 if none
};
/// OutputError of test against ref (n elements each, row-major): the one definition every
/// backend delivers (the default op downloads both and calls this).
OutputError output_error(const float* ref, const float* test, size_t n);
/// OutputError from its reduction (every backend's last step): n elements, `nonfinite` of them
/// excluded, the tree sums se = sum (t - r)^2 and sr = sum r^2, the largest error and its first index.
OutputError output_error_of(size_t n, size_t nonfinite, double se, double sr, double max_abs_err, int64_t max_index);

/// Histogram of the block scale exponents of a quantized tensor, 256 bins in
/// E8M0 code order: bin 127 + e counts the blocks whose scale exponent e is
/// (E8M0: the byte's exponent; FP32 / UE4M3 scales: floor(log2 scale_inv),
/// clamped to [-127, 127]); bin 255 counts NaN scales. The bins of
/// trace::ScaleExpHistogram (OCP MX v1.0 E8M0: bias 127, 0xFF = NaN).
using ScaleExpCounts = std::array<uint64_t, 256>;

/// Sets s's four error statistics from their sums over the `pairs` elements
/// compared (numerics.md §4.6): mse = se / pairs, signal_power = sx / pairs,
/// sqnr_db = 10 log10(sx / se) (+inf when se = 0), max_abs_err as given; all
/// four NaN when pairs = 0 (nothing to compare is undefined, not "exact").
/// One definition for every backend: they differ only in how they sum.
/// sum_err: the FP64 tree sum of d - x over the same pairs (mean_err = sum_err / pairs, NaN too).
void set_error_stats(QuantStats& s, size_t pairs, double se, double sx, double max_abs_err, double sum_err);
/// The statistics of an operand nothing quantized (a BF16 GEMM's): every FP64 field NaN, counts 0.
QuantStats not_recorded();

struct QuantizedTensor;
/// The ScaleExpCounts of q's block scales (reads only spec, scale_bytes /
/// scale_inv and tensor_scale_inv). One definition for every backend: the
/// GPU backend downloads the scales and calls this.
ScaleExpCounts scale_exp_counts(const QuantizedTensor& q);

}  // namespace mxsim
