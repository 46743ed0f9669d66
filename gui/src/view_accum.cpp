#include "view_accum.hpp"

#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QToolTip>
#include <QVBoxLayout>
#include <cmath>
#include <cstring>

#include "names.hpp"

namespace mxsim::inspector {

AccumPoint accumulate(const AccumData& a, int n, int k, int bh, int bw, bool block) {
  AccumPoint p;
  const size_t NK = size_t(a.N) * size_t(a.K);
  auto bits = [](float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  };
  if (!block) {
    const size_t i = size_t(n) * size_t(a.K) + size_t(k);
    float acc = 0.0f;
    for (int m = 0; m < a.NMB; ++m) {
      const float c = a.contrib[size_t(m) * NK + i];
      acc = acc + c;  // one FP32 add, round to nearest even (-ffp-contract=off)
      p.contrib.push_back(c);
      p.running.push_back(acc);
    }
    p.main_grad = a.main_grad[i];
    p.bit_equal = bits(acc) == bits(a.main_grad[i]);
    return p;
  }
  const int r0 = (n / bh) * bh, c0 = (k / bw) * bw;
  const int r1 = std::min(a.N, r0 + bh), c1 = std::min(a.K, c0 + bw);
  std::vector<float> acc(size_t(r1 - r0) * size_t(c1 - c0), 0.0f);
  for (int m = 0; m < a.NMB; ++m) {
    double cn = 0, rn = 0;
    size_t j = 0;
    for (int r = r0; r < r1; ++r)
      for (int c = c0; c < c1; ++c, ++j) {
        const float v = a.contrib[size_t(m) * NK + size_t(r) * size_t(a.K) + size_t(c)];
        acc[j] = acc[j] + v;
        cn += double(v) * double(v);
        rn += double(acc[j]) * double(acc[j]);
      }
    p.contrib.push_back(std::sqrt(cn));
    p.running.push_back(std::sqrt(rn));
  }
  double gn = 0;
  size_t j = 0;
  for (int r = r0; r < r1; ++r)
    for (int c = c0; c < c1; ++c, ++j) {
      const float g = a.main_grad[size_t(r) * size_t(a.K) + size_t(c)];
      gn += double(g) * double(g);
      p.mismatched += bits(acc[j]) != bits(g);
    }
  p.main_grad = std::sqrt(gn);
  p.bit_equal = p.mismatched == 0;
  return p;
}

AccumView::AccumView(InspectorState* st, QWidget* parent) : View(st, parent) {
  auto* g = new QGridLayout(this);
  g->setContentsMargins(2, 2, 2, 2);
  g->setSpacing(4);
  auto* box = new QWidget(this);
  auto* bl = new QVBoxLayout(box);
  bl->setContentsMargins(0, 0, 0, 0);
  auto* bar = new QHBoxLayout;
  mode_pick_ = new QComboBox(box);
  mode_pick_->addItems({"one element", "the element's block (L2 norms)"});
  connect(mode_pick_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this](int i) { setBlockMode(i == 1); });
  bar->addWidget(new QLabel("Accumulate:", box));
  bar->addWidget(mode_pick_);
  bar->addWidget(new QLabel("(click the map to pick an element)", box));
  bar->addStretch(1);
  bl->addLayout(bar);
  map_plot_ = make_plot(box, "main_grad");
  heat_ = add_heatmap(map_plot_, "main_grad (gradient units)");
  heat_.map->setGradient(diverging());
  connect(map_plot_, &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
    if (!data_ok_ || e->button() != Qt::LeftButton) return;
    const int k = int(std::lround(map_plot_->xAxis->pixelToCoord(e->pos().x())));
    const int n = int(std::lround(map_plot_->yAxis->pixelToCoord(e->pos().y())));
    if (n >= 0 && k >= 0 && n < data_.N && k < data_.K) st_->setElement(n, k);
  });
  bl->addWidget(map_plot_, 1);
  contrib_plot_ = make_plot(this, "contributions");
  contrib_plot_->legend->setVisible(true);
  norm_plot_ = make_plot(this, "norms");
  norm_plot_->legend->setVisible(true);
  tok_plot_ = make_plot(this, "tokens per expert");
  tok_heat_ = add_heatmap(tok_plot_, "tokens routed (before padding)");
  g->addWidget(box, 0, 0);
  g->addWidget(contrib_plot_, 0, 1);
  g->addWidget(norm_plot_, 1, 0);
  g->addWidget(tok_plot_, 1, 1);
  g->setColumnStretch(0, 1);
  g->setColumnStretch(1, 1);
  g->setRowStretch(0, 3);
  g->setRowStretch(1, 2);
  connect(st_, &InspectorState::stepChanged, this, &AccumView::scheduleRefresh);
  connect(st_, &InspectorState::primaryChanged, this, &AccumView::scheduleRefresh);
  connect(st_, &InspectorState::layerChanged, this, &AccumView::scheduleRefresh);
  connect(st_, &InspectorState::expertChanged, this, &AccumView::scheduleRefresh);
  connect(st_, &InspectorState::elementChanged, this, &AccumView::scheduleRefresh);
  connect(st_, &InspectorState::primarySteps, this, &AccumView::scheduleRefresh);
}

