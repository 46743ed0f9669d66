// Live follow: a trace still being written (HDF5 SWMR) updates in the window
// as steps arrive, from a writer thread in this process and from `mxsim train`
// in another process; "follow latest step" keeps the scrubber on the newest step.
#include <QFileInfo>
#include <QProcess>
#include <QTest>
#include <atomic>
#include <cstring>
#include <thread>

#include "gui_test_util.hpp"
#include "main_window.hpp"
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

  void mxsimTrainInAnotherProcess() {
    const QString path = dir_.filePath("proc.h5");
    QStringList args = {"train", "--threads", "1", "--trace", path};
    for (const auto& s : guitest::tiny_overrides({"run.max_steps=8"})) args << "--set" << QString::fromStdString(s);
    QProcess p;
    p.start(QString(MXSIM_BINARY_DIR) + "/cli/mxsim", args);
    QVERIFY(p.waitForStarted(10000));
    QTRY_VERIFY_WITH_TIMEOUT(QFileInfo::exists(path) || p.state() == QProcess::NotRunning, 60000);
    QVERIFY2(QFileInfo::exists(path), p.readAllStandardError().constData());
    MainWindow w;
    w.resize(1280, 800);
    w.show();
    w.setFollow(true);
    TraceDocument* d = w.openTrace(path);
    QTRY_VERIFY_WITH_TIMEOUT(d->state() == TraceDocument::State::Ready, 10000);
    QVERIFY(d->following());
    uint64_t seen_before_end = d->steps();
    if (p.state() != QProcess::NotRunning) QVERIFY(p.waitForFinished(120000));
    QCOMPARE(p.exitCode(), 0);
    QTRY_COMPARE_WITH_TIMEOUT(d->steps(), uint64_t(8), 10000);
    QVERIFY(seen_before_end <= 8);
    QTRY_COMPARE_WITH_TIMEOUT(w.state()->step(), qint64(7), 5000);
    // same config, same bits: the in-process run is the oracle of the other process's trace
    const auto res = guitest::write_trace(guitest::tiny({"run.max_steps=8"}), dir_.filePath("oracle.h5"));
    auto* c = static_cast<CurvesView*>(w.view("curves"));
    w.showView("curves");
    QTRY_COMPARE_WITH_TIMEOUT(c->values(d, "/train/loss").size(), 8, 10000);
    const QVector<double> v = c->values(d, "/train/loss");
    for (int i = 0; i < 8; ++i) QVERIFY(std::memcmp(&v[i], &res.losses[size_t(i)], sizeof(double)) == 0);
  }
};

QTEST_MAIN(GuiFollow)
#include "test_gui_follow.moc"
