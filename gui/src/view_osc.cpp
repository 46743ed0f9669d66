#include "view_osc.hpp"

#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QToolTip>
#include <QVBoxLayout>
#include <cmath>
#include <set>

#include "mxsim/format.hpp"
#include "mxsim/rounding.hpp"
#include "names.hpp"

namespace mxsim::inspector {

namespace {
const char* const kMetricName[] = {"flips", "ema", "dist_ratio", "residual", "snaps"};
const char* const kMetricLabel[] = {"oscillations (cumulative count)", "EMA oscillation frequency (per step)",
                                    "DistRatio (sum|dQ| / sum|dW|, current window)",
                                    "|master - weight_q| (value units)",
                                    "de-oscillation snaps (cumulative count)"};
}  // namespace

double ElementTimeline::scale_value(size_t i) const {
  const double v = scale[i];
  switch (kind) {
    case ScaleKind::E8M0: return decode(Format::E8M0, uint32_t(v));  // the one decode: 0xFF is NaN
    case ScaleKind::UE4M3:  // both levels, as hd::dequant_value applies them
      return i < tensor_scale.size() ? double(decode(spec_of(Format::E4M3), uint32_t(v))) * tensor_scale[i] : NAN;
    case ScaleKind::FP32: return v;
  }
  return NAN;
}

OscView::OscView(InspectorState* st, QWidget* parent) : View(st, parent) {
  auto* g = new QGridLayout(this);
  g->setContentsMargins(2, 2, 2, 2);
  g->setSpacing(4);
  auto* box = new QWidget(this);
  auto* bl = new QVBoxLayout(box);
  bl->setContentsMargins(0, 0, 0, 0);
  auto* bar = new QHBoxLayout;
  metric_pick_ = new QComboBox(box);
  metric_pick_->addItems({"flip count", "EMA flip frequency", "DistRatio", "|master - weight_q|", "de-osc snaps"});
  connect(metric_pick_, qOverload<int>(&QComboBox::activated), this, [this](int i) {
    user_metric_ = true;
    setMetric(i);
  });
  bar->addWidget(new QLabel("Map:", box));
  bar->addWidget(metric_pick_);
  bar->addWidget(new QLabel("(click an element for its timeline)", box));
  bar->addStretch(1);
  bl->addLayout(bar);
  heat_plot_ = make_plot(box, "per-element map");
  heat_ = add_heatmap(heat_plot_, kMetricLabel[0]);
  connect(heat_plot_, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
    if (!map_ok_ || e->button() != Qt::LeftButton) return;
    const int k = int(std::lround(heat_plot_->xAxis->pixelToCoord(e->pos().x())));
    const int n = int(std::lround(heat_plot_->yAxis->pixelToCoord(e->pos().y())));
    if (n >= 0 && k >= 0 && n < map_.N && k < map_.K) st_->setElement(n, k);
  });
  connect(heat_plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) {
    if (!map_ok_) return;
    const int k = int(std::lround(heat_plot_->xAxis->pixelToCoord(e->pos().x())));
    const int n = int(std::lround(heat_plot_->yAxis->pixelToCoord(e->pos().y())));
    if (n < 0 || k < 0 || n >= map_.N || k >= map_.K) return;
    QToolTip::showText(e->globalPosition().toPoint(),
                       QString("element (n %1, k %2): %3").arg(n).arg(k).arg(fmt_num(map_.v[size_t(n) * size_t(map_.K) + size_t(k)])),
                       heat_plot_);
  });
  bl->addWidget(heat_plot_, 1);
  tl_plot_ = make_plot(this, "element timeline");
  tl_plot_->legend->setVisible(true);
  flip_plot_ = make_plot(this, "oscillations per step");
  freq_plot_ = make_plot(this, "oscillation frequency");
  g->addWidget(box, 0, 0);
  g->addWidget(tl_plot_, 0, 1);
  g->addWidget(flip_plot_, 1, 0);
  g->addWidget(freq_plot_, 1, 1);
  g->setColumnStretch(0, 1);
  g->setColumnStretch(1, 1);
  g->setRowStretch(0, 3);
  g->setRowStretch(1, 2);
  connect(st_, &InspectorState::stepChanged, this, &OscView::scheduleRefresh);
  connect(st_, &InspectorState::primaryChanged, this, &OscView::scheduleRefresh);
  connect(st_, &InspectorState::layerChanged, this, &OscView::scheduleRefresh);
  connect(st_, &InspectorState::expertChanged, this, &OscView::scheduleRefresh);
  connect(st_, &InspectorState::elementChanged, this, &OscView::scheduleRefresh);
  connect(st_, &InspectorState::primarySteps, this, &OscView::scheduleRefresh);
}