void AccumView::setBlockMode(bool on) {
  block_ = on;
  if (mode_pick_->currentIndex() != (on ? 1 : 0)) mode_pick_->setCurrentIndex(on ? 1 : 0);
  scheduleRefresh();
}

void AccumView::refresh() {
  TraceDocument* d = st_->primary();
  data_ok_ = point_ok_ = false;
  data_note_.clear();
  tokens_.clear();
  norms_.clear();
  sel_layer_ = st_->layer();
  sel_expert_ = st_->expert();
  sel_step_ = st_->step();
  sel_n_ = st_->elemRow();
  sel_k_ = st_->elemCol();
  if (!d || d->state() != TraceDocument::State::Ready || d->steps() == 0) return;
  const TraceMeta& m = d->meta();
  const qint64 s = std::min<qint64>(sel_step_, qint64(m.steps) - 1);
  const std::string l = sel_layer_.toStdString();
  if (m.dataset(names::kTokensPerExpert))
    load<SeriesData>(
        d, QString("row:tokens@%1").arg(s), "tokens",
        [s](const trace::Reader& r) { return read_series_double(r, names::kTokensPerExpert, uint64_t(s), 1); },
        [this](const SeriesData& v) {
          tokens_ = v.v;
          tok_nmb_ = v.row_shape.size() == 2 ? int(v.row_shape[0]) : 0;
          tok_e_ = v.row_shape.size() == 2 ? int(v.row_shape[1]) : 0;
        });
  const std::string gn = names::main_grad_norm(l);
  if (m.dataset(gn))
    load<SeriesData>(
        d, QString("row:%1@%2").arg(QString::fromStdString(gn)).arg(s), "norms",
        [gn, s](const trace::Reader& r) { return read_series_double(r, gn, uint64_t(s), 1); },
        [this](const SeriesData& v) { norms_ = v.v; });
  const LayerMeta* lm = m.layer(sel_layer_);
  if (lm) {
    bh_ = lm->blocks[0].rows > 0 ? lm->blocks[0].rows : int(lm->shape[1]);
    bw_ = lm->blocks[0].cols > 0 ? lm->blocks[0].cols : int(lm->shape[2]);
    if (lm->blocks[0].format.isEmpty()) bh_ = bw_ = 32;  // bf16 layers: a 32x32 neighbourhood
  }
  const std::string wn = names::snap(l, "wgrad_mb"), mn = names::snap(l, "main_grad");
  const trace::DatasetInfo* wi = m.dataset(wn);
  if (!wi || !m.dataset(mn)) {
    const bool recorder_main_grad_only = m.prov.producer != trace::kProducerSimulator && m.dataset(mn);
    data_note_ = QString("This trace holds no wgrad_mb / main_grad snapshots of %1\n(%2).")
                     .arg(sel_layer_, recorder_main_grad_only
                                          ? QString("mxsim.torch.Recorder's snapshots hold main_grad, no per-micro-batch "
                                                    "wgrad_mb yet")
                                          : snapshot_setting(m));
    return;
  }
  if (std::find(wi->snapshot_steps.begin(), wi->snapshot_steps.end(), s) == wi->snapshot_steps.end()) {
    data_note_ = QString("No micro-batch contributions at step %1.\nSnapshots of %2 exist at steps %3.")
                     .arg(step_of(d, s))
                     .arg(sel_layer_, steps_list(d, wi->snapshot_steps));
    return;
  }
  const int e = std::clamp(sel_expert_, 0, std::max(0, int(wi->row_shape.at(1)) - 1));
  load<AccumData>(
      d, QString("accum:%1/%2@%3").arg(sel_layer_).arg(e).arg(s), "accum",
      [wn, mn, e, s](const trace::Reader& r) {
        const auto& in = r.info(wn);
        AccumData a;
        a.NMB = int(in.row_shape.at(0));
        const size_t G = in.row_shape.at(1);
        a.N = int(in.row_shape.at(2));
        a.K = int(in.row_shape.at(3));
        const size_t NK = size_t(a.N) * size_t(a.K);
        const auto w = r.read_snapshot<float>(wn, s);
        const auto g = r.read_snapshot<float>(mn, s);
        for (int mb = 0; mb < a.NMB; ++mb) {
          const auto* p = w.data() + (size_t(mb) * G + size_t(e)) * NK;
          a.contrib.insert(a.contrib.end(), p, p + NK);
        }
        a.main_grad.assign(g.begin() + std::ptrdiff_t(size_t(e) * NK), g.begin() + std::ptrdiff_t(size_t(e + 1) * NK));
        return a;
      },
      [this](const AccumData& a) {
        data_ = a;
        data_ok_ = true;
        if (sel_n_ < 0 || sel_n_ >= a.N || sel_k_ >= a.K) {  // default: the element with the largest |main_grad|
          size_t best = 0;
          for (size_t i = 0; i < a.main_grad.size(); ++i)
            if (std::fabs(a.main_grad[i]) > std::fabs(a.main_grad[best])) best = i;
          sel_n_ = int(best / size_t(a.K));
          sel_k_ = int(best % size_t(a.K));
        }
        point_ = accumulate(a, sel_n_, sel_k_, bh_, bw_, block_);
        point_ok_ = true;
      },
      [this](const QString& err) { data_note_ = "Cannot read the snapshots: " + err; });
}

