#include "report.hpp"

#include <QApplication>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QTextStream>
#include <QThread>
#include <cmath>
#include <map>
#include <qcustomplot.h>

#include "names.hpp"
#include "plot_util.hpp"
#include "state.hpp"
#include "view.hpp"

namespace mxsim::inspector {

namespace {

/// Every series an overview draws, read in one job on the document's I/O thread.
struct OverviewData {
  std::map<std::string, SeriesData> s;
  size_t bytes() const {
    size_t b = 64;
    for (const auto& [n, v] : s) b += n.size() + v.bytes();
    return b;
  }
  const SeriesData* get(const std::string& n) const {
    auto it = s.find(n);
    return it == s.end() ? nullptr : &it->second;
  }
};

struct Line {
  QString layer, tensor, label;
  QVector<double> x, y;
};
struct Panel {
  QString title, ylabel;
  std::vector<Line> lines;
  bool from_zero = false;  ///< shares and counts: the axis starts at 0
  bool counts = false;     ///< integer tick labels (no mix of 750000 and 1e6)
};
struct Figure {
  QString file, title, caption;
  std::vector<Panel> panels;
  bool empty() const {
    for (const auto& p : panels)
      if (!p.lines.empty()) return false;
    return true;
  }
};

/// Runs the job on d's I/O thread and waits for it (events processed meanwhile).
bool read_now(TraceDocument* d, const QString& key, std::function<OverviewData(const trace::Reader&)> job, int ms,
              OverviewData& out, QString* err) {
  QObject receiver;
  bool done = false, ok = false;
  d->fetch<OverviewData>(
      key, QString(), std::move(job), &receiver,
      [&](const OverviewData& v) {
        out = v;
        done = ok = true;
      },
      [&](const QString& e) {
        if (err) *err = e;
        done = true;
      });
  QElapsedTimer t;
  t.start();
  while (!done && t.elapsed() < ms) {
    QApplication::processEvents(QEventLoop::AllEvents, 20);
    if (!done) QThread::msleep(2);
  }
  if (!done && err) *err = "timed out reading the series for the overview figures";
  return ok;
}

QString operand_text(const char* op) {
  for (const auto& o : kOperandInfo)
    if (QString(op) == o.key) return QString(o.label).simplified();
  return op;
}

QString layer_label(const TraceMeta& m, const QString& l) {
  const LayerMeta* lm = m.layer(l);
  return lm && !lm->recipe.isEmpty() ? QString("%1 (%2)").arg(l, lm->recipe) : l;
}

/// Points of a series against the global step; non-finite values become gaps.
Line line_of(const TraceMeta& m, const QString& layer, const QString& tensor, const SeriesData& v,
             const std::function<double(size_t)>& value) {
  Line ln;
  ln.layer = layer;
  ln.tensor = tensor;
  ln.label = layer_label(m, layer);
  const size_t n = size_t(std::min<uint64_t>(v.rows, m.steps));
  ln.x.resize(int(n));
  ln.y.resize(int(n));
  for (size_t i = 0; i < n; ++i) {
    ln.x[int(i)] = double(m.global(i));
    const double y = value(i);
    ln.y[int(i)] = std::isfinite(y) ? y : NAN;
  }
  return ln;
}

QFont font_of(double pt, bool bold = false) {
  QFont f = QApplication::font();
  f.setPointSizeF(pt);
  f.setBold(bold);
  return f;
}

/// One QCustomPlot: the figure's title, then per panel a title row and an axis rect, all axis
/// rects sharing their left and right margins (aligned x axes) and one legend of the layers
/// beside the first panel, outside the data.
bool draw(const Figure& f, const QSize& size, const QString& path, QString* err) {
  QCustomPlot p;
  p.setBackground(Qt::white);
  p.plotLayout()->clear();
  auto* title = new QCPTextElement(&p, f.title, font_of(12, true));
  p.plotLayout()->addElement(0, 0, title);
  auto* margins = new QCPMarginGroup(&p);
  auto* legend = new QCPLegend;
  legend->setFont(font_of(10));
  legend->setBrush(Qt::white);
  legend->setBorderPen(QPen(QColor(160, 160, 160)));
  legend->setRowSpacing(2);
  QStringList in_legend;
  int row = 1;
  for (const Panel& pn : f.panels) {
    auto* pt = new QCPTextElement(&p, pn.title, font_of(10.5, true));
    p.plotLayout()->addElement(row++, 0, pt);
    auto* rect = new QCPAxisRect(&p);
    p.plotLayout()->addElement(row, 0, rect);
    if (row == 2) {  // the legend at the top of the first panel's row, at its own height
      auto* side = new QCPLayoutGrid;
      p.plotLayout()->addElement(row, 1, side);
      side->addElement(0, 0, legend);
      side->addElement(1, 0, new QCPLayoutElement(&p));
      side->setRowStretchFactor(0, 0.001);
      side->setRowStretchFactor(1, 1);
      legend->setLayer("legend");
    }
    ++row;
    rect->setMarginGroup(QCP::msLeft | QCP::msRight, margins);
    QCPAxis* x = rect->axis(QCPAxis::atBottom);
    QCPAxis* y = rect->axis(QCPAxis::atLeft);
    for (QCPAxis* a : {x, y}) {
      a->setLabelFont(font_of(10));
      a->setTickLabelFont(font_of(9.5));
      a->grid()->setPen(QPen(QColor(220, 220, 220), 1, Qt::DotLine));
    }
    x->setLabel("optimizer step");
    y->setLabel(pn.ylabel);
    if (pn.counts) {
      y->setNumberFormat("f");
      y->setNumberPrecision(0);
    }
    rect->setRangeDrag(Qt::Horizontal);
    double lo = INFINITY, hi = -INFINITY, xlo = INFINITY, xhi = -INFINITY;
    for (const Line& ln : pn.lines) {
      auto* g = new QCPGraph(x, y);
      g->setData(ln.x, ln.y, true);
      // the layer's colour, and a dash pattern per line of the panel: a line drawn over an equal
      // one (two layers that never oscillate) leaves the one below visible in its gaps
      QPen pen(layer_color(ln.layer));
      pen.setWidthF(1.5);
      static const Qt::PenStyle kStyles[] = {Qt::SolidLine, Qt::DashLine, Qt::DotLine, Qt::DashDotLine};
      pen.setStyle(kStyles[(&ln - pn.lines.data()) % 4]);
      g->setPen(pen);
      g->setName(ln.label);
      g->removeFromLegend();
      if (!in_legend.contains(ln.label)) {
        in_legend << ln.label;
        legend->addItem(new QCPPlottableLegendItem(legend, g));
      }
      for (int i = 0; i < ln.y.size(); ++i)
        if (std::isfinite(ln.y[i])) {
          lo = std::min(lo, ln.y[i]);
          hi = std::max(hi, ln.y[i]);
          xlo = std::min(xlo, ln.x[i]);
          xhi = std::max(xhi, ln.x[i]);
        }
    }
    if (pn.lines.empty() || !std::isfinite(lo)) {
      auto* note = new QCPItemText(&p);
      note->setClipAxisRect(rect);
      note->position->setAxisRect(rect);
      note->position->setType(QCPItemPosition::ptAxisRectRatio);
      note->position->setCoords(0.5, 0.5);
      note->setText(pn.lines.empty() ? "no layer records this series" : "no finite values");
      note->setFont(font_of(10));
      lo = 0;
      hi = 1;
      xlo = 0;
      xhi = 1;
    }
    if (pn.from_zero) lo = std::min(lo, 0.0);
    if (pn.from_zero && hi <= lo) hi = lo + 1;  // all zero: a unit range, no negative ticks
    const double pad = hi > lo ? 0.06 * (hi - lo) : std::max(1.0, std::fabs(hi) * 0.1);
    // from zero, with a little room below it: a line at 0 stays visible above the axis
    y->setRange(pn.from_zero && lo >= 0 ? -0.5 * pad : lo - pad, hi + pad);
    x->setRange(xlo, xhi > xlo ? xhi : xlo + 1);
  }
  p.plotLayout()->setColumnStretchFactor(1, 0.001);
  for (int r = 1; r < row; ++r) p.plotLayout()->setRowStretchFactor(r, r % 2 == 1 ? 0.001 : 1.0);
  p.plotLayout()->setRowStretchFactor(0, 0.001);
  if (!p.savePng(path, size.width(), size.height(), 1.0)) {
    if (err) *err = "cannot write " + path;
    return false;
  }
  return true;
}

bool write_csv(const Figure& f, const QString& path, const TraceMeta& m, QString* err) {
  QFile file(path);
  if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) {
    if (err) *err = "cannot write " + path;
    return false;
  }
  QTextStream out(&file);
  out << "panel,layer,tensor,row,step,value\n";
  for (const Panel& pn : f.panels)
    for (const Line& ln : pn.lines)
      for (int i = 0; i < ln.y.size(); ++i)
        out << csv_field(pn.title) << ',' << ln.layer << ',' << ln.tensor << ',' << i << ',' << m.global(uint64_t(i))
            << ',' << csv_num(ln.y[i]) << '\n';
  out.flush();
  if (file.error() != QFile::NoError) {
    if (err) *err = "cannot write " + path;
    return false;
  }
  return true;
}

QString html(const QString& s) { return s.toHtmlEscaped(); }

}  // namespace

