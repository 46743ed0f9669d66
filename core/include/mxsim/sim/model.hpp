// The Mixture-of-Experts classifier of the training simulator, written once
// against mxsim::Backend, with explicit forward and backward code.
//
//   x [B, 784] (FP32 pixels, cast to BF16)
//   h0 = embed(x)                      [B, d]      linear 784 -> d
//   logits_r = router(h0), p = softmax [B, E]      linear d -> E, FP32 softmax
//   top-k experts per token, gate = p (not renormalised, Switch/GShard)
//   permute (token, slot) pairs by expert, stable (expert, token, slot) order,
//     each expert's rows padded with zero rows to a multiple of 16 (the
//     Hadamard run; Turbo pads grouped column-wise spans likewise)
//   u = fc1(xp) grouped [E, d_ff, d]; a = act(u); yp = fc2(a) grouped [E, d, d_ff]
//   moe[t] = sum_slots gate * yp[row]  (slot order)
//   h1 = h0 + moe   (residual)
//   logits = head(h1) [B, 10]; loss = mean CE over the global batch
//          + aux = coeff * E * sum_e f_e * P_e per micro-batch / num_microbatches
// Activations and GEMM outputs are BF16 values; softmax, loss, gates FP32.
//
// Every tensor lives in backend memory (backend_tensor.hpp handles); the code
// here touches no element data. Host-side are only the routing counts of a
// micro-batch (downloaded once: the grouped GEMMs' m_splits, as Megatron does)
// and scalar results for the trace.
#pragma once
#include <array>
#include <deque>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxsim/backend.hpp"
#include "mxsim/delayed_scaling.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/deosc.hpp"
#include "mxsim/sim/layers.hpp"
#include "mxsim/sim/osc_metrics.hpp"
#include "mxsim/sim/parallel.hpp"
#include "mxsim/sim/recipe.hpp"
#include "mxsim/sim/step.hpp"

namespace mxsim::sim {

/// Thrown on misuse of training mechanics (stale cache, double main_grad add).
class MechanicsError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// A quantized-weight cache entry, valid only for the weight version it was
/// made from (training-mechanics.md §4-§5).
struct WeightCache {
  QTensor q;
  uint64_t version = 0;
  bool valid = false;
};

/// FP8 current scaling's refusal of a non-finite amax, deferred: the amax of every
/// current-scaled operand of a step in the order of use, delivered by Backend::amax_deferred
/// while the quantizer finds the same amax where the tensor lives (QuantSpec::whole_tensor_scale),
/// so a GPU step needs no synchronisation per operand. The Model owns one; its weights point to it.
struct CurrentAmaxChecks {
  struct Entry {
    const std::string* weight;  ///< Weight::name
    Role role;
    int microbatch;
    float amax = 0.0f;  ///< written when the backend resolves its deferred values
  };
  /// A deque: the backend holds the address of each amax until it resolves.
  std::deque<Entry> pending;
  int microbatch = 0;  ///< the micro-batch running now (Model::train_microbatch sets it)
  /// After the backend resolved them: "micro-batch M: <layer>: operand <role> has a non-finite amax
  /// (v); FP8 current scaling has no finite scale" for the first non-finite one in the order of use
  /// (the error the operand's quantization would have raised at once), else nullopt. Empties the queue.
  std::optional<std::string> take_error();
};

/// One weight [G, N, K] (G = 1 for plain linears) with its FP32 master, AdamW
/// moments, BF16 model copy, FP32 main_grad (all f32 tensors in backend
/// memory) and the per-(micro-batch, group) grad_added_to_main_grad guard.
struct Weight {
  std::string name;
  Layer layer = Layer::Embed;
  size_t G = 1, N = 0, K = 0;
  LinearRecipe recipe;  ///< per GEMM (a uniform one: the layer's named recipe)
  Tensor master, m, v, model, main_grad;
  uint64_t version = 0;  ///< bumped by every optimizer step
  WeightCache cache;     ///< rowwise/2-D cache (fprop; dgrad too when same bytes)
  std::vector<uint8_t> added;  ///< [num_microbatches * G] (host bookkeeping)
  int num_microbatches = 1;
  /// fp8_delayed only: one mxsim::DelayedScaling per operand role (indexed by
  /// Role; TransformerEngine semantics, delayed_scaling.hpp). Every
  /// quantization of the role in a step records its amax; update_scaling()
  /// after the optimizer step turns the history into the next step's scale
  /// (1.0 before the first update, as TE). Empty for every other recipe.
  std::array<std::optional<DelayedScaling>, 3> delayed;
  /// fp8_delayed: this step's amaxes per role in the order of use, delivered by
  /// Backend::amax_deferred (no synchronisation per operand, as TE keeps amax on
  /// the device) and recorded into `delayed` by update_scaling(). The same history
  /// as recording each at once: record is a max with a sticky first NaN. A deque:
  /// the backend holds the address of each value until it resolves.
  std::array<std::deque<float>, 3> pending_amax;
  /// Whether a quantization queues its amax into pending_amax (false while the Model evaluates:
  /// evaluation records no amax, and a queued value cannot be taken back before it resolves).
  bool records_amax = true;
  /// Where a training quantization under current scaling queues its amax for the deferred
  /// non-finite check (the Model's); null (a Weight assembled by hand) or while evaluating
  /// (records_amax false): the amax is read and checked at once.
  CurrentAmaxChecks* current_checks = nullptr;