void OscView::setMetric(int m) {
  metric_ = std::clamp(m, 0, 4);
  if (metric_pick_->currentIndex() != metric_) metric_pick_->setCurrentIndex(metric_);
  scheduleRefresh();
}

void OscView::refresh() {
  TraceDocument* d = st_->primary();
  map_ok_ = tl_ok_ = false;
  map_note_.clear();
  tl_note_.clear();
  curves_.clear();
  sel_layer_ = st_->layer();
  sel_expert_ = st_->expert();
  sel_step_ = st_->step();
  sel_n_ = st_->elemRow();
  sel_k_ = st_->elemCol();
  if (!d || d->state() != TraceDocument::State::Ready || d->steps() == 0) return;
  const TraceMeta& m = d->meta();
  const LayerMeta* lm = m.layer(sel_layer_);
  const std::string l = sel_layer_.toStdString();
  const uint64_t k = m.steps;
  // layer curves
  std::vector<std::string> cs;
  for (const auto& s : trace::schema::kOscSeries) cs.push_back(names::osc(l, s.name));
  cs.push_back(names::osc(l, trace::schema::kOscEmaFracAboveV2));  // traces of format <= 2
  cs.push_back(names::deosc_snapped(l));
  for (const auto& n : cs) {
    if (!m.dataset(n)) continue;
    load<SeriesData>(
        d, QString("series:%1#%2").arg(QString::fromStdString(n)).arg(k), "osc:" + QString::fromStdString(n),
        [n, k](const trace::Reader& r) { return read_series_double(r, n, 0, k); },
        [this, n](const SeriesData& v) { curves_[n] = v; });
  }
  if (!lm) return;
  // element map of the expert at the step; a trace without element maps starts on the residual
  if (!user_metric_ && metric_ != 3 && !m.dataset(names::element_map(l, "flips")) && m.dataset(names::snap(l, "master"))) {
    metric_ = 3;
    metric_pick_->blockSignals(true);
    metric_pick_->setCurrentIndex(3);
    metric_pick_->blockSignals(false);
  }
  const bool residual = metric_ == 3;
  const std::string mn = residual ? names::snap(l, "master") : names::element_map(l, kMetricName[metric_]);
  const trace::DatasetInfo* mi = m.dataset(mn);
  const int G = int(lm->shape[0]), N = int(lm->shape[1]), K = int(lm->shape[2]);
  const int e = std::clamp(sel_expert_, 0, std::max(0, G - 1));
  const qint64 s = std::min<qint64>(sel_step_, qint64(k) - 1);
  if (!mi) {
    const int since = std::string(kMetricName[metric_]) == "snaps" ? names::kFormatOperandMaps : names::kFormatWeightMaps;
    map_note_ = residual ? QString("This trace holds no snapshots of %1 (%2).").arg(sel_layer_, snapshot_setting(m))
                         : QString("This trace holds no per-element oscillation maps for %1\n(dataset %2):\n%3.\n"
                                   "Choose |master - weight_q| to see the snapshots' quantization residual.")
                               .arg(sel_layer_, QString::fromStdString(mn),
                                    missing_dataset_reason(m, since, "per-element maps"));
  } else if (std::find(mi->snapshot_steps.begin(), mi->snapshot_steps.end(), s) == mi->snapshot_steps.end()) {
    map_note_ = QString("No element map at step %1.\nSnapshots exist at steps %2.").arg(step_of(d, s)).arg(steps_list(d, mi->snapshot_steps));
  } else {
    load<ElementMap>(
        d, QString("emap:%1/%2/%3@%4").arg(sel_layer_, kMetricName[metric_]).arg(e).arg(s), "emap",
        [mn, l, residual, e, N, K, s](const trace::Reader& r) {
          ElementMap em;
          em.N = N;
          em.K = K;
          const SeriesData a = read_snapshot_double(r, mn, s);
          const size_t off = size_t(e) * size_t(N) * size_t(K), n = size_t(N) * size_t(K);
          em.v.assign(a.v.begin() + std::ptrdiff_t(off), a.v.begin() + std::ptrdiff_t(off + n));
          if (residual) {
            const SeriesData q = read_snapshot_double(r, names::snap(l, "weight_q"), s);
            for (size_t i = 0; i < n; ++i) em.v[i] = std::fabs(em.v[i] - q.v[off + i]);
          }
          return em;
        },
        [this](const ElementMap& em) {
          map_ = em;
          map_ok_ = true;
          if (sel_n_ < 0) {  // no element chosen yet: the one with the largest value
            const auto it = std::max_element(map_.v.begin(), map_.v.end());
            const size_t i = size_t(it - map_.v.begin());
            QTimer::singleShot(0, this, [this, i] { st_->setElement(int(i / size_t(map_.K)), int(i % size_t(map_.K))); });
          }
        },
        [this](const QString& err) { map_note_ = "Cannot read the element map: " + err; });
  }
  // timeline of the chosen element
  if (sel_n_ < 0 || sel_k_ < 0 || sel_n_ >= N || sel_k_ >= K) {
    tl_note_ = "Click an element of the map to see its timeline.";
    return;
  }
  const bool watched = m.dataset(names::watch(l, "element")) != nullptr;
  if (!watched && (!m.dataset(names::snap(l, "master")) || !m.dataset(names::snap(l, "weight_q")))) {
    tl_note_ = QString("This trace holds no master / weight_q snapshots of %1.").arg(sel_layer_);
    return;
  }
  const uint64_t flat = (uint64_t(e) * uint64_t(N) + uint64_t(sel_n_)) * uint64_t(K) + uint64_t(sel_k_);
  const BlockShape bs = lm->blocks[0];
  const int bh = bs.rows == 0 ? N : bs.rows, bw = bs.cols == 0 ? K : bs.cols;
  const int BR = (N + bh - 1) / bh, BC = (K + bw - 1) / bw;
  const uint64_t bflat = (uint64_t(e) * uint64_t(BR) + uint64_t(sel_n_ / bh)) * uint64_t(BC) + uint64_t(sel_k_ / bw);
  load<ElementTimeline>(
      d, QString("tl:%1/%2@%3#%4").arg(sel_layer_).arg(flat).arg(bflat).arg(k), "timeline",
      [l, flat, bflat, k, byte_kind = bs.byte_kind()](
          const trace::Reader& r) {
        ElementTimeline t;
        const std::string tn = names::quant(l, "w", trace::schema::kTensorScaleInv.name);
        const SeriesData ts = r.has(tn) ? read_series_double(r, tn, 0, k) : SeriesData{};
        auto tensor_scale_at = [&](double row) { return row < double(ts.v.size()) ? ts.v[size_t(row)] : NAN; };
        if (r.has(names::watch(l, "element"))) {  // watched elements: every step (trace format 4)
          const auto idx = r.read_series<int64_t>(names::watch(l, "element"), 0, 1);
          const auto it = std::find(idx.begin(), idx.end(), int64_t(flat));
          if (it != idx.end()) {
            const uint64_t j = uint64_t(it - idx.begin());
            t.every_step = true;
            const auto ms = r.read_series_element<float>(names::watch(l, "master"), j, 0, k);
            const auto qs = r.read_series_element<float>(names::watch(l, "weight_q"), j, 0, k);
            for (size_t i = 0; i < ms.size(); ++i) {
              t.steps.push_back(double(i));
              t.master.push_back(ms[i]);
              t.wq.push_back(i < qs.size() ? qs[i] : NAN);
            }
            const std::string sn = names::watch(l, "scale");
            if (r.has(sn)) {
              const SeriesData sc = read_series_double(r, sn, 0, k);
              t.kind = r.info(sn).dtype == trace::DType::u8 ? byte_kind : ScaleKind::FP32;
              for (uint64_t i = 0; i < sc.rows; ++i) {
                t.scale.push_back(sc.v[i * sc.elems + j]);
                t.tensor_scale.push_back(tensor_scale_at(double(i)));
              }
            }
            const std::string pn = names::watch(l, "snaps");
            if (r.has(pn))
              for (uint32_t c : r.read_series_element<uint32_t>(pn, j, 0, k)) t.snaps.push_back(c);
            return t;
          }
          if (!r.has(names::snap(l, "master"))) return t;  // not watched, no snapshots: nothing
        }
        std::vector<int64_t> st;
        const auto ms = r.read_snapshot_element<float>(names::snap(l, "master"), flat, &st);
        const auto qs = r.read_snapshot_element<float>(names::snap(l, "weight_q"), flat);
        for (size_t i = 0; i < st.size(); ++i) {
          t.steps.push_back(double(st[i]));
          t.master.push_back(ms[i]);
          t.wq.push_back(i < qs.size() ? qs[i] : NAN);
        }
        const std::string sn = names::block_map(l, "w", "scale");
        if (r.has(sn)) {
          std::vector<int64_t> ss;
          std::vector<double> v;
          if (r.info(sn).dtype == trace::DType::u8) {
            t.kind = byte_kind;
            for (uint8_t b : r.read_snapshot_element<uint8_t>(sn, bflat, &ss)) v.push_back(b);
          } else {
            t.kind = ScaleKind::FP32;
            for (float f : r.read_snapshot_element<float>(sn, bflat, &ss)) v.push_back(f);
          }
          if (ss == st) {
            t.scale = v;
            for (double row : t.steps) t.tensor_scale.push_back(tensor_scale_at(row));
          }
        }
        const std::string pn = names::element_map(l, "snaps");
        if (r.has(pn)) {
          std::vector<int64_t> ss;
          std::vector<double> v;
          for (uint32_t c : r.read_snapshot_element<uint32_t>(pn, flat, &ss)) v.push_back(c);
          if (ss == st) t.snaps = v;
        }
        return t;
      },
      [this](const ElementTimeline& t) {
        tl_ = t;
        tl_ok_ = true;
      },
      [this](const QString& err) { tl_note_ = "Cannot read the timeline: " + err; });
}