QColor layer_color(const QString& layer) {
  // the expert layers first: they are the quantized ones of the default recipes
  static const char* order[] = {"fc1", "fc2", "router", "head", "embed"};
  for (int i = 0; i < int(std::size(order)); ++i)
    if (layer == order[i]) return palette_color(i);
  return palette_color(int(qHash(layer) % 8u));  // a recorder's module names: one colour per name, stable
}

bool render_overviews(TraceDocument* d, const OverviewOptions& o, std::vector<ReportImage>& images, QString* err) {
  const TraceMeta& m = d->meta();
  std::vector<std::string> want;
  QStringList quant_layers, osc_layers;
  for (const LayerMeta& l : m.layers) {
    if (!o.layers.contains(l.name)) continue;
    const std::string ln = l.name.toStdString();
    if (l.quantized) {
      quant_layers << l.name;
      for (const char* op : names::kOperands)
        for (const char* stat : {"sqnr_db", "saturated", "underflow", "count"})
          if (m.dataset(names::quant(ln, op, stat))) want.push_back(names::quant(ln, op, stat));
    }
    if (l.osc) {
      osc_layers << l.name;
      for (const char* stat : {"flips", "flips_total", "ema_frac_above"})
        if (m.dataset(names::osc(ln, stat))) want.push_back(names::osc(ln, stat));
    }
  }
  if (want.empty()) return true;
  const uint64_t k = m.steps;
  OverviewData data;
  if (!read_now(
          d, QString("overview#%1#%2").arg(o.layers.join(',')).arg(k),
          [want, k](const trace::Reader& r) {
            OverviewData v;
            for (const std::string& n : want) v.s[n] = read_series_double(r, n, 0, k);
            return v;
          },
          o.timeout_ms, data, err))
    return false;

  std::vector<Figure> figs;
  const QString trace = QFileInfo(m.path).fileName();
  auto quant_fig = [&](const QString& file, const QString& what, const char* stat, const QString& ylabel, bool share) {
    Figure f;
    f.file = file;
    f.title = QString("%1 per layer over steps  (%2, micro-batch 0 of each step)").arg(what, trace);
    f.caption = QString("%1 of W, x and dy of every quantized layer over the optimizer steps").arg(what);
    for (const char* op : names::kOperands) {
      Panel pn;
      pn.title = operand_text(op);
      pn.ylabel = ylabel;
      pn.from_zero = share;
      for (const QString& l : quant_layers) {
        const std::string ln = l.toStdString();
        const SeriesData* v = data.get(names::quant(ln, op, stat));
        const SeriesData* c = data.get(names::quant(ln, op, "count"));
        if (!v || (share && !c)) continue;
        pn.lines.push_back(line_of(m, l, op, *v, [&](size_t i) {
          if (!share) return v->v[i];
          const double n = c->v[i];
          return n > 0 ? 100.0 * v->v[i] / n : NAN;
        }));
      }
      f.panels.push_back(std::move(pn));
    }
    figs.push_back(std::move(f));
  };
  if (!quant_layers.isEmpty()) {
    quant_fig("overview-sqnr", "Quantization SQNR", "sqnr_db", "SQNR (dB)", false);
    quant_fig("overview-saturation", "Saturation (|x| clamped to the largest value)", "saturated",
              "saturated (% of elements)", true);
    quant_fig("overview-underflow", "Underflow (nonzero -> 0)", "underflow", "underflow (% of elements)", true);
  }
  if (!osc_layers.isEmpty()) {
    Figure f;
    f.file = "overview-osc";
    f.title = QString("Weight oscillations per layer over steps  (%1)").arg(trace);
    f.caption = "Oscillations of every quantized weight (Nagel et al. 2022): per step, cumulative, and the share of "
                "elements whose EMA oscillation frequency exceeds 0.01";
    const struct {
      const char* stat;
      const char* title;
      const char* ylabel;
      double scale;
      bool counts;
    } panels[] = {{"flips", "Oscillations at this step", "oscillating elements", 1.0, true},
                  {"flips_total", "Oscillations, cumulative over the run", "oscillations (all elements)", 1.0, true},
                  {"ema_frac_above", "Share of elements with EMA oscillation frequency > 0.01", "elements (%)", 100.0, false}};
    for (const auto& pd : panels) {
      Panel pn;
      pn.title = pd.title;
      pn.ylabel = pd.ylabel;
      pn.from_zero = true;
      pn.counts = pd.counts;
      for (const QString& l : osc_layers)
        if (const SeriesData* v = data.get(names::osc(l.toStdString(), pd.stat)))
          pn.lines.push_back(line_of(m, l, "w", *v, [&](size_t i) { return pd.scale * v->v[i]; }));
      f.panels.push_back(std::move(pn));
    }
    figs.push_back(std::move(f));
  }
  for (const Figure& f : figs) {
    if (f.empty()) continue;
    const QString png = o.out_dir + "/" + f.file + ".png", csv = o.out_dir + "/" + f.file + ".csv";
    if (!draw(f, o.size, png, err) || !write_csv(f, csv, m, err)) return false;
    images.push_back({"Overview", f.file + ".png", f.file + ".csv", f.caption});
    std::printf("%s  %s (%dx%d)\n", qPrintable(png), qPrintable(f.caption), o.size.width(), o.size.height());
  }
  return true;
}

