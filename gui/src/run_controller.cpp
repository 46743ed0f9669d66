#include "run_controller.hpp"

#include <QFile>
#include <QFileInfo>
#include <exception>
#include <memory>
#include <stdexcept>

#include "mxsim/backend_select.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/trainer.hpp"

namespace mxsim::inspector {

QStringList available_train_backends(QString* why_not_gpu) {
  std::string why;
  if (gpu_backend_usable(&why)) return {"emu", "hip"};
  if (why_not_gpu) *why_not_gpu = QString::fromStdString("no usable GPU: " + why);
  return {"emu"};
}

RunController::RunController(QObject* parent) : QObject(parent) {}

RunController::~RunController() {
  stop();
  if (worker_.joinable()) worker_.join();
}

bool RunController::active() const {
  std::lock_guard l(mu_);
  return st_.state == RunStatus::State::Running || st_.state == RunStatus::State::Paused;
}

RunStatus RunController::status() const {
  std::lock_guard l(mu_);
  return st_;
}

bool RunController::start(const RunSettings& s) {
  if (active()) return false;
  if (worker_.joinable()) worker_.join();
  auto fail = [&](const QString& m) {
    std::lock_guard l(mu_);
    st_ = RunStatus{};
    st_.state = RunStatus::State::Failed;
    st_.message = m;
    post_status();
    return false;
  };
  QString why;
  const QStringList usable = available_train_backends(&why);
  if (!usable.contains(s.backend))
    return fail(s.backend == "hip" ? QString("backend 'hip': %1").arg(why)
                                   : QString("backend '%1': unknown (usable here: %2)").arg(s.backend, usable.join(", ")));
  if (s.trace_path.isEmpty()) return fail("a trace path is needed (the views follow the trace)");
  std::string text = sim::default_config_text(), source = "default config";
  if (!s.config_path.isEmpty()) {
    QFile f(s.config_path);
    if (!f.open(QIODevice::ReadOnly)) return fail(QString("cannot read config '%1'").arg(s.config_path));
    text = f.readAll().toStdString();
    source = s.config_path.toStdString();
  }
  std::vector<std::string> sets;
  for (const QString& o : s.overrides)
    if (!o.trimmed().isEmpty()) sets.push_back(o.trimmed().toStdString());
  sim::Config cfg;
  try {
    cfg = sim::parse_config(text, sets, source);
  } catch (const std::exception& e) {
    return fail(QString("bad config: %1").arg(e.what()));
  }
  {
    std::lock_guard l(mu_);
    st_ = RunStatus{};
    st_.state = RunStatus::State::Running;
    paused_ = s.start_paused;
    stop_ = false;
    announced_ = false;
    advance_ = 0;
    trace_path_ = QFileInfo(s.trace_path).absoluteFilePath();
  }
  post_status();
  worker_ = std::thread([this, cfg, s, path = trace_path_] {
    RunStatus::State end = RunStatus::State::Finished;
    QString msg;
    try {
      std::string why;
      std::unique_ptr<Backend> be = make_backend(s.backend.toStdString(), &why);
      if (!be) throw std::runtime_error("backend '" + s.backend.toStdString() + "': " + why);
      sim::TrainOptions o;
      o.trace_path = path.toStdString();
      o.threads = std::max(1, s.threads);
      o.evaluate = s.evaluate;
      o.control = [this](const sim::Progress& p) { return hook(p.step, p.total, p.microbatch, p.num_microbatches, p.loss); };
      const sim::TrainResult r = sim::train(cfg, *be, o);
      {
        std::lock_guard l(mu_);
        if (stop_) end = RunStatus::State::Stopped;
      }
      msg = QString("%1 of %2 steps, final loss %3%4")
                .arg(r.steps)
                .arg(r.total_steps)
                .arg(r.final_loss, 0, 'g', 5)
                .arg(r.test_accuracy >= 0 ? QString(", test accuracy %1").arg(r.test_accuracy, 0, 'f', 4) : QString());
    } catch (const std::bad_alloc&) {
      end = RunStatus::State::Failed;
      msg = "out of memory";
    } catch (const std::exception& e) {
      end = RunStatus::State::Failed;
      msg = QString::fromUtf8(e.what());
    }
    {
      std::lock_guard l(mu_);
      st_.state = end;
      st_.message = msg;
    }
    post_status();
    emit finished();
  });
  return true;
}

bool RunController::hook(qint64 step, qint64 total, int mb, int nmb, double loss) {
  std::unique_lock l(mu_);
  st_.step = step;
  st_.total = total;
  st_.microbatch = mb;
  st_.num_microbatches = nmb;
  st_.loss = loss;
  if (mb < 0) ++st_.steps_done;
  const bool announce = !announced_;
  announced_ = true;
  if (advance_ == 1 || (advance_ == 2 && mb < 0)) {
    advance_ = 0;
    paused_ = true;
  }
  st_.state = paused_ && !stop_ ? RunStatus::State::Paused : RunStatus::State::Running;
  const QString path = trace_path_;
  l.unlock();
  if (announce) emit traceStarted(path);
  post_status();
  l.lock();
  cv_.wait(l, [&] { return stop_ || !paused_ || advance_ != 0; });
  if (stop_) return false;
  st_.state = RunStatus::State::Running;
  return true;
}

void RunController::pause() {
  std::lock_guard l(mu_);
  paused_ = true;
  advance_ = 0;
}

void RunController::resume() {
  {
    std::lock_guard l(mu_);
    paused_ = false;
    advance_ = 0;
  }
  cv_.notify_all();
  post_status();
}

void RunController::stepMicroBatch() {
  {
    std::lock_guard l(mu_);
    paused_ = true;
    advance_ = 1;
  }
  cv_.notify_all();
}

void RunController::stepOptimizer() {
  {
    std::lock_guard l(mu_);
    paused_ = true;
    advance_ = 2;
  }
  cv_.notify_all();
}

void RunController::stop() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

void RunController::post_status() { emit statusChanged(); }

}  // namespace mxsim::inspector
