#include "view_quant.hpp"

#include <QGridLayout>
#include <QHeaderView>
#include <QLabel>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>
#include <cmath>

#include "mxsim/hd/quant_block.hpp"
#include "mxsim/trace/histogram.hpp"
#include "names.hpp"

namespace mxsim::inspector {

namespace {
constexpr int kNanBin = trace::ScaleExpHistogram::kNanBin;

QString op_label(const QString& op) {
  for (const auto& o : kOperandInfo)
    if (op == o.key) return QString(o.label).simplified();
  return op;
}

/// What the scale-exponent histogram bins for an operand's scale kind (hd::scale_exp_bin): the
/// E8M0 exponent, floor(log2) of an FP32 scale_inv, or for NVFP4 of both levels' product.
QString scale_exp_label(const LayerMeta* lm, int operand) {
  const QString s = lm && operand >= 0 ? lm->blocks[size_t(operand)].scale : QString();
  if (s.startsWith("FP32")) return "floor(log2 scale_inv)";
  if (s.startsWith("UE4M3")) return "floor(log2(E4M3 block scale x FP32 tensor scale))";
  return "scale exponent (E8M0 byte - 127)";
}

/// The bins of scale-exponent histograms (256, E8M0 order) that the views show: from `first` to
/// `last` inclusive, bin 0 (a zero scale: the all-zero blocks NVFP4's dy and padded x hold many of)
/// left out when any other bin is used, since a bar or a row at -127 would squash the exponents in
/// use into a sliver (the histogram's text counts them); NaN's bin 255 never. Fed one histogram at
/// a time (the map over steps feeds every row); empty when no bin is used.
struct ShownBins {
  int first = 255, last = -1;
  bool zero = false;  ///< bin 0 is used
  void add(const double* hist) {
    for (int b = 0; b < 255; ++b) {
      if (hist[b] == 0) continue;
      if (b == 0) zero = true;
      else first = std::min(first, b), last = std::max(last, b);
    }
  }
  /// Bin 0 is shown only where no other bin is used.
  bool shows_zero() const { return zero && last < 0; }
  int lo() const { return shows_zero() ? 0 : first; }
  int hi() const { return shows_zero() ? 0 : last; }
  bool empty() const { return !zero && last < 0; }
};
}  // namespace

const QuantStep::Entry* QuantStep::find(const QString& l, const QString& op) const {
  for (const auto& x : e)
    if (x.layer == l && x.op == op) return &x;
  return nullptr;
}

namespace {
/// A labelled combo box in a row of its own at the top of `into` (the map's and the curves' pickers).
QComboBox* add_picker(QVBoxLayout* into, QWidget* parent, const QString& label, const QStringList& items) {
  auto* bar = new QHBoxLayout;
  auto* pick = new QComboBox(parent);
  pick->addItems(items);
  bar->addWidget(new QLabel(label, parent));
  bar->addWidget(pick);
  bar->addStretch(1);
  into->addLayout(bar);
  return pick;
}
}  // namespace

QuantView::QuantView(InspectorState* st, QWidget* parent) : View(st, parent) {
  auto* g = new QGridLayout(this);
  g->setContentsMargins(2, 2, 2, 2);
  g->setSpacing(4);
  auto* mapbox = new QWidget(this);
  auto* ml = new QVBoxLayout(mapbox);
  ml->setContentsMargins(0, 0, 0, 0);
  metric_pick_ = add_picker(ml, mapbox, "Map:", {"per-block SQNR (dB)", "per-block MSE", "scale exponents over steps"});
  connect(metric_pick_, qOverload<int>(&QComboBox::activated), this, [this](int i) {
    user_metric_ = true;
    setMetric(Metric(i));
  });
  map_ = make_plot(mapbox, "per-block error");
  map_->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
  heat_ = add_heatmap(map_, "SQNR (dB)");
  map_->setMouseTracking(true);
  connect(map_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) {
    if (!maps_ok_ || metric_ == Metric::ExpOverSteps) return;
    const double x = map_->xAxis->pixelToCoord(e->pos().x()), y = map_->yAxis->pixelToCoord(e->pos().y());
    const int ix = int(std::lround(x)), iy = int(std::lround(y));
    if (ix < 0 || iy < 0 || ix >= maps_.G * maps_.BC || iy >= maps_.BR) {
      QToolTip::hideText();
      return;
    }
    QToolTip::showText(e->globalPosition().toPoint(), blockInfo(ix / maps_.BC, iy, ix % maps_.BC), map_);
  });
  ml->addWidget(map_, 1);
  hist_ = make_plot(this, "scale exponents");
  hist_text_ = new QCPItemText(hist_);
  hist_text_->setPositionAlignment(Qt::AlignTop | Qt::AlignLeft);
  hist_text_->position->setType(QCPItemPosition::ptAxisRectRatio);
  hist_text_->position->setCoords(0.02, 0.03);
  hist_text_->setTextAlignment(Qt::AlignLeft);
  hist_text_->setFont(hist_->xAxis->labelFont());
  hist_text_->setBrush(QColor(255, 255, 255, 220));
  hist_text_->setPadding(QMargins(4, 2, 4, 2));
  err_curve_ = make_plot(this, "error over steps");
  uf_curve_ = make_plot(this, "underflow and saturation over steps");
  gq_curve_ = make_plot(this, "bias and rounding over steps");
  gs_curve_ = make_plot(this, "output error per GEMM over steps");
  table_ = new QTableView(this);
  table_->setModel(&summary_);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->verticalHeader()->setVisible(false);
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setMaximumHeight(150);
  table_->verticalHeader()->setDefaultSectionSize(20);
  connect(table_, &QTableView::clicked, this, [this](const QModelIndex& i) {
    const auto& r = summary_.rows().at(size_t(i.row()));
    st_->setLayer(r[0].toString());
    st_->setOperand(r[1].toString());
  });
  g->addWidget(mapbox, 0, 0);
  g->addWidget(hist_, 0, 1);
  g->addWidget(err_curve_, 1, 0);
  auto* lowbox = new QWidget(this);
  auto* ll = new QVBoxLayout(lowbox);
  ll->setContentsMargins(0, 0, 0, 0);
  lower_pick_ = add_picker(ll, lowbox, "Curves:", {"underflow and saturation", "bias and rounding", "error per GEMM vs BF16"});
  connect(lower_pick_, qOverload<int>(&QComboBox::activated), this, [this](int i) {
    user_lower_ = true;
    setLower(i);
  });
  ll->addWidget(uf_curve_, 1);
  ll->addWidget(gq_curve_, 1);
  ll->addWidget(gs_curve_, 1);
  gq_curve_->setVisible(false);
  gs_curve_->setVisible(false);
  g->addWidget(lowbox, 1, 1);
  g->addWidget(table_, 2, 0, 1, 2);
  g->setColumnStretch(0, 1);
  g->setColumnStretch(1, 1);
  g->setRowStretch(0, 3);
  g->setRowStretch(1, 2);
  g->setRowStretch(2, 0);

