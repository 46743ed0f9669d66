// The trace recorder of `mxsim train`: every dataset a run writes is listed
// once (name from trace/schema.hpp, dtype, row shape, where its row comes
// from), and the same list both declares the datasets and appends their rows.
// docs/trace-format.md "Datasets written by mxsim train" says what each means.
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "mxsim/backend.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/layers.hpp"
#include "mxsim/sim/model.hpp"
#include "mxsim/sim/step.hpp"
#include "mxsim/trace/common.hpp"

namespace mxsim::trace {
class Writer;
}

namespace mxsim::sim {

/// Everything one trace row holds, gathered by the trainer (host values).
struct StepRecord {
  int64_t step = 0;  ///< global step n (1-based, sim/step.hpp)
  double loss = 0, aux_loss = 0, accuracy = 0, test_accuracy = 0;
  float lr = 0;
  std::vector<int64_t> tokens_per_expert;  ///< [micro-batches * experts]
  std::vector<double> scalars;             ///< RunPlan::scalars, in their order
  struct LayerRecord {
    std::vector<double> main_grad_norm;    ///< [micro-batches]
    std::vector<uint8_t> grad_added;       ///< [micro-batches] (LayerPlan::grad_added)
    std::array<OperandStats, 3> quant{};   ///< by Role (quantized layers)
    /// The BF16 shadow's error per GemmForm, one entry per micro-batch (LayerPlan::shadow).
    struct Shadow {
      std::vector<double> rel_l2, sqnr_db, max_abs_err;
      std::vector<int64_t> max_index;
      std::vector<uint64_t> nonfinite;
      void set(const std::vector<OutputError>& e);
    };
    std::array<Shadow, 3> shadow;
    Backend::OscStep osc;
    int64_t snapped = 0;                   ///< de-osc snaps this step
    DeOsc::EdgeStep edge;                  ///< parallel.deosc_shard_edge: what the shard edge changed
    /// trace.watch_elements of a quantized snapshot layer (schema::watch), [W] each.
    struct Watch {
      std::vector<int64_t> element;
      std::vector<float> master;
      Backend::QuantElements q;  ///< code, scale (byte or scale_inv) and weight_q (value)
      std::vector<uint32_t> flips, snaps;
    } watch;
  };
  std::vector<LayerRecord> layers;         ///< by LayerPlan::slot
};

/// What one recorded linear layer writes, for the simulator's weights and for a PyTorch model's
/// modules (mxsim.torch.Recorder through the C interface) alike: TraceRecorder declares its
/// series from this plan, so the two producers share one list of datasets.
struct LayerPlan {
  std::string name;               ///< the trace's layer name: /layers/<name> (no '/')
  size_t slot = 0;                ///< index of its record in StepRecord::layers
  std::string recipe;             ///< recipe name (the group's schema::kLayerRecipeAttr)
  std::string module;             ///< the module's class ("" for the simulator's layers)
  uint64_t G = 1, N = 0, K = 0;   ///< weight [G, N, K] (schema::kLayerShapeAttr)
  bool quantized = false;         ///< quant/{w,x,dy}/* and osc/*
  bool deosc = false;             ///< deosc/snapped
  bool shard_edge = false;        ///< deosc/shard_edge_* (parallel.deosc_shard_edge)
  uint64_t watch = 0;             ///< watched elements W (watch/*; 0: none)
  bool watch_fp32_scale = false;  ///< watch/scale is f32 (FP32 scale_inv) rather than the byte
  /// Snapshots at RunPlan::snapshot_steps: master, weight_q, main_grad [G, N, K] (+ wgrad_mb
  /// where snapshot_wgrad_mb) and, quantized, W's block maps and the element maps (schema.hpp).
  bool snapshots = false;
  bool snapshot_wgrad_mb = false;
  bool grad_added = false;        ///< the grad_added_to_main_grad series (a recorder's main_grad layers)
  std::array<bool, 3> shadow{};   ///< per GemmForm: shadow/<gemm>/* (a BF16 shadow of that GEMM)
  /// per Role: quant/<role>/tensor_scale_inv (a quantized layer's operand with a two-level scale,
  /// LinearRecipe::two_level_scale)
  std::array<bool, 3> tensor_scale{};
};
/// The run-wide series beside the layers'.
struct RunPlan {
  uint64_t micro_batches = 1;     ///< rows of main_grad_norm (and of tokens_per_expert)
  uint64_t experts = 0;           ///< /train/tokens_per_expert [micro_batches, experts]; 0: not written
  bool model_metrics = false;     ///< aux_loss, accuracy, test_accuracy (the simulator's model)
  std::vector<std::string> scalars;  ///< further f64 series /train/<name> (a recorder's own scalars)
  std::vector<LayerPlan> layers;
  /// Global steps that take snapshots (of the layers with LayerPlan::snapshots) and the first
  /// step of the trace (row r holds global step first_step + r).
  std::vector<int64_t> snapshot_steps;
  int64_t first_step = 1;
};
/// The plan of a simulator run (every layer of `weights`); `shadows` says which GEMMs of a layer
/// run a BF16 shadow (Model::shadows).
RunPlan simulator_plan(const Config& cfg, const std::vector<Weight*>& weights,
                       const std::function<bool(Layer, GemmForm)>& shadows);

/// The fixed trace layout of one activation operand's block maps (snapshot layers): G groups
/// (the experts of fc1 / fc2, else 1) of at most R rows (a micro-batch's tokens; an expert's
/// padded to 16) and C columns, blocks [BR, BC] per group in the recipe's logical grid.
struct OperandGrid {
  uint64_t G = 1, R = 0, C = 0, BR = 0, BC = 0;
  bool fp32_scales = false;
  bool two_level = false;  ///< NVFP4: a tensor scale per group beside the block maps
};
OperandGrid operand_grid(const Config& cfg, const Weight& w, Operand o);

/// Rows are written by a writer thread (where the HDF5 library is
/// thread-safe, as Debian's is; else on the caller's thread), so a step's
/// HDF5 appends and flushes overlap the next step's device work instead of
/// holding up its launches. append() queues a copy of the record (at most
/// kMaxQueuedRows behind; then it waits); an error of the writer is thrown by
/// the next append / write_snapshots / close. The destructor writes every
/// queued row before the file is closed, so a run that ends by an exception
/// keeps its trace complete up to the last appended step.
class TraceRecorder {
 public:
  static constexpr size_t kMaxQueuedRows = 16;
  /// Tests only: while true the writer writes no row, so that a test can have
  /// rows queued when a run ends.
  inline static std::atomic<bool> test_hold_writer{false};
  /// Creates the trace at `path` and declares every series of `cfg`'s run and
  /// the snapshots of trace.snapshot_layers at the steps of
  /// trace.snapshot_steps that lie in [first, last] (global steps). Throws
  /// trace::TraceError naming the path.
  TraceRecorder(const std::string& path, const std::string& config_toml, const std::string& backend,
                const Config& cfg, const std::vector<Weight*>& weights, Step first, Step last,
                const std::function<bool(Layer, GemmForm)>& shadows = {});
  /// A trace of any model's layers (no snapshots): the series of `plan`, provenance `prov`
  /// (producer, model class), config_toml as given (a recorder's settings). Rows then come
  /// through append() with StepRecord::layers sized to the largest slot + 1. Throws
  /// trace::TraceError naming the path; std::invalid_argument for a layer or scalar name that
  /// is empty, holds '/', or repeats.
  TraceRecorder(const std::string& path, const std::string& config_toml, const trace::Provenance& prov,
                const RunPlan& plan);
  /// A snapshot this trace declared: the layer's slot and its kind (the path below /snap/<l>/).
  struct SnapshotKey {
    size_t slot;
    std::string kind;
  };
  /// Every declared snapshot of one snapshot step, in declaration order.
  std::vector<SnapshotKey> snapshot_keys() const;
  ~TraceRecorder();

