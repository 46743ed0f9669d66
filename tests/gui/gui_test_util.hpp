// Shared helpers of the inspector's Qt Test suites: traces written by the
// simulator itself (a tiny MoE run), temporary paths, waiting for views.
#pragma once
#include <QCoreApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QTemporaryDir>
#include <QTest>
#include <cstdlib>
#include <string>
#include <vector>

#include "mxsim/backend_select.hpp"
#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/trainer.hpp"
#include "view.hpp"

namespace guitest {

/// The tiny run of the simulator's own tests (tests/test_sim_train.cpp): 4 experts,
/// d_model 32, 4 micro-batches of 32, MXFP4 experts; snapshots of fc1 at global steps 2 and 4
/// (trace rows 1 and 3).
inline std::vector<std::string> tiny_overrides(std::vector<std::string> extra = {}) {
  std::vector<std::string> s = {"run.epochs=1",           "run.max_steps=6",         "run.train_limit=2048",
                                "run.test_limit=500",     "model.d_model=32",        "model.d_ff=64",
                                "model.experts=4",        "model.top_k=2",           "batch.global_batch=128",
                                "batch.num_microbatches=4", "optim.warmup_steps=2",  "deosc.period=2",
                                "deosc.start_step=1",     "deosc.ratio=1.0",         "trace.snapshot_layers=[\"fc1\"]",
                                "trace.snapshot_steps=[2, 4]"};  // global steps: trace rows 1 and 3
  // $MXSIM_DATA_DIR: the Fashion-MNIST folder on a machine without the Debian package (the GPU
  // machine's bundle, scripts/gpu-gui-pack.sh: the first 2048 training and 500 test images are
  // all these runs read)
  if (const char* d = std::getenv("MXSIM_DATA_DIR"); d && *d) s.push_back("run.data_dir=\"" + std::string(d) + "\"");
  s.insert(s.end(), extra.begin(), extra.end());
  return s;
}

/// The `mxsim` CLI the tests start in another process: $MXSIM_CLI when set (a bundle whose
/// binaries moved), else the one of this build tree.
inline QString mxsim_cli() {
  if (const char* c = std::getenv("MXSIM_CLI"); c && *c) return QString::fromLocal8Bit(c);
  return QString(MXSIM_BINARY_DIR) + "/cli/mxsim";
}

/// "" when the GPU backend can train here (this build has it and a usable GPU is present), else
/// the reason: the runtime's, as `mxsim train --backend hip` gives it.
inline QString no_gpu_reason() {
  std::string why;
  return mxsim::gpu_backend_usable(&why) ? QString() : QString::fromStdString("no usable GPU: " + why);
}

inline mxsim::sim::Config tiny(std::vector<std::string> extra = {}) {
  return mxsim::sim::parse_config(mxsim::sim::default_config_text(), tiny_overrides(std::move(extra)), "tiny");
}

/// Trains `cfg` on the emu backend writing a trace at `path`.
inline mxsim::sim::TrainResult write_trace(const mxsim::sim::Config& cfg, const QString& path) {
  auto be = mxsim::emu::make_emu_backend();
  mxsim::sim::TrainOptions o;
  o.trace_path = path.toStdString();
  o.threads = 1;
  return mxsim::sim::train(cfg, *be, o);
}

/// A resumed run's trace: trains `cfg` for `stop_after` optimizer steps writing a checkpoint
/// (no trace), then resumes from it to the end writing the trace at `path`, so trace row r
/// holds global optimizer step stop_after + 1 + r (docs/trace-format.md, "Datasets written by
/// `mxsim train`"). The checkpoint goes beside the trace.
inline mxsim::sim::TrainResult write_resumed_trace(const mxsim::sim::Config& cfg, int64_t stop_after, const QString& path) {
  auto be = mxsim::emu::make_emu_backend();
  mxsim::sim::TrainOptions first;
  first.threads = 1;
  first.stop_after = stop_after;
  first.checkpoint_path = (path + ".ckpt.h5").toStdString();
  mxsim::sim::train(cfg, *be, first);
  mxsim::sim::TrainOptions rest;
  rest.threads = 1;
  rest.resume_path = first.checkpoint_path;
  rest.trace_path = path.toStdString();
  return mxsim::sim::train(cfg, *be, rest);
}

/// Processes events until `v` has no load outstanding (true) or `ms` passed.
inline bool wait_view(mxsim::inspector::View* v, int ms = 20000) {
  QElapsedTimer t;
  t.start();
  int quiet = 0;
  while (t.elapsed() < ms) {
    QCoreApplication::processEvents(QEventLoop::AllEvents, 10);
    quiet = v->busy() ? 0 : quiet + 1;
    if (quiet >= 3) return true;
    QTest::qWait(2);
  }
  return false;
}

}  // namespace guitest