  connect(st_, &InspectorState::stepChanged, this, &QuantView::scheduleRefresh);
  connect(st_, &InspectorState::primaryChanged, this, &QuantView::scheduleRefresh);
  connect(st_, &InspectorState::layerChanged, this, &QuantView::scheduleRefresh);
  connect(st_, &InspectorState::operandChanged, this, &QuantView::scheduleRefresh);
  connect(st_, &InspectorState::expertChanged, this, &QuantView::scheduleRefresh);
  connect(st_, &InspectorState::primarySteps, this, &QuantView::scheduleRefresh);
}

void QuantView::setMetric(Metric m) {
  metric_ = m;
  if (metric_pick_->currentIndex() != int(m)) metric_pick_->setCurrentIndex(int(m));
  scheduleRefresh();
}

void QuantView::refresh() {
  TraceDocument* d = st_->primary();
  step_ok_ = maps_ok_ = false;
  maps_note_.clear();
  step_err_.clear();
  sel_layer_ = st_->layer();
  sel_op_ = st_->operand();
  sel_step_ = st_->step();
  if (!d || d->state() != TraceDocument::State::Ready) return;
  const TraceMeta& m = d->meta();
  const uint64_t k = m.steps;
  if (k == 0) return;
  const qint64 s = std::min<qint64>(sel_step_, qint64(k) - 1);
  // 1. every quantized operand's statistics at the step (one job: a few dozen row reads)
  std::vector<std::pair<std::string, std::string>> ops;
  for (const auto& l : m.layers)
    if (l.quantized)
      for (const char* op : names::kOperands) ops.push_back({l.name.toStdString(), op});
  load<QuantStep>(
      d, QString("qstep@%1").arg(s), "qstep",
      [ops, s](const trace::Reader& r) {
        QuantStep q;
        for (const auto& lo : ops) {
          const std::string& l = lo.first;  // named, not a structured binding: Clang 14 cannot capture one
          const std::string& op = lo.second;
          QuantStep::Entry e;
          e.layer = QString::fromStdString(l);
          e.op = QString::fromStdString(op);
          auto one = [&](const char* stat) {
            const std::string n = names::quant(l, op, stat);
            return r.has(n) ? read_series_double(r, n, uint64_t(s), 1).v.at(0) : NAN;
          };
          e.mse = one("mse");
          e.sqnr_db = one("sqnr_db");
          e.underflow = one("underflow");
          e.saturated = one("saturated");
          e.count = one("count");
          const std::string hn = names::quant(l, op, "scale_exp_hist");
          if (r.has(hn)) e.hist = read_series_double(r, hn, uint64_t(s), 1).v;
          q.e.push_back(std::move(e));
        }
        return q;
      },
      [this](const QuantStep& q) {
        step_ = q;
        step_ok_ = true;
      },
      [this](const QString& e) { step_err_ = e; });
  // 2. curves of the selected operand over all complete steps
  curves_.clear();
  const std::string l = sel_layer_.toStdString(), op = sel_op_.toStdString();
  std::vector<std::string> series;
  for (const auto& stat : trace::schema::kQuantStats)  // the scalar statistics (the histogram is read per step)
    if (std::string_view(stat.name) != "scale_exp_hist") series.push_back(names::quant(l, op, stat.name));
  for (const char* g : {"fprop", "dgrad", "wgrad"}) series.push_back(names::shadow(l, g, "sqnr_db"));
  for (const char* o : {"x", "dy"})  // beside the shadow (once: the operand's own may be listed)
    if (std::find(series.begin(), series.end(), names::quant(l, o, "sqnr_db")) == series.end())
      series.push_back(names::quant(l, o, "sqnr_db"));
  series.push_back(names::quant(l, op, trace::schema::kTensorScaleInv.name));  // two-level scales only
  for (const std::string& n : series) {
    if (!m.dataset(n)) continue;
    load<SeriesData>(
        d, QString("series:%1#%2").arg(QString::fromStdString(n)).arg(k), "qcurve:" + QString::fromStdString(n),
        [n, k](const trace::Reader& r) { return read_series_double(r, n, 0, k); },
        [this, n](const SeriesData& v) { curves_[n] = v; });
  }
  // 3. the left map: scale exponents over all steps, or per-block maps at the step
  const std::string mname = names::block_map(l, op, "block_sqnr_db");
  const trace::DatasetInfo* mi = m.dataset(mname);
  const bool have_hist = m.dataset(names::quant(l, op, "scale_exp_hist")) != nullptr;
  if (!user_metric_ && mi && metric_ == Metric::ExpOverSteps) {  // maps exist again (another operand)
    metric_ = Metric::Sqnr;
    metric_pick_->setCurrentIndex(int(metric_));
  }
  if (!mi && !user_metric_ && metric_ != Metric::ExpOverSteps && have_hist) {  // nothing per block: show what there is
    metric_ = Metric::ExpOverSteps;
    metric_pick_->setCurrentIndex(int(metric_));
  }
  hist_steps_ok_ = false;
  if (metric_ == Metric::ExpOverSteps) {
    const std::string hn = names::quant(l, op, "scale_exp_hist");
    if (!m.dataset(hn)) {
      maps_note_ = QString("No per-step scale exponent histograms of %1.%2 in this trace\n"
                           "(recorded for W, x and dy; the wgrad operands have block maps at snapshot steps).")
                       .arg(sel_layer_, sel_op_);
      return;
    }
    load<SeriesData>(
        d, QString("series:%1#%2").arg(QString::fromStdString(hn)).arg(k), "expsteps",
        [hn, k](const trace::Reader& r) { return read_series_double(r, hn, 0, k); },
        [this](const SeriesData& v) {
          hist_steps_ = v;
          hist_steps_ok_ = true;
        });
    return;
  }
  if (!mi) {
    const int since = sel_op_ == "w" ? names::kFormatWeightMaps : names::kFormatOperandMaps;
    maps_note_ = QString("This trace holds no per-block error maps of %1.%2\n(dataset %3):\n%4.")
                     .arg(sel_layer_, sel_op_, QString::fromStdString(mname),
                          missing_dataset_reason(m, since, "per-block maps"));
    return;
  }
  if (std::find(mi->snapshot_steps.begin(), mi->snapshot_steps.end(), s) == mi->snapshot_steps.end()) {
    maps_note_ = QString("No per-block map at step %1.\nMaps exist at steps %2.").arg(step_of(d, s)).arg(steps_list(d, mi->snapshot_steps));
    return;
  }
  const LayerMeta* lmeta = m.layer(sel_layer_);
  const int oidx = operand_index(sel_op_);
  const ScaleKind byte_kind = lmeta && oidx >= 0 ? lmeta->blocks[size_t(oidx)].byte_kind() : ScaleKind::E8M0;
  load<BlockMaps>(
      d, QString("bmap:%1/%2@%3").arg(sel_layer_, sel_op_).arg(s), "bmap",
      [l, op, s, byte_kind](const trace::Reader& r) {
        BlockMaps b;
        const auto& in = r.info(names::block_map(l, op, "block_sqnr_db"));
        b.G = int(in.row_shape.at(0));
        b.BR = int(in.row_shape.at(1));
        b.BC = int(in.row_shape.at(2));
        b.sqnr_db = r.read_snapshot<float>(names::block_map(l, op, "block_sqnr_db"), s);
        b.mse = r.read_snapshot<float>(names::block_map(l, op, "block_mse"), s);
        if (r.has(names::block_map(l, op, "block_amax")))
          b.amax = r.read_snapshot<float>(names::block_map(l, op, "block_amax"), s);
        const std::string sn = names::block_map(l, op, "scale");
        if (r.has(sn)) {
          b.kind = r.info(sn).dtype == trace::DType::u8 ? byte_kind : ScaleKind::FP32;
          b.scale = read_snapshot_double(r, sn, s).v;
          const std::string mn = names::block_map(l, op, trace::schema::kTensorScaleInv.name);
          const std::string tn = names::quant(l, op, trace::schema::kTensorScaleInv.name);
          if (has_tensor_scale(b.kind) && r.has(mn))
            b.tensor_scales = r.read_snapshot<float>(mn, s);
          else if (has_tensor_scale(b.kind) && r.has(tn))
            b.tensor_scales.assign(size_t(b.G), float(read_series_double(r, tn, uint64_t(s), 1).v.at(0)));
        }
        const std::string rn = names::block_map(l, op, trace::schema::kOperandRows);
        if (r.has(rn)) b.rows = r.read_snapshot<int64_t>(rn, s);
        const std::string cn = names::block_map(l, op, "codes");
        if (r.has(cn)) {
          const auto& ci = r.info(cn);
          b.R = int(ci.row_shape.at(1));
          b.C = int(ci.row_shape.at(2));
          b.codes = r.read_snapshot<uint8_t>(cn, s);
        }
        return b;
      },
      [this](const BlockMaps& b) {
        maps_ = b;
        maps_ok_ = true;
      },
      [this](const QString& e) { maps_note_ = "Cannot read the block maps: " + e; });
}