  /// Whether step n's row takes snapshots.
  bool snapshot_due(Step n) const;
  /// Where a snapshot's tensor comes from: (layer, kind) -> its bytes (little-endian, the
  /// declared dtype and shape). Kinds: schema::kSnapshotKinds (f32), and for quantized layers
  /// the maps: "quant/w/<m>" for m in schema::kBlockMaps, "quant/<op>/<m>" for the activation
  /// operands (sim::Operand names) with m in kBlockMaps or "rows", "osc/<m>" for flips, ema,
  /// dist_ratio (the path below /snap/<l>/).
  /// The layer is its LayerPlan::slot (the simulator's: size_t(Layer)).
  using SnapshotSource = std::function<std::vector<unsigned char>(size_t slot, std::string_view kind)>;
  /// Writes every declared snapshot of step `n` (must be snapshot_due), on
  /// the caller's thread after the queued rows (src reads the backend, and
  /// the tensors are written one at a time to bound host memory).
  void write_snapshots(Step n, const SnapshotSource& src);
  /// Queues the row of every series; the writer appends them and finishes the
  /// row (completeness rule).
  void append(const StepRecord& r);
  /// Writes the queued rows, stops the writer and closes the file; throws
  /// trace::TraceError for any write that failed.
  void close();

 private:
  void write_row(const StepRecord& r);
  void writer_loop();
  /// Waits until the writer has written every queued row; rethrows its error.
  void drain();
  void stop_writer() noexcept;

  struct Series {
    std::string name;
    trace::DType dtype;
    std::vector<uint64_t> shape;
    std::function<const void*(const StepRecord&)> row;
  };
  struct Snapshot {
    std::string name;
    size_t slot;
    std::string kind;
    trace::DType dtype;
    std::vector<uint64_t> shape;
  };
  void declare_operand_maps(const Config& cfg, const Weight& w);
  /// snap_steps_: the steps of `steps` in [first, last], sorted, once each.
  void set_snapshot_steps(const std::vector<int64_t>& steps, int64_t first, int64_t last);
  /// A layer's weight snapshots (master, weight_q, main_grad, wgrad_mb; W's block and element maps).
  void declare_weight_snapshots(const LayerPlan& l, uint64_t micro_batches);
  /// The series of `plan` into series_ (one list for both producers).
  void plan_series(const RunPlan& plan);
  /// Creates the writer, declares series_ and snaps_ with the layers' attributes, starts SWMR
  /// and the writer thread.
  void open(const std::string& path, const std::string& config_toml, const trace::Provenance& prov,
            const RunPlan& plan);
  std::unique_ptr<trace::Writer> w_;
  std::vector<Series> series_;
  std::vector<Snapshot> snaps_;
  std::vector<int64_t> snap_steps_;  ///< global steps (sorted, unique)
  Step first_;
  // The writer thread and its queue (guarded by mu_).
  std::thread writer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StepRecord> queue_;
  bool busy_ = false, stopping_ = false;
  std::exception_ptr error_;
};

}  // namespace mxsim::sim
