#include "view_curves.hpp"

#include <QDragEnterEvent>
#include <QDropEvent>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QMimeData>
#include <QPushButton>
#include <QScrollArea>
#include <QSplitter>
#include <cmath>
#include <set>

#include "names.hpp"

namespace mxsim::inspector {

namespace {
const char* kMime = "application/x-mxsim-series";
const int kDatasetRole = Qt::UserRole + 1;

Qt::PenStyle style_of(int j) {
  static const Qt::PenStyle s[] = {Qt::SolidLine, Qt::DashLine, Qt::DotLine, Qt::DashDotLine};
  return s[j % 4];
}
}  // namespace

SeriesTreeModel::SeriesTreeModel(QObject* parent) : QStandardItemModel(parent) {}

void SeriesTreeModel::rebuild(TraceListModel* traces) {
  clear();
  setHorizontalHeaderLabels({"series (drag onto a plot)"});
  std::set<QString> names;
  for (int i = 0; i < traces->size(); ++i) {
    TraceDocument* d = traces->at(i);
    if (d->state() != TraceDocument::State::Ready) continue;
    for (const auto& ds : d->meta().datasets)
      if (!ds.snapshot && ds.row_shape.empty()) names.insert(QString::fromStdString(ds.name));
  }
  // group by the first path components: /train, /eval, /layers/<l>/quant/<op>, /layers/<l>/osc
  std::map<QString, QStandardItem*> groups;
  for (const QString& n : names) {
    const QString grp = n.section('/', 0, -2);
    QStandardItem*& g = groups[grp];
    if (!g) {
      g = new QStandardItem(grp);
      g->setEditable(false);
      g->setDragEnabled(false);
      appendRow(g);
    }
    auto* it = new QStandardItem(n.section('/', -1));
    it->setData(n, kDatasetRole);
    it->setToolTip(n);
    it->setEditable(false);
    it->setDragEnabled(true);
    g->appendRow(it);
  }
}

QStringList SeriesTreeModel::mimeTypes() const { return {kMime}; }

QMimeData* SeriesTreeModel::mimeData(const QModelIndexList& indexes) const {
  QStringList names;
  for (const auto& i : indexes) {
    const QString n = i.data(kDatasetRole).toString();
    if (!n.isEmpty()) names << n;
  }
  if (names.isEmpty()) return nullptr;
  auto* m = new QMimeData;
  m->setData(kMime, names.join('\n').toUtf8());
  m->setText(names.join('\n'));
  return m;
}

CurvesView::CurvesView(InspectorState* st, QWidget* parent) : View(st, parent) {
  auto* split = new QSplitter(Qt::Horizontal, this);
  tree_ = new QTreeView(split);
  tree_->setModel(&tree_model_);
  tree_->setDragEnabled(true);
  tree_->setDragDropMode(QAbstractItemView::DragOnly);
  tree_->setSelectionMode(QAbstractItemView::ExtendedSelection);
  tree_->header()->setStretchLastSection(true);
  connect(tree_, &QTreeView::doubleClicked, this, [this](const QModelIndex& i) {
    const QString n = i.data(kDatasetRole).toString();
    if (!n.isEmpty()) addSeries(int(panels_.size()), n);
  });

  auto* right = new QWidget(split);
  auto* rl = new QVBoxLayout(right);
  rl->setContentsMargins(0, 0, 0, 0);
  auto* bar = new QHBoxLayout;
  smooth_label_ = new QLabel(right);
  smooth_slider_ = new QSlider(Qt::Horizontal, right);
  smooth_slider_->setRange(0, 99);
  smooth_slider_->setValue(int(std::lround(smooth_ * 100)));
  smooth_slider_->setMaximumWidth(220);
  connect(smooth_slider_, &QSlider::valueChanged, this, [this](int v) { setSmoothing(v / 100.0); });
  auto* reset = new QPushButton("Default panels", right);
  connect(reset, &QPushButton::clicked, this, [this] {
    setPanels({{QString::fromStdString(names::kLoss), QString::fromStdString(names::kAuxLoss)},
               {QString::fromStdString(names::kAccuracy), QString::fromStdString(names::kTestAccuracy)},
               {QString::fromStdString(names::kLr)}});
  });
  bar->addWidget(new QLabel("Smoothing (EMA weight):", right));
  bar->addWidget(smooth_slider_);
  bar->addWidget(smooth_label_);
  bar->addStretch(1);
  bar->addWidget(reset);
  rl->addLayout(bar);
  panel_box_ = new QWidget(right);
  panel_layout_ = new QVBoxLayout(panel_box_);
  panel_layout_->setContentsMargins(0, 0, 0, 0);
  panel_layout_->setSpacing(2);
  rl->addWidget(panel_box_, 1);
  drop_hint_ = new QLabel("Drop a series here for a new panel; drop it on a plot to add it there.", right);
  drop_hint_->setAlignment(Qt::AlignCenter);
  drop_hint_->setStyleSheet("QLabel { color: #666; border: 1px dashed #aaa; padding: 4px; }");
  drop_hint_->setAcceptDrops(true);
  drop_hint_->installEventFilter(this);
  rl->addWidget(drop_hint_);
  split->addWidget(tree_);
  split->addWidget(right);
  split->setStretchFactor(1, 1);
  split->setSizes({220, 1000});
  auto* l = new QVBoxLayout(this);
  l->setContentsMargins(2, 2, 2, 2);
  l->addWidget(split);

  setSmoothing(smooth_);
  setPanels({{QString::fromStdString(names::kLoss), QString::fromStdString(names::kAuxLoss)},
             {QString::fromStdString(names::kAccuracy), QString::fromStdString(names::kTestAccuracy)},
             {QString::fromStdString(names::kLr)}});

  auto* tl = st_->traces();
  auto rebuild = [this] {
    tree_model_.rebuild(st_->traces());
    tree_->expandAll();
    scheduleRefresh();
  };
  connect(tl, &TraceListModel::overlayChanged, this, rebuild);
  connect(tl, &QAbstractItemModel::dataChanged, this, rebuild);
  connect(tl, &QAbstractItemModel::rowsRemoved, this, rebuild);
  connect(st_, &InspectorState::primaryChanged, this, &CurvesView::scheduleRefresh);
  // a step change only moves the marker: the curves stay
  connect(st_, &InspectorState::stepChanged, this, [this] {
    instantUpdate([this] {
      TraceDocument* prim = st_->primary();
      if (!prim || prim->state() != TraceDocument::State::Ready) return;
      const double x = double(prim->meta().global(uint64_t(st_->step())));
      for (auto& p : panels_) {
        set_step_marker(p.plot, x);
        replot_marker(p.plot);
      }
    });
  });
  connect(st_, &InspectorState::primarySteps, this, &CurvesView::scheduleRefresh);
}

void CurvesView::setSmoothing(double w) {
  smooth_ = std::clamp(w, 0.0, 0.99);
  smooth_label_->setText(QString::number(smooth_, 'f', 2));
  if (smooth_slider_->value() != int(std::lround(smooth_ * 100))) smooth_slider_->setValue(int(std::lround(smooth_ * 100)));
  redraw();
}

void CurvesView::setPanels(const std::vector<QStringList>& panels) {
  for (auto& p : panels_) delete p.plot;
  panels_.clear();
  for (const auto& s : panels) panels_.push_back({nullptr, s});
  rebuildPanels();
  scheduleRefresh();
}

std::vector<QStringList> CurvesView::panels() const {
  std::vector<QStringList> r;
  for (const auto& p : panels_) r.push_back(p.series);
  return r;
}

void CurvesView::addSeries(int panel, const QString& dataset) {
  if (panel >= int(panels_.size())) {
    panels_.push_back({nullptr, {dataset}});
    rebuildPanels();
  } else if (!panels_[size_t(panel)].series.contains(dataset)) {
    panels_[size_t(panel)].series << dataset;
  }
  scheduleRefresh();
}

void CurvesView::rebuildPanels() {
  for (auto& p : panels_) {
    if (p.plot) continue;
    p.plot = make_plot(panel_box_);
    p.plot->setAcceptDrops(true);
    p.plot->installEventFilter(this);
    p.plot->legend->setVisible(true);
    p.plot->xAxis->setLabel("optimizer step");
    panel_layout_->addWidget(p.plot, 1);
    QCustomPlot* plot = p.plot;
    // one x range for all panels (zoom one, the others follow)
    connect(plot->xAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), this, [this, plot](const QCPRange& r) {
      for (auto& q : panels_)
        if (q.plot != plot && q.plot->xAxis->range() != r) {
          q.plot->xAxis->setRange(r);
          q.plot->replot(QCustomPlot::rpQueuedReplot);
        }
    });
  }
}

