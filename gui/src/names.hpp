// Every trace dataset name the inspector reads, in one place
// (docs/trace-format.md "Datasets written by mxsim train"). When the trace
// library's schema header exists, these become thin forwards to it.
#pragma once
#include <string>

namespace mxsim::inspector::names {

/// Trace format versions this inspector reads (root attribute mxsim_trace_format).
inline constexpr int kMinFormat = 1, kMaxFormat = 1;

inline const std::string kStep = "/train/step";
inline const std::string kLoss = "/train/loss";
inline const std::string kAuxLoss = "/train/aux_loss";
inline const std::string kAccuracy = "/train/accuracy";
inline const std::string kLr = "/train/lr";
inline const std::string kTokensPerExpert = "/train/tokens_per_expert";
inline const std::string kTestAccuracy = "/eval/test_accuracy";

/// Layer names in model order (sim/model.hpp).
inline constexpr const char* kLayers[] = {"embed", "router", "fc1", "fc2", "head"};
/// Quantized operands the trace records per layer: W (fprop), x (fprop), dy (dgrad).
inline constexpr const char* kOperands[] = {"w", "x", "dy"};

inline std::string layer(const std::string& l) { return "/layers/" + l; }
inline std::string main_grad_norm(const std::string& l) { return layer(l) + "/main_grad_norm"; }
/// stat: mse, sqnr_db, underflow, saturated, count, scale_exp_hist.
inline std::string quant(const std::string& l, const std::string& op, const std::string& stat) {
  return layer(l) + "/quant/" + op + "/" + stat;
}
/// stat: flips, flips_total, ema_mean, ema_frac_above_0.01, dist_ratio_mean.
inline std::string osc(const std::string& l, const std::string& stat) { return layer(l) + "/osc/" + stat; }
inline std::string deosc_snapped(const std::string& l) { return layer(l) + "/deosc/snapped"; }
/// Snapshots: master, weight_q, main_grad, wgrad_mb.
inline std::string snap(const std::string& l, const std::string& what) { return "/snap/" + l + "/" + what; }

// ---- element- and block-level datasets (docs/trace-format.md, "Element and block maps")
/// Per-block quantization maps of an operand at snapshot steps: block_mse, block_sqnr_db,
/// block_amax (f32 [G, BR, BC]), scale_e8m0 (u8 [G, BR, BC]) or scale_inv (f32), codes (u8 [G, R, C]).
inline std::string snap_quant(const std::string& l, const std::string& op, const std::string& what) {
  return "/snap/" + l + "/quant/" + op + "/" + what;
}
/// Per-element oscillation state at snapshot steps: flips (u32 [G, N, K], cumulative),
/// ema (f32), dist_ratio (f32, current window).
inline std::string snap_osc(const std::string& l, const std::string& what) { return "/snap/" + l + "/osc/" + what; }

}  // namespace mxsim::inspector::names
