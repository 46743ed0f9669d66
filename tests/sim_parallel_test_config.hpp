// The small parallel-simulation config that the virtual-rank tests (test_sim_parallel) and the
// process-mode tests (test_sim_process_mode) train: 4 experts, 2 micro-batches, de-oscillation
// from step 1, snapshots at steps 2 and 4, so that every collective and snapshot path runs in
// five steps. `extra` are --set overrides applied after these.
#pragma once
#include <string>
#include <vector>

#include "mxsim/sim/config.hpp"

namespace mxsim::sim::test {

inline Config tiny_parallel_config(std::vector<std::string> extra) {
  std::vector<std::string> s = {"run.epochs=1",          "run.max_steps=5",   "run.train_limit=1024",
                                "run.test_limit=300",    "model.d_model=32",  "model.d_ff=64",
                                "model.experts=4",       "model.top_k=2",     "batch.global_batch=128",
                                "batch.num_microbatches=2", "optim.warmup_steps=2", "deosc.period=2",
                                "deosc.start_step=1",    "deosc.ratio=1.0",
                                "trace.snapshot_layers=[\"embed\", \"fc1\", \"fc2\"]", "trace.snapshot_steps=[2, 4]",
                                // no BF16 shadow: expert parallelism does not record it (docs/config.md), so the
                                // one-rank runs these tests compare against must not either
                                "trace.shadow_layers=[]"};
  s.insert(s.end(), extra.begin(), extra.end());
  return parse_config(default_config_text(), s, "tiny");
}

}  // namespace mxsim::sim::test