void QuantView::present() {
  drawMap();
  drawHist();
  fillSummary();
  map_->replot();
  hist_->replot();
  // the curves over steps change only with the layer, operand or step count: otherwise move the marker
  TraceDocument* d = st_->primary();
  const QString key = QString("%1|%2|%3|%4|%5").arg(sel_layer_, sel_op_).arg(d ? d->steps() : 0).arg(curves_.size()).arg(quintptr(d));
  if (key != curves_key_) {
    curves_key_ = key;
    drawCurves();
    drawQuality();
    drawShadow();
    // Until the user picks: bias and rounding for the gradient operand, the GEMMs against their
    // BF16 shadow for x (the layer's first operand), where the trace has them; else underflow.
    if (!user_lower_)
      setLower(sel_op_ == "dy" && gq_curve_->graphCount() > 0   ? 1
               : sel_op_ == "x" && gs_curve_->graphCount() > 0 ? 2
                                                                : 0);
    for (QCustomPlot* p : {err_curve_, uf_curve_, gq_curve_, gs_curve_}) p->legend->setVisible(p->graphCount() > 0);
    err_curve_->replot();
    uf_curve_->replot();
    gq_curve_->replot();
    gs_curve_->replot();
  } else if (d && d->state() == TraceDocument::State::Ready) {
    for (QCustomPlot* p : {err_curve_, uf_curve_, gq_curve_, gs_curve_}) {
      set_step_marker(p, double(d->meta().global(uint64_t(sel_step_))));
      replot_marker(p);
    }
  }
}

