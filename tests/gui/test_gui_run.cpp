// Run mode: the simulator on a worker thread, driven from the window: start
// paused, step a micro-batch, step an optimizer step, resume, pause, stop; the
// window opens and follows the run's trace. On the emulator always, on the GPU
// backend where a usable GPU is present (skipped with the runtime's reason
// otherwise); either way every loss the controller reports and the whole trace
// equal, bit for bit, an emulator run of the same config in this process (the
// GPU backend computes the emulator's bits: docs/gpu.md).
#include <QSignalSpy>
#include <QTest>
#include <cstring>
#include <map>

#include "gui_test_util.hpp"
#include "main_window.hpp"
#include "mxsim/trace/compare.hpp"
#include "run_panel.hpp"
#include "view_curves.hpp"

using namespace mxsim::inspector;
using State = RunStatus::State;

namespace {

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

/// The emulator's run of `sets` stopped after `steps` optimizer steps (as the window's Stop
/// left the run: the schedule still that of run.max_steps), its trace at `path`; `mb_loss`
/// gets the running loss the control hook reports after each micro-batch of step 1.
mxsim::sim::TrainResult emu_oracle(const std::vector<std::string>& sets, int64_t steps, const QString& path,
                                   std::map<int, double>& mb_loss) {
  auto be = mxsim::emu::make_emu_backend();
  mxsim::sim::TrainOptions o;
  o.trace_path = path.toStdString();
  o.threads = 1;
  o.stop_after = steps;
  o.control = [&](const mxsim::sim::Progress& p) {
    if (p.step == 1 && p.microbatch >= 0) mb_loss[p.microbatch] = p.loss;
    return true;
  };
  return mxsim::sim::train(mxsim::sim::parse_config(mxsim::sim::default_config_text(), sets, "tiny"), *be, o);
}

}  // namespace

