// Run mode panel: config, --set overrides, backend, trace path; start,
// pause, step a micro-batch, step an optimizer step, resume, stop; status.
#pragma once
#include <QAction>
#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QWidget>

#include "run_controller.hpp"

namespace mxsim::inspector {

class RunPanel : public QWidget {
  Q_OBJECT
 public:
  explicit RunPanel(QWidget* parent = nullptr);
  /// Adds the run actions (start, pause, step, resume, stop) to a menu.
  void addActions(QMenu* m);
  RunController* controller() { return &ctl_; }
  /// Fills the form (tests, command line).
  void setSettings(const RunSettings& s);
  RunSettings settings() const;

 signals:
  void traceStarted(const QString& path);

 private:
  void updateStatus();
  RunController ctl_;
  QLineEdit *config_ = nullptr, *trace_ = nullptr;
  QPlainTextEdit* sets_ = nullptr;
  QComboBox* backend_ = nullptr;
  QSpinBox* threads_ = nullptr;
  QLabel* status_ = nullptr;
  QAction *start_ = nullptr, *pause_ = nullptr, *step_mb_ = nullptr, *step_opt_ = nullptr, *resume_ = nullptr, *stop_ = nullptr;
};

}  // namespace mxsim::inspector