void QuantView::drawMap() {
  const QString metric = metric_ == Metric::Sqnr ? "SQNR (dB)" : "MSE";
  TraceDocument* d = st_->primary();
  clear_items(map_);
  map_->clearGraphs();
  map_->legend->setVisible(false);
  map_->yAxis->setRangeReversed(metric_ != Metric::ExpOverSteps);
  if (metric_ == Metric::ExpOverSteps) {
    set_title(map_, QString("Block scale exponents of %1.%2 over steps (micro-batch 0)").arg(sel_layer_, sel_op_));
    heat_.scale->axis()->setLabel("blocks with this exponent (log)");
    if (!hist_steps_ok_ || !d || hist_steps_.elems != 256 || hist_steps_.rows == 0) {
      heat_.map->setVisible(false);
      heat_.scale->setVisible(false);
      set_plot_note(map_, maps_note_.isEmpty() ? "loading..." : maps_note_);
      return;
    }
    ShownBins shown;  // the rows span the exponents in use
    for (uint64_t r = 0; r < hist_steps_.rows; ++r) shown.add(hist_steps_.v.data() + r * 256);
    const int lo = shown.empty() ? 127 : shown.lo(), hi = shown.empty() ? 127 : shown.hi();
    const int nx = int(hist_steps_.rows), ny = hi - lo + 1;
    std::vector<double> z(size_t(nx) * size_t(ny));
    for (int x = 0; x < nx; ++x)
      for (int y = 0; y < ny; ++y) z[size_t(y) * size_t(nx) + size_t(x)] = hist_steps_.v[uint64_t(x) * 256 + uint64_t(lo + y)];
    heat_.scale->setVisible(true);
    fill_heatmap(heat_, nx, ny, z, true);
    // axis coordinates: global step, exponent
    heat_.map->data()->setRange(QCPRange(double(d->meta().global(0)), double(d->meta().global(uint64_t(nx - 1)))),
                                QCPRange(lo - 127, hi - 127));
    map_->xAxis->setRange(double(d->meta().global(0)) - 0.5, double(d->meta().global(uint64_t(nx - 1))) + 0.5);
    map_->yAxis->setRange(lo - 127 - 0.5, hi - 127 + 0.5);
    drawTensorScale(*d, nx);
    map_->xAxis->setLabel("optimizer step");
    const LayerMeta* lm = d->meta().layer(sel_layer_);
    map_->yAxis->setLabel(scale_exp_label(lm, operand_index(sel_op_)));
    {
      QSharedPointer<QCPAxisTickerFixed> t(new QCPAxisTickerFixed);
      t->setTickStep(1);
      t->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
      map_->yAxis->setTicker(t);
    }
    set_step_marker(map_, double(d->meta().global(uint64_t(sel_step_))));
    set_plot_note(map_, "");
    QString title = QString("Block scale exponents of %1.%2 over steps").arg(sel_layer_, sel_op_);
    if (d && !d->meta().dataset(names::block_map(sel_layer_.toStdString(), sel_op_.toStdString(), "block_sqnr_db")))
      title += QString("\n(%1)").arg(missing_dataset_reason(
          d->meta(), sel_op_ == "w" ? names::kFormatWeightMaps : names::kFormatOperandMaps, "per-block maps"));
    set_title(map_, title);
    return;
  }
  const QString grid = block_grid_text();
  set_title(map_, QString("Block %1 of %2.%3, step %4%5")
                      .arg(metric, sel_layer_, sel_op_)
                      .arg(step_of(d, sel_step_))
                      .arg(grid.isEmpty() ? QString() : "  (" + grid + ")"));
  heat_.scale->axis()->setLabel(metric + (metric_ == Metric::Sqnr ? "  (higher = less error)" : "  (lower = less error)"));
  heat_.scale->setVisible(maps_ok_);
  map_->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
  if (!maps_ok_) {
    heat_.map->setVisible(false);
    heat_.map->data()->clear();
    set_plot_note(map_, maps_note_.isEmpty() ? (d ? "loading..." : "Open a trace.") : maps_note_);
    map_->xAxis->setLabel("");
    map_->yAxis->setLabel("");
    return;
  }
  set_plot_note(map_, "");
  const int nx = maps_.G * maps_.BC, ny = maps_.BR;
  std::vector<double> z(size_t(nx) * size_t(ny), NAN);
  const auto& src = metric_ == Metric::Sqnr ? maps_.sqnr_db : maps_.mse;
  for (int g = 0; g < maps_.G; ++g)
    for (int br = 0; br < maps_.BR; ++br)
      for (int bc = 0; bc < maps_.BC; ++bc) {
        const size_t i = (size_t(g) * size_t(maps_.BR) + size_t(br)) * size_t(maps_.BC) + size_t(bc);
        // an activation operand's all-zero blocks (each expert's padding rows) have no signal: blank
        const bool zero = !maps_.rows.empty() && i < maps_.amax.size() && maps_.amax[i] == 0.0f;
        z[size_t(br) * size_t(nx) + size_t(g * maps_.BC + bc)] = i < src.size() && !zero ? double(src[i]) : NAN;
      }
  fill_heatmap(heat_, nx, ny, z, metric_ == Metric::Mse);
  heat_.map->setGradient(viridis());  // bright = large (the colour scale says which way is better)
  map_->xAxis->setLabel(maps_.G > 1 ? QString("block column (experts side by side, %1 per expert)").arg(maps_.BC)
                                    : QString("block column"));
  map_->yAxis->setLabel("block row");
  if (!maps_.rows.empty()) {
    // an activation operand of micro-batch 0: each group's own rows, blank below them
    int64_t used = 1;
    const int bh = maps_.R > 0 && maps_.BR > 0 ? (maps_.R + maps_.BR - 1) / maps_.BR : 1;
    QStringList rs;
    for (int64_t r : maps_.rows) {
      used = std::max<int64_t>(used, (r + bh - 1) / bh);
      rs << QString::number(r);
    }
    map_->yAxis->setRange(-0.5, double(std::min<int64_t>(used, maps_.BR)) - 0.5);
    map_->yAxis->setLabel(bh > 1 ? QString("block row (%1 rows each)").arg(bh) : QString("row (token, micro-batch 0)"));
    map_->xAxis->setLabel(map_->xAxis->label() + "; blank: zero padding rows");
    set_title(map_, QString("Block %1 of %2.%3, step %4  (%5)\nmicro-batch 0, rows per %6: %7")
                        .arg(metric_ == Metric::Sqnr ? "SQNR (dB)" : "MSE", sel_layer_, sel_op_)
                        .arg(step_of(d, sel_step_))
                        .arg(block_grid_text())
                        .arg(maps_.G > 1 ? "expert" : "tensor")
                        .arg(rs.join(", ")));
  }
}

QString QuantView::block_grid_text() const {
  TraceDocument* d = st_->primary();
  const LayerMeta* lm = d && d->state() == TraceDocument::State::Ready ? d->meta().layer(sel_layer_) : nullptr;
  const size_t oi = size_t(operand_index(sel_op_));
  if (!lm || lm->blocks[oi].format.isEmpty()) return {};
  return QString("%1 %2, %3").arg(lm->blocks[oi].format.toUpper(), lm->blocks[oi].text(), lm->blocks[oi].scale);
}

unsigned BlockMaps::bin(size_t i) const {
  const double v = scale[i];
  if (kind == ScaleKind::FP32) return hd::scale_exp_bin(kind, 0, float(v), 1.0f);
  const size_t per = size_t(BR) * size_t(BC);
  const float ts = tensor_scale(per ? i / per : 0);
  return hd::scale_exp_bin(kind, uint8_t(v), 0.0f, std::isnan(ts) ? 1.0f : ts);
}

QString QuantView::blockInfo(int g, int br, int bc) const {
  if (!maps_ok_ || g < 0 || g >= maps_.G || br < 0 || br >= maps_.BR || bc < 0 || bc >= maps_.BC) return {};
  const size_t i = (size_t(g) * size_t(maps_.BR) + size_t(br)) * size_t(maps_.BC) + size_t(bc);
  QString t = QString("%1.%2, expert %3, block (%4, %5)\n").arg(sel_layer_, sel_op_).arg(g).arg(br).arg(bc);
  if (i < maps_.scale.size()) {
    if (maps_.kind == ScaleKind::E8M0) {
      const int b = int(maps_.scale[i]);
      t += b == 255 ? QString("scale byte 0xFF (NaN)\n")
                    : QString("scale byte 0x%1 = 2^%2\n").arg(b, 2, 16, QChar('0')).arg(b - 127);
    } else if (maps_.kind == ScaleKind::UE4M3) {
      const int b = int(maps_.scale[i]);
      t += QString("scale byte 0x%1 = %2 (E4M3)").arg(b, 2, 16, QChar('0')).arg(fmt_num(decode(spec_of(Format::E4M3), uint32_t(b)), 6));
      const float ts = maps_.tensor_scale(size_t(g));
      t += std::isnan(ts) ? QString(" x the tensor scale (not in this trace)\n")
                          : QString(" x tensor scale %1\n").arg(fmt_num(ts, 6));
    } else {
      t += QString("scale_inv %1\n").arg(fmt_num(maps_.scale[i], 9));
    }
  }
  if (i < maps_.amax.size()) t += QString("amax %1\n").arg(fmt_num(maps_.amax[i], 9));
  if (i < maps_.sqnr_db.size()) t += QString("SQNR %1 dB\n").arg(fmt_num(maps_.sqnr_db[i], 5));
  if (i < maps_.mse.size()) t += QString("MSE %1\n").arg(fmt_num(maps_.mse[i], 5));
  if (!maps_.codes.empty() && maps_.R > 0 && maps_.C > 0) {
    const int bh = (maps_.R + maps_.BR - 1) / maps_.BR, bw = (maps_.C + maps_.BC - 1) / maps_.BC;
    t += QString("element codes (rows %1-%2, cols %3-%4):").arg(br * bh).arg(br * bh + bh - 1).arg(bc * bw).arg(bc * bw + bw - 1);
    const int show_rows = std::min(bh, 4);
    for (int r = 0; r < show_rows; ++r) {
      t += "\n ";
      const int rr = br * bh + r;
      if (rr >= maps_.R) break;
      for (int c = 0; c < std::min(bw, 32); ++c) {
        const int cc = bc * bw + c;
        if (cc >= maps_.C) break;
        t += QString(" %1").arg(maps_.codes[(size_t(g) * size_t(maps_.R) + size_t(rr)) * size_t(maps_.C) + size_t(cc)], 2, 16, QChar('0'));
      }
    }
    if (bh > show_rows) t += QString("\n  ... (%1 more rows)").arg(bh - show_rows);
  }
  return t;
}

