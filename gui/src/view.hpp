// Base of every inspector view: follows InspectorState, loads its data
// through the trace documents (asynchronously), knows when it is up to date,
// exports itself as PNG and its data as CSV.
#pragma once
#include <QElapsedTimer>
#include <QLabel>
#include <QTextStream>
#include <QWidget>
#include <functional>

#include "state.hpp"

namespace mxsim::inspector {

class View : public QWidget {
  Q_OBJECT
 public:
  View(InspectorState* st, QWidget* parent = nullptr);

  virtual QString id() const = 0;     ///< file stem for exports: "curves", "quant", ...
  virtual QString title() const = 0;  ///< tab text

  /// The data this view shows for the current selection, as CSV (header row first).
  virtual void writeCsv(QTextStream& out) const = 0;

  /// Loads outstanding or a refresh scheduled.
  bool busy() const { return pending_ > 0 || scheduled_; }
  /// Milliseconds from the last refresh request to the last plot update.
  double lastUpdateMs() const { return last_ms_; }
  /// The trace row (InspectorState::step) the view last drew: of the last refresh whose loads
  /// all arrived, or of the last instantUpdate; -1 before the first.
  qint64 shownRow() const { return shown_row_; }
  /// Renders the whole view (all its plots and tables) into a PNG of its current size.
  bool exportPng(const QString& path) const;
  bool exportCsv(const QString& path) const;

  /// Re-reads what the current selection needs (scheduled: many changes, one refresh).
  void scheduleRefresh();
  /// An update that needs no data (e.g. moving the step marker): runs f now, timed like a refresh.
  void instantUpdate(const std::function<void()>& f);

 signals:
  /// Every load of a refresh has arrived and the plots were redrawn.
  void updated();

 protected:
  /// Issues the loads for the current selection (via load()).
  virtual void refresh() = 0;
  /// Called once all loads of a refresh have arrived, before updated(): redraw here.
  virtual void present() {}
  void showEvent(QShowEvent* e) override;

  /// doc->fetch with bookkeeping: counts the load, reports errors through `fail`
  /// (or the view's note when none), emits updated() when the last load lands.
  template <class T, class F>
  void load(TraceDocument* doc, const QString& key, const QString& lane, F compute, std::function<void(const T&)> done,
            std::function<void(const QString&)> fail = {}) {
    ++pending_;
    const quint64 gen = gen_;
    doc->fetch<T>(
        key, lane, std::move(compute), this,
        [this, gen, d = std::move(done)](const T& v) {
          if (gen != gen_) return;  // an older refresh's data
          d(v);
          loaded();
        },
        [this, gen, f = std::move(fail)](const QString& e) {
          if (gen != gen_) return;
          if (f) f(e);
          loaded();
        });
  }

  InspectorState* st_;

 private:
  void loaded();
  void runRefresh();
  int pending_ = 0;
  quint64 gen_ = 0;
  qint64 refresh_row_ = -1, shown_row_ = -1;
  bool scheduled_ = false, dirty_ = true;
  QElapsedTimer timer_;
  double last_ms_ = 0;
};

/// Why a trace lacks a dataset that exists from trace format `since` on: "this trace is format
/// F; <what> come with trace format `since` (docs/trace-format.md)" for an older trace, else
/// "<what> are written for trace.snapshot_layers at trace.snapshot_steps" (the run did not
/// snapshot the layer). One sentence, no trailing period.
QString missing_dataset_reason(const TraceMeta& m, int since, const QString& what);
/// How a trace of m's producer gets snapshots: the simulator's setting, or that a recorder's
/// trace has none yet.
QString snapshot_setting(const TraceMeta& m);

/// What every view shows as "step": the global optimizer step of trace row `row` of `d`
/// (/train/step, 1-based; TraceMeta::global), as the plots' axes show steps. The row itself
/// when `d` is not open.
int64_t step_of(const TraceDocument* d, int64_t row);
/// The global optimizer steps of trace rows `rows` (a snapshot's steps attribute), comma-separated:
/// the first `max`, then "...".
QString steps_list(const TraceDocument* d, const std::vector<int64_t>& rows, size_t max = 12);

/// CSV field quoting (RFC 4180).
QString csv_field(const QString& s);
/// Round-trip text of a double ("%.17g"), "nan"/"inf" for non-finite values.
QString csv_num(double v);

}  // namespace mxsim::inspector