void OscView::present() {
  drawMap();
  drawTimeline();
  tl_plot_->legend->setVisible(tl_plot_->graphCount() > 0);
  heat_plot_->replot();
  tl_plot_->replot();
  TraceDocument* d = st_->primary();
  const QString key = QString("%1|%2|%3|%4").arg(sel_layer_).arg(d ? d->steps() : 0).arg(curves_.size()).arg(quintptr(d));
  if (key != curves_key_) {
    curves_key_ = key;
    drawCurves();
    for (QCustomPlot* p : {flip_plot_, freq_plot_}) p->legend->setVisible(p->graphCount() > 0);
    flip_plot_->replot();
    freq_plot_->replot();
  } else if (d && d->state() == TraceDocument::State::Ready) {
    for (QCustomPlot* p : {flip_plot_, freq_plot_}) {
      set_step_marker(p, double(d->meta().global(uint64_t(sel_step_))));
      replot_marker(p);
    }
  }
}

void OscView::drawMap() {
  set_title(heat_plot_, QString("%1 of %2, expert %3, at step %4")
                            .arg(metric_pick_->currentText(), sel_layer_)
                            .arg(sel_expert_)
                            .arg(step_of(st_->primary(), sel_step_)));
  heat_.scale->axis()->setLabel(kMetricLabel[metric_]);
  if (!map_ok_) {
    heat_.map->setVisible(false);
    set_plot_note(heat_plot_, map_note_.isEmpty() ? "loading..." : map_note_);
    return;
  }
  set_plot_note(heat_plot_, "");
  fill_heatmap(heat_, map_.K, map_.N, map_.v, false);
  {
    QCPColorGradient gr(QCPColorGradient::gpHot);
    gr.setNanHandling(QCPColorGradient::nhTransparent);
    heat_.map->setGradient(gr.inverted());  // white = 0, dark red = most
  }
  // every metric is >= 0: the scale starts at 0, so that 0 is white also where the map is all
  // zeros (no flips yet at an early snapshot), not the middle of a range around it
  double hi = 0;
  for (double v : map_.v)
    if (std::isfinite(v)) hi = std::max(hi, v);
  heat_.map->setDataRange(QCPRange(0, hi > 0 ? hi : 1));
  if (hi == 0)  // an all-white map is data, not a failure: say so (an early snapshot, before any flip)
    set_plot_note(heat_plot_, QString("%1 is 0 for every element of expert %2 at step %3")
                                  .arg(metric_pick_->currentText())
                                  .arg(sel_expert_)
                                  .arg(step_of(st_->primary(), sel_step_)));
  heat_plot_->xAxis->setLabel("k (input feature)");
  heat_plot_->yAxis->setLabel("n (output feature)");
  // mark the chosen element
  static const char* kSel = "mxsim_sel";
  auto* r = static_cast<QCPItemEllipse*>(heat_plot_->property(kSel).value<void*>());
  if (!r) {
    r = new QCPItemEllipse(heat_plot_);
    r->setPen(QPen(QColor(0, 114, 178), 2));
    heat_plot_->setProperty(kSel, QVariant::fromValue(static_cast<void*>(r)));
  }
  r->setVisible(sel_n_ >= 0);
  const double rad = std::max(1.5, map_.K / 60.0);
  r->topLeft->setCoords(sel_k_ - rad, sel_n_ - rad);
  r->bottomRight->setCoords(sel_k_ + rad, sel_n_ + rad);
}