  /// Whether bf16(master) is the model copy: set by whoever writes both (the
  /// Model's initialisation, every optimizer step), cleared once de-oscillation
  /// snapped master elements or a checkpoint restored both; false for a Weight
  /// assembled by hand. Decides whether a quantization of bf16(master) may
  /// reuse quantized().
  bool master_matches_model = false;

  Shape shape() const { return {G, N, K}; }
  /// Zero main_grad (allocated on first use) and the guard (start of a step).
  void zero_grad(Backend& be);
  /// Mark (mb, g) as added; throws MechanicsError on a second add.
  void mark_added(int mb, size_t g);
  /// The optimizer step happened: bump the version, invalidate the cache,
  /// quantized() and bf16_model(), master_matches_model = true.
  void invalidate();
  /// End of step for fp8_delayed: resolves the backend's deferred values where
  /// amaxes are pending (the trainer's step has resolved them at its last
  /// micro-batch already; on the GPU this can still wait for the optimizer's
  /// kernels: one synchronisation per step, not one per operand), records the
  /// step's pending amaxes, then DelayedScaling::update() of every role (no-op
  /// for other recipes).
  void update_scaling(Backend& be);
  /// A step abandoned before its end (TrainOptions::control stopped it after a micro-batch): the
  /// amaxes it queued are dropped, as its gradients are, so the state (and a checkpoint of it) is
  /// that of the step before. Only once the backend has resolved them (it holds their addresses).
  void drop_step_amaxes();
  /// The model copy of this version quantized by `spec` (Axis::Cols): one
  /// quantization per (version, spec), shared by fprop, dgrad, the weight_q
  /// snapshot, de-oscillation and the oscillation metrics wherever their spec
  /// is the same (a quantization is a pure function of tensor and spec).
  const QTensor& quantized(Backend& be, const QuantSpec& spec);
  /// The model copy of this version as a bf16 tensor (its bit patterns): what the BF16 GEMMs
  /// read, made once per version like quantized(), so that a GPU reads W as it is instead of
  /// re-encoding the f32 copy for every GEMM of every micro-batch.
  const Tensor& bf16_model(Backend& be);
  /// bf16(master) as a tensor: the model copy itself while
  /// master_matches_model, else a new tensor.
  Tensor bf16_master(Backend& be) const;
  /// q = dequantize(quantize(bf16(master), spec)) (f32 [G, N, K]): from
  /// quantized(spec) while master_matches_model, else quantized afresh.
  void qdq_master(Backend& be, const QuantSpec& spec, Tensor& q);
  /// Quantizations of this weight so far (quantized() misses and the
  /// bf16(master) ones of steps with de-osc snaps).
  uint64_t quantizations() const { return quantizations_; }