void AccumView::present() {
  drawMap();
  drawContrib();
  drawNorms();
  drawTokens();
  for (QCustomPlot* p : {contrib_plot_, norm_plot_}) p->legend->setVisible(p->plottableCount() > 0);
  for (QCustomPlot* p : {map_plot_, contrib_plot_, norm_plot_, tok_plot_}) p->replot();
}

void AccumView::drawMap() {
  set_title(map_plot_, QString("main_grad of %1 expert %2 at step %3 (after all micro-batches)")
                           .arg(sel_layer_)
                           .arg(sel_expert_)
                           .arg(step_of(st_->primary(), sel_step_)));
  clear_items(map_plot_);
  if (!data_ok_) {
    heat_.map->setVisible(false);
    set_plot_note(map_plot_, data_note_.isEmpty() ? "loading..." : data_note_);
    return;
  }
  std::vector<double> z(data_.main_grad.begin(), data_.main_grad.end());
  fill_heatmap(heat_, data_.K, data_.N, z, false);
  double a = 0;
  for (double v : z) a = std::max(a, std::fabs(v));
  heat_.map->setDataRange(QCPRange(-std::max(a, 1e-30), std::max(a, 1e-30)));  // symmetric: white = 0
  if (a == 0)
    set_plot_note(map_plot_, QString("main_grad of expert %1 is zero at this step:\nthe expert received no tokens in any micro-batch").arg(sel_expert_));
  heat_.map->setGradient(diverging());
  map_plot_->xAxis->setLabel("k (input feature)");
  map_plot_->yAxis->setLabel("n (output feature)");
  auto* r = new QCPItemRect(map_plot_);
  r->setPen(QPen(QColor(0, 0, 0), 1.5));
  if (block_) {
    const int r0 = (sel_n_ / bh_) * bh_, c0 = (sel_k_ / bw_) * bw_;
    r->topLeft->setCoords(c0 - 0.5, r0 - 0.5);
    r->bottomRight->setCoords(std::min(data_.K, c0 + bw_) - 0.5, std::min(data_.N, r0 + bh_) - 0.5);
  } else {
    const double rad = std::max(1.0, data_.K / 80.0);
    r->topLeft->setCoords(sel_k_ - rad, sel_n_ - rad);
    r->bottomRight->setCoords(sel_k_ + rad, sel_n_ + rad);
  }
}

