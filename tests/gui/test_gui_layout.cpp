// Every plot title, note and axis label fits in its plot: in every view of every layer and
// operand of the tests' default trace (the simulator's tiny run), at the render's window size
// and a smaller one, the text as drawn lies inside the plot widget, a title inside its own row
// (so no line runs past the plot's edge or into the axes below), and no line of an axis label
// is longer than its axis (QCustomPlot centres a label on its axis and clips the rest), and
// every legend shown lies inside the plot and outside its axis rects, where nothing of the data is.
#include <QTest>

#include "gui_test_util.hpp"
#include "main_window.hpp"
#include "plot_util.hpp"
#include "render.hpp"

using namespace mxsim::inspector;

class GuiLayout : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString trace_;

  /// The first axis label of `p` with a line longer than its axis ("" when none).
  static QString axis_label_overflow(QCustomPlot* p) {
    QList<QCPAxis*> axes;
    for (QCPAxisRect* ar : p->axisRects()) axes += ar->axes();
    for (QCPLayoutElement* e : p->plotLayout()->elements(true))
      if (auto* cs = qobject_cast<QCPColorScale*>(e); cs && cs->visible()) axes << cs->axis();
    for (QCPAxis* a : axes) {
      if (!a->visible() || a->label().isEmpty()) continue;
      const int len = a->orientation() == Qt::Horizontal ? a->axisRect()->width() : a->axisRect()->height();
      const int w = QFontMetrics(a->labelFont()).boundingRect(QRect(), Qt::TextDontClip, a->label()).width();
      if (w > len) return QString("axis label '%1': %2 px on a %3 px axis").arg(a->label()).arg(w).arg(len);
    }
    return {};
  }

  /// Every visible plot of `v`: its title and its note inside the plot, the title in its row,
  /// its axis labels no longer than their axes.
  static inline int legends_ = 0;  ///< legends check_view found shown

  static void check_view(View* v, const QString& where) {
    int plots = 0;
    for (QCustomPlot* p : v->findChildren<QCustomPlot*>()) {
      if (!p->isVisible()) continue;
      ++plots;
      const QString title = plot_title(p);
      const QRect pr = p->rect();
      const QString at = QString("%1, plot '%2' (%3x%4)").arg(where, title).arg(pr.width()).arg(pr.height());
      if (!title.isEmpty()) {
        const QRect t = title_text_rect(p), box = title_box(p);
        QVERIFY2(!t.isEmpty(), qPrintable(at + ": title not drawn"));
        QVERIFY2(pr.contains(t), qPrintable(QString("%1: title text %2,%3 %4x%5 outside the plot")
                                                .arg(at).arg(t.x()).arg(t.y()).arg(t.width()).arg(t.height())));
        QVERIFY2(box.contains(t), qPrintable(QString("%1: title text %2x%3 taller or wider than its row %4x%5")
                                                 .arg(at).arg(t.width()).arg(t.height()).arg(box.width()).arg(box.height())));
      }
      const QString over = axis_label_overflow(p);
      QVERIFY2(over.isEmpty(), qPrintable(at + ": " + over));
      if (p->legend->realVisibility() && p->legend->itemCount() > 0) {
        const QRect lg = p->legend->outerRect();
        QVERIFY2(pr.contains(lg), qPrintable(QString("%1: legend %2,%3 %4x%5 outside the plot")
                                                 .arg(at).arg(lg.x()).arg(lg.y()).arg(lg.width()).arg(lg.height())));
        for (QCPAxisRect* ar : p->axisRects())
          QVERIFY2(!lg.intersects(ar->rect()),
                   qPrintable(QString("%1: legend %2,%3 %4x%5 over the data area %6,%7 %8x%9")
                                  .arg(at).arg(lg.x()).arg(lg.y()).arg(lg.width()).arg(lg.height())
                                  .arg(ar->rect().x()).arg(ar->rect().y()).arg(ar->rect().width()).arg(ar->rect().height())));
        // drawn: its swatches and names are something other than the white background
        const QImage img = p->grab().toImage();
        int ink = 0;
        for (int y = lg.top(); y <= lg.bottom(); ++y)
          for (int x = lg.left(); x <= lg.right(); ++x) ink += qGray(img.pixel(x, y)) < 128;
        QVERIFY2(ink > 20 * p->legend->itemCount() / 2, qPrintable(QString("%1: legend not drawn (%2 dark pixels)").arg(at).arg(ink)));
        ++legends_;
      }
      const QRect n = note_box(p);
      if (!n.isEmpty())
        QVERIFY2(pr.contains(n), qPrintable(QString("%1: note '%2' (%3,%4 %5x%6) outside the plot")
                                                .arg(at, plot_note(p)->text()).arg(n.x()).arg(n.y()).arg(n.width()).arg(n.height())));
    }
    if (v->id() != "data") QVERIFY2(plots > 0, qPrintable(where + ": no plot"));  // the raw data view is tables only
  }

  /// `size` empty: the window's own default size; `row` -1: the last step.
  void every_view_fits(const QSize& size, qint64 row = -1) {
    MainWindow w;
    if (!size.isEmpty()) w.resize(size);
    w.show();
    w.openTrace(trace_);
    QVERIFY(wait_idle(w, 20000));
    TraceDocument* d = w.state()->primary();
    QVERIFY(d && d->state() == TraceDocument::State::Ready);
    w.state()->setStep(row >= 0 ? row : qint64(d->steps()) - 1);
    int checked = 0;
    for (const LayerMeta& lm : d->meta().layers) {
      if (!lm.quantized) continue;
      w.state()->setLayer(lm.name);
      for (const auto& op : kOperandInfo) {
        w.state()->setOperand(op.key);
        for (View* v : w.views()) {
          w.showView(v->id());
          QVERIFY(wait_idle(w, 20000));
          check_view(v, QString("%1x%2 step %3, %4 view, %5.%6")
                            .arg(w.width()).arg(w.height()).arg(d->meta().global(uint64_t(w.state()->step())))
                            .arg(v->id(), lm.name, op.key));
          if (QTest::currentTestFailed()) return;
          ++checked;
        }
      }
    }
    QVERIFY(checked >= 2 * 5 * 6);  // fc1 and fc2, five operands, six views
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    trace_ = dir_.filePath("tiny.h5");
    QCOMPARE(guitest::write_trace(guitest::tiny(), trace_).steps, 6);
  }

  // The render's size (mxsim-inspector --render, mxsim report): fc2 (no snapshots) shows its
  // scale exponents over steps with a second title line saying why there are no maps.
  void titlesAndNotesFitAtTheRenderSize() { every_view_fits(QSize(1280, 800)); }
  void titlesAndNotesFitInASmallerWindow() { every_view_fits(QSize(1000, 700)); }
  // The window as it opens (MainWindow's default size), at a snapshot step (step 4: every map,
  // the micro-batch contributions and the watched element's timeline are drawn, each plot with
  // its legend) and at the last step: no legend over the data of any plot.
  void legendsOffTheDataAtTheDefaultSize() {
    legends_ = 0;
    every_view_fits(QSize(), 3);
    if (QTest::currentTestFailed()) return;
    every_view_fits(QSize(), -1);
    QVERIFY2(legends_ >= 2 * 5 * 5, qPrintable(QString("%1 legends checked").arg(legends_)));
  }
};

QTEST_MAIN(GuiLayout)
#include "test_gui_layout.moc"
