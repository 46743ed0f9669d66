// Oscillation metrics of quantized weights (the trace's osc/*), with their
// state in backend memory: the simulator's weights and a PyTorch model's
// (mxsim_osc_metrics_*).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mxsim/backend.hpp"

namespace mxsim::sim {

struct Weight;
class StateIO;

/// Oscillation metrics of every quantized weight (Nagel et al. 2022, arXiv:2203.11086):
/// per element the sign of the last non-zero change of the quantized value, an
/// oscillation indicator (non-zero change opposite to the last non-zero one),
/// flip counts and the EMA frequency f = m * ind + (1 - m) * f; plus DistRatio
/// = sum|dQ| / sum|dW| over windows of `period` steps.
class OscMetrics {
 public:
  struct State {
    Backend::OscState t;  ///< backend tensors
    int64_t window = 0;
    bool seeded = false;
  };
  OscMetrics(float momentum, int64_t period) : m_(momentum), period_(period) {}
  /// One step of weight w: its QDQ on the forward grid (the next fprop's W), then observe.
  Backend::OscStep update(Backend& be, Weight& w);
  /// One step of the weight called `name`: master w (f32) and its quantized value q (f32, w's
  /// shape). The first call seeds the state with (w, q); windows of `period` steps end DistRatio's
  /// sums. The simulator's update and the C interface's recorder (mxsim_osc_metrics_update) both
  /// come here.
  Backend::OscStep observe(Backend& be, const std::string& name, const Tensor& w, const Tensor& q);
  /// observe, its OscStep delivered to dst by the backend's next resolve_deferred (no wait now).
  void observe_deferred(Backend& be, const std::string& name, const Tensor& w, const Tensor& q,
                        Backend::OscStep* dst);
  /// The checkpoint entries of this state (sim/state_io.hpp).
  void visit(StateIO& io, Backend& be, const std::vector<Weight*>& ws);
  /// The backend tensors of weight `name`'s state; nullptr before its first update.
  const Backend::OscState* state(const std::string& name) const {
    auto it = state_.find(name);
    return it == state_.end() ? nullptr : &it->second.t;
  }

 private:
  /// A zeroed state for a weight of `shape` (seeding and resume).
  static State make_state(Backend& be, const Shape& shape);
  /// name's state, made and seeded with (w, q) at its first step; refuses another shape.
  State& seeded(Backend& be, const std::string& name, const Tensor& w, const Tensor& q);
  /// Whether this step ends s's DistRatio window (every `period` steps), counting the step.
  bool next_window(State& s) const;
  std::map<std::string, State> state_;
  float m_;
  int64_t period_;
};

}  // namespace mxsim::sim
