// The inspector's models and views on real traces written by the simulator in
// this test: metadata, curves, quantization statistics per step, the
// accumulation check, element timelines, raw rows, comparison (ULP) and
// PNG/CSV export. Expected values come from the trainer's own result, the
// model configuration, or the trace library's reader (another read path).
#include <QElapsedTimer>
#include <QFile>
#include <QImage>
#include <QTest>
#include <cmath>
#include <map>
#include <cstring>

#include "gui_test_util.hpp"
#include "mxsim/trace/reader.hpp"
#include "mxsim/trace/writer.hpp"
#include "plot_util.hpp"
#include "render.hpp"
#include "state.hpp"
#include "view_accum.hpp"
#include "view_compare.hpp"
#include "view_curves.hpp"
#include "view_data.hpp"
#include "view_osc.hpp"
#include "view_quant.hpp"

using namespace mxsim::inspector;

class GuiViews : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString trace_;
  mxsim::sim::TrainResult res_;
  InspectorState* st_ = nullptr;
  TraceDocument* doc_ = nullptr;

  static bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
  /// A tiny run with `overrides` written at `path` and opened as st's primary trace.
  static bool openTrainedTrace(InspectorState& st, const QString& path, std::vector<std::string> overrides) {
    if (guitest::write_trace(guitest::tiny(std::move(overrides)), path).steps != 6) return false;
    TraceDocument* d = st.traces()->add(path);
    QElapsedTimer t;
    t.start();
    while (d->state() == TraceDocument::State::Opening && t.elapsed() < 20000) QTest::qWait(20);
    if (d->state() != TraceDocument::State::Ready) return false;
    st.setPrimary(d);
    return true;
  }
  /// v shown at 1000 x 800 on fc1's operand op, its data loaded.
  bool showFc1(QuantView& v, const char* op) {
    v.resize(1000, 800);
    v.show();
    st_->setLayer("fc1");
    st_->setOperand(op);
    return guitest::wait_view(&v);
  }

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    trace_ = dir_.filePath("tiny.h5");
    res_ = guitest::write_trace(guitest::tiny(), trace_);
    QCOMPARE(res_.steps, 6);
    st_ = new InspectorState(this);
    doc_ = st_->traces()->add(trace_);
    QTRY_VERIFY_WITH_TIMEOUT(doc_->state() != TraceDocument::State::Opening, 20000);
    QCOMPARE(doc_->state(), TraceDocument::State::Ready);
    st_->setPrimary(doc_);
    st_->setLayer("fc1");
  }

  void metadataFromTheTrace() {
    const TraceMeta& m = doc_->meta();
    QCOMPARE(m.steps, uint64_t(6));
    QCOMPARE(m.num_microbatches, 4);
    QCOMPARE(m.experts, 4);
    const LayerMeta* fc1 = m.layer("fc1");
    QVERIFY(fc1);
    QVERIFY(fc1->quantized);
    QCOMPARE(fc1->recipe, QString("mxfp4"));
    QCOMPARE(fc1->shape[0], uint64_t(4));   // experts
    QCOMPARE(fc1->shape[1], uint64_t(64));  // d_ff
    QCOMPARE(fc1->shape[2], uint64_t(32));  // d_model
    QCOMPARE(fc1->blocks[0].text(), QString("32x32"));  // MXFP4 weights: 32x32 tiles
    QCOMPARE(fc1->blocks[1].text(), QString("1x32"));   // activations: 1x32 along K
    QVERIFY(!m.layer("embed")->quantized);
    QCOMPARE(m.global(0), int64_t(1));
    QCOMPARE(fc1->snapshot_steps, (std::vector<int64_t>{1, 3}));
  }

  void curvesEqualTheTrainersLosses() {
    CurvesView v(st_);
    v.resize(1000, 700);
    v.show();
    QVERIFY(guitest::wait_view(&v));
    const QVector<double> loss = v.values(doc_, "/train/loss");
    QCOMPARE(loss.size(), int(res_.losses.size()));
    for (int i = 0; i < loss.size(); ++i) QVERIFY2(same_bits(loss[i], res_.losses[size_t(i)]), qPrintable(QString::number(i)));
  }

  void quantStatisticsFollowTheStep() {
    QuantView v(st_);
    v.resize(1100, 750);
    v.show();
    mxsim::trace::Reader r(trace_.toStdString());
    for (qint64 s : {0, 5, 2}) {
      st_->setStep(s);
      QVERIFY(guitest::wait_view(&v));
      const QuantStep* q = v.stepData();
      QVERIFY(q);
      QCOMPARE(int(q->e.size()), 6);  // fc1, fc2 x {w, x, dy}
      const QuantStep::Entry* e = q->find("fc1", "w");
      QVERIFY(e);
      // fc1 W is [4, 64, 32]: 8192 elements in 4 * 2 * 1 = 8 tiles of 32x32
      QCOMPARE(e->count, 8192.0);
      double blocks = 0;
      for (double c : e->hist) blocks += c;
      QCOMPARE(blocks, 8.0);
      const auto hist = r.read_series<uint64_t>("/layers/fc1/quant/w/scale_exp_hist", uint64_t(s), 1);
      for (size_t b = 0; b < 256; ++b) QCOMPARE(e->hist[b], double(hist[b]));
      QVERIFY(same_bits(e->mse, r.read_series<double>("/layers/fc1/quant/w/mse", uint64_t(s), 1).at(0)));
      QCOMPARE(v.summary().rowCount(), 6);
    }
    // the summary's SQNR cell of fc1.x at step 2 is the trace's
    const double sq = r.read_series<double>("/layers/fc1/quant/x/sqnr_db", 2, 1).at(0);
    bool found = false;
    for (const auto& row : v.summary().rows())
      if (row[0].toString() == "fc1" && row[1].toString() == "x") {
        QVERIFY(same_bits(row[5].toDouble(), sq));
        found = true;
      }
    QVERIFY(found);
  }

  void accumulationEqualsMainGradBitForBit() {
    AccumView v(st_);
    v.resize(1100, 750);
    v.show();
    st_->setStep(1);  // a snapshot step
    for (int e = 0; e < 4; ++e) {
      st_->setExpert(e);
      st_->setElement(5, 7);
      QVERIFY(guitest::wait_view(&v));
      const AccumPoint* p = v.point();
      QVERIFY(p);
      QCOMPARE(int(p->contrib.size()), 4);
      QVERIFY2(p->bit_equal, "fl32 running sum of the wgrad_mb contributions != stored main_grad");
    }
    v.setBlockMode(true);
    QVERIFY(guitest::wait_view(&v));
    QVERIFY(v.point());
    QCOMPARE(v.point()->mismatched, int64_t(0));
    // every micro-batch routes 32 tokens to top-2 experts: 64 assignments per row
    const auto& t = v.tokens();
    QCOMPARE(int(t.size()), 16);
    for (int mb = 0; mb < 4; ++mb) {
      double s = 0;
      for (int e = 0; e < 4; ++e) s += t[size_t(mb * 4 + e)];
      QCOMPARE(s, 64.0);
    }
    // a step without snapshots says so
    st_->setStep(2);
    QVERIFY(guitest::wait_view(&v));
    QVERIFY(!v.point());
    st_->setExpert(0);
    v.setBlockMode(false);
  }

  void elementTimelineMatchesTheSnapshots() {
    OscView v(st_);
    v.resize(1100, 750);
    v.show();
    st_->setStep(3);
    st_->setExpert(2);
    st_->setElement(10, 20);
    QVERIFY(guitest::wait_view(&v));
    const ElementTimeline* t = v.timeline();
    QVERIFY(t);
    QCOMPARE(t->steps, (std::vector<double>{1, 3}));
    mxsim::trace::Reader r(trace_.toStdString());
    const size_t flat = (2 * 64 + 10) * 32 + 20;
    for (size_t i = 0; i < 2; ++i) {
      const auto m = r.read_snapshot<float>("/snap/fc1/master", int64_t(t->steps[i]));
      const auto q = r.read_snapshot<float>("/snap/fc1/weight_q", int64_t(t->steps[i]));
      QVERIFY(same_bits(t->master[i], double(m[flat])));
      QVERIFY(same_bits(t->wq[i], double(q[flat])));
    }
    // the residual map at a snapshot step is |master - weight_q| of the expert
    v.setMetric(3);
    QVERIFY(guitest::wait_view(&v));
    QVERIFY(v.map());
    const auto m = r.read_snapshot<float>("/snap/fc1/master", 3), q = r.read_snapshot<float>("/snap/fc1/weight_q", 3);
    QCOMPARE(v.map()->v[10 * 32 + 20], std::fabs(double(m[flat]) - double(q[flat])));
    st_->setExpert(0);
  }

  void rawDataShowsTheRow() {
    DataView v(st_);
    v.resize(1000, 700);
    v.show();
    st_->setStep(4);
    v.setDataset("/train/tokens_per_expert");
    QVERIFY(guitest::wait_view(&v));
    QCOMPARE(v.array().rowCount(), 4);
    QCOMPARE(v.array().columnCount(), 4);
    mxsim::trace::Reader r(trace_.toStdString());
    const auto row = r.read_series<int64_t>("/train/tokens_per_expert", 4, 1);
    for (size_t i = 0; i < 16; ++i) QCOMPARE(v.array().text(i / 4, i % 4), QString::number(row[i]));
  }

  // The bias and rounding plot draws the trace's own numbers: the norm ratio 10^(sqnr_db / 20)
  // and the share rounded_up / rounded of fc1's dy, read here through the trace library.
  void qualityPlotFromTheTrace() {
    QuantView v(st_);
    QVERIFY(showFc1(v, "dy"));
    QCustomPlot* p = v.qualityPlot();
    QTRY_COMPARE_WITH_TIMEOUT(p->graphCount(), 4, 10000);
    mxsim::trace::Reader r(trace_.toStdString());
    const auto sq = r.read_series<double>("/layers/fc1/quant/dy/sqnr_db");
    const auto rd = r.read_series<uint64_t>("/layers/fc1/quant/dy/rounded");
    const auto up = r.read_series<uint64_t>("/layers/fc1/quant/dy/rounded_up");
    QVERIFY(rd[0] > 0);
    const auto* ratio = p->graph(0)->data().data();
    const auto* share = p->graph(1)->data().data();
    QCOMPARE(ratio->size(), int(sq.size()));
    for (int i = 0; i < ratio->size(); ++i) {
      QVERIFY(same_bits(ratio->at(i)->value, std::pow(10.0, sq[size_t(i)] / 20.0)));
      QVERIFY(same_bits(share->at(i)->value, double(up[size_t(i)]) / double(rd[size_t(i)])));
    }
    bool label = false;
    for (int i = 0; i < p->itemCount(); ++i)
      if (auto* t = qobject_cast<QCPItemText*>(p->item(i))) label = label || t->text().startsWith("sqrt(3)");
    QVERIFY(label);
    st_->setOperand("w");
  }

  // The GEMMs against their BF16 shadow: fprop's output SQNR of micro-batch 0 per step, as the
  // trace holds it ([micro-batches] rows: every 4th value here).
  void shadowPlotFromTheTrace() {
    QuantView v(st_);
    QVERIFY(showFc1(v, "x"));
    QCustomPlot* p = v.shadowPlot();
    QTRY_VERIFY_WITH_TIMEOUT(p->graphCount() >= 3, 10000);
    QVERIFY(p->isVisible());  // the default for x where the trace has a shadow
    mxsim::trace::Reader r(trace_.toStdString());
    const auto sq = r.read_series<double>("/layers/fc1/shadow/fprop/sqnr_db");
    const auto* y = p->graph(0)->data().data();
    QCOMPARE(y->size(), int(sq.size() / 4));
    for (int i = 0; i < y->size(); ++i) QVERIFY(same_bits(y->at(i)->value, sq[size_t(i) * 4]));
    st_->setOperand("w");
  }

  // NVFP4's two scale levels on the map of scale exponents over steps: a line at log2 of the
  // trace's tensor_scale_inv per step over the blocks' exponents (which bin the product), and no
  // line for a one-level layer. The histogram leaves the zero-scale bin (all-zero blocks, at
  // -127) out of its bars, which would squash the exponents in use, and counts it in its text.
  void tensorScaleLineOverTheExponents() {
    const QString path = dir_.filePath("nvfp4.h5");
    InspectorState st(this);
    QVERIFY(openTrainedTrace(st, path, {"recipe.fc2=\"nvfp4\""}));
    QuantView v(&st);
    v.resize(1100, 750);
    v.show();
    st.setLayer("fc2");  // no snapshot maps: the map shows the exponents over steps
    st.setOperand("dy");
    st.setStep(3);
    QVERIFY(guitest::wait_view(&v));
    QCustomPlot* m = v.mapPlot();
    QCOMPARE(m->graphCount(), 1);
    QCOMPARE(m->graph(0)->name(), QString("log2 FP32 tensor scale S_dec"));
    mxsim::trace::Reader r(path.toStdString());
    const auto ts = r.read_series<float>("/layers/fc2/quant/dy/tensor_scale_inv");
    const auto* line = m->graph(0)->data().data();
    QCOMPARE(line->size(), int(ts.size()));
    for (int i = 0; i < line->size(); ++i) {
      QVERIFY(ts[size_t(i)] > 0 && ts[size_t(i)] != 1.0f);
      QCOMPARE(line->at(i)->value, std::log2(double(ts[size_t(i)])));
      QVERIFY(m->yAxis->range().contains(line->at(i)->value));  // the axis reaches the line
    }
    const auto hist = r.read_series<uint64_t>("/layers/fc2/quant/dy/scale_exp_hist", 3, 1);
    QVERIFY2(hist[0] > 0, "the tiny run's NVFP4 dy holds all-zero blocks (its padded rows)");
    QVERIFY2(m->yAxis->range().lower > -120, "the map leaves the zero-scale row (-127) out");
    bool row_seen = false;
    for (const auto& row : v.summary().rows())  // and the summary's exponent range too, the zeros counted apart
      if (row[0].toString() == "fc2" && row[1].toString() == "dy") {
        QVERIFY(row[11].toInt() > -127);
        QCOMPARE(row[13].toLongLong(), qint64(hist[0]));
        row_seen = true;
      }
    QVERIFY(row_seen);
    QCustomPlot* h = v.histogramPlot();
    QCPBars* bars = nullptr;
    for (int i = 0; i < h->plottableCount(); ++i)
      if (auto* b = qobject_cast<QCPBars*>(h->plottable(i))) bars = b;
    QVERIFY(bars && !bars->data()->isEmpty());
    for (auto it = bars->data()->constBegin(); it != bars->data()->constEnd(); ++it) QVERIFY(it->key > -127);
    bool counted = false;
    for (int i = 0; i < h->itemCount(); ++i)
      if (auto* t = qobject_cast<QCPItemText*>(h->item(i)))
        counted = counted || t->text().contains(QString("zero scales: %1").arg(hist[0]));
    QVERIFY(counted);
    // a one-level layer (fc2 of the MXFP4 trace) has no tensor scale and no line
    QuantView mx(st_);
    mx.resize(1100, 750);
    mx.show();
    st_->setLayer("fc2");
    st_->setOperand("dy");
    QVERIFY(guitest::wait_view(&mx));
    QCOMPARE(mx.mapPlot()->graphCount(), 0);
    st_->setLayer("fc1");
    st_->setOperand("w");
  }

  // NVFP4 block scales are E4M3 bytes under the FP32 tensor scale, not E8M0 bytes: the weight
  // timeline's grid factor is E4M3(byte) x S_dec of the step (byte from the snapshot's block map,
  // S_dec from quant/w/tensor_scale_inv, decoded here by hand), and a wgrad operand's block-map
  // histogram counts floor(log2(E4M3(byte) x S_dec of the block's expert)) with each expert's own
  // S_dec from the snapshot (reading the bytes as E8M0 gave exponents -127 .. -1).
  void nvfp4ScalesReadAsE4M3TimesTheTensorScale() {
    const QString path = dir_.filePath("nvfp4_fc1.h5");
    InspectorState st(this);
    QVERIFY(openTrainedTrace(st, path, {"recipe.fc1=\"nvfp4\""}));
    st.setLayer("fc1");
    st.setStep(3);
    st.setExpert(2);
    st.setElement(10, 20);
    auto e4m3 = [](uint8_t b) {  // UE4M3 (OCP FP8 E4M3, sign 0): bias 7, subnormals below exponent 1
      const int e = b >> 3 & 15, m = b & 7;
      return e == 0 ? std::ldexp(double(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
    };
    OscView o(&st);
    o.resize(1100, 750);
    o.show();
    QVERIFY(guitest::wait_view(&o));
    const ElementTimeline* t = o.timeline();
    QVERIFY(t && !t->scale.empty());
    QVERIFY(t->kind == mxsim::ScaleKind::UE4M3);
    mxsim::trace::Reader r(path.toStdString());
    const auto ts = r.read_series<float>("/layers/fc1/quant/w/tensor_scale_inv");
    const size_t block = (2 * 4 + 10 / 16) * 2 + 20 / 16;  // fc1 W [4, 64, 32] in 16 x 16 tiles: [4, 4, 2]
    for (size_t i = 0; i < t->steps.size(); ++i) {
      const auto bytes = r.read_snapshot<uint8_t>("/snap/fc1/quant/w/scale", int64_t(t->steps[i]));
      const double want = e4m3(bytes.at(block)) * double(ts.at(size_t(t->steps[i])));
      QCOMPARE(t->scale_value(i), want);
    }
    QuantView q(&st);
    q.resize(1100, 750);
    q.show();
    st.setOperand("x_wgrad");
    QVERIFY(guitest::wait_view(&q));
    // the expected histogram, from the snapshot's bytes, rows and per-expert tensor scales
    const int64_t row = 3;
    const auto bytes = r.read_snapshot<uint8_t>("/snap/fc1/quant/x_wgrad/scale", row);
    const auto rows = r.read_snapshot<int64_t>("/snap/fc1/quant/x_wgrad/rows", row);
    const auto gts = r.read_snapshot<float>("/snap/fc1/quant/x_wgrad/tensor_scale_inv", row);
    const auto& info = r.info("/snap/fc1/quant/x_wgrad/scale");
    const size_t G = info.row_shape.at(0), BR = info.row_shape.at(1), BC = info.row_shape.at(2);
    QCOMPARE(gts.size(), G);
    std::map<int, double> want;
    for (size_t i = 0; i < bytes.size(); ++i) {
      const size_t g = i / (BR * BC), br = (i % (BR * BC)) / BC;
      if (int64_t(br * 16) >= rows[g] || bytes[i] == 0) continue;  // past the expert's rows; zero scales
      want[int(std::floor(std::log2(e4m3(bytes[i]) * double(gts[g]))))] += 1;
    }
    QVERIFY(!want.empty());
    QCustomPlot* h = q.histogramPlot();
    QCPBars* bars = nullptr;
    for (int i = 0; i < h->plottableCount(); ++i)
      if (auto* b = qobject_cast<QCPBars*>(h->plottable(i))) bars = b;
    QVERIFY(bars);
    std::map<int, double> got;
    for (auto it = bars->data()->constBegin(); it != bars->data()->constEnd(); ++it) got[int(it->key)] = it->value;
    QCOMPARE(got, want);
    QVERIFY(!plot_title(h).contains("E4M3 scales alone"));
  }

  void exportWritesPngAndCsv() {
    QuantView v(st_);
    v.resize(1000, 700);
    v.show();
    st_->setStep(5);
    QVERIFY(guitest::wait_view(&v));
    const QString png = dir_.filePath("quant.png");
    QVERIFY(v.exportPng(png));
    QImage img(png);
    QCOMPARE(img.size(), QSize(1000, 700));
    // the tallest bar of the scale histogram is drawn in the first palette colour
    const QuantStep::Entry* e = v.stepData()->find("fc1", "w");
    int best = 0;
    for (int b = 0; b < 255; ++b)
      if (e->hist[size_t(b)] > e->hist[size_t(best)]) best = b;
    QCustomPlot* h = v.histogramPlot();
    const QPoint inplot(int(h->xAxis->coordToPixel(best - 127)), int(h->yAxis->coordToPixel(e->hist[size_t(best)] / 2)));
    const QPoint p = h->mapTo(&v, inplot);
    QCOMPARE(img.pixelColor(p).rgb(), palette_color(0).rgb());
    // the plot background above the bars is white
    const QPoint bg = h->mapTo(&v, QPoint(int(h->xAxis->coordToPixel(best - 127)), int(h->yAxis->coordToPixel(e->hist[size_t(best)] * 1.2))));
    QCOMPARE(img.pixelColor(bg).rgb(), QColor(Qt::white).rgb());
    // CSV: the curves' values are the trace's, digit for digit
    CurvesView c(st_);
    c.resize(1000, 700);
    c.show();
    QVERIFY(guitest::wait_view(&c));
    const QString csv = dir_.filePath("curves.csv");
    QVERIFY(c.exportCsv(csv));
    QFile f(csv);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QStringList lines = QString::fromUtf8(f.readAll()).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.front(), QString("trace,dataset,row,step,value,smoothed"));
    int n = 0;
    for (const QString& l : lines) {
      const QStringList c = l.split(',');
      if (c.size() < 6 || c[1] != "/train/loss") continue;
      const int row = c[2].toInt();
      QCOMPARE(c[3].toLongLong(), qint64(row + 1));  // global step
      QVERIFY(same_bits(c[4].toDouble(), res_.losses[size_t(row)]));
      ++n;
    }
    QCOMPARE(n, 6);
  }

  void ulpDistanceOfKnownValues() {
    using mxsim::trace::DType;
    auto f32 = [](float a, float b) {
      bool nm = false;
      unsigned char x[4], y[4];
      std::memcpy(x, &a, 4);
      std::memcpy(y, &b, 4);
      return ulp_distance(DType::f32, x, y, &nm);
    };
    QCOMPARE(f32(1.0f, 1.0f), 0.0);
    QCOMPARE(f32(1.0f, std::nextafter(1.0f, 2.0f)), 1.0);
    QCOMPARE(f32(0.0f, -0.0f), 1.0);
    QCOMPARE(f32(-1.0f, 1.0f), double(2u * 0x3f800000u + 1u));  // through both zeros
    QCOMPARE(f32(std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min()), 3.0);
    bool nm = false;
    {
      const float n = NAN, one = 1.0f;
      unsigned char x[4], y[4];
      std::memcpy(x, &n, 4);
      std::memcpy(y, &one, 4);
      QCOMPARE(ulp_distance(DType::f32, x, y, &nm), -1.0);  // NaN on one side only
      QVERIFY(nm);
    }
    const double a = 1.0, b = std::nextafter(std::nextafter(1.0, 2.0), 2.0);
    unsigned char x[8], y[8];
    std::memcpy(x, &a, 8);
    std::memcpy(y, &b, 8);
    QCOMPARE(ulp_distance(DType::f64, x, y, &nm), 2.0);
    const uint64_t u = 5, w = 2;
    std::memcpy(x, &u, 8);
    std::memcpy(y, &w, 8);
    QCOMPARE(ulp_distance(DType::u64, x, y, &nm), 3.0);
  }

  void compareFindsTheFirstDifferenceAndItsUlpMap() {
    using mxsim::trace::DType;
    const QString pa = dir_.filePath("a.h5"), pb = dir_.filePath("b.h5");
    const float three_up = std::nextafter(std::nextafter(std::nextafter(1.0f, 2.0f), 2.0f), 2.0f);
    for (int which = 0; which < 2; ++which) {
      mxsim::trace::Writer w((which ? pb : pa).toStdString(), "", mxsim::trace::make_provenance("emu", 1));
      w.declare_series("/train/step", DType::i64, {});
      w.declare_series("/x", DType::f32, {4});
      w.start_swmr();
      for (int64_t s = 0; s < 3; ++s) {
        w.append("/train/step", s + 1);
        float row[4] = {1.0f, -0.0f, 1.0f, 2.0f};
        if (which && s == 1) {
          row[0] = three_up;
          row[1] = 0.0f;
          row[3] = NAN;
        }
        w.append("/x", row);
        w.end_step();
      }
      w.close();
    }
    InspectorState st;
    TraceDocument* a = st.traces()->add(pa);
    TraceDocument* b = st.traces()->add(pb);
    QTRY_VERIFY_WITH_TIMEOUT(a->state() == TraceDocument::State::Ready && b->state() == TraceDocument::State::Ready, 20000);
    st.setPrimary(a);
    st.setOther(b);
    CompareView v(&st);
    v.resize(1000, 700);
    v.show();
    QVERIFY(guitest::wait_view(&v));
    QVERIFY(v.result());
    QCOMPARE(v.result()->first_step, int64_t(1));
    QCOMPARE(v.result()->first_dataset, QString("/x"));
    QVERIFY(!v.result()->identical);
    st.setStep(1);
    v.setDataset("/x");
    QVERIFY(guitest::wait_view(&v));
    QVERIFY(v.ulp());
    QCOMPARE(v.ulp()->ulp, (std::vector<double>{3, 1, 0, -1}));
    QCOMPARE(v.ulp()->differing, uint64_t(3));
    QCOMPARE(v.ulp()->nan_mismatch, uint64_t(1));
    st.setStep(2);
    QVERIFY(guitest::wait_view(&v));
    QCOMPARE(v.ulp()->differing, uint64_t(0));
  }

  // Every view of one layer (--layer fc1, every view named, compare too): files named after the
  // view, layer and operand. tests/gui/test_gui_report.cpp covers the all-layers report.
  void headlessRenderWritesEveryView() {
    RenderOptions o;
    o.traces = {trace_};
    o.out_dir = dir_.filePath("render");
    o.step = 3;
    o.size = QSize(1280, 800);
    o.layer = "fc1";
    o.views = kRenderViews;
    QCOMPARE(render(o), 0);
    for (const char* f : {"curves", "quant-fc1-w", "quant-fc1-x", "quant-fc1-dy", "quant-fc1-x_wgrad", "quant-fc1-dy_wgrad",
                          "osc-fc1", "accum-fc1", "compare", "data", "overview-sqnr", "overview-osc"}) {
      const QImage img(o.out_dir + "/" + f + ".png");
      QCOMPARE(img.size(), QSize(1280, 800));
      QVERIFY2(QFile::exists(o.out_dir + "/" + f + ".csv"), f);
    }
    QVERIFY(QFile::exists(o.out_dir + "/index.html"));
  }

  void cleanupTestCase() { delete st_; }
};

QTEST_MAIN(GuiViews)
#include "test_gui_views.moc"
