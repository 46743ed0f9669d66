// The window's file handling and step keys, on traces the simulator writes here: File > Open
// recent (an entry per opened trace, newest first, kept in QSettings across windows, reopening
// works, a file gone since is removed with a message); dropping .h5 files on the window opens
// them (also onto a plot of the curves view, which takes series drags itself), other files are
// refused; and the scrubber keys of docs/inspector.md move the step, every view following.
#include <QApplication>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFile>
#include <QMenu>
#include <QMimeData>
#include <QSettings>
#include <QSlider>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTest>
#include <QUrl>

#include "gui_test_util.hpp"
#include "main_window.hpp"
#include "plot_util.hpp"
#include "render.hpp"

using namespace mxsim::inspector;

class GuiWindow : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString a_, b_, long_;  // two 6-step traces; one of 24 steps for the keys

  static QStringList recent_entries(MainWindow& w) {
    QStringList r;
    for (QAction* act : w.recentMenu()->actions())
      if (!act->data().toString().isEmpty()) r << act->data().toString();
    return r;
  }
  static QAction* recent_action(MainWindow& w, const QString& path) {
    for (QAction* act : w.recentMenu()->actions())
      if (act->data().toString() == path) return act;
    return nullptr;
  }
  static bool open_and_wait(MainWindow& w, const QString& path) {
    w.openTrace(path);
    return wait_idle(w, 20000);
  }

  /// Sends a drag enter of `urls` to `target` (a widget of the window: Qt hands it up to the
  /// first widget that accepts it) and, when one accepted it, the drop (Qt delivers a drop only
  /// to the widget that accepted the drag enter). Whether the drag was accepted.
  static bool drag_and_drop(QWidget* target, const QList<QUrl>& urls) {
    QMimeData mime;
    mime.setUrls(urls);
    const QPoint at = target->rect().center();
    QDragEnterEvent enter(at, Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
    enter.setAccepted(false);
    QApplication::sendEvent(target, &enter);
    const bool accepted = enter.isAccepted();
    if (accepted) {
      QDropEvent drop(QPointF(at), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
      drop.setAccepted(false);
      QApplication::sendEvent(target, &drop);
    }
    return accepted;
  }

  /// Every view, shown in turn, draws row `row`: its last refresh was of that row, every step
  /// marker stands at its global optimizer step, and the accumulation view's titles name it.
  static void every_view_shows(MainWindow& w, qint64 row, const QString& after) {
    const TraceDocument* d = w.state()->primary();
    const double step = double(d->meta().global(uint64_t(row)));
    for (View* v : w.views()) {
      w.showView(v->id());
      QVERIFY(wait_idle(w, 20000));
      const QString at = QString("after %1, %2 view").arg(after, v->id());
      QVERIFY2(v->shownRow() == row, qPrintable(QString("%1 shows row %2, want %3").arg(at).arg(v->shownRow()).arg(row)));
      for (QCustomPlot* p : v->findChildren<QCustomPlot*>()) {
        const double x = step_marker(p);
        if (!std::isnan(x))
          QVERIFY2(x == step, qPrintable(QString("%1, plot '%2': marker at %3, want step %4").arg(at, plot_title(p)).arg(x).arg(step)));
        if (v->id() == "accum" && plot_title(p).startsWith("Norms per micro-batch"))
          QVERIFY2(plot_title(p).endsWith(QString("at step %1").arg(step)), qPrintable(at + ": " + plot_title(p)));
      }
    }
  }

 private slots:
  void initTestCase() {
    // QSettings of this test only: Qt's test locations (~/.qttest), an organisation of its own
    QStandardPaths::setTestModeEnabled(true);
    QCoreApplication::setOrganizationName("mxsim-tests");
    QCoreApplication::setApplicationName("test_gui_window");
    QSettings().clear();
    QVERIFY(dir_.isValid());
    a_ = dir_.filePath("a.h5");
    b_ = dir_.filePath("b.h5");
    long_ = dir_.filePath("long.h5");
    QCOMPARE(guitest::write_trace(guitest::tiny(), a_).steps, 6);
    QVERIFY(QFile::copy(a_, b_));
    QCOMPARE(guitest::write_trace(guitest::tiny({"run.epochs=2", "run.max_steps=24"}), long_).steps, 24);
  }
  void init() { QSettings().clear(); }
  void cleanupTestCase() { QSettings().clear(); }

  // Each opened trace becomes the first entry of File > Open recent, stored in QSettings
  // ("recent", newest first), so a new window lists them; an entry reopens its trace.
  void recentFilesPersistAndReopen() {
    {
      MainWindow w;
      w.show();
      QVERIFY(recent_entries(w).isEmpty());
      QVERIFY(!w.recentMenu()->isEnabled());
      QVERIFY(open_and_wait(w, a_));
      QCOMPARE(recent_entries(w), QStringList{a_});
      QVERIFY(w.recentMenu()->isEnabled());
      QVERIFY(open_and_wait(w, b_));
      QCOMPARE(recent_entries(w), (QStringList{b_, a_}));
      QCOMPARE(QSettings().value("recent").toStringList(), (QStringList{b_, a_}));
      // a file that is not a trace is not remembered
      const QString junk = dir_.filePath("junk.h5");
      QFile f(junk);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write("not hdf5");
      f.close();
      QVERIFY(open_and_wait(w, junk));
      QCOMPARE(recent_entries(w), (QStringList{b_, a_}));
    }
    MainWindow w2;
    w2.show();
    QCOMPARE(recent_entries(w2), (QStringList{b_, a_}));
    QAction* act = recent_action(w2, a_);
    QVERIFY(act);
    act->trigger();
    QVERIFY(wait_idle(w2, 20000));
    QVERIFY(w2.state()->primary());
    QCOMPARE(w2.state()->primary()->path(), a_);
    QCOMPARE(w2.state()->primary()->state(), TraceDocument::State::Ready);
    QCOMPARE(recent_entries(w2), (QStringList{a_, b_}));  // reopened: first again
    // the second trace opened is the comparison trace; reopening it from the menu, open
    // already, makes it the primary (A and B swap) instead of opening it twice
    QVERIFY(open_and_wait(w2, b_));
    QCOMPARE(w2.state()->primary()->path(), a_);
    QCOMPARE(w2.state()->other()->path(), b_);
    recent_action(w2, b_)->trigger();
    QVERIFY(wait_idle(w2, 20000));
    QCOMPARE(w2.state()->traces()->size(), 2);
    QCOMPARE(w2.state()->primary()->path(), b_);
    QCOMPARE(w2.state()->other()->path(), a_);
    QCOMPARE(recent_entries(w2), (QStringList{b_, a_}));
  }

  // A recent entry whose file is gone: the window says so and drops the entry (menu and settings).
  void missingRecentFileIsRemovedWithAMessage() {
    const QString gone = dir_.filePath("gone.h5");
    QVERIFY(QFile::copy(a_, gone));
    {
      MainWindow w;
      w.show();
      QVERIFY(open_and_wait(w, a_));
      QVERIFY(open_and_wait(w, gone));
      QCOMPARE(recent_entries(w), (QStringList{gone, a_}));
    }
    QVERIFY(QFile::remove(gone));
    MainWindow w;
    w.show();
    QAction* act = recent_action(w, gone);
    QVERIFY(act);
    act->trigger();
    QVERIFY(wait_idle(w, 20000));
    QVERIFY2(w.bannerText().contains(gone) && w.bannerText().contains("no such file") &&
                 w.bannerText().contains("removed from Open recent"),
             qPrintable(w.bannerText()));
    QCOMPARE(recent_entries(w), QStringList{a_});
    QCOMPARE(QSettings().value("recent").toStringList(), QStringList{a_});
    QCOMPARE(w.state()->traces()->size(), 0);
  }

  // Dropping a .h5 file opens it; a drag of other files only is refused (not accepted: Qt then
  // delivers no drop); of a drop with a trace and another file, only the trace opens and the
  // window names the other. A drop onto a plot of the curves view (which takes series dragged
  // from its tree) reaches the window too.
  void dropOpensH5FilesOnly() {
    MainWindow w;
    w.resize(1280, 800);
    w.show();
    QVERIFY(wait_idle(w, 20000));
    const QString txt = dir_.filePath("notes.txt");
    QFile f(txt);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("hello\n");
    f.close();
    QVERIFY(!drag_and_drop(&w, {QUrl::fromLocalFile(txt)}));
    QVERIFY(!drag_and_drop(&w, {QUrl("https://example.org/run.h5")}));  // not a local file
    QVERIFY(!drag_and_drop(w.view("curves")->findChild<QCustomPlot*>(), {QUrl::fromLocalFile(txt)}));
    QCOMPARE(w.state()->traces()->size(), 0);

    QVERIFY(drag_and_drop(&w, {QUrl::fromLocalFile(a_)}));
    QVERIFY(wait_idle(w, 20000));
    QCOMPARE(w.state()->traces()->size(), 1);
    QVERIFY(w.state()->primary() && w.state()->primary()->path() == a_);
    QCOMPARE(w.state()->primary()->state(), TraceDocument::State::Ready);

    // onto a curves plot, with a text file beside: only the trace opens
    w.showView("curves");
    QVERIFY(wait_idle(w, 20000));
    QCustomPlot* plot = w.view("curves")->findChild<QCustomPlot*>();
    QVERIFY(plot && plot->isVisible());
    QVERIFY(drag_and_drop(plot, {QUrl::fromLocalFile(txt), QUrl::fromLocalFile(b_)}));
    QVERIFY(wait_idle(w, 20000));
    QVERIFY2(w.bannerText().contains("notes.txt") && w.bannerText().contains(".h5"), qPrintable(w.bannerText()));
    QCOMPARE(w.state()->traces()->size(), 2);
    QCOMPARE(w.state()->traces()->at(1)->path(), b_);
    QCOMPARE(w.state()->other(), w.state()->traces()->at(1));  // the second trace: the comparison trace
  }

  // docs/inspector.md: Left/Right one step back/forward, PageUp/PageDown 10 steps back/forward,
  // Home/End the first/last complete step, clamped to the trace's rows; the same with the focus
  // on the slider (which on its own would page the other way and by another amount), on a plot
  // or on the window, and PageUp/PageDown on the spin box. Every view follows each change.
  void scrubberKeysMoveTheStepAndEveryViewFollows() {
    MainWindow w;
    w.resize(1280, 800);
    w.show();
    QVERIFY(open_and_wait(w, long_));
    QCOMPARE(w.state()->primary()->steps(), uint64_t(24));
    struct Key {
      Qt::Key key;
      qint64 row;  // expected row after the key, from the previous one: rows 0..23
    };
    const Key seq[] = {{Qt::Key_Home, 0},      {Qt::Key_Right, 1},   {Qt::Key_Right, 2},    {Qt::Key_Left, 1},
                       {Qt::Key_PageDown, 11}, {Qt::Key_PageDown, 21}, {Qt::Key_PageDown, 23}, {Qt::Key_Right, 23},
                       {Qt::Key_PageUp, 13},   {Qt::Key_End, 23},    {Qt::Key_PageUp, 13},  {Qt::Key_PageUp, 3},
                       {Qt::Key_PageUp, 0},    {Qt::Key_Left, 0}};
    QWidget* plot = w.view("curves")->findChild<QCustomPlot*>();
    const std::pair<const char*, QWidget*> targets[] = {{"slider", w.stepSlider()}, {"plot", plot}, {"window", &w}};
    bool views_checked = false;
    for (const auto& [name, target] : targets) {
      w.showView("curves");
      w.state()->setStep(5);
      QVERIFY(wait_idle(w, 20000));
      if (std::string(name) == "slider") w.stepSlider()->setFocus();
      for (const Key& k : seq) {
        QTest::keyClick(target, k.key);
        const QString after = QString("%1 on the %2").arg(QKeySequence(int(k.key)).toString(), name);
        QVERIFY2(w.state()->step() == k.row, qPrintable(QString("%1: row %2, want %3").arg(after).arg(w.state()->step()).arg(k.row)));
        QCOMPARE(w.stepSlider()->value(), int(k.row));
        QCOMPARE(w.stepSpin()->text(), QString::number(k.row + 1));  // global step = row + 1 in a fresh run
        if (!views_checked) {  // every view at every key once (the slider pass)
          every_view_shows(w, k.row, after);
          if (QTest::currentTestFailed()) return;
        }
      }
      views_checked = true;
    }
    QSpinBox* sp = w.stepSpin();
    w.state()->setStep(12);
    QTest::keyClick(sp, Qt::Key_PageDown);
    QCOMPARE(w.state()->step(), qint64(22));
    QTest::keyClick(sp, Qt::Key_PageUp);
    QCOMPARE(w.state()->step(), qint64(12));
    QTest::keyClick(sp, Qt::Key_Up);  // the spin box's own arrows: one step
    QCOMPARE(w.state()->step(), qint64(13));
  }
};

QTEST_MAIN(GuiWindow)
#include "test_gui_window.moc"