 private:
  std::vector<std::pair<QuantSpec, QTensor>> memo_;  ///< this version's quantizations
  Tensor model_bf16_;                                 ///< bf16_model(), empty until made
  uint64_t quantizations_ = 0;
};

/// What the forward of one linear needs from the weight cache: the
/// quantized W for fprop/dgrad of micro-batch `mb` of `num_mb`.
/// num_mb == 1: quantized on the fly, nothing cached. Else quantized at
/// mb == 0 and cached; mb > 0 reuses the cache and throws MechanicsError if
/// it is missing or its version differs from the weight's.
const QTensor& weight_for_fprop(Backend& be, Weight& w, int mb, int num_mb, QTensor& scratch);
/// dgrad's W: the fprop bytes when fprop and dgrad quantize W by the same spec and a
/// transposed cache is allowed; otherwise quantized from the current BF16 weight by dgrad's
/// spec (current scaling: re-derived at every use; per-GEMM recipes whose W specs differ:
/// once per weight version, Weight::quantized's memo).
const QTensor& weight_for_dgrad(Backend& be, Weight& w, int mb, int num_mb, QTensor& scratch);

/// The QuantSpec the trace's W follows (LinearRecipe::weight_spec: fprop's, or dgrad's when fprop
/// runs in BF16) when the BF16 weight is `wm` ([G, N, K], f32 holding BF16 values): per-tensor FP32 specs get
/// fp8_delayed's current DelayedScaling scale, or fp8_current's one scale
/// over all G groups (E_max / amax(wm)); other specs pass through. Records no
/// amax. Used for the trace's weight_q snapshot and the oscillation metrics so
/// they lie on the grid of the GEMM's W.
QuantSpec weight_fprop_spec(Backend& be, const Weight& w, const Tensor& wm);

/// Per-step quantization statistics of one operand (trace /layers/<l>/quant).
struct OperandStats {
  QuantStats q;
  ScaleExpCounts scale_exp_hist{};
};

/// Host copies of one quantized activation operand of a micro-batch, for the trace's block
/// maps at snapshot steps: per group (experts of fc1 / fc2, else one) its rows of the source
/// and their quantization (groups = 1, rows[g] x cols; a wgrad operand stored transposed).
/// An empty group holds rows 0 and an empty tensor.
struct OperandCapture {
  std::vector<int64_t> rows;              ///< rows per group (the grouped GEMMs' m_splits)
  std::vector<std::vector<float>> x;      ///< per group [rows[g], cols] row-major
  std::vector<QuantizedTensor> q;         ///< per group
  size_t cols = 0;
};

/// Rows each expert's permuted block is padded to (the Hadamard run of 16:
/// Turbo pads grouped column-wise spans likewise).
inline constexpr int64_t kExpertRowPad = 16;

/// One micro-batch's record, for the trace: per-layer dW_mb contribution
/// ([G, N, K] f32; snapshot layers only).
struct MicroRecord {
  std::map<Layer, Tensor> wgrad;
};

class Model {
 public:
  Model(const Config& cfg, Backend& be);
  ~Model();
  Model(const Model&) = delete;  // its weights point into it (Weight::current_checks)
  Model& operator=(const Model&) = delete;
  /// Layers in order: embed, router, fc1, fc2, head.
  std::vector<Weight*> weights();
  Weight& weight(Layer l);
  Weight& weight(const std::string& name);

