// The training loop of the simulator: data order, micro-batches, optimizer,
// de-oscillation, metrics, HDF5 trace (docs/trace-format.md "Datasets
// written by mxsim train"), checkpoint/resume.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mxsim/backend.hpp"
#include "mxsim/sim/config.hpp"

namespace mxsim::sim {

class Comm;

struct StepInfo {
  int64_t step = 0, total = 0;  ///< optimizer steps done / planned
  double loss = 0, accuracy = 0, lr = 0, steps_per_s = 0;
  double test_accuracy = -1;    ///< >= 0 at epoch ends
};

/// Where a run is, for TrainOptions::control.
struct Progress {
  int64_t step = 0, total = 0;  ///< global optimizer step being run (1-based) / planned
  int microbatch = -1;          ///< micro-batch just done (0-based); -1: the optimizer step is done and its trace row queued
  int num_microbatches = 0;
  double loss = 0;              ///< mean CE of the micro-batches done so far (mb >= 0); the step's loss (mb = -1)
};

struct TrainOptions {
  std::string trace_path;       ///< "" = no trace
  std::string resume_path;      ///< checkpoint to resume from ("" = fresh start)
  std::string checkpoint_path;  ///< where checkpoints go ("" = none)
  int threads = 1;
  int64_t stop_after = 0;       ///< stop once this many optimizer steps are done (0 = run all); checkpoints then
  bool evaluate = true;         ///< test accuracy per epoch and at the end
  std::function<void(const StepInfo&)> on_step;
  /// Called on the training thread after every micro-batch and after every optimizer step; it may
  /// block (a paused run waits inside it). Returning false stops the run there, as stop_after
  /// does: the trace holds the completed steps and the checkpoint (if any) is written for them
  /// (a stop after a micro-batch drops that step's partial main_grad; the weights are untouched).
  std::function<bool(const Progress&)> control;
  /// When set and true (a signal handler may set it: std::atomic<bool> is lock-free), the run
  /// stops after the optimizer step in progress, as stop_after does: the trace holds the completed
  /// steps and the checkpoint (if any) is written for them. Read once per optimizer step, so unlike
  /// `control` it adds no synchronisation inside a step.
  const std::atomic<bool>* stop_requested = nullptr;
  /// The communicator of a run of one process per rank (sim/parallel.hpp; e.g. the NCCL one of
  /// `mxsim launch`): this process computes only its local ranks' share, through the same code as
  /// virtual ranks, and only the process driving rank 0 writes the trace and checkpoints (every
  /// process reads the resume checkpoint). Its size() must equal parallel.ranks (else
  /// std::invalid_argument); it must outlive the run. nullptr: virtual ranks in this process
  /// when parallel.ranks > 1 or parallel.deosc_shard_edge, else none.
  Comm* comm = nullptr;
};

struct LayerSummary {
  std::string name, recipe;
  bool quantized = false;           ///< the recipe quantizes the weight (false: bf16)
  double w_mse = 0, w_sqnr_db = 0;  ///< last step's fprop weight quantization (0, not applicable, for bf16)
  uint64_t flips_total = 0;         ///< weight-code flips (0, not applicable, for bf16)
  int64_t snaps_total = 0;
  uint64_t w_quantizations = 0;     ///< quantizations of the weight in this run (Weight::quantizations)
  bool deosc_eligible = false;
};

struct TrainResult {
  int64_t steps = 0, total_steps = 0;
  double final_loss = 0, final_train_acc = 0, test_accuracy = -1, seconds = 0;
  std::vector<double> losses;         ///< per step run here
  std::vector<double> epoch_test_accuracy;
  std::vector<LayerSummary> layers;
  std::vector<std::vector<float>> final_masters;  ///< per layer, for bit-exact checks
};

/// The memory a run of a config needs, estimated from the config alone before anything is
/// allocated (docs/simulator.md "Limits"): the weights with their optimizer, gradient,
/// de-oscillation and metric state; one micro-batch's activations and gradients (training)
/// and one 1000-image chunk's (evaluation); the decoded images. Bytes.
struct MemoryEstimate {
  uint64_t weights = 0, activations = 0, data = 0;
  uint64_t total() const { return weights + activations + data; }
};
MemoryEstimate estimate_run_memory(const Config& cfg);
/// This machine's physical memory, or the cgroup's memory limit where that is lower (bytes).
uint64_t machine_memory_bytes();
/// Throws std::runtime_error ("the run needs about N GiB (...); the machine has M GiB", naming
/// the keys that size it) when estimate_run_memory(cfg) exceeds machine_bytes.
void check_run_memory(const Config& cfg, uint64_t machine_bytes);

/// Runs training (check_run_memory first, against machine_memory_bytes()). Throws std::invalid_argument / std::runtime_error with a
/// message naming the problem (bad data dir, resume file of another config).
TrainResult train(const Config& cfg, Backend& be, const TrainOptions& opt);

}  // namespace mxsim::sim
