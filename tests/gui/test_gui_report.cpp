// The headless report (`mxsim-inspector --render` without --layer, what `mxsim report` runs)
// on a trace the simulator writes here with two quantized snapshot layers: one image per view,
// layer and operand the trace holds, named after them, each 1280x800 with something drawn;
// the overview figures draw every layer in every panel, in the layer's colour, from the
// trace's own values; index.html lists exactly the images written; --layer restricts, and a
// layer, operand or view the trace does not have is a usage error (exit 2).
#include <QDir>
#include <QFile>
#include <QImage>
#include <QRegularExpression>
#include <QSet>
#include <QTest>
#include <cmath>
#include <cstring>
#include <tuple>

#include "gui_test_util.hpp"
#include "mxsim/trace/reader.hpp"
#include "names.hpp"
#include "render.hpp"
#include "report.hpp"

using namespace mxsim::inspector;

namespace {

/// Pixels of rows [y0, y1) of the hue of `c` (within 20 degrees, clearly saturated): a line
/// of that colour, also where antialiasing blends it with the background or a line below.
int count_colour(const QImage& img, QColor c, int y0, int y1) {
  int n = 0;
  for (int y = y0; y < y1; ++y)
    for (int x = 0; x < img.width(); ++x) {
      const QColor p = img.pixelColor(x, y);
      const int dh = std::abs(p.hsvHue() - c.hsvHue());
      if (p.hsvSaturation() >= 80 && p.hsvHue() >= 0 && std::min(dh, 360 - dh) <= 20) ++n;
    }
  return n;
}

/// Of a 64 x 40 grid of sample points, the share that is neither of the image's two most
/// common colours (the plot and window backgrounds).
double drawn_share(const QImage& img) {
  QHash<QRgb, int> hist;
  for (int y = 0; y < img.height(); y += 4)
    for (int x = 0; x < img.width(); x += 4) ++hist[img.pixel(x, y)];
  QRgb bg1 = 0, bg2 = 0;
  int n1 = -1, n2 = -1;
  for (auto it = hist.begin(); it != hist.end(); ++it) {
    if (it.value() > n1) {
      bg2 = bg1, n2 = n1;
      bg1 = it.key(), n1 = it.value();
    } else if (it.value() > n2) {
      bg2 = it.key(), n2 = it.value();
    }
  }
  int other = 0, all = 0;
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 40; ++j) {
      const QRgb p = img.pixel(i * img.width() / 64 + 3, j * img.height() / 40 + 3);
      ++all;
      if (p != bg1 && p != bg2) ++other;
    }
  return double(other) / all;
}

QSet<QString> pngs_in(const QString& dir) {
  QSet<QString> s;
  for (const QString& f : QDir(dir).entryList({"*.png"}, QDir::Files)) s.insert(f);
  return s;
}