void AccumView::drawContrib() {
  contrib_plot_->clearPlottables();
  clear_items(contrib_plot_);
  const QString what = block_ ? QString("block (rows %1.., cols %2.., %3x%4)").arg((sel_n_ / bh_) * bh_).arg((sel_k_ / bw_) * bw_).arg(bh_).arg(bw_)
                     : sel_n_ < 0 ? QString("no element chosen")
                                  : QString("element (n %1, k %2)").arg(sel_n_).arg(sel_k_);
  set_title(contrib_plot_, QString("Micro-batch contributions to main_grad: %1").arg(what));
  contrib_plot_->xAxis->setLabel("micro-batch");
  contrib_plot_->yAxis->setLabel(block_ ? "L2 norm over the block (gradient units)" : "gradient (value units)");
  if (!point_ok_) {
    set_plot_note(contrib_plot_, data_note_.isEmpty() ? "loading..." : data_note_);
    return;
  }
  const int n = int(point_.contrib.size());
  QVector<double> x(n), c(n), run(n);
  for (int i = 0; i < n; ++i) {
    x[i] = i;
    c[i] = point_.contrib[size_t(i)];
    run[i] = point_.running[size_t(i)];
  }
  auto* bars = new QCPBars(contrib_plot_->xAxis, contrib_plot_->yAxis);
  bars->setData(x, c, true);
  bars->setWidth(0.55);
  bars->setBrush(palette_color(0));
  bars->setPen(QPen(palette_color(0).darker(130)));
  bars->setName(block_ ? "||contribution|| of the micro-batch" : "contribution of the micro-batch (dW_mb)");
  auto* g = contrib_plot_->addGraph();
  g->setData(x, run, true);
  g->setPen(QPen(palette_color(1), 2));
  g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, palette_color(1), 7));
  g->setName(block_ ? "||running FP32 sum||" : "running FP32 sum (main_grad so far)");
  auto* f = contrib_plot_->addGraph();
  f->setData(QVector<double>{-0.5, n - 0.5}, QVector<double>{point_.main_grad, point_.main_grad}, true);
  f->setPen(QPen(QColor(0, 0, 0), 1, Qt::DashLine));
  f->setName(block_ ? "||stored main_grad||" : "stored main_grad");
  double lo = 0, hi = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::min({lo, c[i], run[i]});
    hi = std::max({hi, c[i], run[i]});
  }
  lo = std::min(lo, point_.main_grad);
  hi = std::max(hi, point_.main_grad);
  const double pad = std::max(1e-12, (hi - lo) * 0.15);
  contrib_plot_->xAxis->setRange(-0.6, n - 0.4);
  contrib_plot_->yAxis->setRange(lo - pad * 3, hi + pad);  // room below the data for the verdict note
  QSharedPointer<QCPAxisTickerFixed> t(new QCPAxisTickerFixed);
  t->setTickStep(1);
  contrib_plot_->xAxis->setTicker(t);
  const QString verdict = block_ ? (point_.bit_equal ? QString("running sums equal main_grad bit for bit (all %1 elements)").arg(bh_ * bw_)
                                                     : QString("%1 elements differ from main_grad in bits").arg(point_.mismatched))
                                 : (point_.bit_equal ? QString("running sum equals main_grad bit for bit")
                                                     : QString("running sum differs from main_grad (fused accumulate-into GEMM?)"));
  set_plot_note(contrib_plot_, verdict + "\nfl32(...fl32(0 + c_0) + ... + c_last), micro-batch order");
  contrib_plot_->legend->setVisible(true);
  if (QCPItemText* note = plot_note(contrib_plot_)) {
    note->setPositionAlignment(Qt::AlignBottom | Qt::AlignLeft);
    note->position->setCoords(0.02, 0.97);
    note->setBrush(point_.bit_equal ? QColor(225, 245, 225) : QColor(253, 232, 232));
  }
}