void OscView::drawTimeline() {
  tl_plot_->clearGraphs();
  clear_items(tl_plot_);
  TraceDocument* d = st_->primary();
  set_title(tl_plot_, sel_n_ >= 0 ? QString("%1 expert %2, element (n %3, k %4) over steps").arg(sel_layer_).arg(sel_expert_).arg(sel_n_).arg(sel_k_)
                                  : QString("element timeline"));
  tl_plot_->xAxis->setLabel("optimizer step");
  tl_plot_->yAxis->setLabel("weight value");
  if (!tl_ok_ || !d) {
    set_plot_note(tl_plot_, tl_note_.isEmpty() ? "loading..." : tl_note_);
    return;
  }
  const TraceMeta& m = d->meta();
  QVector<double> x;
  for (double s : tl_.steps) x << double(m.global(uint64_t(s)));
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < tl_.master.size(); ++i)
    for (double v : {tl_.master[i], tl_.wq[i]})
      if (std::isfinite(v)) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
  if (!std::isfinite(lo)) {
    set_plot_note(tl_plot_, "No finite values");
    return;
  }
  // grid lines of the element's block: every code of the element format times the block scale
  const LayerMeta* lm = m.layer(sel_layer_);
  Format fmt{};
  const bool have_fmt = lm && format_from_name(lm->blocks[0].format.toStdString(), fmt);
  double span = std::max(hi - lo, 1e-6);
  if (have_fmt && !tl_.scale.empty()) {
    std::vector<double> f(tl_.scale.size());
    for (size_t i = 0; i < f.size(); ++i) f[i] = tl_.scale_value(i);
    // widen the y range by one grid step on each side
    double step_max = 0;
    const FormatSpec sp = spec_of(fmt);
    std::set<double> vals;
    for (uint32_t c = 0; c < (1u << sp.bits); ++c) {
      const double v = decode(fmt, c);
      if (std::isfinite(v)) vals.insert(v);
    }
    for (size_t i = 0; i < f.size(); ++i) {
      const double a = std::max(std::fabs(tl_.master[i]), std::fabs(tl_.wq[i])) / f[i];
      auto it = vals.lower_bound(a);
      if (it != vals.end() && std::next(it) != vals.end()) step_max = std::max(step_max, (*std::next(it) - *it) * f[i]);
      if (it != vals.begin()) step_max = std::max(step_max, (*it - *std::prev(it)) * f[i]);
    }
    lo -= step_max * 1.2;
    hi += step_max * 1.2;
    bool first = true;
    for (double v : vals) {
      QVector<double> y(x.size());
      bool in = false;
      for (int i = 0; i < x.size(); ++i) {
        y[i] = v * f[size_t(i)];
        in = in || (y[i] >= lo && y[i] <= hi);
      }
      if (!in) continue;
      QCPGraph* g = tl_plot_->addGraph();
      g->setData(x, y, true);
      g->setLineStyle(QCPGraph::lsStepLeft);
      g->setPen(QPen(QColor(110, 110, 110), 1, Qt::DashLine));
      if (first) {
        g->setName(QString("%1 grid of its block (x block scale)").arg(lm->blocks[0].format.toUpper()));
        first = false;
      } else {
        g->removeFromLegend();
      }
    }
    tl_plot_->yAxis->grid()->setVisible(false);  // the block's grid replaces the plot's
  } else {
    tl_plot_->yAxis->grid()->setVisible(true);
    span = std::max(hi - lo, 1e-6);
    lo -= 0.1 * span;
    hi += 0.1 * span;
  }
  QCPGraph* gm = tl_plot_->addGraph();
  gm->setData(x, QVector<double>(tl_.master.begin(), tl_.master.end()), true);
  gm->setPen(QPen(palette_color(0), 1.6));
  if (x.size() <= 120) gm->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 4));
  gm->setName(tl_.every_step ? "FP32 master (every step: a watched element)" : "FP32 master (at snapshot steps)");
  QCPGraph* gq = tl_plot_->addGraph();
  gq->setData(x, QVector<double>(tl_.wq.begin(), tl_.wq.end()), true);
  gq->setLineStyle(QCPGraph::lsStepLeft);
  gq->setPen(QPen(palette_color(1), 1.6));
  gq->setName("quantized value fprop used (weight_q)");
  // de-oscillation snaps of this element, or else the layer's snap steps
  const auto snapped = curves_.find(names::deosc_snapped(sel_layer_.toStdString()));
  if (!tl_.snaps.empty()) {
    // The element's count at row r is the state before row r's step (the snaps of rows
    // 0..r-1; docs/trace-format.md "Element and block maps"), while the layer's snapped series
    // counts a window end's snaps at its own row: a count that grows from timeline point i-1
    // to point i is a snap at one of the rows steps[i-1] .. steps[i] - 1, which for a watched
    // element (every row) is steps[i] - 1, and for snapshot rows the last of those rows where
    // the layer snapped (else steps[i] - 1). Drawn at that row's step, on the master line.
    QVector<double> sx, sy;
    for (size_t i = 1; i < tl_.snaps.size(); ++i)
      if (tl_.snaps[i] > tl_.snaps[i - 1]) {
        const int64_t lo = int64_t(tl_.steps[i - 1]), hi = int64_t(tl_.steps[i]) - 1;
        int64_t row = hi;
        if (snapped != curves_.end() && hi > lo) {
          for (int64_t r = hi; r >= lo; --r)
            if (size_t(r) < snapped->second.v.size() && snapped->second.v[size_t(r)] > 0) {
              row = r;
              break;
            }
        }
        const double gx = double(m.global(uint64_t(row))), x0 = x[int(i - 1)], x1 = x[int(i)];
        const double t = x1 > x0 ? (gx - x0) / (x1 - x0) : 0;  // on the straight master line between the points
        sx << gx;
        sy << tl_.master[i - 1] + t * (tl_.master[i] - tl_.master[i - 1]);
      }
    QCPGraph* gs = tl_plot_->addGraph();
    gs->setData(sx, sy, true);
    gs->setLineStyle(QCPGraph::lsNone);
    gs->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssTriangle, QColor(200, 0, 0), QColor(200, 0, 0), 9));
    gs->setName("de-osc snap of this element");
  } else if (auto it = snapped; it != curves_.end()) {
    bool first = true;
    for (size_t i = 0; i < it->second.v.size(); ++i)
      if (it->second.v[i] > 0) {
        const double gx = double(m.global(i));
        if (!x.isEmpty() && (gx < x.front() || gx > x.back())) continue;
        QCPGraph* gs = tl_plot_->addGraph();
        gs->setData(QVector<double>{gx, gx}, QVector<double>{lo, hi}, true);
        gs->setPen(QPen(QColor(200, 0, 0, 90), 1, Qt::DashDotLine));
        if (first) {
          gs->setName("layer de-osc window end with snaps");
          first = false;
        } else {
          gs->removeFromLegend();
        }
      }
  }
  tl_plot_->xAxis->setRange(x.front() - 0.5, x.back() + 0.5);
  tl_plot_->yAxis->setRange(lo, hi);
  QString note;
  if (tl_.steps.size() < 2)
    note = QString("Snapshots of %1 exist at %2 step(s) and the element is not watched:\n%3 for a timeline.")
               .arg(sel_layer_)
               .arg(tl_.steps.size())
               .arg(st_->primary() && st_->primary()->meta().prov.producer != trace::kProducerSimulator
                        ? QString("pass the Recorder a range of snapshot_steps")
                        : QString("set trace.snapshot_steps to a range, or add it to trace.watch_elements"));
  else if (tl_.scale.empty())
    note = QString("No block scales of this element: grid lines not drawn (%1).")
               .arg(missing_dataset_reason(m, names::kFormatWeightMaps, "block scales"));
  // what is missing goes under the title, not over the data
  if (!note.isEmpty())
    set_title(tl_plot_, QString("%1 expert %2, element (n %3, k %4) over steps\n%5")
                            .arg(sel_layer_).arg(sel_expert_).arg(sel_n_).arg(sel_k_).arg(note));
  set_step_marker(tl_plot_, double(m.global(uint64_t(sel_step_))));
}

