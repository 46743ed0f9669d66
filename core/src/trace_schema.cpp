// What each dataset of a trace holds (trace/schema.hpp describe): the words of
// docs/trace-format.md's tables, kept beside the names so the writer can store
// them as attributes.
#include <utility>

#include "mxsim/trace/schema.hpp"

namespace mxsim::trace::schema {

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

struct Entry {
  const char* suffix;  // matched against the end of the name, after a '/'
  const char* units;
  const char* description;
};

// Per-step series, by the end of their name.
constexpr Entry kSeries[] = {
    {"/shadow/fprop/rel_l2", "1", "[micro-batch] ||y - y_bf16|| / ||y_bf16||: fprop's output against the same GEMM on the BF16 operands"},
    {"/shadow/dgrad/rel_l2", "1", "[micro-batch] ||dx - dx_bf16|| / ||dx_bf16||: dgrad's output against the same GEMM on the BF16 operands"},
    {"/shadow/wgrad/rel_l2", "1", "[micro-batch] ||dW - dW_bf16|| / ||dW_bf16||: the micro-batch's dW against the same GEMM on the BF16 operands"},
    {"/shadow/fprop/sqnr_db", "dB", "[micro-batch] 10 log10(sum y_bf16^2 / sum (y - y_bf16)^2) of fprop's output"},
    {"/shadow/dgrad/sqnr_db", "dB", "[micro-batch] 10 log10(sum dx_bf16^2 / sum (dx - dx_bf16)^2) of dgrad's output"},
    {"/shadow/wgrad/sqnr_db", "dB", "[micro-batch] 10 log10(sum dW_bf16^2 / sum (dW - dW_bf16)^2) of wgrad's output"},
    {"prop/max_abs_err", "value", "[micro-batch] largest |output - BF16 shadow output| (fprop)"},
    {"grad/max_abs_err", "value", "[micro-batch] largest |output - BF16 shadow output| (dgrad / wgrad)"},
    {"/max_index", "index", "[micro-batch] row-major index of the first element with the largest shadow error (-1: none differs)"},
    {"/nonfinite", "count", "[micro-batch] elements where the output or the BF16 shadow is NaN or Inf (not compared)"},
    {"/train/step", "step", "global optimizer step, 1-based (a resumed run continues the count)"},
    {"/train/loss", "nat", "mean cross-entropy over the global batch plus the mean auxiliary loss over micro-batches"},
    {"/train/aux_loss", "nat", "load-balancing loss (Switch Transformer eq. 4), mean over micro-batches"},
    {"/train/accuracy", "1", "share of the global batch classified correctly"},
    {"/train/lr", "1", "learning rate of this step's AdamW update"},
    {"/train/tokens_per_expert", "count", "[micro-batch, expert] token assignments per expert, before padding"},
    {"/eval/test_accuracy", "1", "test-set accuracy at epoch ends and at the last step, NaN elsewhere"},
    {"/main_grad_norm", "1", "[micro-batch] L2 norm of main_grad after each micro-batch's add (FP64 fixed tree)"},
    {"/grad_added_to_main_grad", "1",
     "[micro-batch] 1 where every weight carried grad_added_to_main_grad after the micro-batch's backward"},
    {"/mse", "1", "mean squared quantization error of the operand (micro-batch 0 of the step)"},
    {"/sqnr_db", "dB", "signal-to-quantization-noise ratio of the operand, 10 log10(sum x^2 / sum e^2)"},
    {"/underflow", "count", "non-zero finite inputs quantized to zero"},
    {"/saturated", "count", "finite inputs above the block's largest representable value"},
    {"/count", "count", "elements of the operand"},
    {"/mean_err", "value",
     "mean of d - x over the compared elements: the quantization's bias (micro-batch 0; relative to the operand: "
     "mean_err / sqrt(signal power))"},
    {"/rounded", "count",
     "elements whose encoded value lay strictly between two grid values of the element format (E8M0 and UE4M3 "
     "scales): the rounding chose"},
    {"/rounded_up", "count", "of those, rounded to the upper magnitude (away from zero)"},
    {"/expected_up", "count",
     "sum over those of the stochastic-rounding probability of the upper magnitude, (|v| - lo) / (hi - lo): "
     "rounded_up's expectation under stochastic rounding"},
    {"/tensor_scale_inv", "1",
     "FP32 per-tensor decode scale S_dec of an operand with a two-level scale (NVFP4: fl32(1 / fl32(2688 / "
     "amax)), micro-batch 0 of the step): the factor of every E4M3 block scale (docs/numerics.md §3.3)"},
    {"/scale_exp_hist", "count", "[256] block scales per E8M0 byte (FP32 scales: floor(log2 scale_inv) + 127, clamped)"},
    {"/osc/flips", "count", "oscillations of the quantized weight at this step (Nagel et al. 2022)"},
    {"/osc/flips_total", "count", "cumulative oscillations over all elements"},
    {"/osc/ema_mean", "1", "mean EMA oscillation frequency (momentum metrics.osc_ema_momentum)"},
    {"/osc/ema_frac_above", "1", "share of elements whose EMA oscillation frequency exceeds 0.01"},
    {"/osc/dist_ratio_mean", "1", "mean sum|dQ| / sum|dW| over elements that moved in the current window"},
    {"/watch/element", "1", "[W] flat [G, N, K] index of each watched weight element (trace.watch_elements)"},
    {"/watch/master", "1", "[W] FP32 master of each watched element before this step's optimizer update"},
    {"/watch/weight_q", "1", "[W] dequantized weight the step's fprop used, decode(code) x scale"},
    {"/watch/code", "code", "[W] element code of each watched element in the fprop quantization"},
    {"/watch/scale", "1", "[W] block scale of each watched element: E8M0 byte (2^(byte - 127)), UE4M3 byte (NVFP4: its E4M3 "
     "value times quant/w/tensor_scale_inv) or FP32 scale_inv"},
    {"/watch/flips", "count", "[W] cumulative oscillations of each watched element as of this row"},
    {"/watch/snaps", "count", "[W] cumulative de-oscillation snaps of each watched element as of this row"},
    {"/deosc/snapped", "count", "elements snapped by de-oscillation at this step (0 unless a window ended)"},
    {"/deosc/shard_edge_qdiff", "count",
     "elements whose de-osc Q, computed per rank on a zero-filled tile band of its flat shard, differs from the "
     "full-tensor QDQ at this step"},
    {"/deosc/shard_edge_changed", "count",
     "elements whose snap decision at this window end differs from the one the full-tensor QDQ gives (0 unless a "
     "window ended)"},
};

// Snapshots (/snap/<layer>/...), by the end of their name.
constexpr Entry kSnapshots[] = {
    {"/master", "1", "[G, N, K] FP32 master weight after the last micro-batch, before the optimizer step"},
    {"/weight_q", "1", "[G, N, K] dequantized fprop weight (the BF16 copy for bf16 layers)"},
    {"/main_grad", "1", "[G, N, K] FP32 main_grad after all micro-batches"},
    {"/wgrad_mb", "1", "[micro-batch, G, N, K] each micro-batch's contribution to main_grad"},
    {"/tensor_scale_inv", "1",
     "[G] FP32 tensor scale S_dec of each group's quantization (NVFP4 operands; the wgrad operands are quantized "
     "per expert, x and dy once: every group the same); NaN for a group without rows"},
    {"/quant/w/block_mse", "1", "[G, BR, BC] mean squared quantization error per block of W"},
    {"/quant/w/block_sqnr_db", "dB", "[G, BR, BC] signal-to-quantization-noise ratio per block of W (+inf when exact)"},
    {"/quant/w/block_amax", "1", "[G, BR, BC] max |input| per block of W (the BF16 model copy)"},
    {"/quant/w/scale", "1", "[G, BR, BC] block scale: E8M0 byte (value 2^(byte - 127)), UE4M3 byte (NVFP4: its E4M3 value "
     "times quant/w/tensor_scale_inv) or FP32 scale_inv"},
    {"/quant/w/codes", "code", "[G, N, K] element codes of W, one per byte (E2M1 unpacked)"},
    // the activation operands (format 4): per group a fixed capacity of rows, the group's first
    {"/rows", "count", "[G] rows of each group at this step (expert m_splits, padded to 16; else the micro-batch)"},
    {"/block_mse", "1", "[G, BR, BC] mean squared quantization error per block (micro-batch 0; NaN past the rows)"},
    {"/block_sqnr_db", "dB", "[G, BR, BC] signal-to-quantization-noise ratio per block (micro-batch 0; NaN past the rows)"},
    {"/block_amax", "1", "[G, BR, BC] max |input| per block (after the Hadamard transform where used; NaN past the rows)"},
    {"/scale", "1", "[G, BR, BC] block scale: E8M0 byte (value 2^(byte - 127)), UE4M3 byte (NVFP4: its E4M3 value times "
     "its group's tensor_scale_inv) or FP32 scale_inv (past the rows 0 / NaN)"},
    {"/codes", "code", "[G, R, C] element codes, one per byte (E2M1 unpacked; 0 past the rows)"},
    {"/osc/flips", "count", "[G, N, K] cumulative oscillations of each element"},
    {"/osc/ema", "1", "[G, N, K] EMA oscillation frequency of each element"},
    {"/osc/dist_ratio", "1", "[G, N, K] dist_q / max(dist_w, 1e-12) of the current window (0 where dist_w = 0)"},
    {"/osc/snaps", "count", "[G, N, K] cumulative de-oscillation snaps of each element"},
};

DatasetDoc find(std::string_view name, const Entry* begin, const Entry* end) {
  for (const Entry* e = begin; e != end; ++e)
    if (ends_with(name, e->suffix)) return {e->units, e->description};
  return {};
}

}  // namespace

DatasetDoc describe(std::string_view name) {
  if (name == kSteps)
    return {"row", "completion counter: row i holds i (the 0-based trace row), written after every series of row "
                   "i; a reader trusts len(/steps) rows of every dataset"};
  if (starts_with(name, kSnapshotRows))
    return {"row", "trace rows of the snapshot steps (the snapshots' steps attribute): the HDF5 dimension scale of "
                   "the row axis of the snapshots it is attached to"};
  if (starts_with(name, "/snap/")) return find(name, std::begin(kSnapshots), std::end(kSnapshots));
  if (starts_with(name, "/train/")) {  // the fixed run series by their whole name; any other is a user's scalar
    for (const Entry& e : kSeries)
      if (name == e.suffix) return {e.units, e.description};
    return {"", "a scalar the recorded run logged under this name (mxsim.torch.Recorder.log)"};
  }
  return find(name, std::begin(kSeries), std::end(kSeries));
}

}  // namespace mxsim::trace::schema