bool write_index(const QString& out_dir, const TraceMeta& m, qint64 row, const std::vector<ReportImage>& images,
                 const std::vector<std::pair<QString, QString>>& notes, QString* err) {
  const QString path = out_dir + "/index.html";
  QFile file(path);
  if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) {
    if (err) *err = "cannot write " + path;
    return false;
  }
  QTextStream out(&file);
  const QString name = QFileInfo(m.path).fileName();
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>mxsim report: " << html(name)
      << "</title>\n<style>body{font-family:sans-serif;margin:1em 2em;max-width:1320px}"
         "img{max-width:100%;height:auto;border:1px solid #ccc}figure{margin:0 0 2em 0}"
         "figcaption{color:#333;margin-top:.3em}code{background:#f4f4f4}</style>\n</head>\n<body>\n";
  out << "<h1>mxsim report: " << html(name) << "</h1>\n<p><code>" << html(m.path) << "</code>: trace format "
      << m.format << ", " << m.steps << " complete steps";
  if (m.steps > 0) out << " (optimizer steps " << m.global(0) << " to " << m.global(m.steps - 1) << ")";
  out << "; mxsim " << html(QString::fromStdString(m.prov.version)) << " ("
      << html(QString::fromStdString(m.prov.git_describe)) << "), backend " << html(QString::fromStdString(m.prov.backend))
      << ", seed " << m.prov.seed << ", " << html(QString::fromStdString(m.prov.date)) << ".</p>\n";
  if (m.steps > 0)
    out << "<p>Views that show one step show optimizer step " << m.global(uint64_t(row)) << " (trace row " << row
        << ", what --step takes); the overview figures and every curve cover all steps.</p>\n";
  QStringList sections;
  for (const ReportImage& im : images)
    if (!sections.contains(im.section)) sections << im.section;
  auto anchor = [](const QString& s) {
    QString a;
    for (const QChar c : s.toLower()) a += c.isLetterOrNumber() ? c : QChar('-');
    while (a.contains("--")) a.replace("--", "-");
    while (a.endsWith('-')) a.chop(1);
    return a;
  };
  out << "<ul>\n";
  for (const QString& s : sections) out << "<li><a href=\"#" << anchor(s) << "\">" << html(s) << "</a></li>\n";
  out << "</ul>\n";
  for (const QString& s : sections) {
    out << "<h2 id=\"" << anchor(s) << "\">" << html(s) << "</h2>\n";
    for (const auto& [sec, note] : notes)
      if (sec == s) out << "<p>" << html(note) << "</p>\n";
    for (const ReportImage& im : images) {
      if (im.section != s) continue;
      out << "<figure><a href=\"" << html(im.png) << "\"><img src=\"" << html(im.png) << "\" alt=\"" << html(im.caption)
          << "\"></a>\n<figcaption><code>" << html(im.png) << "</code>: " << html(im.caption);
      if (!im.csv.isEmpty()) out << " (<a href=\"" << html(im.csv) << "\">data, CSV</a>)";
      out << "</figcaption></figure>\n";
    }
  }
  out << "</body>\n</html>\n";
  out.flush();
  if (file.error() != QFile::NoError) {
    if (err) *err = "cannot write " + path;
    return false;
  }
  std::printf("%s  index of %zu images\n", qPrintable(path), images.size());
  return true;
}

}  // namespace mxsim::inspector
