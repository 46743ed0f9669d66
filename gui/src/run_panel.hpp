#pragma once
#include <QMenu>
#include <QWidget>
namespace mxsim::inspector {
class RunPanel : public QWidget {
  Q_OBJECT
 public:
  using QWidget::QWidget;
  void addActions(QMenu*) {}
  bool busy() const { return false; }
 signals:
  void traceStarted(const QString& path);
};
}
