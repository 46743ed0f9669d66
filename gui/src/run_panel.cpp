#include "run_panel.hpp"

#include <QDateTime>
#include <QDir>
#include <QFileDialog>
#include <QFormLayout>
#include <QGridLayout>
#include <QStandardItemModel>
#include <QStandardPaths>
#include <QThread>
#include <QToolButton>
#include <QVBoxLayout>

namespace mxsim::inspector {

RunPanel::RunPanel(QWidget* parent) : QWidget(parent) {
  auto* l = new QVBoxLayout(this);
  l->setContentsMargins(4, 4, 4, 4);
  auto* f = new QFormLayout;
  auto* cfgrow = new QHBoxLayout;
  config_ = new QLineEdit(this);
  config_->setPlaceholderText("embedded default (examples/default.toml)");
  auto* browse = new QToolButton(this);
  browse->setText("...");
  connect(browse, &QToolButton::clicked, this, [this] {
    const QString p = QFileDialog::getOpenFileName(this, "Run config", {}, "TOML (*.toml);;All files (*)");
    if (!p.isEmpty()) config_->setText(p);
  });
  cfgrow->addWidget(config_);
  cfgrow->addWidget(browse);
  f->addRow("Config:", cfgrow);
  sets_ = new QPlainTextEdit(this);
  sets_->setPlaceholderText("section.key=value per line, e.g.\nrun.max_steps=20");
  sets_->setMaximumHeight(60);
  f->addRow("--set:", sets_);
  backend_ = new QComboBox(this);
  QString why;
  const QStringList bes = available_train_backends(&why);
  for (const QString& b : bes) backend_->addItem(b);
  if (!bes.contains("hip")) {
    backend_->addItem("hip (GPU)");
    auto* m = qobject_cast<QStandardItemModel*>(backend_->model());
    m->item(backend_->count() - 1)->setEnabled(false);
    m->item(backend_->count() - 1)->setToolTip(why);
  }
  f->addRow("Backend:", backend_);
  threads_ = new QSpinBox(this);
  threads_->setRange(1, std::max(1, QThread::idealThreadCount()));
  threads_->setValue(std::max(1, QThread::idealThreadCount() / 2));
  f->addRow("Threads:", threads_);
  trace_ = new QLineEdit(this);
  trace_->setPlaceholderText("a new file in the temp directory");
  f->addRow("Trace:", trace_);
  l->addLayout(f);
  auto* g = new QGridLayout;
  auto mk = [this](const QString& text, const QString& tip) {
    auto* a = new QAction(text, this);
    a->setToolTip(tip);
    return a;
  };
  start_ = mk("Start run", "Start mxsim::sim::train on a worker thread; the views follow its trace");
  pause_ = mk("Pause", "Pause after the current micro-batch");
  step_mb_ = mk("Step micro-batch", "Run one micro-batch (or the optimizer step that ends the step), then pause");
  step_opt_ = mk("Step optimizer step", "Run to the end of the current optimizer step (its trace row), then pause");
  resume_ = mk("Resume", "Run on");
  stop_ = mk("Stop", "Stop after the current micro-batch; the trace keeps every completed step");
  const QList<QAction*> acts = {start_, pause_, step_mb_, step_opt_, resume_, stop_};
  for (int i = 0; i < acts.size(); ++i) {
    auto* b = new QToolButton(this);
    b->setDefaultAction(acts[i]);
    b->setToolButtonStyle(Qt::ToolButtonTextOnly);
    b->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
    g->addWidget(b, i / 2, i % 2);
  }
  l->addLayout(g);
  status_ = new QLabel("idle", this);
  status_->setWordWrap(true);
  l->addWidget(status_);
  l->addStretch(1);

  connect(start_, &QAction::triggered, this, [this] {
    RunSettings s = settings();
    if (s.trace_path.isEmpty()) {
      s.trace_path = QDir(QStandardPaths::writableLocation(QStandardPaths::TempLocation))
                         .filePath(QString("mxsim-run-%1.h5").arg(QDateTime::currentDateTime().toString("yyyyMMdd-HHmmss")));
      trace_->setText(s.trace_path);
    }
    ctl_.start(s);
    updateStatus();
  });
  connect(pause_, &QAction::triggered, &ctl_, &RunController::pause);
  connect(step_mb_, &QAction::triggered, &ctl_, &RunController::stepMicroBatch);
  connect(step_opt_, &QAction::triggered, &ctl_, &RunController::stepOptimizer);
  connect(resume_, &QAction::triggered, &ctl_, &RunController::resume);
  connect(stop_, &QAction::triggered, &ctl_, &RunController::stop);
  connect(&ctl_, &RunController::statusChanged, this, &RunPanel::updateStatus, Qt::QueuedConnection);
  connect(&ctl_, &RunController::traceStarted, this, &RunPanel::traceStarted, Qt::QueuedConnection);
  updateStatus();
}

void RunPanel::addActions(QMenu* m) {
  for (QAction* a : {start_, pause_, step_mb_, step_opt_, resume_, stop_}) m->addAction(a);
  pause_->setShortcut(QKeySequence("Ctrl+P"));
  step_mb_->setShortcut(QKeySequence("Ctrl+M"));
  step_opt_->setShortcut(QKeySequence("Ctrl+T"));
  resume_->setShortcut(QKeySequence("Ctrl+R"));
}

void RunPanel::setSettings(const RunSettings& s) {
  config_->setText(s.config_path);
  sets_->setPlainText(s.overrides.join('\n'));
  trace_->setText(s.trace_path);
  threads_->setValue(s.threads);
  const int i = backend_->findText(s.backend);
  if (i >= 0) backend_->setCurrentIndex(i);
}

RunSettings RunPanel::settings() const {
  RunSettings s;
  s.config_path = config_->text().trimmed();
  s.overrides = sets_->toPlainText().split('\n', Qt::SkipEmptyParts);
  s.backend = backend_->currentText();
  s.trace_path = trace_->text().trimmed();
  s.threads = threads_->value();
  return s;
}

void RunPanel::updateStatus() {
  const RunStatus s = ctl_.status();
  using S = RunStatus::State;
  const bool running = s.state == S::Running, paused = s.state == S::Paused, active = running || paused;
  start_->setEnabled(!active);
  pause_->setEnabled(running);
  step_mb_->setEnabled(active);
  step_opt_->setEnabled(active);
  resume_->setEnabled(paused);
  stop_->setEnabled(active);
  for (QWidget* w : std::initializer_list<QWidget*>{config_, sets_, backend_, threads_, trace_}) w->setEnabled(!active);
  QString where = s.total > 0 ? QString("step %1/%2, %3").arg(s.step).arg(s.total).arg(
                                    s.microbatch >= 0 ? QString("micro-batch %1/%2 done (CE so far %3)")
                                                            .arg(s.microbatch + 1)
                                                            .arg(s.num_microbatches)
                                                            .arg(s.loss, 0, 'g', 4)
                                                      : QString("optimizer step done (loss %1)").arg(s.loss, 0, 'g', 4))
                              : QString();
  switch (s.state) {
    case S::Idle: status_->setText("idle"); break;
    case S::Running: status_->setText("running " + where); break;
    case S::Paused: status_->setText("<b>paused</b> after " + where); break;
    case S::Finished: status_->setText("finished: " + s.message); break;
    case S::Stopped: status_->setText("stopped: " + s.message); break;
    case S::Failed: status_->setText("<span style='color:#a00'>failed: " + s.message.toHtmlEscaped() + "</span>"); break;
  }
}

}  // namespace mxsim::inspector