class GuiRun : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

  void driveRun(const QString& backend) {
    MainWindow w;
    w.resize(1280, 800);
    w.show();
    RunController* rc = w.runPanel()->controller();
    RunSettings s;
    // long enough (16 steps per epoch) that the run is still going when the test pauses it
    const std::vector<std::string> sets = guitest::tiny_overrides({"run.epochs=100", "run.max_steps=1000"});
    for (const auto& o : sets) s.overrides << QString::fromStdString(o);
    s.trace_path = dir_.filePath("run." + backend + ".h5");
    s.backend = backend;
    s.threads = 1;
    s.start_paused = true;
    QVERIFY2(rc->start(s), qPrintable(rc->status().message));
    // paused after the first micro-batch of step 1
    QTRY_COMPARE_WITH_TIMEOUT(rc->status().state, State::Paused, 60000);
    QCOMPARE(rc->status().step, qint64(1));
    QCOMPARE(rc->status().microbatch, 0);
    QCOMPARE(rc->status().num_microbatches, 4);
    const double mb0 = rc->status().loss;
    rc->stepMicroBatch();
    QTRY_VERIFY_WITH_TIMEOUT(rc->status().state == State::Paused && rc->status().microbatch == 1, 30000);
    QCOMPARE(rc->status().steps_done, qint64(0));
    const double mb1 = rc->status().loss;
    rc->stepOptimizer();
    QTRY_VERIFY_WITH_TIMEOUT(rc->status().state == State::Paused && rc->status().microbatch == -1, 30000);
    QCOMPARE(rc->status().steps_done, qint64(1));
    const double loss1 = rc->status().loss;
    // the window opened the run's trace and follows it: one complete step so far
    InspectorState* st = w.state();
    QTRY_VERIFY_WITH_TIMEOUT(st->primary() && st->primary()->state() == TraceDocument::State::Ready, 10000);
    TraceDocument* d = st->primary();
    QCOMPARE(QFileInfo(d->path()).fileName(), QFileInfo(s.trace_path).fileName());
    QTRY_COMPARE_WITH_TIMEOUT(d->steps(), uint64_t(1), 10000);
    auto* c = static_cast<CurvesView*>(w.view("curves"));
    w.showView("curves");
    QTRY_COMPARE_WITH_TIMEOUT(c->values(d, "/train/loss").size(), 1, 10000);
    QVERIFY(same_bits(c->values(d, "/train/loss")[0], loss1));  // the hook's step loss is the trace's
    // resume, then pause again: more steps run while the UI keeps running (paused as soon as
    // the controller reports them, not at the window's 2 Hz follow: a GPU run is fast)
    rc->resume();
    QTRY_VERIFY_WITH_TIMEOUT(rc->status().steps_done >= 3, 60000);
    rc->pause();
    QTRY_COMPARE_WITH_TIMEOUT(rc->status().state, State::Paused, 30000);
    const qint64 done_at_pause = rc->status().steps_done;
    QTest::qWait(300);
    QCOMPARE(rc->status().steps_done, done_at_pause);  // paused means paused
    QTRY_COMPARE_WITH_TIMEOUT(d->steps(), uint64_t(done_at_pause), 10000);  // the window followed
    rc->stop();
    QTRY_COMPARE_WITH_TIMEOUT(rc->status().state, State::Stopped, 30000);
    const qint64 done = rc->status().steps_done;
    QCOMPARE(done, done_at_pause);  // stopped while paused: no step more
    QTRY_COMPARE_WITH_TIMEOUT(d->steps(), uint64_t(done), 10000);
    QVERIFY(done >= 3 && done < 1000);
    QTRY_COMPARE_WITH_TIMEOUT(st->step(), qint64(d->steps()) - 1, 5000);  // followed to the last step

    // the emulator's run of the same config, stopped after as many steps, in this process
    std::map<int, double> oracle_mb;
    const QString oracle_path = dir_.filePath("oracle." + backend + ".h5");
    const auto r = emu_oracle(sets, done, oracle_path, oracle_mb);
    QCOMPARE(r.steps, done);
    QVERIFY2(oracle_mb.count(0) && same_bits(mb0, oracle_mb[0]), qPrintable(QString("micro-batch 0: %1 vs %2").arg(mb0, 0, 'g', 17).arg(oracle_mb[0], 0, 'g', 17)));
    QVERIFY2(oracle_mb.count(1) && same_bits(mb1, oracle_mb[1]), qPrintable(QString("micro-batch 1: %1 vs %2").arg(mb1, 0, 'g', 17).arg(oracle_mb[1], 0, 'g', 17)));
    QVERIFY(same_bits(loss1, r.losses[0]));
    QTRY_COMPARE_WITH_TIMEOUT(c->values(d, "/train/loss").size(), int(done), 10000);
    const QVector<double> v = c->values(d, "/train/loss");
    for (qint64 i = 0; i < done; ++i)
      QVERIFY2(same_bits(v[i], r.losses[size_t(i)]), qPrintable(QString("step %1: %2 vs the emulator's %3").arg(i + 1).arg(v[i], 0, 'g', 17).arg(r.losses[size_t(i)], 0, 'g', 17)));
    // and every dataset of the trace (quantization statistics, snapshots, ...), as mxsim compare
    const auto cmp = mxsim::trace::compare(s.trace_path.toStdString(), oracle_path.toStdString());
    QVERIFY2(cmp.identical(), cmp.first_difference ? qPrintable(QString("first difference at step %1 in %2").arg(cmp.first_difference->step).arg(QString::fromStdString(cmp.first_difference->dataset))) : "datasets or steps differ");
    QCOMPARE(cmp.steps_compared, uint64_t(done));
  }

 private slots:
  void stepPauseResumeStop() { driveRun("emu"); }

  void stepPauseResumeStopOnGpu() {
    if (const QString why = guitest::no_gpu_reason(); !why.isEmpty()) QSKIP(qPrintable(why));
    QVERIFY(available_train_backends().contains("hip"));  // the run panel offers it
    driveRun("hip");
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