  /// Forward + backward of one micro-batch: x [B_mb, 784] f32 pixels, labels
  /// [B_mb] u8 (backend tensors), adding its weight gradients into
  /// main_grad. grad_scale = 1 / global batch.
  struct MbResult {
    double loss_sum = 0, aux = 0;  ///< summed CE over the rows (FP64); the micro-batch's aux loss
    int64_t correct = 0;
    std::vector<int64_t> tokens_per_expert;
  };
  MbResult train_microbatch(const Tensor& x, const Tensor& labels, int mb, int num_mb, Step step, float grad_scale,
                            bool record_stats, bool record_wgrad, MicroRecord* rec);
  /// The same into `out`, with out.loss_sum, out.aux, out.correct and the
  /// operand statistics (record_stats) delivered deferred: they hold their
  /// values once the backend's resolve_deferred() has returned, and `out`
  /// must live until then (Backend, "deferred host values").
  void train_microbatch(const Tensor& x, const Tensor& labels, int mb, int num_mb, Step step, float grad_scale,
                        bool record_stats, bool record_wgrad, MicroRecord* rec, MbResult& out);
  /// FP8 current scaling's non-finite check of the operands the deferred form above quantized
  /// since the last call ("micro-batch M: <layer>: operand <role> has a non-finite amax ...", the
  /// first in the order of use; CurrentAmaxChecks): call it once the backend has resolved its
  /// deferred values, before anything of the step is kept. The first form checks by itself and
  /// throws std::runtime_error with that message.
  std::optional<std::string> take_current_amax_error() { return current_checks_.take_error(); }
  /// Forward only (evaluation), BF16 weights quantized per recipe on the fly;
  /// writes logits [B, 10] f32.
  void forward_eval(const Tensor& x, Tensor& logits);
  /// Predicted class per row of x (forward_eval + argmax, downloaded).
  std::vector<int> predict(const Tensor& x);

  /// Quantization stats of the last recorded micro-batch.
  const OperandStats& stats(Layer l, Role r) const { return stats_[size_t(l)][size_t(r)]; }
  /// Whether GEMM g of layer l runs a BF16 shadow: set_shadow(true) (the trainer's, when a trace
  /// records it), trace.shadow_layers, a quantized GEMM, one grouped launch (not under expert
  /// parallelism); never in evaluation.
  bool shadows(Layer l, GemmForm g) const;
  void set_shadow(bool on) { shadow_on_ = on; }
  /// The BF16 shadow's error of GEMM g of layer l per micro-batch of the step (deferred: the
  /// values arrive with the step's resolve_deferred; NaN where the step ran no such GEMM).
  const std::vector<OutputError>& shadow(Layer l, GemmForm g) const { return shadow_[size_t(l)][size_t(g)]; }

  /// Keep host copies of the quantized activation operands (every Operand) of `layers`'
  /// quantized linears in the micro-batches that run until stop_capture(); the trainer asks
  /// for micro-batch 0 of snapshot steps. Clears earlier captures.
  void capture_operands(std::vector<Layer> layers) {
    capture_layers_ = std::move(layers);
    captures_.clear();
  }
  void stop_capture() { capture_layers_.clear(); }
  /// The captured operand (nullptr when it was not captured).
  const OperandCapture* capture(Layer l, Operand o) const {
    auto it = captures_.find({l, o});
    return it == captures_.end() ? nullptr : &it->second;
  }

  /// Expert parallelism over comm's ranks (nullptr: the experts run as one grouped launch).
  /// With a comm of P ranks (P = 1 included), each micro-batch's tokens are split into P
  /// contiguous shards (the source ranks); fc1 -> activation -> fc2 of expert e run on rank
  /// e / (E / P), whose rows arrive by all_to_all_v after the per-expert counts (m_splits) are
  /// exchanged; the outputs reach every rank by an all-gather of the ranks' expert rows, since
  /// every rank runs the dense layers for the whole micro-batch (docs/simulator.md "Parallel
  /// simulation"). After the backward, every rank's expert groups of main_grad (and of the
  /// snapshot records) are gathered onto every rank, so a process that drives one rank holds
  /// the same tensors as one that drives all. comm must outlive the Model.
  void set_comm(Comm* comm) { comm_ = comm; }

