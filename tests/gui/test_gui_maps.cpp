// The views that read the element and block maps of docs/trace-format.md
// ("Element and block maps"), on a trace written here with closed-form values
// under those schema names: the per-block SQNR/MSE map and its hover text
// (scale byte, amax, codes), the per-element flip map, and an element's
// timeline with its block scale (the grid) and snap events.
#include <QTest>
#include <cmath>

#include "gui_test_util.hpp"
#include "mxsim/trace/schema.hpp"
#include "mxsim/trace/writer.hpp"
#include "plot_util.hpp"
#include "state.hpp"
#include "view_osc.hpp"
#include "view_quant.hpp"

using namespace mxsim::inspector;
namespace schema = mxsim::trace::schema;

namespace {
constexpr uint64_t G = 2, N = 64, K = 64, BR = 2, BC = 2;  // W [2, 64, 64] in 32x32 tiles
const std::vector<int64_t> kSteps = {0, 1, 2, 3};

float sqnr(int64_t s, uint64_t b) { return 10.0f + float(s) + 0.5f * float(b); }
uint8_t scale_byte(int64_t s, uint64_t b) { return uint8_t(124 + (b % 3) + (s >= 2 ? 1 : 0)); }
float master(int64_t s, uint64_t i) { return 0.01f * float(i % 97) + 0.001f * float(s); }
uint32_t flips(int64_t s, uint64_t i) { return uint32_t((i * 7 + uint64_t(s)) % 5); }
uint32_t snaps(int64_t s, uint64_t i) { return uint32_t(s >= 2 && i % 2 == 0 ? 1 : 0); }

/// A fc1 layer (mxfp4 in the default config text) with every map at rows 0..3.
void write_trace(const QString& path) {
  using mxsim::trace::DType;
  mxsim::trace::Writer w(path.toStdString(), mxsim::sim::default_config_text(), mxsim::trace::make_provenance("emu", 1));
  w.declare_series(schema::kTrainStep, DType::i64, {});
  w.declare_series(schema::kTrainLoss, DType::f64, {});
  w.declare_series(schema::quant("fc1", "w", "mse"), DType::f64, {});
  w.declare_snapshot(schema::snapshot("fc1", "master"), DType::f32, {G, N, K}, kSteps);
  w.declare_snapshot(schema::snapshot("fc1", "weight_q"), DType::f32, {G, N, K}, kSteps);
  w.declare_snapshot(schema::block_map("fc1", "w", "block_sqnr_db"), DType::f32, {G, BR, BC}, kSteps);
  w.declare_snapshot(schema::block_map("fc1", "w", "block_mse"), DType::f32, {G, BR, BC}, kSteps);
  w.declare_snapshot(schema::block_map("fc1", "w", "block_amax"), DType::f32, {G, BR, BC}, kSteps);
  w.declare_snapshot(schema::block_map("fc1", "w", "scale"), DType::u8, {G, BR, BC}, kSteps);
  w.declare_snapshot(schema::block_map("fc1", "w", "codes"), DType::u8, {G, N, K}, kSteps);
  for (const char* m : {"flips", "snaps"}) w.declare_snapshot(schema::element_map("fc1", m), DType::u32, {G, N, K}, kSteps);
  w.start_swmr();
  const uint64_t ne = G * N * K, nb = G * BR * BC;
  for (int64_t s = 0; s < 4; ++s) {
    w.append(schema::kTrainStep, s + 1);
    w.append(schema::kTrainLoss, 1.0 / double(s + 1));
    w.append(schema::quant("fc1", "w", "mse"), 0.5);
    std::vector<float> m(ne), q(ne), sq(nb), mse(nb), amax(nb);
    std::vector<uint8_t> sc(nb), codes(ne);
    std::vector<uint32_t> fl(ne), sn(ne);
    for (uint64_t i = 0; i < ne; ++i) {
      m[i] = master(s, i);
      q[i] = std::round(m[i] * 8.0f) / 8.0f;
      codes[i] = uint8_t(i % 16);
      fl[i] = flips(s, i);
      sn[i] = snaps(s, i);
    }
    for (uint64_t b = 0; b < nb; ++b) {
      sq[b] = sqnr(s, b);
      mse[b] = 1.0f / sq[b];
      amax[b] = 0.25f * float(b + 1);
      sc[b] = scale_byte(s, b);
    }
    w.write_snapshot(schema::snapshot("fc1", "master"), m.data());
    w.write_snapshot(schema::snapshot("fc1", "weight_q"), q.data());
    w.write_snapshot(schema::block_map("fc1", "w", "block_sqnr_db"), sq.data());
    w.write_snapshot(schema::block_map("fc1", "w", "block_mse"), mse.data());
    w.write_snapshot(schema::block_map("fc1", "w", "block_amax"), amax.data());
    w.write_snapshot(schema::block_map("fc1", "w", "scale"), sc.data());
    w.write_snapshot(schema::block_map("fc1", "w", "codes"), codes.data());
    w.write_snapshot(schema::element_map("fc1", "flips"), fl.data());
    w.write_snapshot(schema::element_map("fc1", "snaps"), sn.data());
    w.end_step();
  }
  w.close();
}
/// Watched elements (format 4): 10 rows of per-step series for two elements of fc1 and one
/// snapshot (row 0) holding x's block maps of two experts with 3 and 0 rows (capacity 4).
constexpr uint64_t kWatchRows = 10, kXR = 4, kXC = 64;
const std::vector<int64_t> kWatched = {int64_t((64 + 40) * 64 + 10), 5};
float watch_master(uint64_t row, size_t j) { return 0.25f + 0.01f * float(row) + float(j); }
uint8_t watch_scale(uint64_t row) { return uint8_t(row < 5 ? 125 : 126); }
uint32_t watch_snaps(uint64_t row, size_t j) { return uint32_t(j == 0 && row >= 6 ? 1 : 0); }
float x_sqnr(uint64_t g, uint64_t r, uint64_t c) { return 20.0f + float(g * 100 + r * 10 + c); }

void write_watch_trace(const QString& path) {
  using mxsim::trace::DType;
  mxsim::trace::Writer w(path.toStdString(), mxsim::sim::default_config_text(), mxsim::trace::make_provenance("emu", 1));
  w.declare_series(schema::kTrainStep, DType::i64, {});
  w.declare_series(schema::quant("fc1", "w", "mse"), DType::f64, {});
  const uint64_t W = kWatched.size();
  w.declare_series(schema::watch("fc1", "element"), DType::i64, {W});
  for (const char* m : {"master", "weight_q"}) w.declare_series(schema::watch("fc1", m), DType::f32, {W});
  for (const char* m : {"code", "scale"}) w.declare_series(schema::watch("fc1", m), DType::u8, {W});
  for (const char* m : {"flips", "snaps"}) w.declare_series(schema::watch("fc1", m), DType::u32, {W});
  const std::vector<int64_t> snap = {0};
  w.declare_snapshot(schema::snapshot("fc1", "master"), DType::f32, {G, N, K}, snap);
  w.declare_snapshot(schema::snapshot("fc1", "weight_q"), DType::f32, {G, N, K}, snap);
  w.declare_snapshot(schema::block_map("fc1", "x", "rows"), DType::i64, {G}, snap);
  for (const char* m : {"block_sqnr_db", "block_mse", "block_amax"})
    w.declare_snapshot(schema::block_map("fc1", "x", m), DType::f32, {G, kXR, kXC / 32}, snap);
  w.declare_snapshot(schema::block_map("fc1", "x", "scale"), DType::u8, {G, kXR, kXC / 32}, snap);
  w.declare_snapshot(schema::block_map("fc1", "x", "codes"), DType::u8, {G, kXR, kXC}, snap);
  w.start_swmr();
  for (uint64_t s = 0; s < kWatchRows; ++s) {
    w.append(schema::kTrainStep, int64_t(s + 1));
    w.append(schema::quant("fc1", "w", "mse"), 0.5);
    std::vector<float> m(W), q(W);
    std::vector<uint8_t> code(W, 3), sc(W, watch_scale(s));
    std::vector<uint32_t> fl(W, 0), sn(W);
    for (size_t j = 0; j < W; ++j) {
      m[j] = watch_master(s, j);
      q[j] = 1.5f * std::ldexp(1.0f, int(sc[j]) - 127);  // code 3 of E2M1 = 1.5
      sn[j] = watch_snaps(s, j);
    }
    w.append(schema::watch("fc1", "element"), kWatched.data());
    w.append(schema::watch("fc1", "master"), m.data());
    w.append(schema::watch("fc1", "weight_q"), q.data());
    w.append(schema::watch("fc1", "code"), code.data());
    w.append(schema::watch("fc1", "scale"), sc.data());
    w.append(schema::watch("fc1", "flips"), fl.data());
    w.append(schema::watch("fc1", "snaps"), sn.data());
    if (s == 0) {
      std::vector<float> z(G * N * K, 0.0f), sq(G * kXR * 2, NAN), other(G * kXR * 2, NAN);
      std::vector<uint8_t> scale(G * kXR * 2, 0), codes(G * kXR * kXC, 0);
      const std::vector<int64_t> rows = {3, 0};
      for (uint64_t r = 0; r < 3; ++r)
        for (uint64_t c = 0; c < 2; ++c) {
          sq[r * 2 + c] = x_sqnr(0, r, c);
          other[r * 2 + c] = 0.125f;
          scale[r * 2 + c] = uint8_t(120 + r);
        }
      w.write_snapshot(schema::snapshot("fc1", "master"), z.data());
      w.write_snapshot(schema::snapshot("fc1", "weight_q"), z.data());
      w.write_snapshot(schema::block_map("fc1", "x", "rows"), rows.data());
      w.write_snapshot(schema::block_map("fc1", "x", "block_sqnr_db"), sq.data());
      w.write_snapshot(schema::block_map("fc1", "x", "block_mse"), other.data());
      w.write_snapshot(schema::block_map("fc1", "x", "block_amax"), other.data());
      w.write_snapshot(schema::block_map("fc1", "x", "scale"), scale.data());
      w.write_snapshot(schema::block_map("fc1", "x", "codes"), codes.data());
    }
    w.end_step();
  }
  w.close();
}
}  // namespace