CurvesView::Panel& CurvesView::panelAt(int i) { return panels_.at(size_t(i)); }

bool CurvesView::eventFilter(QObject* o, QEvent* e) {
  if (e->type() == QEvent::DragEnter || e->type() == QEvent::DragMove) {
    auto* de = static_cast<QDragMoveEvent*>(e);
    if (de->mimeData()->hasFormat(kMime)) {
      de->acceptProposedAction();
      return true;
    }
  } else if (e->type() == QEvent::Drop && static_cast<QDropEvent*>(e)->mimeData()->hasFormat(kMime)) {
    // series from the tree only: files dropped here go on to the window (it opens traces)
    auto* de = static_cast<QDropEvent*>(e);
    const QStringList ns = QString::fromUtf8(de->mimeData()->data(kMime)).split('\n', Qt::SkipEmptyParts);
    int target = int(panels_.size());
    for (size_t i = 0; i < panels_.size(); ++i)
      if (panels_[i].plot == o) target = int(i);
    for (const QString& n : ns) addSeries(target, n);  // several names dropped below: one new panel
    de->acceptProposedAction();
    return true;
  }
  return View::eventFilter(o, e);
}

QVector<double> CurvesView::values(TraceDocument* d, const QString& dataset) const {
  auto it = data_.find({d, dataset});
  return it == data_.end() ? QVector<double>() : it->second.y;
}

