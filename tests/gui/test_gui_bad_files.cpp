// Files that are not (readable) traces get a clear message in the window and
// no crash: missing, not HDF5, truncated, damaged, HDF5 but foreign, an mxsim
// checkpoint, a trace of a newer format.
#include <hdf5.h>

#include <QFile>
#include <QTest>

#include "gui_test_util.hpp"
#include "main_window.hpp"
#include "mxsim/trace/checkpoint.hpp"
#include "render.hpp"

using namespace mxsim::inspector;

class GuiBadFiles : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString good_;
  QByteArray good_bytes_;

  /// Opens `path` in a fresh window, shows every view, returns the banner text.
  QString open_in_window(const QString& path, TraceDocument::State* state = nullptr) {
    MainWindow w;
    w.resize(1280, 800);
    w.show();
    TraceDocument* d = w.openTrace(path);
    [&] { QTRY_VERIFY_WITH_TIMEOUT(d->state() != TraceDocument::State::Opening, 20000); }();
    for (View* v : w.views()) {
      w.showView(v->id());
      [&] { QVERIFY(wait_idle(w, 20000)); }();
    }
    if (state) *state = d->state();
    return w.bannerText();
  }

  QString write_file(const QString& name, const QByteArray& bytes) {
    const QString p = dir_.filePath(name);
    QFile f(p);
    if (!f.open(QIODevice::WriteOnly)) return {};
    f.write(bytes);
    return p;
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    good_ = dir_.filePath("good.h5");
    guitest::write_trace(guitest::tiny({"run.max_steps=3"}), good_);
    QFile f(good_);
    QVERIFY(f.open(QIODevice::ReadOnly));
    good_bytes_ = f.readAll();
    QVERIFY(good_bytes_.size() > 100000);
  }

  void missingFile() {
    TraceDocument::State s;
    const QString m = open_in_window(dir_.filePath("nope.h5"), &s);
    QCOMPARE(s, TraceDocument::State::Failed);
    QVERIFY2(m.contains("no such file"), qPrintable(m));
  }

  void notHdf5() {
    TraceDocument::State s;
    const QString m = open_in_window(write_file("text.h5", "step,loss\n1,0.5\n"), &s);
    QCOMPARE(s, TraceDocument::State::Failed);
    QVERIFY2(m.contains("is not an HDF5 file"), qPrintable(m));
  }

  void truncated() {
    for (double frac : {0.5, 0.05}) {
      TraceDocument::State s;
      const QString m = open_in_window(write_file(QString("trunc%1.h5").arg(frac), good_bytes_.left(int(good_bytes_.size() * frac))), &s);
      QCOMPARE(s, TraceDocument::State::Failed);
      QVERIFY2(m.contains("truncated or damaged"), qPrintable(m));
    }
  }

  void damagedSuperblock() {
    QByteArray b = good_bytes_;
    for (int i = 0; i < 8; ++i) b[i] = 'X';  // the HDF5 signature
    TraceDocument::State s;
    const QString m = open_in_window(write_file("nosig.h5", b), &s);
    QCOMPARE(s, TraceDocument::State::Failed);
    QVERIFY2(m.contains("not an HDF5 file"), qPrintable(m));
  }

  void damagedInside() {
    // Garbage over metadata or data at several places: the window reports what it can,
    // and never crashes; every view finishes.
    for (double at : {0.002, 0.01, 0.3, 0.6, 0.97}) {
      QByteArray b = good_bytes_;
      const int off = int(b.size() * at);
      for (int i = 0; i < 4096 && off + i < b.size(); ++i) b[off + i] = char((i * 131 + 7) & 0xFF);
      TraceDocument::State s;
      open_in_window(write_file(QString("damaged%1.h5").arg(at), b), &s);
      QVERIFY(s != TraceDocument::State::Opening);
    }
  }

  void foreignHdf5() {
    const QString p = dir_.filePath("foreign.h5");
    hid_t f = H5Fcreate(p.toUtf8().constData(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    QVERIFY(f >= 0);
    const hsize_t n = 10;
    hid_t sp = H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(f, "/data", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(d);
    H5Sclose(sp);
    H5Fclose(f);
    TraceDocument::State s;
    const QString m = open_in_window(p, &s);
    QCOMPARE(s, TraceDocument::State::Failed);
    QVERIFY2(m.contains("is an HDF5 file but not an mxsim trace"), qPrintable(m));
  }

  void checkpointIsNotATrace() {
    const QString p = dir_.filePath("ckpt.h5");
    mxsim::trace::CheckpointWriter c;
    c.put_u64("step", 3);
    c.commit(p.toStdString());
    TraceDocument::State s;
    const QString m = open_in_window(p, &s);
    QCOMPARE(s, TraceDocument::State::Failed);
    QVERIFY2(m.contains("not an mxsim trace"), qPrintable(m));
  }

  void newerFormat() {
    const QString p = dir_.filePath("newer.h5");
    QFile::copy(good_, p);
    hid_t f = H5Fopen(p.toUtf8().constData(), H5F_ACC_RDWR, H5P_DEFAULT);
    QVERIFY(f >= 0);
    hid_t a = H5Aopen(f, "mxsim_trace_format", H5P_DEFAULT);
    QVERIFY(a >= 0);
    const uint64_t v = 99;
    QVERIFY(H5Awrite(a, H5T_NATIVE_UINT64, &v) >= 0);
    H5Aclose(a);
    H5Fclose(f);
    TraceDocument::State s;
    const QString m = open_in_window(p, &s);
    QCOMPARE(s, TraceDocument::State::Failed);
    QVERIFY2(m.contains("trace format 99") && m.contains("newer"), qPrintable(m));
  }

  void goodFileOpens() {
    TraceDocument::State s;
    const QString m = open_in_window(good_, &s);
    QCOMPARE(s, TraceDocument::State::Ready);
    QVERIFY2(m.isEmpty(), qPrintable(m));
  }

  void renderReportsABadFile() {
    RenderOptions o;
    o.traces = {dir_.filePath("nope.h5")};
    o.out_dir = dir_.filePath("render");
    QCOMPARE(render(o), 1);  // a runtime / data error (2 is a usage error)
    QVERIFY(!QFile::exists(o.out_dir + "/index.html"));  // nothing written for a trace that does not open
  }
};

QTEST_MAIN(GuiBadFiles)
#include "test_gui_bad_files.moc"