QString OscView::osc_missing() const {
  TraceDocument* d = st_->primary();
  const LayerMeta* lm = d && d->state() == TraceDocument::State::Ready ? d->meta().layer(sel_layer_) : nullptr;
  // blocks[0] is W's block shape, known only when some GEMM quantizes W (per-GEMM recipes)
  if (lm && !lm->recipe.isEmpty() && lm->blocks[0].format.isEmpty())
    return QString("%1's weight is not quantized (%2): no oscillation metrics").arg(sel_layer_, lm->recipe);
  return QString("This trace holds no oscillation series for %1").arg(sel_layer_);
}

void OscView::drawCurves() {
  TraceDocument* d = st_->primary();
  const std::string l = sel_layer_.toStdString();
  auto get = [&](const std::string& n) -> const SeriesData* {
    auto it = curves_.find(n);
    return it == curves_.end() ? nullptr : &it->second;
  };
  auto xs = [&](const SeriesData& s) {
    QVector<double> x(int(s.v.size()));
    for (int i = 0; i < x.size(); ++i) x[i] = double(d->meta().global(uint64_t(i)));
    return x;
  };
  auto ys = [](const SeriesData& s) { return QVector<double>(s.v.begin(), s.v.end()); };
  const double marker = d && d->state() == TraceDocument::State::Ready ? double(d->meta().global(uint64_t(sel_step_))) : 0;

  flip_plot_->clearGraphs();
  set_title(flip_plot_, QString("Oscillations of %1 (Nagel et al. 2022) and de-osc snaps").arg(sel_layer_));
  flip_plot_->xAxis->setLabel("optimizer step");
  flip_plot_->yAxis->setLabel("elements per step");
  flip_plot_->yAxis2->setVisible(true);
  flip_plot_->yAxis2->setLabel("oscillations, cumulative");
  flip_plot_->legend->setVisible(true);
  const SeriesData *fl = get(names::osc(l, "flips")), *ft = get(names::osc(l, "flips_total")), *sn = get(names::deosc_snapped(l));
  if (fl) {
    auto* g = flip_plot_->addGraph();
    g->setData(xs(*fl), ys(*fl), true);
    g->setPen(QPen(palette_color(0), 1.2));
    g->setName("oscillations this step");
    if (sn) {
      auto* s = flip_plot_->addGraph();
      s->setData(xs(*sn), ys(*sn), true);
      s->setLineStyle(QCPGraph::lsImpulse);
      s->setPen(QPen(QColor(200, 0, 0), 2));
      s->setName("de-osc snapped (window ends)");
    }
    flip_plot_->rescaleAxes();
    if (ft) {
      auto* t = flip_plot_->addGraph(flip_plot_->xAxis, flip_plot_->yAxis2);
      t->setData(xs(*ft), ys(*ft), true);
      t->setPen(QPen(palette_color(2), 1.4, Qt::DashLine));
      t->setName("cumulative (right)");
      t->rescaleValueAxis();
    }
    set_step_marker(flip_plot_, marker);
    set_plot_note(flip_plot_, "");
  } else {
    set_plot_note(flip_plot_, d ? osc_missing() : QString());
  }

  freq_plot_->clearGraphs();
  set_title(freq_plot_, QString("Oscillation frequency and DistRatio of %1").arg(sel_layer_));
  freq_plot_->xAxis->setLabel("optimizer step");
  freq_plot_->yAxis->setLabel("frequency / share of elements");
  freq_plot_->yAxis2->setVisible(true);
  freq_plot_->yAxis2->setLabel("mean DistRatio");
  freq_plot_->legend->setVisible(true);
  const SeriesData* ef = get(names::osc(l, "ema_frac_above"));
  if (!ef) ef = get(names::osc(l, trace::schema::kOscEmaFracAboveV2));  // traces of format <= 2
  const SeriesData *em = get(names::osc(l, "ema_mean")), *dr = get(names::osc(l, "dist_ratio_mean"));
  if (em && ef) {
    auto* a = freq_plot_->addGraph();
    a->setData(xs(*em), ys(*em), true);
    a->setPen(QPen(palette_color(0), 1.4));
    a->setName("mean EMA frequency");
    auto* b = freq_plot_->addGraph();
    b->setData(xs(*ef), ys(*ef), true);
    b->setPen(QPen(palette_color(4), 1.4));
    b->setName("share with EMA > 0.01");
    freq_plot_->rescaleAxes();
    if (dr) {
      auto* c = freq_plot_->addGraph(freq_plot_->xAxis, freq_plot_->yAxis2);
      c->setData(xs(*dr), ys(*dr), true);
      c->setPen(QPen(palette_color(3), 1.2, Qt::DashLine));
      c->setName("mean DistRatio (right)");
      c->rescaleValueAxis();
    }
    set_step_marker(freq_plot_, marker);
    set_plot_note(freq_plot_, "");
  } else {
    set_plot_note(freq_plot_, d ? osc_missing() : QString());
  }
}

