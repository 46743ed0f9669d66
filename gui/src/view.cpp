#include "view.hpp"

#include <QFile>
#include <QPixmap>
#include <QShowEvent>
#include <QTimer>
#include <cmath>

namespace mxsim::inspector {

View::View(InspectorState* st, QWidget* parent) : QWidget(parent), st_(st) {}

void View::scheduleRefresh() {
  dirty_ = true;
  if (scheduled_) return;
  if (!isVisible()) return;  // lazy: hidden views read nothing until shown
  scheduled_ = true;
  timer_.start();
  QTimer::singleShot(0, this, &View::runRefresh);
}

void View::instantUpdate(const std::function<void()>& f) {
  if (!isVisible() || busy()) {
    scheduleRefresh();
    return;
  }
  timer_.start();
  f();
  shown_row_ = st_->step();
  last_ms_ = double(timer_.nsecsElapsed()) * 1e-6;
  emit updated();
}

void View::runRefresh() {
  scheduled_ = false;
  dirty_ = false;
  ++gen_;
  refresh_row_ = st_->step();
  pending_ = 1;  // guard: loads answered from the cache complete synchronously
  refresh();
  loaded();
}

void View::loaded() {
  if (pending_ > 0 && --pending_ == 0) {
    shown_row_ = refresh_row_;
    present();
    last_ms_ = double(timer_.nsecsElapsed()) * 1e-6;
    emit updated();
  }
}

void View::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  if (dirty_) scheduleRefresh();
}

bool View::exportPng(const QString& path) const {
  const QPixmap pm = const_cast<View*>(this)->grab();
  return !pm.isNull() && pm.save(path, "PNG");
}

bool View::exportCsv(const QString& path) const {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) return false;
  QTextStream out(&f);
  writeCsv(out);
  out.flush();
  return f.error() == QFile::NoError;
}

int64_t step_of(const TraceDocument* d, int64_t row) {
  return d && d->state() == TraceDocument::State::Ready && row >= 0 ? d->meta().global(uint64_t(row)) : row;
}

QString steps_list(const TraceDocument* d, const std::vector<int64_t>& rows, size_t max) {
  QStringList ss;
  for (size_t i = 0; i < rows.size() && i < max; ++i) ss << QString::number(step_of(d, rows[i]));
  if (rows.size() > max) ss << "...";
  return ss.join(", ");
}

QString csv_field(const QString& s) {
  if (!s.contains(',') && !s.contains('"') && !s.contains('\n')) return s;
  QString q = s;
  q.replace("\"", "\"\"");
  return "\"" + q + "\"";
}

QString csv_num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return QString::number(v, 'g', 17);
}

QString missing_dataset_reason(const TraceMeta& m, int since, const QString& what) {
  if (m.format < since)
    return QString("this trace is format %1; %2 come with trace format %3 (docs/trace-format.md)")
        .arg(m.format)
        .arg(what)
        .arg(since);
  if (m.prov.producer != trace::kProducerSimulator) return QString("%1: %2").arg(what, snapshot_setting(m));
  return QString("%1 are written for trace.snapshot_layers at trace.snapshot_steps").arg(what);
}

QString snapshot_setting(const TraceMeta& m) {
  return m.prov.producer == trace::kProducerSimulator ? QString("set trace.snapshot_layers")
                                                      : QString("pass mxsim.torch.Recorder snapshot_steps");
}

}  // namespace mxsim::inspector
