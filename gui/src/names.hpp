// The trace dataset names the inspector reads: thin forwards to the trace
// library's schema header (mxsim/trace/schema.hpp), which the writer, the
// reader and `mxsim compare` use too. Nothing here spells a path itself.
#pragma once
#include <string>

#include "mxsim/trace/schema.hpp"

namespace mxsim::inspector::names {

namespace schema = mxsim::trace::schema;

/// Trace format versions this inspector reads (root attribute mxsim_trace_format).
inline constexpr int kMinFormat = 1, kMaxFormat = schema::kFormatVersion;

inline const std::string kStep = schema::kTrainStep;
inline const std::string kLoss = schema::kTrainLoss;
inline const std::string kAuxLoss = schema::kTrainAuxLoss;
inline const std::string kAccuracy = schema::kTrainAccuracy;
inline const std::string kLr = schema::kTrainLr;
inline const std::string kTokensPerExpert = schema::kTokensPerExpert;
inline const std::string kTestAccuracy = schema::kTestAccuracy;

/// Quantized operands the trace records per-step statistics of: W (fprop), x (fprop), dy (dgrad).
inline constexpr const char* kOperands[] = {"w", "x", "dy"};
/// The trace format a dataset kind first appears in (missing-data notes name it).
inline constexpr int kFormatWeightMaps = schema::kFormatWeightMaps, kFormatOperandMaps = schema::kFormatOperandMaps;

inline std::string layer(const std::string& l) { return schema::layer(l); }
inline std::string main_grad_norm(const std::string& l) { return schema::main_grad_norm(l); }
/// stat: mse, sqnr_db, underflow, saturated, count, scale_exp_hist.
inline std::string quant(const std::string& l, const std::string& op, const std::string& stat) {
  return schema::quant(l, op, stat);
}
/// The BF16 shadow of GEMM gemm (fprop, dgrad, wgrad): rel_l2, sqnr_db, max_abs_err, max_index, nonfinite.
inline std::string shadow(const std::string& l, const std::string& gemm, const std::string& stat) {
  return schema::shadow(l, gemm, stat);
}
/// stat: one of trace::schema::kOscSeries (flips, flips_total, ema_mean, ema_frac_above, dist_ratio_mean).
inline std::string osc(const std::string& l, const std::string& stat) { return schema::osc(l, stat); }
inline std::string deosc_snapped(const std::string& l) { return schema::deosc_snapped(l); }
/// Snapshots: master, weight_q, main_grad, wgrad_mb.
inline std::string snap(const std::string& l, const std::string& what) { return schema::snapshot(l, what); }

}  // namespace mxsim::inspector::names

namespace mxsim::inspector::names {
/// Per-block quantization maps (block_mse, block_sqnr_db, block_amax, scale, codes, rows).
inline std::string block_map(const std::string& l, const std::string& op, const std::string& what) {
  return schema::block_map(l, op, what);
}
/// Per-step series of the watched weight elements (element, master, weight_q, code, scale, flips, snaps).
inline std::string watch(const std::string& l, const std::string& what) { return schema::watch(l, what); }
/// Per-element oscillation maps (flips, ema, dist_ratio, snaps).
inline std::string element_map(const std::string& l, const std::string& what) { return schema::element_map(l, what); }
}  // namespace mxsim::inspector::names
