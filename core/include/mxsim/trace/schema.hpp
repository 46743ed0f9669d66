// The names of everything a trace and a checkpoint hold, in one place.
//
// The trace writer (the simulator's recorder), the reader, `mxsim compare` and
// the inspector all build dataset paths through these functions, so a dataset
// is spelled once. docs/trace-format.md describes what each dataset means; this
// header says what it is called. Paths are absolute HDF5 paths in the trace
// ("/train/loss") and relative entry names in a checkpoint ("model/fc1/master").
//
// Layer names are the simulator's ("embed", "router", "fc1", "fc2", "head") in
// its traces and a PyTorch model's module names ("layers.0.mlp.experts") in a
// recorder's (mxsim.torch.Recorder): any name without '/'. Operand names are the
// quantized operand roles of a linear ("w", "x", "dy").
#pragma once
#include <array>
#include <string>
#include <string_view>

#include "mxsim/trace/common.hpp"

namespace mxsim::trace::schema {

/// Root attribute holding the integer schema version; a file without it is
/// not an mxsim trace. Readers refuse versions newer than kFormatVersion.
/// Additions that readers of the same version pass over (attributes, the
/// snapshot_rows dimension scale) keep the version: a bump would make every
/// older reader refuse the file for nothing it needs.
/// 2: format 1 plus the block and element maps of the snapshot layers (block_map, element_map).
/// 3: no dots in dataset names (osc/ema_frac_above, formerly osc/ema_frac_above_0.01).
/// 4: format 3 plus the block maps of the activation operands (kActivationOperands) with their
///    rows, the per-element de-oscillation snap counts (element_map "snaps") and the per-step
///    series of watched elements (watch).
/// 5: format 4 plus the bias and rounding choices of every quantized operand (quant/<op>/mean_err,
///    rounded, rounded_up, expected_up: the gradient-quality statistics of numerics.md §4.6) and
///    the BF16 shadow of the quantized GEMMs (shadow/<gemm>/*, numerics.md §4.8).
inline constexpr const char* kFormatAttr = "mxsim_trace_format";
inline constexpr int kFormatVersion = 5;
/// The first format that holds a dataset of the given kind (readers name it when one is missing).
inline constexpr int kFormatWeightMaps = 2, kFormatOperandMaps = 4, kFormatGradQuality = 5;
/// The completion counter: row i holds i (the trace row), written after
/// every series of that row; a reader trusts len(/steps) rows. It carries
/// units, description and rows as the series do (describe, kRowConvention).
inline constexpr const char* kSteps = "/steps";

// --- per-step scalar series of the whole model ---
inline constexpr const char* kTrainStep = "/train/step";                ///< i64, global step (1-based)
inline constexpr const char* kTrainLoss = "/train/loss";                ///< f64, mean CE over the global batch
inline constexpr const char* kTrainAuxLoss = "/train/aux_loss";         ///< f64, mean aux loss per micro-batch
inline constexpr const char* kTrainAccuracy = "/train/accuracy";        ///< f64, fraction correct
inline constexpr const char* kTrainLr = "/train/lr";                    ///< f32, learning rate used
inline constexpr const char* kTokensPerExpert = "/train/tokens_per_expert";  ///< i64 [micro-batches, experts]
inline constexpr const char* kTestAccuracy = "/eval/test_accuracy";     ///< f64, NaN where not evaluated
/// f64: a scalar a recorder's user logs by name (Recorder.log(step, grad_norm=...)).
inline std::string train_scalar(std::string_view name) { return "/train/" + std::string(name); }

// --- per-layer series ---
inline std::string layer(std::string_view l) { return "/layers/" + std::string(l); }
/// Attributes of the layer group /layers/<l>: the recipe's name (string), the weight's shape
/// [G, N, K] (i64 [3]) and, in a recorder's trace, the module's class (string). Traces written
/// before they existed lack them (readers then take both from the simulator's config).
inline constexpr const char* kLayerRecipeAttr = "recipe";
inline constexpr const char* kLayerShapeAttr = "weight_shape";
inline constexpr const char* kLayerModuleAttr = "module";
/// f64 [micro-batches]: L2 norm of main_grad after each micro-batch's add.
inline std::string main_grad_norm(std::string_view l) { return layer(l) + "/main_grad_norm"; }
/// u8 [micro-batches] (recorder traces of layers with main_grad): 1 where, after the micro-batch's
/// backward, every weight of the layer carried grad_added_to_main_grad = True (Megatron's
/// contract: the wgrad reached main_grad and autograd's .grad is a placeholder), else 0.
inline std::string grad_added(std::string_view l) { return layer(l) + "/grad_added_to_main_grad"; }
/// Quantization statistic `stat` of operand `op` ("w", "x", "dy").
inline std::string quant(std::string_view l, std::string_view op, std::string_view stat) {
  return layer(l) + "/quant/" + std::string(op) + "/" + std::string(stat);
}
/// Oscillation metric series `what` (one of kOscSeries).
inline std::string osc(std::string_view l, std::string_view what) { return layer(l) + "/osc/" + std::string(what); }
/// [micro-batches] The BF16 shadow of GEMM `gemm` (fprop, dgrad, wgrad) of layer l: `what` is
/// rel_l2, sqnr_db, max_abs_err (f64), max_index (i64) or nonfinite (u64) (quant_stats.hpp OutputError).
inline std::string shadow(std::string_view l, std::string_view gemm, std::string_view what) {
  return layer(l) + "/shadow/" + std::string(gemm) + "/" + std::string(what);
}
/// i64: elements snapped by de-oscillation this step.
inline std::string deosc_snapped(std::string_view l) { return layer(l) + "/deosc/snapped"; }
/// i64 (parallel.deosc_shard_edge runs): elements whose shard-edge de-osc Q differs from the
/// full-tensor QDQ at this step.
inline std::string deosc_shard_edge_qdiff(std::string_view l) { return layer(l) + "/deosc/shard_edge_qdiff"; }
/// i64 (parallel.deosc_shard_edge runs): elements whose snap decision at this step's window end
/// differs from the full-tensor QDQ's (0 unless a window ended).
inline std::string deosc_shard_edge_changed(std::string_view l) { return layer(l) + "/deosc/shard_edge_changed"; }

/// A per-step series of a fixed shape and dtype, as the recorder declares it.
struct SeriesName {
  const char* name;
  DType dtype;
};
/// The quantization statistics of one operand (core's QuantStats), in declaration order
/// (scale_exp_hist has row shape [256]: counts of E8M0 bytes / exponents + 127). mean_err,
/// rounded, rounded_up, expected_up: trace format 5.
inline constexpr std::array<SeriesName, 10> kQuantStats{{{"mse", DType::f64},
                                                         {"sqnr_db", DType::f64},
                                                         {"underflow", DType::u64},
                                                         {"saturated", DType::u64},
                                                         {"count", DType::u64},
                                                         {"scale_exp_hist", DType::u64},
                                                         {"mean_err", DType::f64},
                                                         {"rounded", DType::u64},
                                                         {"rounded_up", DType::u64},
                                                         {"expected_up", DType::f64}}};
inline constexpr std::size_t kScaleExpBins = 256;
/// The per-step f32 series of an operand with a two-level scale (NVFP4) beside kQuantStats:
/// QuantStats::tensor_scale_inv, the FP32 tensor scale the block scales multiply.
inline constexpr SeriesName kTensorScaleInv{"tensor_scale_inv", DType::f32};
/// The oscillation metrics of one quantized weight, in declaration order.
/// ema_frac_above: the share of elements whose EMA flip frequency exceeds
/// hd::kOscEmaThreshold = 0.01 (Backend::osc_update).
inline constexpr std::array<SeriesName, 5> kOscSeries{{{"flips", DType::u64},
                                                       {"flips_total", DType::u64},
                                                       {"ema_mean", DType::f64},
                                                       {"ema_frac_above", DType::f64},
                                                       {"dist_ratio_mean", DType::f64}}};
/// The name ema_frac_above had in formats 1 and 2 (readers of older traces try it).
inline constexpr const char* kOscEmaFracAboveV2 = "ema_frac_above_0.01";

// --- snapshots of chosen layers at chosen steps ---
/// Snapshot kinds: master [G, N, K] (FP32 master after the step), weight_q
/// (dequantized W fprop used), main_grad [G, N, K], wgrad_mb [micro-batches, G, N, K].
inline constexpr std::array<const char*, 4> kSnapshotKinds{"master", "weight_q", "main_grad", "wgrad_mb"};
inline std::string snapshot(std::string_view l, std::string_view kind) {
  return "/snap/" + std::string(l) + "/" + std::string(kind);
}

// --- element and block maps at snapshot steps (format 2; docs/trace-format.md "Element and block maps") ---
/// Per-block quantization of operand `op` of layer `l` at the snapshot steps, taken with the
/// other snapshots (after the last micro-batch, before the optimizer step), from the same
/// quantization of the weight that this step's fprop used. `what`, one of kBlockMaps:
///   block_mse, block_sqnr_db, block_amax  f32 [G, BR, BC]  (the recipe's block grid over [N, K])
///   scale                                 u8 (E8M0, UE4M3 byte) or f32 (FP32 scale_inv) [G, BR, BC]
///   codes                                 u8 [G, N, K] (one element code per byte, logical layout)
/// Written for op "w" of quantized snapshot layers (format 2) and, from format 4, for the
/// activation operands of kActivationOperands from micro-batch 0 of the step, whose row count
/// varies per step: per group g (the experts of fc1 / fc2, else one) a fixed capacity of R
/// rows (BR block rows), the group's own rows first, the rest NaN (floats) or 0 (bytes), and
///   rows                                  i64 [G]  rows of each group at this step (m_splits)
inline std::string block_map(std::string_view l, std::string_view op, std::string_view what) {
  return "/snap/" + std::string(l) + "/quant/" + std::string(op) + "/" + std::string(what);
}
inline constexpr std::array<const char*, 5> kBlockMaps{"block_mse", "block_sqnr_db", "block_amax", "scale", "codes"};
/// The activation operands with block maps (format 4): x of fprop, dy of dgrad, and the wgrad
/// operands x and dy quantized along M per expert (Hadamard, stochastic rounding as the recipe).
inline constexpr std::array<const char*, 4> kActivationOperands{"x", "dy", "x_wgrad", "dy_wgrad"};
inline constexpr const char* kOperandRows = "rows";
/// Per-element oscillation state of a quantized snapshot layer's weight at the snapshot
/// steps (as of the snapshot: after the previous step's metrics update). `what`, one of
/// kElementMaps: flips (u32 [G, N, K], cumulative oscillations), ema (f32, EMA frequency),
/// dist_ratio (f32, dist_q / max(dist_w, 1e-12) of the current window; 0 where dist_w = 0);
/// snaps (u32, format 4, layers with de-oscillation: the element's cumulative de-oscillation
/// snaps, Backend::deosc_update's per-element counts).
inline std::string element_map(std::string_view l, std::string_view what) {
  return "/snap/" + std::string(l) + "/osc/" + std::string(what);
}
inline constexpr std::array<const char*, 4> kElementMaps{"flips", "ema", "dist_ratio", "snaps"};

// --- per-step series of watched weight elements (format 4; config trace.watch_elements) ---
/// Per step, for the W watched elements of a quantized snapshot layer, taken when the snapshots
/// are (after the last micro-batch, before the optimizer step): `what`, one of kWatchSeries:
///   element   i64 [W]  the flat [G, N, K] index of each (the same every row)
///   master    f32 [W]  FP32 master
///   weight_q  f32 [W]  the dequantized value the step's fprop used (decode(code) x scale)
///   code      u8  [W]  its element code
///   scale     u8 (E8M0 / UE4M3 byte) or f32 (FP32 scale_inv) [W]  its block's scale
///   flips     u32 [W]  cumulative oscillations as of the row (the osc/flips map's element)
///   snaps     u32 [W]  cumulative de-oscillation snaps as of the row (layers with de-osc)
inline std::string watch(std::string_view l, std::string_view what) { return layer(l) + "/watch/" + std::string(what); }
inline constexpr std::array<const char*, 7> kWatchSeries{"element", "master", "weight_q", "code", "scale", "flips", "snaps"};

// --- what each dataset holds (its attributes; docs/trace-format.md says the same) ---
/// Units ("1" for a share or ratio, "count", "dB", "step", ...) and a one-line
/// description of a dataset this schema names, written as the dataset's
/// `units` and `description` attributes so that a trace reads without the
/// docs (h5dump -A, HDFView). Empty strings for a name the schema does not know.
struct DatasetDoc {
  std::string units, description;
};
DatasetDoc describe(std::string_view name);
/// The `rows` attribute of every per-step series: the row convention.
inline constexpr const char* kRowConvention =
    "one row per optimizer step of this run: row i holds global step /train/step[i] (1-based)";
/// The name of /train/step as an HDF5 dimension scale (H5DS), attached to dimension 0 of every
/// series and of /steps.
inline constexpr const char* kStepScaleName = "optimizer step";
/// The `rows` attribute of every snapshot: its row convention.
inline constexpr const char* kSnapshotRowConvention =
    "one row per snapshot step: row j holds trace row steps[j] (attribute steps, dimension scale "
    "/snapshot_rows), whose global optimizer step is /train/step[steps[j]]";
/// The dimension scale (H5DS) of the snapshots' row axis: i64 [S], the trace rows of the
/// snapshot steps (the snapshots' `steps` attribute), attached to dimension 0 of every snapshot
/// with those steps. One per distinct list of steps, in the order of the snapshots' names:
/// snapshot_rows_scale(0) = "/snapshot_rows", then "/snapshot_rows_2", "/snapshot_rows_3", ...
/// (a run of `mxsim train` has one list). Its mxsim_kind is kSnapshotRowsKind, which readers of
/// series and snapshots pass over. Names starting with "/snapshot_rows" are reserved.
inline constexpr const char* kSnapshotRows = "/snapshot_rows";
inline constexpr const char* kSnapshotRowsKind = "snapshot_rows";
inline constexpr const char* kSnapshotScaleName = "trace row";
inline std::string snapshot_rows_scale(std::size_t i) {
  return i == 0 ? std::string(kSnapshotRows) : std::string(kSnapshotRows) + "_" + std::to_string(i + 1);
}

// --- checkpoint entries (relative names inside a checkpoint file) ---
namespace ckpt {
inline constexpr const char* kConfig = "config";  ///< canonical TOML of the run
inline constexpr const char* kStep = "step";      ///< u64, optimizer steps done
/// model/<l>/{master,m,v,model} FP32 [G, N, K] and model/<l>/version (u64).
inline std::string model(std::string_view l, std::string_view what) {
  return "model/" + std::string(l) + "/" + std::string(what);
}
/// fp8_delayed state of role `op`: .../{history,scale}.
inline std::string delayed(std::string_view l, std::string_view op, std::string_view what) {
  return model(l, "delayed/" + std::string(op) + "/" + std::string(what));
}
inline std::string deosc(std::string_view what) { return "deosc/" + std::string(what); }
inline std::string deosc_state(std::string_view l, std::string_view what) {
  return "deosc/state/" + std::string(l) + "/" + std::string(what);
}
inline std::string osc(std::string_view l, std::string_view what) {
  return "osc/" + std::string(l) + "/" + std::string(what);
}
inline std::string snaps_total(std::string_view l) { return "snaps_total/" + std::string(l); }
/// Group names of the state that exists only once the run created it (de-oscillation after
/// deosc.start_step, the oscillation metrics after a quantized layer's first step, a layer's
/// snap count after its first window): each such group has a required u64 entry
/// present/<group> (0 or 1), so a file that lost a group is refused, never re-seeded.
inline std::string deosc_group(std::string_view l) { return "deosc/state/" + std::string(l); }
inline std::string osc_group(std::string_view l) { return "osc/" + std::string(l); }
inline std::string snaps_group(std::string_view l) { return snaps_total(l); }
inline std::string present(std::string_view group) { return "present/" + std::string(group); }
}  // namespace ckpt

}  // namespace mxsim::trace::schema