// A two-level scale (NVFP4): log2 of the FP32 tensor scale per step over the blocks' exponents,
// which bin the product of both levels: the gap between the line and a block's row is that
// block's E4M3 scale, so a shift of the whole tensor and a spread of its blocks read apart.
void QuantView::drawTensorScale(const TraceDocument& d, int nx) {
  const auto it = curves_.find(names::quant(sel_layer_.toStdString(), sel_op_.toStdString(), trace::schema::kTensorScaleInv.name));
  if (it == curves_.end() || it->second.v.empty()) return;
  const SeriesData& s = it->second;
  QVector<double> x, y;
  for (size_t i = 0; i < s.v.size() && i < size_t(nx); ++i) {
    x.push_back(double(d.meta().global(uint64_t(i))));
    y.push_back(s.v[i] > 0 ? std::log2(s.v[i]) : NAN);  // a NaN scale (a NaN amax) leaves a gap
  }
  auto* g = map_->addGraph();
  g->setData(x, y, true);
  g->setPen(QPen(QColor(230, 60, 0), 2.0));  // orange-red: apart from the colour map and the red step marker
  g->setName("log2 FP32 tensor scale S_dec");
  bool found = false;
  const QCPRange r = g->getValueRange(found);
  if (found) {  // the line sits below the blocks by log2 of their E4M3 scales (up to 448: about 9)
    const QCPRange cur = map_->yAxis->range();
    map_->yAxis->setRange(std::min(cur.lower, std::floor(r.lower) - 0.5), std::max(cur.upper, std::ceil(r.upper) + 0.5));
  }
  map_->legend->setVisible(true);
  map_->legend->setBrush(QColor(255, 255, 255, 200));
}

void QuantView::drawHist() {
  hist_->clearPlottables();
  hist_text_->setVisible(false);
  const QuantStep::Entry* e = step_ok_ ? step_.find(sel_layer_, sel_op_) : nullptr;
  TraceDocument* d = st_->primary();
  const LayerMeta* lm = d && d->state() == TraceDocument::State::Ready ? d->meta().layer(sel_layer_) : nullptr;
  const int oi = operand_index(sel_op_);
  set_title(hist_, QString("Block scale exponents of %1.%2 at step %3").arg(sel_layer_, sel_op_).arg(step_of(d, sel_step_)));
  hist_->xAxis->setLabel(scale_exp_label(lm, oi));
  hist_->yAxis->setLabel("blocks");
  QuantStep::Entry from_map;  // an operand without per-step series: its block map's scales at a snapshot step
  if ((!e || e->hist.size() != 256) && maps_ok_ && !maps_.rows.empty() && !maps_.scale.empty()) {
    from_map.hist.assign(256, 0.0);
    from_map.count = 0;
    from_map.underflow = from_map.saturated = NAN;
    const size_t per = maps_.G > 0 ? maps_.scale.size() / size_t(maps_.G) : 0;
    const int bh = maps_.R > 0 && maps_.BR > 0 ? (maps_.R + maps_.BR - 1) / maps_.BR : 1;
    for (size_t i = 0; i < maps_.scale.size(); ++i) {
      const size_t g = per ? i / per : 0;
      const int64_t br = maps_.BC > 0 ? int64_t((i % per) / size_t(maps_.BC)) : 0;
      if (g >= maps_.rows.size() || br * bh >= maps_.rows[g]) continue;  // past the group's rows
      from_map.hist[maps_.bin(i)] += 1;
    }
    for (int64_t r : maps_.rows) from_map.count += double(r) * double(maps_.C);
    e = &from_map;
    set_title(hist_, QString("Block scale exponents of %1.%2 at step %3 (block map%4)")
                         .arg(sel_layer_, sel_op_)
                         .arg(step_of(d, sel_step_))
                         .arg(maps_.kind == ScaleKind::UE4M3 && maps_.tensor_scales.empty()
                                  ? QString(": E4M3 scales alone, no tensor scale in this trace")
                                  : QString()));
    if (maps_.kind == ScaleKind::UE4M3 && maps_.tensor_scales.empty())
      hist_->xAxis->setLabel("floor(log2 E4M3 block scale)");
  }
  if (!e || e->hist.size() != 256) {
    hist_->xAxis->setRange(-1, 1);  // not the previous selection's exponents
    hist_->yAxis->setRange(0, 1);
    set_plot_note(hist_, !step_err_.isEmpty()   ? "Cannot read: " + step_err_
                         : lm && !lm->quantized ? QString("%1 is not quantized (recipe %2): no statistics").arg(sel_layer_, lm->recipe)
                         : step_ok_             ? QString("No scale statistics for %1.%2 in this trace").arg(sel_layer_, sel_op_)
                                                : QString("loading..."));
    return;
  }
  auto* bars = new QCPBars(hist_->xAxis, hist_->yAxis);
  QVector<double> x, y;
  int lo = 999, hi = -999;
  // Bin 0 (zero scales: all-zero blocks) is counted in the text, not drawn, when other bins are
  // used: a bar at -127 would squash the exponents in use into a sliver (as in the map).
  const double zero = e->hist[0];
  ShownBins shown;
  shown.add(e->hist.data());
  double total = shown.shows_zero() ? 0 : zero;
  for (int b = shown.shows_zero() ? 0 : 1; b < 255; ++b) {
    if (e->hist[size_t(b)] == 0) continue;
    x << (b - 127);
    y << e->hist[size_t(b)];
    lo = std::min(lo, b - 127);
    hi = std::max(hi, b - 127);
    total += e->hist[size_t(b)];
  }
  const double nan = e->hist[kNanBin];
  bars->setData(x, y, true);
  bars->setWidth(0.8);
  bars->setPen(QPen(palette_color(0).darker(130)));
  bars->setBrush(palette_color(0));
  bars->setName("blocks per exponent");
  if (lo > hi) {
    lo = -1;
    hi = 1;
  }
  hist_->xAxis->setRange(lo - 1.5, hi + 1.5);
  hist_->yAxis->setRange(0, (y.isEmpty() ? 1 : *std::max_element(y.begin(), y.end())) * 1.75);  // room for the counts
  const double cnt = e->count > 0 ? e->count : 1;
  set_plot_note(hist_, "");
  hist_text_->setVisible(true);
  auto* txt = hist_text_;
  if (std::isnan(e->underflow))
    txt->setText(QString("blocks: %1   NaN scales: %2   zero scales: %3\nelements: %4")
                     .arg(total + nan, 0, 'f', 0)
                     .arg(nan, 0, 'f', 0)
                     .arg(zero, 0, 'f', 0)
                     .arg(e->count, 0, 'f', 0));
  else
  txt->setText(QString("blocks: %1   NaN scales: %2   zero scales: %8\nelements: %3\nunderflow (nonzero -> 0): %4 (%5 %)\nsaturated (clamped to max): %6 (%7 %)")
                   .arg(total + nan, 0, 'f', 0)
                   .arg(nan, 0, 'f', 0)
                   .arg(e->count, 0, 'f', 0)
                   .arg(e->underflow, 0, 'f', 0)
                   .arg(100.0 * e->underflow / cnt, 0, 'g', 3)
                   .arg(e->saturated, 0, 'f', 0)
                   .arg(100.0 * e->saturated / cnt, 0, 'g', 3)
                   .arg(zero, 0, 'f', 0));
}

