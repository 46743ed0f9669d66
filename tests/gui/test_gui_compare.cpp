// The Compare view on traces the simulator writes here: every dataset name of its table is
// shown in full (no eliding; the tooltip carries it too), its steps are global optimizer
// steps as the plots' axes are, and a resumed run's trace is paired with the uninterrupted
// run's by global step (as `mxsim compare` pairs them), not row by row.
#include <QHeaderView>
#include <QStyle>
#include <QTableView>
#include <QTest>
#include <set>

#include "gui_test_util.hpp"
#include "mxsim/trace/reader.hpp"
#include "plot_util.hpp"
#include "state.hpp"
#include "view_compare.hpp"

using namespace mxsim::inspector;

class GuiCompare : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString fresh_, lr_, resumed_;

  static void open_pair(InspectorState& st, const QString& a, const QString& b) {
    TraceDocument* da = st.traces()->add(a);
    TraceDocument* db = st.traces()->add(b);
    QTRY_VERIFY_WITH_TIMEOUT(da->state() == TraceDocument::State::Ready && db->state() == TraceDocument::State::Ready, 20000);
    st.setPrimary(da);
    st.setOther(db);
  }

  /// The table's rows: dataset name (column 0) -> "first diff. step" (column 2) as shown.
  static std::map<QString, QString> table_rows(const CompareView& v) {
    std::map<QString, QString> r;
    const QAbstractItemModel* m = v.table()->model();
    for (int i = 0; i < m->rowCount(); ++i)
      r[m->index(i, 0).data(Qt::DisplayRole).toString()] = m->index(i, 2).data(Qt::DisplayRole).toString();
    return r;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    fresh_ = dir_.filePath("fresh.h5");
    lr_ = dir_.filePath("lr.h5");
    resumed_ = dir_.filePath("resumed.h5");
    QCOMPARE(guitest::write_trace(guitest::tiny(), fresh_).steps, 6);
    QCOMPARE(guitest::write_trace(guitest::tiny({"optim.lr=0.003"}), lr_).steps, 6);
    QCOMPARE(guitest::write_resumed_trace(guitest::tiny(), 3, resumed_).steps, 3);  // global steps 4..6
  }

  // Every row's dataset name is drawn whole: the name column is at least as wide as the
  // delegate needs to draw the name without eliding it (its text width plus the style's text
  // margin on both sides, QCommonStyle's rule), lies inside the table's viewport, and the cell's
  // tooltip is the name too.
  void datasetNamesAreShownInFull() {
    InspectorState st;
    open_pair(st, fresh_, lr_);
    CompareView v(&st);
    v.resize(1280, 750);
    v.show();
    QVERIFY(guitest::wait_view(&v));
    QVERIFY(v.result());
    std::set<QString> names;
    for (const auto& d : mxsim::trace::Reader(fresh_.toStdString()).datasets()) names.insert(QString::fromStdString(d.name));
    const QTableView* t = v.table();
    const QAbstractItemModel* m = t->model();
    QCOMPARE(m->rowCount(), int(names.size()));  // the same datasets in both traces
    const QFontMetrics fm(t->font());
    const int margin = t->style()->pixelMetric(QStyle::PM_FocusFrameHMargin, nullptr, t) + 1;
    const int width = t->columnWidth(0);
    QString longest;
    for (int i = 0; i < m->rowCount(); ++i) {
      const QString name = m->index(i, 0).data(Qt::DisplayRole).toString();
      QVERIFY2(names.count(name), qPrintable(name));
      if (fm.horizontalAdvance(name) > fm.horizontalAdvance(longest)) longest = name;
    }
    // the longest name of this trace: a wgrad operand's block map (docs/trace-format.md)
    QVERIFY2(longest.startsWith("/snap/fc1/quant/") && longest.contains("_wgrad/"), qPrintable(longest));
    QVERIFY2(width >= fm.horizontalAdvance(longest) + 2 * margin,
             qPrintable(QString("name column %1 px, '%2' needs %3 px").arg(width).arg(longest).arg(fm.horizontalAdvance(longest) + 2 * margin)));
    QCOMPARE(fm.elidedText(longest, t->textElideMode(), width - 2 * margin), longest);
    QVERIFY2(t->columnViewportPosition(0) >= 0 && t->columnViewportPosition(0) + width <= t->viewport()->width(),
             qPrintable(QString("name column at %1 + %2 px, viewport %3 px").arg(t->columnViewportPosition(0)).arg(width).arg(t->viewport()->width())));
    for (int i = 0; i < m->rowCount(); ++i)
      QCOMPARE(m->index(i, 0).data(Qt::ToolTipRole).toString(), m->index(i, 0).data(Qt::DisplayRole).toString());
  }

  // Steps are global optimizer steps (/train/step, 1-based), as on the plots' axes: a run with
  // another base learning rate has another /train/lr from its first step, global step 1 (trace
  // row 0; the schedule scales the base rate at every step, config.md "optim"), so the first
  // difference is at step 1 and /train/lr's row says 1.
  void stepsAreGlobalOptimizerSteps() {
    InspectorState st;
    open_pair(st, fresh_, lr_);
    CompareView v(&st);
    v.resize(1280, 750);
    v.show();
    QVERIFY(guitest::wait_view(&v));
    QVERIFY(v.result());
    QVERIFY2(v.summaryText().contains("first difference at step 1 in"), qPrintable(v.summaryText()));
    const auto rows = table_rows(v);
    QCOMPARE(rows.at("/train/lr"), QString("1"));
    // the ULP map's title names the global step of the selected row: row 2 is step 3
    st.setStep(2);
    v.setDataset("/train/lr");
    QVERIFY(guitest::wait_view(&v));
    QVERIFY2(plot_title(v.ulpPlot()).startsWith("ULP distance A vs B: /train/lr at step 3"), qPrintable(plot_title(v.ulpPlot())));
  }

  // A resumed run's trace (rows 0..2 = global steps 4..6) against the uninterrupted run's
  // (rows 0..5 = steps 1..6): paired by global step, the common steps 4..6 are bit for bit the
  // same (a resumed run reproduces the uninterrupted one bit for bit, docs/simulator.md
  // "Checkpoint / resume"), so every dataset is identical, and the ULP map at A's row 3
  // (step 4) compares it with B's row 0, the snapshot of step 4 in both.
  void resumedTraceIsPairedByGlobalStep() {
    InspectorState st;
    open_pair(st, fresh_, resumed_);
    CompareView v(&st);
    v.resize(1280, 750);
    v.show();
    QVERIFY(guitest::wait_view(&v));
    QVERIFY(v.result());
    QVERIFY2(v.summaryText().contains("bit-identical") || v.summaryText().contains("no bit difference"), qPrintable(v.summaryText()));
    QCOMPARE(v.result()->first_step, int64_t(-1));
    for (const auto& [name, first] : table_rows(v)) QVERIFY2(first == "-", qPrintable(name + ": " + first));
    st.setStep(3);  // A's row 3: global step 4, a snapshot step of both
    v.setDataset("/snap/fc1/master");
    QVERIFY(guitest::wait_view(&v));
    QVERIFY2(v.ulp(), qPrintable(plot_title(v.ulpPlot())));
    QVERIFY2(v.ulp()->note.isEmpty() || v.ulp()->note.startsWith("expert/slice"), qPrintable(v.ulp()->note));
    QCOMPARE(v.ulp()->ulp.size(), size_t(64 * 32));  // expert 0's [N, K] of fc1
    QCOMPARE(v.ulp()->differing, uint64_t(0));
  }
};

QTEST_MAIN(GuiCompare)
#include "test_gui_compare.moc"