/// The fields of one CSV line (RFC 4180: a field with a comma is quoted, "" inside is a quote).
QStringList csv_fields(const QString& line) {
  QStringList out;
  QString cur;
  bool quoted = false;
  for (int i = 0; i < line.size(); ++i) {
    const QChar ch = line[i];
    if (quoted && ch == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      cur += '"';
      ++i;
    } else if (ch == '"') {
      quoted = !quoted;
    } else if (ch == ',' && !quoted) {
      out << cur;
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out << cur;
  return out;
}

/// CSV rows of an overview figure: (panel, layer, tensor) -> values by row.
std::map<std::tuple<QString, QString, QString>, std::vector<double>> read_overview_csv(const QString& path) {
  std::map<std::tuple<QString, QString, QString>, std::vector<double>> m;
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly | QIODevice::Text)) return m;
  f.readLine();  // header
  while (!f.atEnd()) {
    const QStringList c = csv_fields(QString::fromUtf8(f.readLine()).trimmed());
    if (c.size() != 6) continue;
    const double v = c[5] == "nan" ? NAN : c[5].toDouble();
    m[{c[0], c[1], c[2]}].push_back(v);
  }
  return m;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

class GuiReport : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString trace_;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    trace_ = dir_.filePath("two_layers.h5");
    // fc1 and fc2 quantized (MXFP4), both snapshot layers: each holds statistics of W, x, dy
    // and block maps of all five operands, oscillation metrics and main_grad snapshots
    const auto res = guitest::write_trace(guitest::tiny({"trace.snapshot_layers=[\"fc1\", \"fc2\"]"}), trace_);
    QCOMPARE(res.steps, 6);
  }

  void everyLayerAndOperandInOneCall() {
    RenderOptions o;
    o.traces = {trace_};
    o.out_dir = dir_.filePath("all");
    QCOMPARE(render(o), 0);
    QSet<QString> want = {"curves.png",          "data.png",          "overview-sqnr.png", "overview-saturation.png",
                          "overview-underflow.png", "overview-osc.png"};
    for (const char* l : {"fc1", "fc2"}) {
      for (const char* op : {"w", "x", "dy", "x_wgrad", "dy_wgrad"}) want.insert(QString("quant-%1-%2.png").arg(l, op));
      want.insert(QString("osc-%1.png").arg(l));
      want.insert(QString("accum-%1.png").arg(l));
    }
    QCOMPARE(pngs_in(o.out_dir), want);  // no compare.png: one trace
    for (const QString& f : want) {
      const QImage img(o.out_dir + "/" + f);
      QCOMPARE(img.size(), QSize(1280, 800));
      // a window grab holds plots, text and tables; the overviews (thin lines on white) are
      // checked line by line below
      if (!f.startsWith("overview-")) QVERIFY2(drawn_share(img) > 0.03, qPrintable(f + ": almost nothing drawn"));
      QVERIFY2(QFile::exists(o.out_dir + "/" + QString(f).replace(".png", ".csv")), qPrintable(f));
    }
    // the index lists every image written, each once, and links its data
    QFile idx(o.out_dir + "/index.html");
    QVERIFY(idx.open(QIODevice::ReadOnly));
    const QString html = QString::fromUtf8(idx.readAll());
    QSet<QString> listed;
    int imgs = 0;
    for (auto it = QRegularExpression("<img src=\"([^\"]+)\"").globalMatch(html); it.hasNext(); ++imgs)
      listed.insert(it.next().captured(1));
    QCOMPARE(listed, want);
    QCOMPARE(imgs, int(want.size()));
    for (auto it = QRegularExpression("href=\"([^\"]+\\.csv)\"").globalMatch(html); it.hasNext();) {
      const QString csv = it.next().captured(1);
      QVERIFY2(QFile::exists(o.out_dir + "/" + csv), qPrintable(csv));
    }
    QVERIFY(html.contains("Layer fc1 (mxfp4)") && html.contains("Layer fc2 (mxfp4)"));
  }

  // Each of the three panels of every overview draws both layers, each in its colour.
  void overviewsDrawEveryLayerInEveryPanel() {
    const QString dir = dir_.filePath("all");
    for (const char* f : {"overview-sqnr", "overview-saturation", "overview-underflow", "overview-osc"}) {
      const QImage img(dir + "/" + f + ".png");
      QCOMPARE(img.size(), QSize(1280, 800));
      // panels below the figure title, each a third of the rest; the legend (top right) is
      // left out of the bands so that it cannot stand in for a line
      const int top = 30, band = (img.height() - top) / 3;
      const QImage plot = img.copy(0, 0, img.width() - 200, img.height());
      for (int p = 0; p < 3; ++p)
        for (const char* l : {"fc1", "fc2"}) {
          const int n = count_colour(plot, layer_color(l), top + p * band, top + (p + 1) * band);
          QVERIFY2(n > 40, qPrintable(QString("%1 panel %2: %3 pixels of %4's colour").arg(f).arg(p).arg(n).arg(l)));
        }
    }
  }

  // The overview's values are the trace's: SQNR as stored, saturation and underflow as
  // 100 * (elements) / count, the oscillation panels as flips, flips_total and 100 * ema_frac_above,
  // every row bit for bit.
  void overviewValuesAreTheTraces() {
    const QString dir = dir_.filePath("all");
    mxsim::trace::Reader r(trace_.toStdString());
    const auto sq = read_overview_csv(dir + "/overview-sqnr.csv");
    const auto sat = read_overview_csv(dir + "/overview-saturation.csv");
    const auto und = read_overview_csv(dir + "/overview-underflow.csv");
    const auto osc = read_overview_csv(dir + "/overview-osc.csv");
    uint64_t underflows = 0;
    for (const char* l : {"fc1", "fc2"})
      for (const auto& [op, panel] : {std::pair<const char*, const char*>{"w", "W (fprop/dgrad weight)"},
                                      {"x", "x (fprop input)"},
                                      {"dy", "dy (dgrad grad_output)"}}) {
        const auto want = r.read_series<double>(names::quant(l, op, "sqnr_db"));
        const auto it = sq.find({panel, l, op});
        QVERIFY2(it != sq.end(), qPrintable(QString("%1.%2").arg(l, op)));
        QCOMPARE(it->second.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) QVERIFY(same_bits(it->second[i], want[i]));
        const auto s = r.read_series<uint64_t>(names::quant(l, op, "saturated"));
        const auto c = r.read_series<uint64_t>(names::quant(l, op, "count"));
        const auto jt = sat.find({panel, l, op});
        QVERIFY(jt != sat.end());
        QCOMPARE(jt->second.size(), s.size());
        for (size_t i = 0; i < s.size(); ++i) QVERIFY(same_bits(jt->second[i], 100.0 * double(s[i]) / double(c[i])));
        const auto u = r.read_series<uint64_t>(names::quant(l, op, "underflow"));
        const auto ut = und.find({panel, l, op});
        QVERIFY2(ut != und.end(), qPrintable(QString("underflow %1.%2").arg(l, op)));
        QCOMPARE(ut->second.size(), u.size());
        for (size_t i = 0; i < u.size(); ++i) {
          QVERIFY(same_bits(ut->second[i], 100.0 * double(u[i]) / double(c[i])));
          underflows += u[i];
        }
      }
    // dy of an MXFP4 layer loses its small elements: the underflow panel is not all zeros, so a
    // figure that drew zeros (or the saturation series) in its place would fail above
    QVERIFY(underflows > 0);
    uint64_t flips = 0;
    for (const char* l : {"fc1", "fc2"})
      for (const auto& [stat, panel, scale] :
           {std::tuple<const char*, const char*, double>{"flips", "Oscillations at this step", 1.0},
            {"flips_total", "Oscillations, cumulative over the run", 1.0},
            {"ema_frac_above", "Share of elements with EMA oscillation frequency > 0.01", 100.0}}) {
        std::vector<double> want;  // flips and flips_total are u64 counts, ema_frac_above an f64 share
        if (std::strcmp(stat, "ema_frac_above") == 0) {
          want = r.read_series<double>(names::osc(l, stat));
        } else {
          for (uint64_t n : r.read_series<uint64_t>(names::osc(l, stat))) want.push_back(double(n));
        }
        const auto it = osc.find({panel, l, "w"});
        QVERIFY2(it != osc.end(), qPrintable(QString("%1 %2").arg(l, stat)));
        QCOMPARE(it->second.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) QVERIFY(same_bits(it->second[i], scale * want[i]));
        if (std::strcmp(stat, "flips_total") == 0 && !want.empty()) flips += uint64_t(want.back());
      }
    QVERIFY(flips > 0);  // the run oscillates: the panels hold more than zeros
  }

  void layerOptionRestricts() {
    RenderOptions o;
    o.traces = {trace_};
    o.out_dir = dir_.filePath("fc2");
    o.layer = "fc2";
    QCOMPARE(render(o), 0);
    const QSet<QString> got = pngs_in(o.out_dir);
    for (const QString& f : got) QVERIFY2(!f.contains("fc1"), qPrintable(f));
    QVERIFY(got.contains("quant-fc2-w.png") && got.contains("osc-fc2.png") && got.contains("overview-sqnr.png"));
    const QImage img(o.out_dir + "/overview-sqnr.png");
    QCOMPARE(count_colour(img, layer_color("fc1"), 0, img.height()), 0);
    QVERIFY(count_colour(img, layer_color("fc2"), 0, img.height()) > 100);
    o.out_dir = dir_.filePath("fc2x");
    o.op = "x";
    QCOMPARE(render(o), 0);
    QSet<QString> quant;
    for (const QString& f : pngs_in(o.out_dir))
      if (f.startsWith("quant-")) quant.insert(f);
    QCOMPARE(quant, QSet<QString>{"quant-fc2-x.png"});
  }

  void unknownLayerTensorOrViewIsAUsageError() {
    RenderOptions o;
    o.traces = {trace_};
    o.out_dir = dir_.filePath("bad");
    o.layer = "fc9";
    QCOMPARE(render(o), 2);
    o.layer.clear();
    o.op = "w2";
    QCOMPARE(render(o), 2);
    o.op.clear();
    o.views = {"curves", "bogus"};
    QCOMPARE(render(o), 2);
  }
};

QTEST_MAIN(GuiReport)
#include "test_gui_report.moc"
