// One step convention everywhere a user reads a step: the global optimizer step (/train/step),
// as the plots' axes show it. On a resumed run's trace the simulator writes here, trace row r
// holds global step 4 + r (resumed after step 3; docs/trace-format.md, "Datasets written by
// `mxsim train`": a run resumed after step c stores step n at row n - c - 1), so a row shown as
// a step is off by 4 and cannot pass for the step by accident. Snapshots at global step 5 only
// (trace.snapshot_steps = [5]) fall on row 1.
#include <QFile>
#include <QLineEdit>
#include <QSpinBox>
#include <QTest>

#include "gui_test_util.hpp"
#include "main_window.hpp"
#include "plot_util.hpp"
#include "render.hpp"
#include "view_accum.hpp"
#include "view_data.hpp"
#include "view_osc.hpp"
#include "view_quant.hpp"

using namespace mxsim::inspector;

class GuiSteps : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString trace_;

  static QString note_of(QCustomPlot* p) {
    const QCPItemText* n = plot_note(p);
    return n && n->visible() ? n->text() : QString();
  }

  static QString csv_of(View* v) {
    QString s;
    QTextStream out(&s);
    v->writeCsv(out);
    return s;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    trace_ = dir_.filePath("resumed.h5");
    QCOMPARE(guitest::write_resumed_trace(guitest::tiny({"trace.snapshot_steps=[5]"}), 3, trace_).steps, 3);
  }

  void theTraceHoldsSteps4To6() {
    InspectorState st;
    TraceDocument* d = st.traces()->add(trace_);
    QTRY_VERIFY_WITH_TIMEOUT(d->state() == TraceDocument::State::Ready, 20000);
    QCOMPARE(d->meta().global_step, (std::vector<int64_t>{4, 5, 6}));
    QCOMPARE(d->meta().layer("fc1")->snapshot_steps, (std::vector<int64_t>{1}));
    QCOMPARE(d->meta().row_of(5), int64_t(1));
    QCOMPARE(d->meta().row_of(3), int64_t(-1));
    QCOMPARE(d->meta().row_of(7), int64_t(-1));
  }

  // At row 0 (step 4) no view has its snapshot maps: every message names step 4 and the
  // snapshot step 5; at row 1 (step 5) the titles say step 5.
  void messagesAndTitlesNameTheGlobalStep() {
    MainWindow w;
    w.resize(1280, 800);
    w.show();
    w.openTrace(trace_);
    QVERIFY(wait_idle(w, 20000));
    InspectorState* st = w.state();
    st->setLayer("fc1");
    st->setOperand("w");
    st->setStep(0);
    QVERIFY(wait_idle(w, 20000));
    // the scrubber: the spin box shows the step, the label the row
    QCOMPARE(w.stepSpin()->text(), QString("4"));
    QVERIFY2(w.stepLabel().startsWith("trace row 0 of 3 complete steps (optimizer steps 4 to 6)"), qPrintable(w.stepLabel()));

    auto* q = qobject_cast<QuantView*>(w.view("quant"));
    w.showView("quant");
    q->setMetric(QuantView::Metric::Sqnr);
    QVERIFY(wait_idle(w, 20000));
    QCOMPARE(note_of(q->mapPlot()), QString("No per-block map at step 4.\nMaps exist at steps 5."));
    QVERIFY2(plot_title(q->histogramPlot()) == "Block scale exponents of fc1.w at step 4", qPrintable(plot_title(q->histogramPlot())));
    QVERIFY2(csv_of(q).contains("\nsummary,fc1,w,0,4,mse,"), qPrintable(csv_of(q).left(200)));

    auto* o = qobject_cast<OscView*>(w.view("osc"));
    w.showView("osc");
    o->setMetric(0);
    QVERIFY(wait_idle(w, 20000));
    QCOMPARE(note_of(o->mapPlot()), QString("No element map at step 4.\nSnapshots exist at steps 5."));
    QVERIFY2(plot_title(o->mapPlot()).endsWith("at step 4"), qPrintable(plot_title(o->mapPlot())));

    auto* a = qobject_cast<AccumView*>(w.view("accum"));
    w.showView("accum");
    QVERIFY(wait_idle(w, 20000));
    QCustomPlot* amap = nullptr;
    for (QCustomPlot* p : a->findChildren<QCustomPlot*>())
      if (plot_title(p).startsWith("main_grad of")) amap = p;
    QVERIFY(amap);
    QCOMPARE(note_of(amap), QString("No micro-batch contributions at step 4.\nSnapshots of fc1 exist at steps 5."));
    QCOMPARE(plot_title(amap), QString("main_grad of fc1 expert 0 at step 4 (after all micro-batches)"));

    auto* dv = qobject_cast<DataView*>(w.view("data"));
    w.showView("data");
    dv->setDataset("/snap/fc1/master");
    QVERIFY(wait_idle(w, 20000));
    QCOMPARE(dv->infoText(), QString("/snap/fc1/master: no snapshot at step 4 (snapshot steps: 5)"));
    // a scalar series' column: its rows are labelled by their optimizer steps
    dv->setDataset("/train/loss");
    QVERIFY(wait_idle(w, 20000));
    QVERIFY2(dv->infoText().contains("all 3 steps"), qPrintable(dv->infoText()));
    for (int r = 0; r < 3; ++r) QCOMPARE(dv->array().headerData(r, Qt::Vertical, Qt::DisplayRole).toLongLong(), qint64(4 + r));

    // step 5 (row 1): the snapshot; the titles name step 5
    st->setStep(1);
    w.showView("quant");
    QVERIFY(wait_idle(w, 20000));
    QVERIFY2(plot_title(q->mapPlot()).startsWith("Block SQNR (dB) of fc1.w, step 5"), qPrintable(plot_title(q->mapPlot())));
    w.showView("accum");
    QVERIFY(wait_idle(w, 20000));
    QCOMPARE(plot_title(amap), QString("main_grad of fc1 expert 0 at step 5 (after all micro-batches)"));
    QCOMPARE(w.stepSpin()->text(), QString("5"));
  }

  // Typing a step into the scrubber's spin box selects the row that holds it.
  // --step names the global step (step 5 = row 1 of this trace), --row the trace row; a step
  // the trace does not hold, or both options, is a usage error naming the steps it holds.
  void renderStepIsTheGlobalStep() {
    RenderOptions o;
    o.traces = {trace_};
    o.layer = "fc1";
    o.op = "w";
    o.views = {"quant"};
    o.out_dir = dir_.filePath("step5");
    o.step = 5;
    QCOMPARE(render(o), 0);
    QFile idx(o.out_dir + "/index.html");
    QVERIFY(idx.open(QIODevice::ReadOnly));
    const QString html = QString::fromUtf8(idx.readAll());
    QVERIFY2(html.contains("step 5") && html.contains("row 1"), qPrintable(html.left(2000)));
    o.out_dir = dir_.filePath("row1");
    o.step = -1;
    o.row = 1;
    QCOMPARE(render(o), 0);
    QFile idx2(o.out_dir + "/index.html");
    QVERIFY(idx2.open(QIODevice::ReadOnly));
    QCOMPARE(QString::fromUtf8(idx2.readAll()).replace("row1", "step5"), html);  // the same page
    o.out_dir = dir_.filePath("bad");
    o.row = -1;
    o.step = 2;  // the resumed trace starts at step 4
    QCOMPARE(render(o), 2);
    o.step = 5;
    o.row = 1;
    QCOMPARE(render(o), 2);
  }

  void typingAStepSelectsItsRow() {
    MainWindow w;
    w.resize(1280, 800);
    w.show();
    w.openTrace(trace_);
    QVERIFY(wait_idle(w, 20000));
    QSpinBox* sp = w.stepSpin();
    sp->setFocus();
    sp->selectAll();
    QTest::keyClicks(sp, "6");
    QTest::keyClick(sp, Qt::Key_Return);
    QCOMPARE(w.state()->step(), qint64(2));  // step 6 = row 2
    QCOMPARE(sp->text(), QString("6"));
  }
};

QTEST_MAIN(GuiSteps)
#include "test_gui_steps.moc"
