// Run mode: the simulator on a worker thread, driven from the window: start
// paused, step a micro-batch, step an optimizer step, resume, pause, stop; the
// window opens and follows the run's trace.
#include <QSignalSpy>
#include <QTest>
#include <cstring>

#include "gui_test_util.hpp"
#include "main_window.hpp"
#include "run_panel.hpp"
#include "view_curves.hpp"

using namespace mxsim::inspector;
using State = RunStatus::State;

class GuiRun : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

 private slots:
  void stepPauseResumeStop() {
    MainWindow w;
    w.resize(1280, 800);
    w.show();
    RunController* rc = w.runPanel()->controller();
    RunSettings s;
    // long enough (16 steps per epoch) that the run is still going when the test pauses it
    for (const auto& o : guitest::tiny_overrides({"run.epochs=100", "run.max_steps=1000"})) s.overrides << QString::fromStdString(o);
    s.trace_path = dir_.filePath("run.h5");
    s.threads = 1;
    s.start_paused = true;
    QVERIFY(rc->start(s));
    // paused after the first micro-batch of step 1
    QTRY_COMPARE_WITH_TIMEOUT(rc->status().state, State::Paused, 60000);
    QCOMPARE(rc->status().step, qint64(1));
    QCOMPARE(rc->status().microbatch, 0);
    QCOMPARE(rc->status().num_microbatches, 4);
    rc->stepMicroBatch();
    QTRY_VERIFY_WITH_TIMEOUT(rc->status().state == State::Paused && rc->status().microbatch == 1, 30000);
    QCOMPARE(rc->status().steps_done, qint64(0));
    rc->stepOptimizer();
    QTRY_VERIFY_WITH_TIMEOUT(rc->status().state == State::Paused && rc->status().microbatch == -1, 30000);
    QCOMPARE(rc->status().steps_done, qint64(1));
    const double loss1 = rc->status().loss;
    // the window opened the run's trace and follows it: one complete step so far
    InspectorState* st = w.state();
    QTRY_VERIFY_WITH_TIMEOUT(st->primary() && st->primary()->state() == TraceDocument::State::Ready, 10000);
    TraceDocument* d = st->primary();
    QCOMPARE(QFileInfo(d->path()).fileName(), QString("run.h5"));
    QTRY_COMPARE_WITH_TIMEOUT(d->steps(), uint64_t(1), 10000);
    auto* c = static_cast<CurvesView*>(w.view("curves"));
    w.showView("curves");
    QTRY_COMPARE_WITH_TIMEOUT(c->values(d, "/train/loss").size(), 1, 10000);
    const double traced = c->values(d, "/train/loss")[0];
    QVERIFY(std::memcmp(&traced, &loss1, sizeof traced) == 0);  // the hook's step loss is the trace's
    // resume, then pause again: more steps arrive while the UI keeps running
    rc->resume();
    QTRY_VERIFY_WITH_TIMEOUT(d->steps() >= 3, 60000);
    rc->pause();
    QTRY_COMPARE_WITH_TIMEOUT(rc->status().state, State::Paused, 30000);
    const qint64 done_at_pause = rc->status().steps_done;
    QTest::qWait(300);
    QCOMPARE(rc->status().steps_done, done_at_pause);  // paused means paused
    rc->stop();
    QTRY_COMPARE_WITH_TIMEOUT(rc->status().state, State::Stopped, 30000);
    QTRY_COMPARE_WITH_TIMEOUT(d->steps(), uint64_t(rc->status().steps_done), 10000);
    QVERIFY(rc->status().steps_done < 1000);
    QTRY_COMPARE_WITH_TIMEOUT(st->step(), qint64(d->steps()) - 1, 5000);  // followed to the last step
  }

  void badConfigIsRefusedWithAMessage() {
    RunController rc;
    RunSettings s;
    s.overrides = {"model.top_k=99"};
    s.trace_path = dir_.filePath("bad.h5");
    QVERIFY(!rc.start(s));
    QCOMPARE(rc.status().state, State::Failed);
    QVERIFY2(rc.status().message.contains("top_k"), qPrintable(rc.status().message));
    s.overrides = {};
    s.backend = "hip";
    QString why;
    if (!available_train_backends(&why).contains("hip")) {  // no usable GPU here: refused with the reason
      QVERIFY(!rc.start(s));
      QVERIFY2(rc.status().message.contains("no usable GPU"), qPrintable(rc.status().message));
      QVERIFY2(rc.status().message.contains(why.mid(QString("no usable GPU: ").size())), qPrintable(rc.status().message));
    }
    s.backend = "cpu";  // not a backend at all
    QVERIFY(!rc.start(s));
    QVERIFY2(rc.status().message.contains("backend 'cpu'"), qPrintable(rc.status().message));
  }

  void runToTheEnd() {
    RunController rc;
    RunSettings s;
    for (const auto& o : guitest::tiny_overrides({"run.max_steps=3"})) s.overrides << QString::fromStdString(o);
    s.trace_path = dir_.filePath("end.h5");
    QSignalSpy fin(&rc, &RunController::finished);
    QVERIFY(rc.start(s));
    QTRY_COMPARE_WITH_TIMEOUT(fin.count(), 1, 60000);
    QCOMPARE(rc.status().state, State::Finished);
    QCOMPARE(rc.status().steps_done, qint64(3));
  }
};

QTEST_MAIN(GuiRun)
#include "test_gui_run.moc"
