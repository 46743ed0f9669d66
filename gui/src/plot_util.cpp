#include "plot_util.hpp"

#include <QTextLayout>
#include <algorithm>
#include <cmath>

namespace mxsim::inspector {

namespace {
const char* kTitleProp = "mxsim_title";
const char* kMarkerProp = "mxsim_marker";
const char* kNoteProp = "mxsim_note";

/// `text` broken into lines no wider than `width` pixels in font `f`: each line of it
/// (explicit line breaks stay) at word boundaries, and inside a word only where one word is
/// wider than a line (a dataset path). width <= 0: unchanged.
QString wrap_text(const QString& text, const QFont& f, int width) {
  if (width <= 0) return text;
  QTextOption opt;
  opt.setWrapMode(QTextOption::WrapAtWordBoundaryOrAnywhere);
  QStringList out;
  for (const QString& para : text.split('\n')) {
    QTextLayout tl(para, f);
    tl.setTextOption(opt);
    tl.beginLayout();
    bool any = false;
    for (QTextLine line = tl.createLine(); line.isValid(); line = tl.createLine()) {
      line.setLineWidth(width);
      out << para.mid(line.textStart(), line.textLength()).trimmed();
      any = true;
    }
    tl.endLayout();
    if (!any) out << QString();
  }
  return out.join('\n');
}

/// The title row of make_plot: a text element whose text wraps to the width the plot's layout
/// gives it, its height growing by the lines, so that no title runs past the plot's edges.
/// QCPTextElement asks for its text's full width as its minimum (the row then spans the plot
/// and the text is clipped at both ends when the plot is narrower, and a title beside a colour
/// scale is centred on the axis rect's column, not the plot); this one asks only for its
/// margins' width and for the height of its text wrapped to `wrap_width` (set before every
/// replot from a layout pass, see make_plot). text() stays the text as given.
class TitleElement : public QCPTextElement {
 public:
  TitleElement(QCustomPlot* p, const QString& text, const QFont& f) : QCPTextElement(p, text, f) {}
  QRect drawn() const { return mTextBoundingRect; }
  void setWrapWidth(int w) { wrap_w_ = w; }

 protected:
  QString shown(int outer_width) const {
    return wrap_text(mText, mainFont(), outer_width - mMargins.left() - mMargins.right() - 2);
  }
  QSize text_size() const {
    return QFontMetrics(mainFont()).boundingRect(0, 0, 0, 0, Qt::TextDontClip | mTextFlags, shown(wrap_w_)).size();
  }
  QSize minimumOuterSizeHint() const override {
    return {mMargins.left() + mMargins.right(), text_size().height() + mMargins.top() + mMargins.bottom()};
  }
  QSize maximumOuterSizeHint() const override {
    return {QWIDGETSIZE_MAX, text_size().height() + mMargins.top() + mMargins.bottom()};
  }
  void draw(QCPPainter* painter) override {
    painter->setFont(mainFont());
    painter->setPen(QPen(mainTextColor()));
    painter->drawText(mRect, mTextFlags, shown(mOuterRect.width()), &mTextBoundingRect);
  }

 private:
  int wrap_w_ = 0;
};

/// The note of set_plot_note: a text item whose text wraps to its axis rect's width (less its
/// padding), so that a long reason stays inside the plot; it remembers where it drew its box.
class NoteItem : public QCPItemText {
 public:
  using QCPItemText::QCPItemText;
  QRect drawn() const { return drawn_; }

 protected:
  void draw(QCPPainter* painter) override {
    const QString raw = mText;
    const QCPAxisRect* ar = parentPlot()->axisRect();
    const int width = (ar ? ar->rect().width() : parentPlot()->viewport().width()) - padding().left() - padding().right() - 8;
    mText = wrap_text(raw, mainFont(), std::max(width, 40));
    QCPItemText::draw(painter);
    // the box QCPItemText::draw paints: the text's bounding rect plus padding, placed by the
    // position alignment at the position's pixel (centre by default; the accumulation view's
    // verdict stands in a corner)
    const QRect t = QFontMetrics(mainFont()).boundingRect(0, 0, 0, 0, Qt::TextDontClip | textAlignment(), mText);
    QRect box = t.adjusted(-padding().left(), -padding().top(), padding().right(), padding().bottom());
    const QPoint at = position->pixelPosition().toPoint();
    const Qt::Alignment a = positionAlignment();
    box.moveTopLeft({a & Qt::AlignLeft ? at.x() : a & Qt::AlignRight ? at.x() - box.width() : at.x() - box.width() / 2,
                     a & Qt::AlignTop ? at.y() : a & Qt::AlignBottom ? at.y() - box.height() : at.y() - box.height() / 2});
    drawn_ = box;
    mText = raw;
  }