void QuantView::drawCurves() {
  TraceDocument* d = st_->primary();
  const std::string l = sel_layer_.toStdString(), op = sel_op_.toStdString();
  auto get = [&](const char* stat) -> const SeriesData* {
    auto it = curves_.find(names::quant(l, op, stat));
    return it == curves_.end() ? nullptr : &it->second;
  };
  const double marker = d && d->state() == TraceDocument::State::Ready ? double(d->meta().global(uint64_t(sel_step_))) : 0;
  auto xs = [&](const SeriesData& s) {
    QVector<double> x(int(s.v.size()));
    for (int i = 0; i < x.size(); ++i) x[i] = double(d->meta().global(uint64_t(i)));
    return x;
  };
  // SQNR (left axis) and MSE (right axis, log)
  err_curve_->clearGraphs();
  set_title(err_curve_, QString("Quantization error of %1.%2 over steps (micro-batch 0)").arg(sel_layer_, sel_op_));
  err_curve_->xAxis->setLabel("optimizer step");
  err_curve_->yAxis->setLabel("SQNR (dB)");
  err_curve_->yAxis2->setVisible(true);
  err_curve_->yAxis2->setLabel("MSE");
  err_curve_->yAxis2->setScaleType(QCPAxis::stLogarithmic);
  err_curve_->yAxis2->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  err_curve_->legend->setVisible(true);
  const SeriesData *sq = get("sqnr_db"), *ms = get("mse");
  if (sq && ms) {
    auto* g1 = err_curve_->addGraph(err_curve_->xAxis, err_curve_->yAxis);
    g1->setData(xs(*sq), QVector<double>(sq->v.begin(), sq->v.end()), true);
    g1->setPen(QPen(palette_color(0), 1.4));
    g1->setName("SQNR (dB, left)");
    auto* g2 = err_curve_->addGraph(err_curve_->xAxis, err_curve_->yAxis2);
    g2->setData(xs(*ms), QVector<double>(ms->v.begin(), ms->v.end()), true);
    g2->setPen(QPen(palette_color(1), 1.2));
    g2->setName("MSE (right, log)");
    g1->rescaleAxes();
    g2->rescaleAxes();
    set_step_marker(err_curve_, marker);
    set_plot_note(err_curve_, "");
  } else {
    emptyCurves(err_curve_, !d ? QString()
                              : sel_op_.contains("wgrad")
                                  ? QString("Per-step statistics are recorded for W, x and dy;\n%1.%2 has block maps at the snapshot steps").arg(sel_layer_, sel_op_)
                                  : QString("No error statistics for %1.%2").arg(sel_layer_, sel_op_));
  }
  // underflow and saturation as % of elements
  uf_curve_->clearGraphs();
  set_title(uf_curve_, QString("Underflow and saturation of %1.%2 over steps").arg(sel_layer_, sel_op_));
  uf_curve_->xAxis->setLabel("optimizer step");
  uf_curve_->yAxis->setLabel("share of elements (%)");
  uf_curve_->legend->setVisible(true);
  const SeriesData *uf = get("underflow"), *sa = get("saturated"), *cn = get("count");
  if (uf && sa && cn) {
    auto pct = [&](const SeriesData& s) {
      QVector<double> y(int(s.v.size()));
      for (int i = 0; i < y.size(); ++i) y[i] = cn->v[size_t(i)] > 0 ? 100.0 * s.v[size_t(i)] / cn->v[size_t(i)] : 0;
      return y;
    };
    auto* g1 = uf_curve_->addGraph();
    g1->setData(xs(*uf), pct(*uf), true);
    g1->setPen(QPen(palette_color(2), 1.4));
    g1->setName("underflow: nonzero -> 0");
    auto* g2 = uf_curve_->addGraph();
    g2->setData(xs(*sa), pct(*sa), true);
    g2->setPen(QPen(palette_color(3), 1.4));
    g2->setName("saturated: |x| clamped to max");
    uf_curve_->rescaleAxes();
    const QCPRange r = uf_curve_->yAxis->range();
    uf_curve_->yAxis->setRange(0, std::max(r.upper * 1.15, 1e-3));
    set_step_marker(uf_curve_, marker);
    set_plot_note(uf_curve_, "");
  } else {
    emptyCurves(uf_curve_, !d ? QString()
                             : sel_op_.contains("wgrad")
                                 ? QString("Per-step statistics are recorded for W, x and dy;\n%1.%2 has block maps at the snapshot steps").arg(sel_layer_, sel_op_)
                                 : QString("No underflow/saturation counts for %1.%2").arg(sel_layer_, sel_op_));
  }
}

