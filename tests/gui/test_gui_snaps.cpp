// De-oscillation snaps in the weight oscillation view, on the tests' default trace (the
// simulator's tiny run: de-oscillation every 2 steps from step 1, snapshots of fc1 at steps 2
// and 4, the first eight elements of expert 0 watched): an element's snap marker on its
// timeline stands at the same optimizer step as the layer's snap bar of that window end.
//
// When a snap is recorded (docs/trace-format.md, "Element and block maps"): the layer's
// /layers/<l>/deosc/snapped at row r counts the elements snapped at row r's step (its window
// end), while the per-element counts (the osc/snaps map, watch/snaps) are the state as of the
// row, before its step: at row r they hold the snaps of rows 0..r-1. So an element whose count
// grows from row r to row r + 1 snapped at row r, the step /train/step[r].
#include <QTest>

#include "gui_test_util.hpp"
#include "mxsim/trace/reader.hpp"
#include "plot_util.hpp"
#include "state.hpp"
#include "view_osc.hpp"

using namespace mxsim::inspector;

class GuiSnaps : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString trace_;
  std::vector<int64_t> step_, snapped_;  // /train/step and /layers/fc1/deosc/snapped per row

  static QCPGraph* graph_named(QCustomPlot* p, const QString& name) {
    for (int i = 0; i < p->graphCount(); ++i)
      if (p->graph(i)->name() == name) return p->graph(i);
    return nullptr;
  }
  static std::vector<double> keys(const QCPGraph* g, bool positive_only = false) {
    std::vector<double> k;
    for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it)
      if (!positive_only || it->value > 0) k.push_back(it->key);
    return k;
  }
  /// The layer's snap bars (window ends with snaps) on the flip plot: their steps.
  static std::vector<double> bar_steps(OscView& v) {
    const QCPGraph* bars = graph_named(v.flipPlot(), "de-osc snapped (window ends)");
    return bars ? keys(bars, true) : std::vector<double>{};
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    trace_ = dir_.filePath("tiny.h5");
    QCOMPARE(guitest::write_trace(guitest::tiny(), trace_).steps, 6);
    mxsim::trace::Reader r(trace_.toStdString());
    step_ = r.read_series<int64_t>("/train/step");
    snapped_ = r.read_series<int64_t>("/layers/fc1/deosc/snapped");
  }

  // A watched element (every step): find its first snap in the trace, row r, and check that the
  // view marks it at /train/step[r], where the layer's bar of that window end stands.
  void watchedElementSnapAtTheLayersSnapStep() {
    mxsim::trace::Reader r(trace_.toStdString());
    const auto watched = r.read_series<int64_t>("/layers/fc1/watch/element", 0, 1);
    const uint64_t W = watched.size(), k = r.steps_completed();
    const auto counts = r.read_series<uint32_t>("/layers/fc1/watch/snaps");  // [k, W]
    int64_t elem = -1, row = -1;
    for (uint64_t j = 0; j < W && elem < 0; ++j)
      for (uint64_t s = 0; s + 1 < k; ++s)
        if (counts[(s + 1) * W + j] > counts[s * W + j]) {
          elem = watched[j];
          row = int64_t(s);
          break;
        }
    QVERIFY2(elem >= 0, "no watched element of fc1 snaps in the tiny run");
    QVERIFY2(snapped_.at(size_t(row)) > 0, qPrintable(QString("the layer snapped no element at row %1").arg(row)));
    const double want = double(step_.at(size_t(row)));

    InspectorState st;
    TraceDocument* d = st.traces()->add(trace_);
    QTRY_VERIFY_WITH_TIMEOUT(d->state() == TraceDocument::State::Ready, 20000);
    st.setPrimary(d);
    st.setLayer("fc1");
    OscView v(&st);
    v.resize(1100, 750);
    v.show();
    const int K = int(d->meta().layer("fc1")->shape[2]), N = int(d->meta().layer("fc1")->shape[1]);
    st.setExpert(int(elem / (int64_t(N) * K)));
    st.setElement(int(elem / K % N), int(elem % K));
    st.setStep(int64_t(k) - 1);
    QVERIFY(guitest::wait_view(&v));
    QVERIFY(v.timeline() && v.timeline()->every_step);
    const QCPGraph* marks = graph_named(v.timelinePlot(), "de-osc snap of this element");
    QVERIFY(marks);
    const std::vector<double> at = keys(marks);
    QVERIFY2(!at.empty() && at.front() == want,
             qPrintable(QString("first snap marker at step %1, the trace says step %2").arg(at.empty() ? -1 : at.front()).arg(want)));
    const std::vector<double> bars = bar_steps(v);
    for (double x : at)
      QVERIFY2(std::find(bars.begin(), bars.end(), x) != bars.end(),
               qPrintable(QString("snap marker at step %1 has no layer snap bar there").arg(x)));
  }

  // An element that is not watched: its timeline has the snapshot rows only (1 and 3), and its
  // snap count grows between them: the snap happened at one of rows 1..2, at a window end with
  // snaps (the layer's series says which), and the marker stands at that step.
  void snapshotElementSnapAtTheLayersSnapStep() {
    mxsim::trace::Reader r(trace_.toStdString());
    const auto& in = r.info("/snap/fc1/osc/snaps");
    QCOMPARE(in.snapshot_steps, (std::vector<int64_t>{1, 3}));
    const auto a = r.read_snapshot<uint32_t>("/snap/fc1/osc/snaps", 1), b = r.read_snapshot<uint32_t>("/snap/fc1/osc/snaps", 3);
    const uint64_t N = in.row_shape[1], K = in.row_shape[2];
    int64_t elem = -1;
    for (uint64_t i = 8; i < a.size() && elem < 0; ++i)  // past the watched elements 0..7
      if (b[i] > a[i]) elem = int64_t(i);
    QVERIFY2(elem >= 0, "no element of fc1 snaps between the snapshot rows");
    // the window ends with snaps among rows 1..2 (snaps of rows 1 and 2 reach row 3's map)
    int64_t row = -1;
    for (int64_t s = 1; s <= 2; ++s)
      if (snapped_.at(size_t(s)) > 0) row = s;
    QVERIFY(row >= 0);
    const double want = double(step_.at(size_t(row)));

    InspectorState st;
    TraceDocument* d = st.traces()->add(trace_);
    QTRY_VERIFY_WITH_TIMEOUT(d->state() == TraceDocument::State::Ready, 20000);
    st.setPrimary(d);
    st.setLayer("fc1");
    OscView v(&st);
    v.resize(1100, 750);
    v.show();
    st.setExpert(int(uint64_t(elem) / (N * K)));
    st.setElement(int(uint64_t(elem) / K % N), int(uint64_t(elem) % K));
    st.setStep(3);
    QVERIFY(guitest::wait_view(&v));
    QVERIFY(v.timeline() && !v.timeline()->every_step);
    const QCPGraph* marks = graph_named(v.timelinePlot(), "de-osc snap of this element");
    QVERIFY(marks);
    QCOMPARE(keys(marks), (std::vector<double>{want}));
    const std::vector<double> bars = bar_steps(v);
    QVERIFY(std::find(bars.begin(), bars.end(), want) != bars.end());
  }
};

QTEST_MAIN(GuiSnaps)
#include "test_gui_snaps.moc"