void OscView::writeCsv(QTextStream& out) const {
  // row: the trace row; step: its global optimizer step
  const TraceDocument* d = st_->primary();
  const auto at = [d](int64_t row) { return QString("%1,%2").arg(row).arg(step_of(d, row)); };
  out << "section,layer,expert,n,k,row,step,value\n";
  if (map_ok_)
    for (int n = 0; n < map_.N; ++n)
      for (int k = 0; k < map_.K; ++k)
        out << "map_" << kMetricName[metric_] << ',' << sel_layer_ << ',' << sel_expert_ << ',' << n << ',' << k << ','
            << at(sel_step_) << ',' << csv_num(map_.v[size_t(n) * size_t(map_.K) + size_t(k)]) << '\n';
  if (tl_ok_)
    for (size_t i = 0; i < tl_.steps.size(); ++i) {
      out << "master," << sel_layer_ << ',' << sel_expert_ << ',' << sel_n_ << ',' << sel_k_ << ',' << at(int64_t(tl_.steps[i])) << ','
          << csv_num(tl_.master[i]) << '\n';
      out << "weight_q," << sel_layer_ << ',' << sel_expert_ << ',' << sel_n_ << ',' << sel_k_ << ',' << at(int64_t(tl_.steps[i])) << ','
          << csv_num(tl_.wq[i]) << '\n';
      if (i < tl_.scale.size())
        out << "block_scale," << sel_layer_ << ',' << sel_expert_ << ',' << sel_n_ << ',' << sel_k_ << ',' << at(int64_t(tl_.steps[i]))
            << ',' << csv_num(tl_.scale[i]) << '\n';
    }
}

}  // namespace mxsim::inspector