 private:
  const Config& cfg_;
  Backend& be_;
  std::vector<std::unique_ptr<Weight>> w_;
  std::array<std::array<OperandStats, 3>, 5> stats_{};
  CurrentAmaxChecks current_checks_;  ///< every Weight's current_checks
  std::array<std::array<std::vector<OutputError>, 3>, 5> shadow_;  ///< [layer][GemmForm][micro-batch]
  bool shadow_on_ = false;
  /// The shadow of GEMM g of w in micro-batch mb: ref (the same GEMM on the BF16 operands, just
  /// computed into its own tensor) against the run's output `test`.
  void queue_shadow(const Weight& w, GemmForm g, int mb, const Tensor& ref, const Tensor& test);
  /// stats_[l][r] = x's quantization statistics against q (deferred).
  void queue_stats(Layer l, Role r, const Tensor& x, const QTensor& q);
  std::vector<Layer> capture_layers_;
  std::map<std::pair<Layer, Operand>, OperandCapture> captures_;
  std::vector<int64_t> capture_ms_;  ///< this micro-batch's expert m_splits (routing)
  bool capturing(Layer l) const;
  /// Host copies of a rowwise operand x [M, C] and its quantization q, cut into the groups of
  /// the layer (the expert m_splits of fc1 / fc2, else one group).
  void capture_rowwise(Layer l, Operand o, const Tensor& x, const QTensor& q);
  /// Host copies of the wgrad operand x [M, C] of one grouped launch over m_splits ms and its
  /// per-group quantization; groups with rows keep theirs (expert-parallel launches fill theirs).
  void capture_grouped(Layer l, Operand o, const Tensor& x, std::span<const int64_t> ms, const GroupedQTensor& q);
  struct LinearCtx;
  struct Workspace;
  std::unique_ptr<Workspace> ws_, eval_ws_;
  void linear_forward(Weight& w, const Tensor& x, std::span<const int64_t> ms, Tensor& y, int mb, int num_mb,
                      bool stats, LinearCtx& ctx);
  void linear_backward(Weight& w, const Tensor& dy, std::span<const int64_t> ms, Tensor* dx, int mb, int num_mb,
                       Step step, bool stats, LinearCtx& ctx, Tensor* record, Tensor& wgrad_tmp);
  struct Routing;
  Routing route(Workspace& ws, const Tensor& h0, size_t B);
  Comm* comm_ = nullptr;
  struct Dispatch;
  Dispatch make_dispatch(const Workspace& ws, const Routing& rt, size_t B) const;
  /// Global permuted rows [M, C] -> each local rank's expert rows (all_to_all_v).
  std::vector<Tensor> ep_scatter(const Dispatch& D, const Tensor& global, size_t C);
  /// Each local rank's expert rows [rows of its experts, C] -> the rows of all ranks concatenated
  /// in rank order, which is the global permuted layout [M, C] (all_gather, every rank's block
  /// padded to the largest).
  Tensor all_gather_rows(const Routing& rt, const std::vector<Tensor>& local, size_t C);
  /// Every rank's expert groups of t (w's shape) onto every local rank (all_gather).
  void share_expert_groups(const Weight& w, Tensor& t);
  using LinearFwd = std::function<void(Weight&, const Tensor&, std::span<const int64_t>, Tensor&, LinearCtx&)>;
  /// xp -> fc1 -> activation -> fc2 -> yp: one grouped launch each, or per rank (comm_).
  void experts_forward(Workspace& ws, const Routing& rt, size_t B, bool st, const LinearFwd& fwd);
  /// dyp -> fc2 backward -> activation backward -> fc1 backward -> dxp (main_grad adds, records).
  void experts_backward(Workspace& ws, const Routing& rt, int mb, int num_mb, Step step, bool st, Tensor* rec1,
                        Tensor* rec2);
  bool expert_parallel() const { return comm_ != nullptr; }
};

/// LR at optimizer step t (1-based): linear warm-up over warmup_steps, then
/// cosine from lr to min_lr at total_steps.
float lr_at(const Config& c, int64_t t, int64_t total_steps);

}  // namespace mxsim::sim