void CurvesView::refresh() {
  const auto docs = st_->traces()->overlay();
  for (auto it = data_.begin(); it != data_.end();) {
    bool keep = false;
    for (auto* d : docs) keep = keep || it->first.first == d;
    it = keep ? std::next(it) : data_.erase(it);
  }
  for (auto it = failed_.begin(); it != failed_.end();) {
    bool keep = false;
    for (auto* d : docs) keep = keep || it->first.first == d;
    it = keep ? std::next(it) : failed_.erase(it);
  }
  std::set<QString> wanted;
  for (const auto& p : panels_)
    for (const auto& s : p.series) wanted.insert(s);
  for (TraceDocument* d : docs) {
    const uint64_t k = d->steps();
    for (const QString& s : wanted) {
      const std::string n = s.toStdString();
      if (!d->meta().dataset(n)) continue;
      QPointer<TraceDocument> dp(d);
      load<SeriesData>(
          d, QString("series:%1#%2").arg(s).arg(k), "curve:" + s,
          [n, k](const trace::Reader& r) { return read_series_double(r, n, 0, k); }, [this, dp, s](const SeriesData& v) {
            if (!dp) return;
            Loaded L;
            L.y = QVector<double>(v.v.begin(), v.v.end());
            L.x.resize(L.y.size());
            for (int i = 0; i < L.y.size(); ++i) L.x[i] = double(dp->meta().global(uint64_t(i)));
            data_[{dp.data(), s}] = std::move(L);
            failed_.erase({dp.data(), s});
          },
          [this, dp, s](const QString& err) {
            if (!dp) return;
            data_.erase({dp.data(), s});  // no older rows of it stay on screen as if they were read
            failed_[{dp.data(), s}] = err;
          });
    }
  }
}

void CurvesView::present() { redraw(); }