class GuiMaps : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  InspectorState* st_ = nullptr;

 private slots:
  void initTestCase() {
    const QString p = dir_.filePath("maps.h5");
    write_trace(p);
    st_ = new InspectorState(this);
    TraceDocument* d = st_->traces()->add(p);
    QTRY_VERIFY_WITH_TIMEOUT(d->state() == TraceDocument::State::Ready, 20000);
    st_->setPrimary(d);
    st_->setLayer("fc1");
    st_->setOperand("w");
  }

  // A map of one block row, one block column or one cell (an FP8 tensor-scaled
  // weight, a per-step series in Compare) is drawn: the centre of every cell
  // has the colour of its value, not the background.
  void singleRowAndColumnMapsAreDrawn() {
    struct Case { int nx, ny; };
    for (const Case c : {Case{1, 1}, Case{5, 1}, Case{1, 4}, Case{3, 2}}) {
      QCustomPlot p;
      p.resize(400, 300);
      Heatmap h = add_heatmap(&p, "value");
      std::vector<double> z(size_t(c.nx) * size_t(c.ny));
      for (size_t i = 0; i < z.size(); ++i) z[i] = double(i + 1);
      fill_heatmap(h, c.nx, c.ny, z, false);
      p.replot();
      const QImage img = p.toPixmap(400, 300).toImage();
      for (int iy = 0; iy < c.ny; ++iy)
        for (int ix = 0; ix < c.nx; ++ix) {
          const int px = int(std::lround(p.xAxis->coordToPixel(ix)));
          const int py = int(std::lround(p.yAxis->coordToPixel(iy)));
          const QRgb want = h.map->gradient().color(z[size_t(iy) * size_t(c.nx) + size_t(ix)],
                                                    h.map->dataRange(), false);
          QCOMPARE_NE(img.pixel(px, py) & 0xFFFFFFu, QColor(Qt::white).rgb() & 0xFFFFFFu);
          QCOMPARE(img.pixel(px, py) & 0xFFFFFFu, want & 0xFFFFFFu);
        }
    }
  }

  void blockMapAndHover() {
    QuantView v(st_);
    v.resize(1100, 750);
    v.show();
    v.setMetric(QuantView::Metric::Sqnr);
    st_->setStep(2);
    QVERIFY(guitest::wait_view(&v));
    // group 1, block (1, 0) = flat block 1 * 4 + 1 * 2 + 0 = 6
    const QString t = v.blockInfo(1, 1, 0);
    QVERIFY2(t.contains(QString("scale byte 0x%1 = 2^%2").arg(scale_byte(2, 6), 2, 16, QChar('0')).arg(int(scale_byte(2, 6)) - 127)),
             qPrintable(t));
    QVERIFY2(t.contains("amax 1.75"), qPrintable(t));
    QVERIFY2(t.contains(QString("SQNR %1 dB").arg(double(sqnr(2, 6)))), qPrintable(t));
    // codes of the block's first row: element (g 1, row 32, cols 0..31) -> flat (1*64 + 32)*64 + c, code = flat % 16
    QVERIFY2(t.contains("element codes (rows 32-63, cols 0-31)"), qPrintable(t));
    QVERIFY2(t.contains("\n  00 01 02 03"), qPrintable(t));
    QVERIFY(v.blockInfo(2, 0, 0).isEmpty());  // outside the grid
  }

  void flipMapAndTimelineWithGrid() {
    OscView v(st_);
    v.resize(1100, 750);
    v.show();
    st_->setStep(3);
    st_->setExpert(1);
    st_->setElement(40, 10);
    v.setMetric(0);
    QVERIFY(guitest::wait_view(&v));
    const ElementMap* m = v.map();
    QVERIFY(m);
    QCOMPARE(m->N, 64);
    QCOMPARE(m->K, 64);
    for (uint64_t n : {0u, 40u, 63u})
      for (uint64_t k : {0u, 10u, 63u}) QCOMPARE(m->v[n * 64 + k], double(flips(3, (64 + n) * 64 + k)));
    const ElementTimeline* t = v.timeline();
    QVERIFY(t);
    const uint64_t flat = (64 + 40) * 64 + 10, block = 1 * 4 + 1 * 2 + 0;
    QCOMPARE(t->steps, (std::vector<double>{0, 1, 2, 3}));
    QVERIFY(t->kind == mxsim::ScaleKind::E8M0);
    for (size_t i = 0; i < 4; ++i) {
      QCOMPARE(t->master[i], double(master(int64_t(i), flat)));
      QCOMPARE(t->scale[i], double(scale_byte(int64_t(i), block)));
      QCOMPARE(t->snaps[i], double(snaps(int64_t(i), flat)));
    }
  }

  // A watched element's timeline has every step (the watch series), with its block scale per
  // step and its own snap events; x's block map of micro-batch 0 shows the experts' rows.
  void watchedElementTimelineAndOperandMap() {
    const QString p = dir_.filePath("watch.h5");
    write_watch_trace(p);
    InspectorState st;
    TraceDocument* d = st.traces()->add(p);
    QTRY_VERIFY_WITH_TIMEOUT(d->state() == TraceDocument::State::Ready, 20000);
    st.setPrimary(d);
    st.setLayer("fc1");
    OscView v(&st);
    v.resize(1100, 750);
    v.show();
    st.setStep(7);
    st.setExpert(1);
    st.setElement(40, 10);  // kWatched[0]
    QVERIFY(guitest::wait_view(&v));
    const ElementTimeline* t = v.timeline();
    QVERIFY(t);
    QVERIFY(t->every_step);
    QCOMPARE(t->steps.size(), size_t(kWatchRows));
    for (uint64_t s = 0; s < kWatchRows; ++s) {
      QCOMPARE(t->steps[s], double(s));
      QCOMPARE(t->master[s], double(watch_master(s, 0)));
      QCOMPARE(t->scale[s], double(watch_scale(s)));
      QCOMPARE(t->snaps[s], double(watch_snaps(s, 0)));
    }
    st.setElement(0, 6);  // not watched: the snapshots (one row)
    QVERIFY(guitest::wait_view(&v));
    QVERIFY(v.timeline() && !v.timeline()->every_step);
    QCOMPARE(v.timeline()->steps, (std::vector<double>{0}));
    QVERIFY2(plot_title(v.timelinePlot()).contains("trace.watch_elements"), qPrintable(plot_title(v.timelinePlot())));

    QuantView q(&st);
    q.resize(1100, 750);
    q.show();
    st.setOperand("x");
    st.setStep(0);
    q.setMetric(QuantView::Metric::Sqnr);
    QVERIFY(guitest::wait_view(&q));
    const QString b = q.blockInfo(0, 2, 1);
    QVERIFY2(b.contains(QString("scale byte 0x%1 = 2^%2").arg(122, 2, 16, QChar('0')).arg(122 - 127)), qPrintable(b));
    QVERIFY2(b.contains(QString("SQNR %1 dB").arg(double(x_sqnr(0, 2, 1)))), qPrintable(b));
    QVERIFY2(plot_title(q.mapPlot()).contains("rows per expert: 3, 0"), qPrintable(plot_title(q.mapPlot())));
    QCOMPARE(q.mapPlot()->yAxis->range().upper, 2.5);  // the 3 rows of the fuller expert, not the capacity 4
  }
};

QTEST_MAIN(GuiMaps)
#include "test_gui_maps.moc"