void AccumView::drawNorms() {
  norm_plot_->clearPlottables();
  clear_items(norm_plot_);
  set_title(norm_plot_, QString("Norms per micro-batch, %1 at step %2").arg(sel_layer_).arg(step_of(st_->primary(), sel_step_)));
  norm_plot_->xAxis->setLabel("micro-batch");
  norm_plot_->yAxis->setLabel("L2 norm (gradient units)");
  if (norms_.empty()) {
    set_plot_note(norm_plot_, "No main_grad norms for this layer");
    return;
  }
  const int n = int(norms_.size());
  QVector<double> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = i - 0.15;
    y[i] = norms_[size_t(i)];
  }
  auto* b = new QCPBars(norm_plot_->xAxis, norm_plot_->yAxis);
  b->setData(x, y, true);
  b->setWidth(0.3);
  b->setBrush(palette_color(2));
  b->setPen(Qt::NoPen);
  b->setName("||main_grad|| after the micro-batch's add (whole layer)");
  double hi = *std::max_element(y.begin(), y.end());
  if (data_ok_) {
    const size_t NK = size_t(data_.N) * size_t(data_.K);
    QVector<double> x2, y2;
    for (int m = 0; m < data_.NMB; ++m) {
      double s = 0;
      for (size_t i = 0; i < NK; ++i) s += double(data_.contrib[size_t(m) * NK + i]) * double(data_.contrib[size_t(m) * NK + i]);
      x2 << m + 0.15;
      y2 << std::sqrt(s);
    }
    auto* b2 = new QCPBars(norm_plot_->xAxis, norm_plot_->yAxis2);
    b2->setData(x2, y2, true);
    b2->setWidth(0.3);
    b2->setBrush(palette_color(4));
    b2->setPen(Qt::NoPen);
    b2->setName(QString("||contribution|| of expert %1 (right axis)").arg(sel_expert_));
    const double h2 = y2.isEmpty() ? 0 : *std::max_element(y2.begin(), y2.end());
    if (h2 == 0) b2->setName(QString("||contribution|| of expert %1: zero (no tokens)").arg(sel_expert_));
    norm_plot_->yAxis2->setVisible(h2 > 0);
    norm_plot_->yAxis2->setLabel(QString("expert %1 contribution norm").arg(sel_expert_));
    norm_plot_->yAxis2->setRange(0, std::max(h2, 1e-30) * 1.08);
  } else {
    norm_plot_->yAxis2->setVisible(false);
  }
  norm_plot_->xAxis->setRange(-0.6, n - 0.4);
  norm_plot_->yAxis->setRange(0, hi * 1.08);
  QSharedPointer<QCPAxisTickerFixed> t(new QCPAxisTickerFixed);
  t->setTickStep(1);
  norm_plot_->xAxis->setTicker(t);
  set_plot_note(norm_plot_, "");
}

