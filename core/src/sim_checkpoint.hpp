// Internal to the simulator: checkpoint save and resume over the one list of
// checkpointed state (sim/state_io.hpp).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "mxsim/backend.hpp"
#include "mxsim/sim/model.hpp"
#include "mxsim/sim/step.hpp"

namespace mxsim::sim {

/// Everything a checkpoint restores; the trainer owns the objects.
struct CheckpointedState {
  Model& model;
  DeOsc& deosc;
  OscMetrics& osc;
  std::map<std::string, int64_t>& snaps_total;  ///< de-osc snaps per layer so far
};

/// Writes the state after step `done` to `path` atomically (trace/checkpoint.hpp).
void save_checkpoint(const std::string& path, Backend& be, const std::string& config_toml, Step done,
                     CheckpointedState s);
/// Restores the state from `path` and returns the last step it holds. Throws
/// std::runtime_error naming the file (and the entry) for a checkpoint of
/// another config, one past `total_steps`, a missing or corrupt entry.
Step load_checkpoint(const std::string& path, Backend& be, const std::string& config_toml, int64_t total_steps,
                     CheckpointedState s);

}  // namespace mxsim::sim