 private:
  QRect drawn_;
};

/// An axis label wraps to the axis' length like the title (a colour scale's vertical label, a
/// map's long x label in a narrow window). The label as given is kept in a property: label()
/// holds the wrapped text until the next setLabel, which the hook tells apart from its own.
void wrap_axis_label(QCPAxis* a) {
  if (!a || !a->visible() || !a->axisRect()) return;
  const QString cur = a->label();
  const bool ours = a->property("mxsim_label_wrapped").toString() == cur && !cur.isEmpty();
  const QString raw = ours ? a->property("mxsim_label_raw").toString() : cur;
  if (raw.isEmpty()) return;
  const int len = a->orientation() == Qt::Horizontal ? a->axisRect()->width() : a->axisRect()->height();
  const QString w = wrap_text(raw, a->labelFont(), len - 8);  // slack: more lines widen the margins a little
  a->setProperty("mxsim_label_raw", raw);
  a->setProperty("mxsim_label_wrapped", w);
  if (w != cur) a->setLabel(w);
}

TitleElement* title_of(QCustomPlot* p) { return static_cast<TitleElement*>(p->property(kTitleProp).value<void*>()); }

/// The legend of a make_plot plot lives in the plot layout's last row, under the axis rect and
/// its labels, so that it never covers data (QCustomPlot's default puts it inside the axis rect,
/// where each plot had to leave headroom and data still ran under it). Called before every
/// replot: a legend shown with items takes that row, in as many columns as the plot's width
/// holds; otherwise it leaves the layout (a layout keeps room for a hidden element) and its own
/// layer is hidden (a legend outside any layout would still draw at its old place).
void place_legend(QCustomPlot* p) {
  QCPLegend* lg = p->legend;
  QCPLayoutGrid* pl = p->plotLayout();
  int items = 0, widest = 1;  // itemCount() counts the grid's cells, the empty ones of its last row too
  for (int i = 0; i < lg->itemCount(); ++i)
    if (QCPLayoutElement* it = lg->item(i)) {
      ++items;
      widest = std::max(widest, it->minimumOuterSizeHint().width());
    }
  const bool show = lg->visible() && items > 0;
  if (show && lg->layout() != pl) {
    const int row = pl->rowCount();
    pl->addElement(row, 0, lg);
    pl->setRowStretchFactor(row, 0.001);  // its items' height; the axis rect takes the rest
  } else if (!show && lg->layout() == pl) {
    pl->take(lg);
    pl->simplify();
  }
  if (lg->layer()) lg->layer()->setVisible(show);
  if (!show) return;
  const int avail = p->viewport().width() - lg->margins().left() - lg->margins().right();
  const int cols = std::clamp((avail + lg->columnSpacing()) / (widest + lg->columnSpacing()), 1, items);
  if (lg->wrap() != cols || lg->fillOrder() != QCPLayoutGrid::foColumnsFirst) {
    lg->setWrap(cols);
    lg->setFillOrder(QCPLayoutGrid::foColumnsFirst, true);
  }
}
}  // namespace

QCustomPlot* make_plot(QWidget* parent, const QString& title) {
  auto* p = new QCustomPlot(parent);
  p->setBackground(Qt::white);
  p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  p->setNoAntialiasingOnDrag(true);
  p->setMinimumSize(220, 160);
  QFont f = p->font();
  f.setPointSizeF(9);
  for (QCPAxis* a : {p->xAxis, p->yAxis, p->xAxis2, p->yAxis2}) {
    a->setLabelFont(f);
    a->setTickLabelFont(f);
  }
  p->legend->setFont(f);
  p->legend->setBrush(Qt::white);
  p->legend->setBorderPen(Qt::NoPen);  // a row under the plot, not a box over it (place_legend)
  p->legend->setColumnSpacing(14);
  p->axisRect()->insetLayout()->take(p->legend);
  // The legend's own box alone on a layer under the items (which stay on "legend", over it), so
  // that place_legend hides it by hiding that layer (the items follow their hidden parent).
  p->addLayer("mxsim_legend", p->layer("legend"), QCustomPlot::limBelow);
  p->legend->setLayer("mxsim_legend");
  p->plotLayout()->insertRow(0);
  QFont tf = f;
  tf.setBold(true);
  auto* t = new TitleElement(p, title, tf);
  p->plotLayout()->addElement(0, 0, t);
  p->setProperty(kTitleProp, QVariant::fromValue(static_cast<void*>(t)));
  // Before every replot, one layout pass at the plot's current size tells the title its width
  // (its column's: the layout's columns do not depend on the title, whose minimum width is its
  // margins); the replot's own layout then gives its row the height of the wrapped lines.
  QObject::connect(p, &QCustomPlot::beforeReplot, t, [p, t] {
    place_legend(p);
    QCPLayoutGrid* l = p->plotLayout();
    l->setOuterRect(p->viewport());
    for (auto phase : {QCPLayoutElement::upPreparation, QCPLayoutElement::upMargins, QCPLayoutElement::upLayout})
      l->update(phase);
    t->setWrapWidth(t->outerRect().width());
    for (QCPAxisRect* ar : p->axisRects())
      for (QCPAxis* a : ar->axes()) wrap_axis_label(a);
    for (QCPLayoutElement* e : l->elements(true))
      if (auto* cs = qobject_cast<QCPColorScale*>(e)) wrap_axis_label(cs->axis());
  });
  return p;
}

void set_title(QCustomPlot* p, const QString& title) {
  if (auto* t = static_cast<QCPTextElement*>(p->property(kTitleProp).value<void*>())) t->setText(title);
}

QString plot_title(QCustomPlot* p) {
  const auto* t = static_cast<QCPTextElement*>(p->property(kTitleProp).value<void*>());
  return t ? t->text() : QString();
}

QRect title_text_rect(QCustomPlot* p) {
  const TitleElement* t = title_of(p);
  return t ? t->drawn() : QRect();
}

QRect title_box(QCustomPlot* p) {
  const TitleElement* t = title_of(p);
  return t ? t->outerRect() : QRect();
}

QColor palette_color(int i) {
  static const QColor c[] = {QColor(0, 114, 178),  QColor(213, 94, 0),   QColor(0, 158, 115), QColor(204, 121, 167),
                             QColor(230, 159, 0),  QColor(86, 180, 233), QColor(0, 0, 0),     QColor(240, 228, 66)};
  return c[((i % 8) + 8) % 8];
}

QCPColorGradient viridis() {
  QCPColorGradient g;
  g.clearColorStops();
  const char* hex[] = {"#440154", "#482878", "#3e4a89", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6dcd59", "#b4de2c", "#fde725"};
  for (int i = 0; i < 10; ++i) g.setColorStopAt(i / 9.0, QColor(hex[i]));
  g.setColorInterpolation(QCPColorGradient::ciRGB);
  g.setNanHandling(QCPColorGradient::nhTransparent);
  return g;
}

QCPColorGradient diverging() {
  QCPColorGradient g;
  g.clearColorStops();
  const char* hex[] = {"#2166ac", "#67a9cf", "#d1e5f0", "#f7f7f7", "#fddbc7", "#ef8a62", "#b2182b"};
  for (int i = 0; i < 7; ++i) g.setColorStopAt(i / 6.0, QColor(hex[i]));
  g.setColorInterpolation(QCPColorGradient::ciRGB);
  g.setNanHandling(QCPColorGradient::nhTransparent);
  return g;
}

Heatmap add_heatmap(QCustomPlot* p, const QString& zlabel) {
  Heatmap h;
  h.map = new QCPColorMap(p->xAxis, p->yAxis);
  h.map->setInterpolate(false);
  h.map->setTightBoundary(false);  // whole cells around the cell centres (element indices)
  h.scale = new QCPColorScale(p);
  // The axis rect and its colour scale side by side in a grid of their own under the title, so
  // that the title spans the plot's whole width (in a second column of the plot's layout, the
  // title would have only the axis rect's column to wrap in).
  QCPAxisRect* ar = p->axisRect();
  auto* row = new QCPLayoutGrid;
  p->plotLayout()->take(ar);
  p->plotLayout()->addElement(1, 0, row);
  row->addElement(0, 0, ar);
  row->addElement(0, 1, h.scale);
  row->setColumnSpacing(0);
  h.scale->setType(QCPAxis::atRight);
  h.scale->axis()->setLabel(zlabel);
  QFont f = p->xAxis->labelFont();
  h.scale->axis()->setLabelFont(f);
  h.scale->axis()->setTickLabelFont(f);
  h.scale->setBarWidth(12);
  h.map->setColorScale(h.scale);
  h.map->setGradient(viridis());
  auto* g = new QCPMarginGroup(p);
  p->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, g);
  h.scale->setMarginGroup(QCP::msBottom | QCP::msTop, g);
  p->yAxis->setRangeReversed(true);  // matrix orientation: row 0 on top
  return h;
}

void fill_heatmap(Heatmap& h, int nx, int ny, const std::vector<double>& z, bool log_scale) {
  // QCPColorMap spreads its cells over the key/value range between the first
  // and last cell centres, so a dimension of one cell (zero range) draws
  // nothing: such a dimension is stored as two equal half cells centred at
  // -0.25 and 0.25, which cover the same [-0.5, 0.5] as one whole cell.
  const int sx = std::max(nx, 2), sy = std::max(ny, 2);
  const auto range_of = [](int n) { return n == 1 ? QCPRange(-0.25, 0.25) : QCPRange(0, std::max(0, n - 1)); };
  auto* d = h.map->data();
  d->setSize(sx, sy);
  d->setRange(range_of(nx), range_of(ny));
  double lo = INFINITY, hi = -INFINITY;
  for (int iy = 0; iy < sy; ++iy)
    for (int ix = 0; ix < sx; ++ix) {
      if (ix >= nx || iy >= ny) {  // the second half cell of a one-cell dimension, or nothing (n == 0)
        d->setCell(ix, iy, nx > 0 && ny > 0 ? d->cell(std::min(ix, nx - 1), std::min(iy, ny - 1)) : NAN);
        continue;
      }
      double v = z[size_t(iy) * size_t(nx) + size_t(ix)];
      if (log_scale && !(v > 0)) v = NAN;
      d->setCell(ix, iy, v);
      if (std::isfinite(v)) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
  h.map->setDataScaleType(log_scale ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
  h.scale->axis()->setScaleType(log_scale ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
  if (log_scale)
    h.scale->axis()->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  else
    h.scale->axis()->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
  if (!std::isfinite(lo)) {
    lo = log_scale ? 1 : 0;
    hi = log_scale ? 10 : 1;
  }
  if (lo == hi) {
    if (log_scale) {
      lo /= 2;
      hi *= 2;
    } else {
      lo -= 0.5;
      hi += 0.5;
    }
  }
  h.map->setDataRange(QCPRange(lo, hi));
  h.map->setVisible(true);
  QCustomPlot* p = h.map->parentPlot();
  p->xAxis->setRange(-0.5, nx - 0.5);
  p->yAxis->setRange(-0.5, ny - 0.5);
  for (QCPAxis* a : {p->xAxis, p->yAxis}) {  // integer ticks: cells are indices
    QSharedPointer<QCPAxisTickerFixed> t(new QCPAxisTickerFixed);
    t->setTickStep(1);
    t->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    a->setTicker(t);
  }
}

void set_step_marker(QCustomPlot* p, double x) {
  auto* line = static_cast<QCPItemStraightLine*>(p->property(kMarkerProp).value<void*>());
  if (!line) {
    if (!p->layer("marker")) {
      p->addLayer("marker", p->layer("main"), QCustomPlot::limAbove);
      p->layer("marker")->setMode(QCPLayer::lmBuffered);
    }
    line = new QCPItemStraightLine(p);
    line->setLayer("marker");
    QPen pen(QColor(200, 0, 0, 160));
    pen.setStyle(Qt::DashLine);
    pen.setWidthF(1.2);
    line->setPen(pen);
    line->setClipToAxisRect(true);
    p->setProperty(kMarkerProp, QVariant::fromValue(static_cast<void*>(line)));
  }
  line->point1->setCoords(x, 0);
  line->point2->setCoords(x, 1);
}

double step_marker(QCustomPlot* p) {
  const auto* line = static_cast<QCPItemStraightLine*>(p->property(kMarkerProp).value<void*>());
  return line ? line->point1->coords().x() : NAN;
}

void replot_marker(QCustomPlot* p) {
  if (QCPLayer* l = p->layer("marker")) l->replot();
}

void set_plot_note(QCustomPlot* p, const QString& text) {
  auto* t = static_cast<QCPItemText*>(p->property(kNoteProp).value<void*>());
  if (!t) {
    t = new NoteItem(p);
    t->setPositionAlignment(Qt::AlignCenter);
    t->position->setType(QCPItemPosition::ptAxisRectRatio);
    t->position->setCoords(0.5, 0.5);
    t->setClipToAxisRect(false);
    t->setPadding(QMargins(8, 6, 8, 6));
    t->setBrush(QColor(255, 250, 225));
    t->setPen(QPen(QColor(180, 160, 90)));
    QFont f = p->xAxis->labelFont();
    t->setFont(f);
    p->setProperty(kNoteProp, QVariant::fromValue(static_cast<void*>(t)));
  }
  t->setText(text);
  t->setVisible(!text.isEmpty());
}

void clear_items(QCustomPlot* p) {
  p->clearItems();
  p->setProperty(kMarkerProp, QVariant());
  p->setProperty(kNoteProp, QVariant());
}

QCPItemText* plot_note(QCustomPlot* p) { return static_cast<QCPItemText*>(p->property(kNoteProp).value<void*>()); }

QRect note_box(QCustomPlot* p) {
  const auto* n = static_cast<NoteItem*>(p->property(kNoteProp).value<void*>());
  return n && n->visible() ? n->drawn() : QRect();
}

QVector<double> smooth_ema(const QVector<double>& v, double w) {
  QVector<double> out(v.size());
  double last = 0;
  int n = 0;
  for (int i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i]) || w <= 0) {
      out[i] = v[i];
      continue;
    }
    last = last * w + (1 - w) * v[i];
    ++n;
    out[i] = last / (1 - std::pow(w, n));
  }
  return out;
}

QString fmt_num(double v, int digits) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return QString::number(v, 'g', digits);
}

}  // namespace mxsim::inspector

namespace mxsim::inspector {
QString axis_label_for(const QString& ds) {
  const QString leaf = ds.section('/', -1);
  if (ds == "/train/loss" || ds == "/train/aux_loss") return "loss (nats)";
  if (ds == "/train/accuracy" || ds == "/eval/test_accuracy") return "accuracy (fraction)";
  if (ds == "/train/lr") return "learning rate";
  if (ds == "/train/step") return "optimizer step";
  if (leaf == "sqnr_db") return "SQNR (dB)";
  if (leaf == "mse") return "MSE (value units^2)";
  if (leaf == "underflow" || leaf == "saturated" || leaf == "count") return leaf + " (elements)";
  if (leaf == "flips") return "oscillations per step (elements)";
  if (leaf == "flips_total") return "oscillations, cumulative";
  if (leaf == "ema_mean") return "mean EMA oscillation frequency (per step)";
  if (leaf.startsWith("ema_frac")) return "share of elements with EMA > 0.01";
  if (leaf == "dist_ratio_mean") return "mean DistRatio (sum|dQ| / sum|dW|)";
  if (leaf == "snapped") return "de-osc snaps (elements)";
  return ds;
}
}  // namespace mxsim::inspector