void AccumView::drawTokens() {
  clear_items(tok_plot_);
  set_title(tok_plot_, QString("Tokens per expert and micro-batch, step %1 (red: empty)").arg(step_of(st_->primary(), sel_step_)));
  if (tokens_.empty() || tok_nmb_ == 0) {
    tok_heat_.map->setVisible(false);
    set_plot_note(tok_plot_, "No tokens_per_expert series in this trace");
    return;
  }
  fill_heatmap(tok_heat_, tok_e_, tok_nmb_, tokens_, false);
  QCPColorGradient gr = viridis();
  tok_heat_.map->setGradient(gr);
  double hi = *std::max_element(tokens_.begin(), tokens_.end());
  tok_heat_.map->setDataRange(QCPRange(0, std::max(1.0, hi)));
  tok_plot_->xAxis->setLabel("expert");
  tok_plot_->yAxis->setLabel("micro-batch");
  QSharedPointer<QCPAxisTickerFixed> t(new QCPAxisTickerFixed);
  t->setTickStep(1);
  tok_plot_->xAxis->setTicker(t);
  tok_plot_->yAxis->setTicker(t);
  for (int m = 0; m < tok_nmb_; ++m)
    for (int e = 0; e < tok_e_; ++e) {
      const double v = tokens_[size_t(m) * size_t(tok_e_) + size_t(e)];
      auto* txt = new QCPItemText(tok_plot_);
      txt->position->setCoords(e, m);
      txt->setText(v == 0 ? "empty" : QString::number(qint64(v)));
      txt->setColor(v > hi * 0.6 ? Qt::black : Qt::white);
      QFont f = tok_plot_->xAxis->labelFont();
      f.setBold(v == 0);
      txt->setFont(f);
      if (v == 0) {
        auto* r = new QCPItemRect(tok_plot_);
        r->topLeft->setCoords(e - 0.5, m - 0.5);
        r->bottomRight->setCoords(e + 0.5, m + 0.5);
        r->setBrush(QColor(200, 30, 30));
        r->setPen(Qt::NoPen);
        txt->setColor(Qt::white);
        txt->setLayer("overlay");
      }
    }
  set_plot_note(tok_plot_, "");
}

void AccumView::writeCsv(QTextStream& out) const {
  // row: the trace row; step: its global optimizer step
  const QString at = QString("%1,%2").arg(sel_step_).arg(step_of(st_->primary(), sel_step_));
  out << "section,layer,expert,n,k,row,step,micro_batch,value\n";
  if (point_ok_)
    for (size_t m = 0; m < point_.contrib.size(); ++m) {
      out << (block_ ? "block_contrib_norm," : "contribution,") << sel_layer_ << ',' << sel_expert_ << ',' << sel_n_ << ',' << sel_k_
          << ',' << at << ',' << m << ',' << csv_num(point_.contrib[m]) << '\n';
      out << (block_ ? "block_running_norm," : "running_sum,") << sel_layer_ << ',' << sel_expert_ << ',' << sel_n_ << ','
          << sel_k_ << ',' << at << ',' << m << ',' << csv_num(point_.running[m]) << '\n';
    }
  if (point_ok_)
    out << (block_ ? "block_main_grad_norm," : "main_grad,") << sel_layer_ << ',' << sel_expert_ << ',' << sel_n_ << ','
        << sel_k_ << ',' << at << ",," << csv_num(point_.main_grad) << '\n';
  for (size_t m = 0; m < norms_.size(); ++m)
    out << "main_grad_norm," << sel_layer_ << ",,,," << at << ',' << m << ',' << csv_num(norms_[m]) << '\n';
  for (int m = 0; m < tok_nmb_; ++m)
    for (int e = 0; e < tok_e_; ++e)
      out << "tokens,," << e << ",,," << at << ',' << m << ',' << csv_num(tokens_[size_t(m) * size_t(tok_e_) + size_t(e)]) << '\n';
}

}  // namespace mxsim::inspector
