// What a trace shows the moment it opens, before any click (issue "a newcomer's first ten
// minutes"): the window opens at the last step that has the maps, names where the maps are,
// and shows the first watched element's timeline; the legends of every plot stay off the data.
// Expected values come from the config the test writes (trace.snapshot_steps,
// trace.watch_elements and the model's fc1 shape), not from the window.
#include <QTest>

#include "gui_test_util.hpp"
#include "main_window.hpp"
#include "plot_util.hpp"
#include "render.hpp"
#include "view_accum.hpp"
#include "view_osc.hpp"

using namespace mxsim::inspector;

namespace {
// fc1 of the tiny run: W [G=4 experts, N=d_ff 64, K=d_model 32]; snapshots at global steps 2
// and 4 (guitest::tiny_overrides), which in a fresh run are trace rows 1 and 3.
constexpr int kN = 64, kK = 32;
constexpr qint64 kLastMapRow = 3;  // step 4
// an element of expert 2 (n 5, k 7): flat [G, N, K] index (2 * N + 5) * K + 7
constexpr int kG2 = 2, kN2 = 5, kK2 = 7;
constexpr int kFlat2 = (kG2 * kN + kN2) * kK + kK2;

/// Every visible note of the plots of `v` ("" when none), one per line.
QString notes_of(View* v) {
  QStringList ns;
  for (QCustomPlot* p : v->findChildren<QCustomPlot*>())
    if (p->isVisible() && plot_note(p) && plot_note(p)->visible()) ns << plot_note(p)->text();
  return ns.join("\n");
}
}  // namespace

class GuiOpen : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString trace_, trace_g2_;

  /// A window of its default size (as the program opens it) with `path` open, nothing clicked.
  static bool open(MainWindow& w, const QString& path) {
    w.show();
    w.openTrace(path);
    if (!wait_idle(w, 20000)) return false;
    TraceDocument* d = w.state()->primary();
    return d && d->state() == TraceDocument::State::Ready;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    trace_ = dir_.filePath("tiny.h5");
    QCOMPARE(guitest::write_trace(guitest::tiny(), trace_).steps, 6);
    trace_g2_ = dir_.filePath("tiny_g2.h5");
    QCOMPARE(guitest::write_trace(guitest::tiny({"trace.watch_elements=[" + std::to_string(kFlat2) + "]"}), trace_g2_).steps, 6);
  }

  // The default trace opened at step 1 while its maps exist only at the snapshot steps: three of
  // the four panes of the oscillation and accumulation views said "No element map at step 1".
  // It opens at the last snapshot step instead, and the scrubber's label says where the maps are.
  void opensAtTheLastStepWithMaps() {
    MainWindow w;
    QVERIFY(open(w, trace_));
    QCOMPARE(w.state()->layer(), QString("fc1"));
    QCOMPARE(w.state()->step(), kLastMapRow);
    QCOMPARE(w.stepSpin()->text(), QString("4"));
    QVERIFY2(w.stepLabel().contains("fc1 maps at steps 2, 4"), qPrintable(w.stepLabel()));
    w.showView("osc");
    QVERIFY(wait_idle(w, 20000));
    auto* osc = qobject_cast<OscView*>(w.view("osc"));
    QVERIFY(osc->map());
    QCOMPARE(osc->map()->N, kN);
    QCOMPARE(osc->map()->K, kK);
    QVERIFY2(!notes_of(osc).contains("No element map"), qPrintable(notes_of(osc)));
    w.showView("accum");
    QVERIFY(wait_idle(w, 20000));
    auto* acc = qobject_cast<AccumView*>(w.view("accum"));
    QVERIFY2(acc->point(), qPrintable(notes_of(acc)));
    QCOMPARE(int(acc->point()->contrib.size()), 4);  // batch.num_microbatches
    QVERIFY2(!notes_of(acc).contains("No micro-batch contributions"), qPrintable(notes_of(acc)));
    w.showView("quant");
    QVERIFY(wait_idle(w, 20000));
    QVERIFY2(!notes_of(w.view("quant")).contains("No per-block map"), qPrintable(notes_of(w.view("quant"))));
  }

  // The timeline pane said "Click an element of the map" until the user did: the layer's first
  // watched element (trace.watch_elements, by default flat indices 0..7: expert 0, row 0) is
  // selected on open, so its every-step timeline is drawn, also at a step without maps.
  void watchedElementTimelineBeforeAnyClick() {
    MainWindow w;
    QVERIFY(open(w, trace_));
    QCOMPARE(w.state()->expert(), 0);
    QCOMPARE(w.state()->elemRow(), 0);
    QCOMPARE(w.state()->elemCol(), 0);
    w.state()->setStep(0);  // step 1: no snapshot, the watched element's series has every step
    w.showView("osc");
    QVERIFY(wait_idle(w, 20000));
    auto* osc = qobject_cast<OscView*>(w.view("osc"));
    QVERIFY2(osc->timeline(), qPrintable(notes_of(osc)));
    QVERIFY(osc->timeline()->every_step);
    QCOMPARE(osc->timeline()->steps.size(), size_t(6));
    QVERIFY(osc->timelinePlot()->graphCount() > 0);
    QVERIFY2(plot_title(osc->timelinePlot()).startsWith("fc1 expert 0, element (n 0, k 0)"),
             qPrintable(plot_title(osc->timelinePlot())));
    // another layer and back: the pick was cleared with the layer, the watched element returns
    w.state()->setLayer("fc2");
    w.state()->setLayer("fc1");
    QCOMPARE(w.state()->elemRow(), 0);
    QCOMPARE(w.state()->elemCol(), 0);
    // a pick of the user's stays
    w.state()->setElement(9, 3);
    w.state()->setExpert(1);
    QCOMPARE(w.state()->elemRow(), 9);
    QCOMPARE(w.state()->elemCol(), 3);
  }

  // Watched elements only in expert 2: the window opens on that expert and element.
  void watchedElementOfAnotherExpert() {
    MainWindow w;
    QVERIFY(open(w, trace_g2_));
    QCOMPARE(w.state()->expert(), kG2);
    QCOMPARE(w.state()->elemRow(), kN2);
    QCOMPARE(w.state()->elemCol(), kK2);
    w.showView("osc");
    QVERIFY(wait_idle(w, 20000));
    auto* osc = qobject_cast<OscView*>(w.view("osc"));
    QVERIFY(osc->timeline() && osc->timeline()->every_step);
    // expert 0 holds no watched element: the automatic pick goes, the view picks its own element
    w.state()->setExpert(0);
    QCOMPARE(w.state()->elemRow(), -1);
  }
};

QTEST_MAIN(GuiOpen)
#include "test_gui_open.moc"