void CurvesView::redraw() {
  const auto docs = st_->traces()->overlay();
  TraceDocument* prim = st_->primary();
  const double marker = prim && prim->state() == TraceDocument::State::Ready ? double(prim->meta().global(uint64_t(st_->step()))) : NAN;
  const bool many = docs.size() > 1;
  for (auto& p : panels_) {
    QCustomPlot* plot = p.plot;
    plot->clearGraphs();
    QString ylabel;
    for (int j = 0; j < p.series.size(); ++j) {
      const QString& s = p.series[j];
      ylabel = ylabel.isEmpty() ? axis_label_for(s) : (axis_label_for(s) == ylabel ? ylabel : ylabel + " / " + axis_label_for(s));
      for (size_t di = 0; di < docs.size(); ++di) {
        auto it = data_.find({docs[di], s});
        if (it == data_.end()) continue;
        const Loaded& L = it->second;
        QColor c = palette_color(many ? int(di) : j);
        // sparse series (test accuracy: NaN except at epoch ends) as points
        // test accuracy marks "not evaluated" as NaN (format 1 writers) or -1 (schema.hpp)
        const bool neg_missing = s == QString::fromStdString(names::kTestAccuracy);
        QVector<double> fx, fy;
        for (int i = 0; i < L.y.size(); ++i)
          if (std::isfinite(L.y[i]) && !(neg_missing && L.y[i] < 0)) {
            fx << L.x[i];
            fy << L.y[i];
          }
        const bool sparse = fy.size() * 4 < L.y.size();
        const QString name = (many ? docs[di]->displayName() + ": " : QString()) + s.section('/', -1);
        if (sparse) {
          QCPGraph* g = plot->addGraph();
          g->setData(fx, fy, true);
          QPen pen(c);
          pen.setStyle(style_of(j));
          g->setPen(pen);
          g->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, c, 6));
          g->setName(name + " (points)");
          continue;
        }
        if (smooth_ > 0) {
          QCPGraph* raw = plot->addGraph();
          raw->setData(L.x, L.y, true);
          QColor f = c;
          f.setAlpha(60);
          raw->setPen(QPen(f));
          raw->removeFromLegend();
        }
        QCPGraph* g = plot->addGraph();
        g->setData(L.x, smooth_ > 0 ? smooth_ema(L.y, smooth_) : L.y, true);
        QPen pen(c);
        pen.setWidthF(1.6);
        pen.setStyle(style_of(many ? j : 0));
        g->setPen(pen);
        g->setName(name + (smooth_ > 0 ? QString(" (smoothed %1)").arg(smooth_, 0, 'f', 2) : QString()));
      }
    }
    plot->yAxis->setLabel(ylabel);
    const bool any = plot->graphCount() > 0;
    QStringList missing, damaged;
    for (const auto& s : p.series)
      for (size_t di = 0; di < docs.size(); ++di)
        if (failed_.count({docs[di], s}))
          damaged << (many ? docs[di]->displayName() + ": " : QString()) + s;
    if (!any)
      for (const auto& s : p.series) missing << s;
    if (!damaged.isEmpty())
      set_plot_note(plot, "Not shown: " + damaged.join(", ") + " damaged or unreadable (the message is in the banner).");
    else
      set_plot_note(plot, any ? QString() : (docs.empty() ? "Open a trace (File > Open, or drop a file here)."
                                                           : "No data: " + missing.join(", ") + " not in the trace(s)."));
    if (any) {
      plot->rescaleAxes();
      const QCPRange yr = plot->yAxis->range();
      const double mag = std::max(std::fabs(yr.lower), std::fabs(yr.upper));
      if (yr.size() <= 1e-9 * mag || yr.size() == 0) {
        // A flat series (a constant learning rate): the smoothing's rounding noise would fill the axis.
        const double half = mag > 0 ? 0.01 * mag : 0.5;
        plot->yAxis->setRange(yr.center() - half, yr.center() + half);
      } else {
        plot->yAxis->setRange(yr.lower - 0.05 * yr.size(), yr.upper + 0.05 * yr.size());
      }
    }
    if (std::isfinite(marker)) set_step_marker(plot, marker);
    set_title(plot, p.series.join(", "));
    plot->replot();
  }
}

void CurvesView::writeCsv(QTextStream& out) const {
  out << "trace,dataset,row,step,value,smoothed\n";
  const auto docs = st_->traces()->overlay();
  for (const auto& p : panels_)
    for (const auto& s : p.series)
      for (auto* d : docs) {
        auto it = data_.find({d, s});
        if (it == data_.end()) continue;
        const auto sm = smooth_ema(it->second.y, smooth_);
        for (int i = 0; i < it->second.y.size(); ++i)
          out << csv_field(d->displayName()) << ',' << csv_field(s) << ',' << i << ','
              << qint64(it->second.x[i]) << ',' << csv_num(it->second.y[i]) << ',' << csv_num(sm[i]) << '\n';
      }
}

}  // namespace mxsim::inspector
