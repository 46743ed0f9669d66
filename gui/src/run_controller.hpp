// Run mode: the simulator library (mxsim::sim::train) on a worker thread,
// writing a trace the inspector follows (SWMR), controlled from the UI:
// pause, step one micro-batch, step one optimizer step, resume, stop. The
// worker blocks inside the trainer's control hook while paused; the UI
// thread never waits for it.
#pragma once
#include <QObject>
#include <QString>
#include <QStringList>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace mxsim::inspector {

struct RunSettings {
  QString config_path;     ///< "" = the embedded default config
  QStringList overrides;   ///< "section.key=value", as mxsim train --set
  QString backend = "emu";
  QString trace_path;      ///< where the trace goes (required)
  int threads = 1;
  bool evaluate = true;
  bool start_paused = false;  ///< pause before the first micro-batch's result is used
};

struct RunStatus {
  enum class State { Idle, Running, Paused, Finished, Stopped, Failed } state = State::Idle;
  qint64 step = 0, total = 0;  ///< global step being run / planned
  int microbatch = -1, num_microbatches = 0;  ///< last event: micro-batch done, or -1 = optimizer step done
  double loss = 0;
  qint64 steps_done = 0;
  QString message;  ///< error text (Failed) or a summary (Finished)
};

/// Backends that can run training here: "emu", and "hip" when this build has the GPU
/// backend and a usable GPU is present (else *why_not_gpu says why: the runtime's reason).
QStringList available_train_backends(QString* why_not_gpu = nullptr);

class RunController : public QObject {
  Q_OBJECT
 public:
  explicit RunController(QObject* parent = nullptr);
  ~RunController() override;  ///< stops a running simulation and joins the worker

  /// Starts a run; false (with status().message) when one is running or the settings are bad.
  bool start(const RunSettings& s);
  void pause();
  void resume();
  /// Run until the next event (a micro-batch done, or the optimizer step done), then pause.
  void stepMicroBatch();
  /// Run until the current optimizer step is done (its trace row written), then pause.
  void stepOptimizer();
  void stop();
  RunStatus status() const;
  bool active() const;  ///< running or paused

 signals:
  /// The trace file exists (SWMR started): the window opens and follows it.
  void traceStarted(const QString& path);
  void statusChanged();
  void finished();

 private:
  bool hook(qint64 step, qint64 total, int mb, int nmb, double loss);
  void post_status();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::thread worker_;
  RunStatus st_;
  bool paused_ = false, stop_ = false, announced_ = false;
  int advance_ = 0;  ///< 0 none, 1 until the next event, 2 until the next optimizer step end
  QString trace_path_;
};

}  // namespace mxsim::inspector
