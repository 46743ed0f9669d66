// Every plot title, note and axis label fits in its plot: in every view of every layer and
// operand of the tests' default trace (the simulator's tiny run), at the render's window size
// and a smaller one, the text as drawn lies inside the plot widget, a title inside its own row
// (so no line runs past the plot's edge or into the axes below), and no line of an axis label
// is longer than its axis (QCustomPlot centres a label on its axis and clips the rest).
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
      const QRect n = note_box(p);
      if (!n.isEmpty())
        QVERIFY2(pr.contains(n), qPrintable(QString("%1: note '%2' (%3,%4 %5x%6) outside the plot")
                                                .arg(at, plot_note(p)->text()).arg(n.x()).arg(n.y()).arg(n.width()).arg(n.height())));
    }
    if (v->id() != "data") QVERIFY2(plots > 0, qPrintable(where + ": no plot"));  // the raw data view is tables only
  }

  void every_view_fits(const QSize& size) {
    MainWindow w;
    w.resize(size);
    w.show();
    w.openTrace(trace_);
    QVERIFY(wait_idle(w, 20000));
    TraceDocument* d = w.state()->primary();
    QVERIFY(d && d->state() == TraceDocument::State::Ready);
    w.state()->setStep(qint64(d->steps()) - 1);
    int checked = 0;
    for (const LayerMeta& lm : d->meta().layers) {
      if (!lm.quantized) continue;
      w.state()->setLayer(lm.name);
      for (const auto& op : kOperandInfo) {
        w.state()->setOperand(op.key);
        for (View* v : w.views()) {
          w.showView(v->id());
          QVERIFY(wait_idle(w, 20000));
          check_view(v, QString("%1x%2, %3 view, %4.%5").arg(size.width()).arg(size.height()).arg(v->id(), lm.name, op.key));
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
};

QTEST_MAIN(GuiLayout)
#include "test_gui_layout.moc"