void QuantView::emptyCurves(QCustomPlot* p, const QString& note) {
  TraceDocument* d = st_->primary();
  p->yAxis2->setVisible(false);
  if (p->yAxis->scaleType() != QCPAxis::stLinear) {
    p->yAxis->setScaleType(QCPAxis::stLinear);
    p->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new QCPAxisTicker));
  }
  p->yAxis->setRange(0, 1);
  if (d && d->state() == TraceDocument::State::Ready && d->steps() > 0)
    p->xAxis->setRange(double(d->meta().global(0)), double(d->meta().global(d->steps() - 1)));
  set_plot_note(p, note);
}

void QuantView::setLower(int i) {
  lower_pick_->setCurrentIndex(i);
  uf_curve_->setVisible(i == 0);
  gq_curve_->setVisible(i == 1);
  gs_curve_->setVisible(i == 2);
}

void QuantView::drawShadow() {
  TraceDocument* d = st_->primary();
  const std::string l = sel_layer_.toStdString();
  QCustomPlot* p = gs_curve_;
  p->clearGraphs();
  clear_items(p);
  set_title(p, QString("GEMM outputs of %1 vs BF16 (micro-batch 0)").arg(sel_layer_));
  p->xAxis->setLabel("optimizer step");
  p->yAxis->setLabel("SQNR (dB)");
  const bool ready = d && d->state() == TraceDocument::State::Ready && d->steps() > 0;
  const int nmb = ready ? std::max(1, d->meta().num_microbatches) : 1;
  struct Line {
    std::string name;
    QString label;
    int color;
    bool shadow;    ///< a shadow series ([micro-batches] per row) rather than an operand's (one)
  };
  const Line lines[] = {{names::shadow(l, "fprop", "sqnr_db"), "fprop y vs BF16", 0, true},
                        {names::shadow(l, "dgrad", "sqnr_db"), "dgrad dx vs BF16", 1, true},
                        {names::shadow(l, "wgrad", "sqnr_db"), "wgrad dW vs BF16", 2, true},
                        {names::quant(l, "x", "sqnr_db"), "x operand", 0, false},
                        {names::quant(l, "dy", "sqnr_db"), "dy operand", 1, false}};
  bool any_shadow = false;
  for (const Line& ln : lines) {
    auto it = curves_.find(ln.name);
    if (!ready || it == curves_.end()) continue;
    const SeriesData& s = it->second;
    const size_t stride = ln.shadow ? size_t(nmb) : 1;
    QVector<double> x, y;
    for (size_t i = 0; i * stride < s.v.size(); ++i) {
      x.push_back(double(d->meta().global(i)));
      y.push_back(s.v[i * stride]);  // micro-batch 0 of the row
    }
    auto* g = p->addGraph();
    g->setData(x, y, true);
    QPen pen(palette_color(ln.color), ln.shadow ? 1.4 : 1.1);
    pen.setStyle(ln.shadow ? Qt::SolidLine : Qt::DotLine);
    g->setPen(pen);
    g->setName(ln.label);
    any_shadow = any_shadow || ln.shadow;
  }
  if (!any_shadow) {
    p->clearGraphs();
    emptyCurves(p, ready ? QString("No BF16 shadow of %1's GEMMs in this trace (trace.shadow_layers, format 5)").arg(sel_layer_)
                         : QString());
    return;
  }
  p->rescaleAxes();
  set_step_marker(p, double(d->meta().global(uint64_t(sel_step_))));
  set_plot_note(p, "");
}

void QuantView::drawQuality() {
  TraceDocument* d = st_->primary();
  const std::string l = sel_layer_.toStdString(), op = sel_op_.toStdString();
  auto get = [&](const char* stat) -> const SeriesData* {
    auto it = curves_.find(names::quant(l, op, stat));
    return it == curves_.end() ? nullptr : &it->second;
  };
  QCustomPlot* p = gq_curve_;
  p->clearGraphs();
  clear_items(p);
  set_title(p, QString("Bias and rounding of %1.%2 over steps").arg(sel_layer_, sel_op_));
  p->xAxis->setLabel("optimizer step");
  p->yAxis->setLabel("norm ratio");
  p->yAxis->setScaleType(QCPAxis::stLogarithmic);
  p->yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>(new QCPAxisTickerLog));
  p->yAxis2->setVisible(true);
  p->yAxis2->setLabel("share, bias");
  const SeriesData *sq = get("sqnr_db"), *ms = get("mse"), *me = get("mean_err"), *rd = get("rounded"),
                   *up = get("rounded_up"), *ex = get("expected_up");
  const bool ready = d && d->state() == TraceDocument::State::Ready && d->steps() > 0;
  if (!ready || !sq || !ms || !me || !rd || !up || !ex) {
    emptyCurves(p, !ready || !sq ? QString()
                                 : QString("No bias or rounding statistics for %1.%2 (trace format 5 records them)")
                                       .arg(sel_layer_, sel_op_));
    return;
  }
  const int n = int(sq->v.size());
  QVector<double> x(n), ratio(n), upr(n), exr(n), bias(n);
  int first_below = -1;
  const double root3 = std::sqrt(3.0);
  for (int i = 0; i < n; ++i) {
    const size_t k = size_t(i);
    x[i] = double(d->meta().global(k));
    ratio[i] = std::pow(10.0, sq->v[k] / 20.0);  // sqrt(signal / noise) = ||x|| / ||d - x||
    const double r = k < rd->v.size() ? rd->v[k] : 0;
    upr[i] = r > 0 && k < up->v.size() ? up->v[k] / r : NAN;
    exr[i] = r > 0 && k < ex->v.size() ? ex->v[k] / r : NAN;
    const double signal = k < ms->v.size() ? ms->v[k] * std::pow(10.0, sq->v[k] / 10.0) : NAN;
    bias[i] = k < me->v.size() && signal > 0 ? me->v[k] / std::sqrt(signal) : NAN;
    if (first_below < 0 && ratio[i] < root3) first_below = i;
  }
  auto add = [&](QCPAxis* y, const QVector<double>& v, int color, Qt::PenStyle style, const QString& name) {
    auto* g = p->addGraph(p->xAxis, y);
    g->setData(x, v, true);
    QPen pen(palette_color(color), 1.3);
    pen.setStyle(style);
    g->setPen(pen);
    g->setName(name);
    return g;
  };
  add(p->yAxis, ratio, 0, Qt::SolidLine, "||x|| / ||d - x|| (left)");
  add(p->yAxis2, upr, 2, Qt::SolidLine, "rounded up / choices");
  add(p->yAxis2, exr, 3, Qt::DashLine, "expected under SR");
  add(p->yAxis2, bias, 4, Qt::SolidLine, "mean(d - x) / RMS(x)");
  p->rescaleAxes();
  const QCPRange yr = p->yAxis->range();
  p->yAxis->setRange(std::min(yr.lower, root3) / 1.5, std::max(yr.upper, root3) * 1.5);
  const QCPRange r2 = p->yAxis2->range();
  p->yAxis2->setRange(std::min(r2.lower, -0.05), std::max(r2.upper, 1.0));
  // the threshold of "FP4 All the Way" (Chmiel et al., 2025, arXiv 2505.19115)
  auto* t = new QCPItemStraightLine(p);
  t->point1->setCoords(x.front(), root3);
  t->point2->setCoords(x.back() + 1, root3);
  QPen tp(QColor(180, 30, 30), 1.2);
  tp.setStyle(Qt::DotLine);
  t->setPen(tp);
  auto* label = new QCPItemText(p);
  label->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
  label->position->setCoords(x.front(), root3);
  label->setColor(QColor(180, 30, 30));
  label->setText(first_below < 0 ? QString("sqrt(3) (Chmiel et al. 2025): never below")
                                 : QString("sqrt(3) (Chmiel et al. 2025): first below at step %1").arg(x[first_below]));
  set_step_marker(p, double(d->meta().global(uint64_t(sel_step_))));
  set_plot_note(p, "");
}

