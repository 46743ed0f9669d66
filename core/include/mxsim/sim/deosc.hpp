// Primus weight de-oscillation of the simulator's MXFP4 weights and of a
// PyTorch model's (mxsim_deosc_*), with its state in backend memory.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mxsim/backend.hpp"
#include "mxsim/sim/parallel.hpp"
#include "mxsim/sim/step.hpp"

namespace mxsim::sim {

struct Weight;
class StateIO;

/// Primus weight de-oscillation (training-mechanics.md §6), FP32 snapshots
/// (the PR #982 variant: prev and prev_q FP32, movement measured on the FP32
/// master). Tracks only Mxfp4-recipe weights: the eligible set is the weights
/// whose recipe type is Mxfp4Recipe (deosc_eligible_v), whatever buffers
/// other weights hold.
class DeOsc {
 public:
  /// start_step: the first global step (sim/step.hpp) that observes.
  DeOsc(int64_t period, float ratio, int64_t start_step) : period_(period), ratio_(ratio), start_(start_step) {}
  /// Called after the optimizer step n (master already copied to the model).
  /// Nothing before start_step; the first observation of a weight seeds;
  /// every `period` observations after that a window ends. Returns snapped
  /// element counts per weight name for the weights whose window ended.
  std::map<std::string, int64_t> step(Backend& be, const std::vector<Weight*>& ws, Step n);
  /// One observation of the weight called `name`: master w (f32; snapped elements are set to
  /// their Q in place) and its MXFP4 forward QDQ q (f32, w's shape). The first observation seeds;
  /// then every `period`-th ends a window: returns its snapped count (nullopt between window
  /// ends). step() observes the simulator's eligible weights through it; the C interface's
  /// mxsim_deosc_observe (mxsim.torch.WeightDeOsc) observes a PyTorch model's.
  std::optional<int64_t> observe(Backend& be, const std::string& name, Tensor& w, const Tensor& q);
  struct State {
    Tensor prev, prev_q, dist_w, dist_q;
    /// Shard-edge runs only: prev_q and dist_q of the full-tensor QDQ, to count the snap
    /// decisions the shard-edge Q changes (the master, prev and dist_w are shared).
    Tensor full_prev_q, full_dist_q;
    /// u32: per element, the snaps so far (the trace's /snap/<l>/osc/snaps and watch/snaps).
    Tensor snaps;
    int64_t step = 0;  ///< observations in the current window
    bool seeded = false;
  };
  /// What the shard-edge QDQ did to one weight at one step.
  struct EdgeStep {
    int64_t qdiff = 0;    ///< elements whose shard-edge Q differs from the full-tensor Q (bits)
    int64_t changed = 0;  ///< at a window end: elements whose snap decision differs (0 otherwise)
  };
  /// Shard-edge de-oscillation (parallel.deosc_shard_edge): Q of weight `name` is
  /// shard_edge_qdq (sim/dist_optimizer.hpp) of parameter index_of[name] of `layout` (which must
  /// outlive this), and step() records EdgeStep per weight. Call before the first step.
  void set_shard_edge(const FlatLayout* layout, std::map<std::string, size_t> index_of) {
    edge_layout_ = layout;
    edge_index_ = std::move(index_of);
  }
  bool shard_edge() const { return edge_layout_ != nullptr; }
  /// The last step()'s EdgeStep per tracked weight (shard-edge runs; empty otherwise).
  const std::map<std::string, EdgeStep>& edge_last() const { return edge_last_; }
  /// The state of a tracked weight (nullptr before its first observation).
  const State* state_of(const std::string& name) const;
  /// Names of the tracked weights, fixed at the first step past start_step.
  const std::vector<std::string>& eligible() const { return eligible_; }
  /// The checkpoint entries of this state (sim/state_io.hpp).
  void visit(StateIO& io, Backend& be, const std::vector<Weight*>& ws);

 private:
  std::map<std::string, State> state_;
  bool built_ = false;
  std::vector<std::string> eligible_;
  const FlatLayout* edge_layout_ = nullptr;
  std::map<std::string, size_t> edge_index_;
  std::map<std::string, EdgeStep> edge_last_;
  /// The EdgeStep of this observation (before the state's update) and the full-tensor shadow's update.
  EdgeStep edge_observe(Backend& be, Weight& w, State& s, const Tensor& Q, const Tensor& Qfull, bool window_end);
  int64_t period_;
  float ratio_;
  int64_t start_;
};

/// Q = MXFP4 QDQ of bf16(master) per expert on the forward grid (32x32, EVEN,
/// RNE), written into q (f32, master's shape).
void mxfp4_forward_qdq(Backend& be, const Tensor& master, Tensor& q);

}  // namespace mxsim::sim
