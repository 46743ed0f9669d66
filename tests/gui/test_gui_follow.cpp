// Live follow: a trace still being written (HDF5 SWMR) updates in the window
// as steps arrive, from a writer thread in this process and from `mxsim train`
// in another process on the emulator and, where a usable GPU is present, on the
// GPU backend (rows seen while that process still ran); "follow latest step"
// keeps the scrubber on the newest step.
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QTest>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include <signal.h>
#include <sys/types.h>

#include "gui_test_util.hpp"
#include "main_window.hpp"
#include "mxsim/trace/compare.hpp"
#include "mxsim/trace/writer.hpp"
#include "view_curves.hpp"

using namespace mxsim::inspector;

class GuiFollow : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;

 private slots:
  void writerThreadInThisProcess() {
    using mxsim::trace::DType;
    const QString path = dir_.filePath("live.h5");
    std::atomic<bool> started{false}, go{false}, done{false};
    std::thread writer([&] {
      mxsim::trace::Writer w(path.toStdString(), "", mxsim::trace::make_provenance("emu", 1));
      w.declare_series("/train/step", DType::i64, {});
      w.declare_series("/train/loss", DType::f64, {});
      w.start_swmr();
      started = true;
      while (!go) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      for (int64_t s = 0; s < 40; ++s) {
        w.append("/train/step", s + 1);
        w.append("/train/loss", 1.0 / double(s + 1));
        w.end_step();
        std::this_thread::sleep_for(std::chrono::milliseconds(15));
      }
      w.close();
      done = true;
    });
    QTRY_VERIFY_WITH_TIMEOUT(started.load(), 10000);
    MainWindow w;
    w.resize(1280, 800);
    w.show();
    TraceDocument* d = w.openTrace(path);
    QTRY_VERIFY_WITH_TIMEOUT(d->state() == TraceDocument::State::Ready, 10000);
    QCOMPARE(d->steps(), uint64_t(0));
    w.setFollow(true);
    go = true;
    // the window keeps processing events while the rows arrive; steps grow monotonically
    uint64_t last = 0;
    QElapsedTimer t;
    t.start();
    while (!(done && d->steps() == 40) && t.elapsed() < 30000) {
      QTest::qWait(5);
      QVERIFY(d->steps() >= last);
      last = d->steps();
    }
    writer.join();
    QCOMPARE(d->steps(), uint64_t(40));
    QTRY_COMPARE_WITH_TIMEOUT(w.state()->step(), qint64(39), 5000);  // follow latest step
    auto* c = static_cast<CurvesView*>(w.view("curves"));
    w.showView("curves");
    QTRY_COMPARE_WITH_TIMEOUT(c->values(d, "/train/loss").size(), 40, 10000);
    const QVector<double> v = c->values(d, "/train/loss");
    for (int i = 0; i < 40; ++i) QCOMPARE(v[i], 1.0 / double(i + 1));
  }

 private:
  // The writer is a separate `mxsim train --backend BACKEND` process. It runs in short bursts
  // (SIGCONT ... SIGSTOP, from burst_ms long) until the window has seen rows; then, with the writer
  // stopped and provably alive, the rows the window shows must be more than 0 and fewer than the
  // run's: they arrived while the process ran, not after it ended. The finished trace equals, bit
  // for bit, the emulator's run of the same config in this process (the GPU backend computes the
  // emulator's bits: docs/gpu.md).
  void followProcess(const QString& backend, int steps, int burst_ms) {
    const QString path = dir_.filePath("proc." + backend + ".h5");
    // 16 steps per epoch
    const std::vector<std::string> cfg = {"run.epochs=" + std::to_string((steps + 15) / 16),
                                          "run.max_steps=" + std::to_string(steps)};
    QStringList args = {"train", "--backend", backend, "--threads", "1", "--trace", path};
    for (const auto& s : guitest::tiny_overrides(cfg)) args << "--set" << QString::fromStdString(s);
    QProcess p;
    p.start(guitest::mxsim_cli(), args);
    QVERIFY2(p.waitForStarted(10000), qPrintable(guitest::mxsim_cli() + ": " + p.errorString()));
    const pid_t pid = pid_t(p.processId());
    // the process state letter of /proc/<pid>/stat: 'T' stopped, 'Z' exited, ...
    auto state = [pid] {
      QFile f(QString("/proc/%1/stat").arg(pid));
      if (!f.open(QIODevice::ReadOnly)) return QChar('?');
      const QByteArray b = f.readAll();
      const int r = b.lastIndexOf(')');
      return r > 0 && r + 2 < b.size() ? QChar(b[r + 2]) : QChar('?');
    };
    auto stop = [&] {
      ::kill(pid, SIGSTOP);
      QTRY_VERIFY_WITH_TIMEOUT(state() == 'T' || state() == 'Z' || state() == '?', 5000);
    };
    // polled every millisecond, not QTRY's 50: a GPU writer appends rows fast
    QElapsedTimer appear;
    appear.start();
    while (!QFileInfo::exists(path) && state() != 'Z' && state() != '?' && appear.elapsed() < 60000)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    stop();
    QVERIFY2(state() == 'T', qPrintable("the writer ended before its trace appeared: " + p.readAllStandardError()));
    QVERIFY2(QFileInfo::exists(path), p.readAllStandardError().constData());
    MainWindow w;
    w.resize(1280, 800);
    w.show();
    w.setFollow(true);
    TraceDocument* d = w.openTrace(path);
    QTRY_VERIFY_WITH_TIMEOUT(d->state() == TraceDocument::State::Ready, 10000);
    QVERIFY(d->following());
    QElapsedTimer t;
    t.start();
    // bursts until rows show, each twice the last up to 4 * burst_ms (the writer's start-up,
    // e.g. loading GPU kernels, may take more than a few)
    for (int ms = burst_ms; d->steps() == 0 && t.elapsed() < 120000; ms = std::min(2 * ms, 4 * burst_ms)) {
      ::kill(pid, SIGCONT);
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      stop();
      QVERIFY2(state() == 'T', "the writer ended before the window saw a row (it must run longer)");
      QTest::qWait(600);  // the follow poll (2 Hz) catches up with the stopped writer
    }
    const uint64_t seen_while_running = d->steps();
    qInfo("%s: rows seen while the writer ran: %llu of %d", qPrintable(backend), (unsigned long long)seen_while_running,
          steps);
    QVERIFY2(state() == 'T', "the writer is stopped, alive, while the rows were counted");
    ::kill(pid, SIGCONT);
    QVERIFY(p.waitForFinished(120000));
    QCOMPARE(p.exitStatus(), QProcess::NormalExit);
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    QTRY_COMPARE_WITH_TIMEOUT(d->steps(), uint64_t(steps), 10000);
    QVERIFY2(seen_while_running > 0 && seen_while_running < uint64_t(steps),
             qPrintable(QString("rows seen while the writer ran: %1 of %2").arg(seen_while_running).arg(steps)));
    QTRY_COMPARE_WITH_TIMEOUT(w.state()->step(), qint64(steps - 1), 5000);
    // same config, same bits: the emulator's run in this process is the oracle of the other
    // process's trace, its losses as the window shows them and every dataset
    const QString oracle = dir_.filePath("oracle." + backend + ".h5");
    const auto res = guitest::write_trace(guitest::tiny(cfg), oracle);
    auto* c = static_cast<CurvesView*>(w.view("curves"));
    w.showView("curves");
    QTRY_COMPARE_WITH_TIMEOUT(c->values(d, "/train/loss").size(), steps, 10000);
    const QVector<double> v = c->values(d, "/train/loss");
    for (int i = 0; i < steps; ++i) QVERIFY(std::memcmp(&v[i], &res.losses[size_t(i)], sizeof(double)) == 0);
    const auto cmp = mxsim::trace::compare(path.toStdString(), oracle.toStdString());
    QVERIFY2(cmp.identical(), cmp.first_difference
                                  ? qPrintable(QString("first difference at step %1 in %2")
                                                   .arg(cmp.first_difference->step)
                                                   .arg(QString::fromStdString(cmp.first_difference->dataset)))
                                  : "datasets or steps differ");
    QCOMPARE(cmp.steps_compared, uint64_t(steps));
  }

 private slots:
  void mxsimTrainInAnotherProcess() { followProcess("emu", 60, 30); }

  // `mxsim train --backend hip`: more steps and shorter bursts, its steps are fast
  void mxsimTrainOnGpuInAnotherProcess() {
    if (const QString why = guitest::no_gpu_reason(); !why.isEmpty()) QSKIP(qPrintable(why));
    followProcess("hip", 320, 5);
  }
};

QTEST_MAIN(GuiFollow)
#include "test_gui_follow.moc"