void QuantView::fillSummary() {
  summary_.setHeaders({"layer", "tensor", "format, block", "elements", "MSE", "SQNR (dB)", "underflow", "underflow %",
                       "saturated", "saturated %", "NaN scales", "scale exp min", "scale exp max", "zero scales"});
  std::vector<std::vector<QVariant>> rows;
  TraceDocument* d = st_->primary();
  if (step_ok_ && d) {
    for (const auto& e : step_.e) {
      const LayerMeta* lm = d->meta().layer(e.layer);
      const int oi = operand_index(e.op);
      const QString fmt = lm && !lm->blocks[size_t(oi)].format.isEmpty()
                              ? lm->blocks[size_t(oi)].format.toUpper() + " " + lm->blocks[size_t(oi)].text()
                              : lm ? lm->recipe : QString();
      ShownBins shown;  // the exponents in use, as the histogram shows them
      if (e.hist.size() == 256) shown.add(e.hist.data());
      const double nan = e.hist.size() == 256 ? e.hist[kNanBin] : 0;
      const int lo = shown.empty() ? 999 : shown.lo() - 127, hi = shown.empty() ? -999 : shown.hi() - 127;
      const double c = e.count > 0 ? e.count : 1;
      auto count = [](double v) { return std::isfinite(v) ? QVariant(qint64(v)) : QVariant("-"); };
      auto pct = [&](double v) { return std::isfinite(v) && e.count > 0 ? QVariant(100 * v / c) : QVariant("-"); };
      rows.push_back({e.layer, e.op, fmt, count(e.count), e.mse, e.sqnr_db, count(e.underflow), pct(e.underflow),
                      count(e.saturated), pct(e.saturated), e.hist.empty() ? QVariant("-") : QVariant(qint64(nan)),
                      lo <= hi ? QVariant(lo) : QVariant("-"), lo <= hi ? QVariant(hi) : QVariant("-"),
                      // all-zero blocks: outside the exponent range above (ShownBins)
                      e.hist.size() == 256 ? QVariant(qint64(e.hist[0])) : QVariant("-")});
    }
  }
  summary_.setRows(std::move(rows));
  for (int r = 0; r < summary_.rowCount(); ++r)
    if (summary_.rows()[size_t(r)][0].toString() == sel_layer_ && summary_.rows()[size_t(r)][1].toString() == sel_op_)
      table_->selectRow(r);
  table_->resizeColumnsToContents();
  (void)op_label;
}

void QuantView::writeCsv(QTextStream& out) const {
  // the per-tensor summary at the step, then the histogram and (when present) the block map
  // row: the trace row; step: its global optimizer step
  const TraceDocument* d = st_->primary();
  const QString at = QString("%1,%2").arg(sel_step_).arg(step_of(d, sel_step_));
  out << "section,layer,tensor,row,step,key,value\n";
  const auto* e = step_ok_ ? step_.find(sel_layer_, sel_op_) : nullptr;
  for (const auto& x : step_.e) {
    if (!step_ok_) break;
    for (auto [k, v] : {std::pair<const char*, double>{"mse", x.mse}, {"sqnr_db", x.sqnr_db}, {"underflow", x.underflow},
                        {"saturated", x.saturated}, {"count", x.count}})
      out << "summary," << x.layer << ',' << x.op << ',' << at << ',' << k << ',' << csv_num(v) << '\n';
  }
  if (e)
    for (size_t b = 0; b < e->hist.size(); ++b)
      if (e->hist[b] != 0)
        out << "scale_exp_hist," << sel_layer_ << ',' << sel_op_ << ',' << at << ','
            << (int(b) == kNanBin ? QString("nan") : QString::number(int(b) - 127)) << ',' << csv_num(e->hist[b]) << '\n';
  if (hist_steps_ok_ && hist_steps_.elems == 256)
    for (uint64_t r = 0; r < hist_steps_.rows; ++r)
      for (int b = 0; b < 256; ++b)
        if (const double c = hist_steps_.v[r * 256 + uint64_t(b)]; c != 0)
          out << "scale_exp_hist_over_steps," << sel_layer_ << ',' << sel_op_ << ',' << r << ',' << step_of(d, int64_t(r)) << ','
              << (b == kNanBin ? QString("nan") : QString::number(b - 127)) << ',' << csv_num(c) << '\n';
  if (const auto it = curves_.find(names::quant(sel_layer_.toStdString(), sel_op_.toStdString(), trace::schema::kTensorScaleInv.name));
      it != curves_.end())
    for (size_t r = 0; r < it->second.v.size(); ++r)
      out << "tensor_scale_inv," << sel_layer_ << ',' << sel_op_ << ',' << r << ',' << step_of(d, int64_t(r)) << ",S_dec,"
          << csv_num(it->second.v[r]) << '\n';
  if (maps_ok_)
    for (int g = 0; g < maps_.G; ++g)
      for (int br = 0; br < maps_.BR; ++br)
        for (int bc = 0; bc < maps_.BC; ++bc) {
          const size_t i = (size_t(g) * size_t(maps_.BR) + size_t(br)) * size_t(maps_.BC) + size_t(bc);
          out << "block," << sel_layer_ << ',' << sel_op_ << ',' << at << ','
              << QString("g%1_r%2_c%3_sqnr_db").arg(g).arg(br).arg(bc) << ',' << csv_num(maps_.sqnr_db[i]) << '\n';
          out << "block," << sel_layer_ << ',' << sel_op_ << ',' << at << ','
              << QString("g%1_r%2_c%3_mse").arg(g).arg(br).arg(bc) << ',' << csv_num(maps_.mse[i]) << '\n';
        }
}

}  // namespace mxsim::inspector
