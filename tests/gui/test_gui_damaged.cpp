// Issue 34: a trace with one flipped bit in the data chunk of /train/loss (Fletcher-32 no longer
// matches) opens, and the inspector says which dataset is damaged instead of drawing the curves
// without it: the document records the failed read (dataset and HDF5's message), the banner
// names it, and the loss panel's note says it is damaged; no loss value is plotted. The other
// curves are drawn as usual.
#include <QTest>

#include "../trace_damage_util.hpp"
#include "gui_test_util.hpp"
#include "main_window.hpp"
#include "plot_util.hpp"
#include "render.hpp"
#include "view_curves.hpp"

using namespace mxsim::inspector;

class GuiDamaged : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString trace_;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    trace_ = dir_.filePath("damaged.h5");
    QCOMPARE(guitest::write_trace(guitest::tiny(), trace_).steps, 6);
    QVERIFY(mxsim::test::flip_chunk_bit(trace_.toStdString(), "/train/loss"));
  }

  void damagedSeriesIsNamedNotDropped() {
    MainWindow w;
    w.setRememberRecent(false);
    w.show();
    w.openTrace(trace_);
    QVERIFY(wait_idle(w, 30000));
    TraceDocument* d = w.state()->primary();
    QVERIFY(d && d->state() == TraceDocument::State::Ready);
    w.showView("curves");
    QVERIFY(wait_idle(w, 30000));
    // the document: the dataset, and the trace library's message naming file, dataset and HDF5's reason
    QVERIFY(!d->readFailures().empty());
    const auto& f = d->readFailures().front();
    QCOMPARE(f.dataset, QString("/train/loss"));
    QVERIFY2(f.message.contains(trace_ + ": /train/loss: read failed") && f.message.contains("Fletcher32"),
             qPrintable(f.message));
    for (const auto& g : d->readFailures()) QCOMPARE(g.dataset, QString("/train/loss"));  // nothing else failed
    // the window: the banner names file and dataset
    QVERIFY2(w.bannerText().contains("damaged.h5: /train/loss is damaged or unreadable"), qPrintable(w.bannerText()));
    // the loss panel: a note naming it, and no graph of it; the learning rate is drawn
    auto* cv = qobject_cast<CurvesView*>(w.view("curves"));
    QVERIFY(cv);
    bool loss_noted = false, lr_drawn = false;
    for (QCustomPlot* p : cv->findChildren<QCustomPlot*>()) {
      for (int i = 0; i < p->graphCount(); ++i) {
        // graph names are the last path part, then " (smoothed ...)" or " (points)"
        QVERIFY2(!p->graph(i)->name().startsWith("loss"), qPrintable("a graph of the damaged series: " + p->graph(i)->name()));
        lr_drawn = lr_drawn || p->graph(i)->name().startsWith("lr");
      }
      if (plot_note(p) && plot_note(p)->visible() && plot_note(p)->text().contains("/train/loss damaged or unreadable"))
        loss_noted = true;
    }
    QVERIFY(loss_noted);
    QVERIFY(lr_drawn);
    QVERIFY(cv->values(d, "/train/loss").isEmpty());
  }
};

QTEST_MAIN(GuiDamaged)
#include "test_gui_damaged.moc"
