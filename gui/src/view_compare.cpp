#include "view_compare.hpp"

#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QScrollBar>
#include <QSplitter>
#include <QVBoxLayout>
#include <cmath>
#include <cstring>

#include "mxsim/trace/compare.hpp"

namespace mxsim::inspector {

namespace {

template <class U>
U load_u(const unsigned char* p) {
  U v;
  std::memcpy(&v, p, sizeof(U));
  return v;
}

/// Floats as integers in value order: negative values reversed below the positives.
template <class U>
U ordered(U bits) {
  constexpr U sign = U(1) << (sizeof(U) * 8 - 1);
  return (bits & sign) ? U(~bits) : U(bits | sign);
}

/// Row (series) or snapshot bytes at step s.
std::vector<unsigned char> row_bytes(const trace::Reader& r, const trace::DatasetInfo& in, int64_t s) {
  return in.snapshot ? r.read_snapshot_raw(in.name, in.dtype, s) : r.read_raw(in.name, in.dtype, uint64_t(s), 1);
}

}  // namespace

double ulp_distance(trace::DType t, const unsigned char* a, const unsigned char* b, bool* nan_mismatch) {
  *nan_mismatch = false;
  using trace::DType;
  switch (t) {
    case DType::f32: {
      const uint32_t x = load_u<uint32_t>(a), y = load_u<uint32_t>(b);
      float fx, fy;
      std::memcpy(&fx, &x, 4);
      std::memcpy(&fy, &y, 4);
      if (std::isnan(fx) != std::isnan(fy)) {
        *nan_mismatch = true;
        return -1;
      }
      if (std::isnan(fx)) return x == y ? 0 : 1;
      const uint32_t ox = ordered(x), oy = ordered(y);
      return double(ox > oy ? ox - oy : oy - ox);
    }
    case DType::f64: {
      const uint64_t x = load_u<uint64_t>(a), y = load_u<uint64_t>(b);
      double fx, fy;
      std::memcpy(&fx, &x, 8);
      std::memcpy(&fy, &y, 8);
      if (std::isnan(fx) != std::isnan(fy)) {
        *nan_mismatch = true;
        return -1;
      }
      if (std::isnan(fx)) return x == y ? 0 : 1;
      const uint64_t ox = ordered(x), oy = ordered(y);
      return double(ox > oy ? ox - oy : oy - ox);
    }
    case DType::u8: return std::fabs(double(a[0]) - double(b[0]));
    case DType::i32: return std::fabs(double(load_u<int32_t>(a)) - double(load_u<int32_t>(b)));
    case DType::u32: return std::fabs(double(load_u<uint32_t>(a)) - double(load_u<uint32_t>(b)));
    case DType::i64: return std::fabs(double(load_u<int64_t>(a)) - double(load_u<int64_t>(b)));
    case DType::u64: {
      const uint64_t x = load_u<uint64_t>(a), y = load_u<uint64_t>(b);
      return double(x > y ? x - y : y - x);
    }
  }
  return 0;
}

CompareView::CompareView(InspectorState* st, QWidget* parent) : View(st, parent) {
  auto* l = new QVBoxLayout(this);
  l->setContentsMargins(2, 2, 2, 2);
  auto* bar = new QHBoxLayout;
  a_pick_ = new QComboBox(this);
  b_pick_ = new QComboBox(this);
  a_pick_->setModel(st_->traces());
  b_pick_->setModel(st_->traces());
  a_pick_->setMinimumWidth(220);
  b_pick_->setMinimumWidth(220);
  connect(a_pick_, qOverload<int>(&QComboBox::activated), this, [this](int i) { st_->setPrimary(st_->traces()->at(i)); });
  connect(b_pick_, qOverload<int>(&QComboBox::activated), this, [this](int i) { st_->setOther(st_->traces()->at(i)); });
  goto_first_ = new QPushButton("Go to first difference", this);
  connect(goto_first_, &QPushButton::clicked, this, [this] {
    if (!cmp_ok_ || cmp_.first_step < 0) return;
    dataset_ = cmp_.first_dataset;
    st_->setStep(cmp_.first_step);
    scheduleRefresh();
  });
  bar->addWidget(new QLabel("A:", this));
  bar->addWidget(a_pick_);
  bar->addWidget(new QLabel("  B:", this));
  bar->addWidget(b_pick_);
  bar->addWidget(goto_first_);
  bar->addStretch(1);
  l->addLayout(bar);
  summary_ = new QLabel(this);
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  summary_->setStyleSheet("QLabel { padding: 4px; }");
  l->addWidget(summary_);
  auto* split = new QSplitter(Qt::Horizontal, this);
  split_ = split;
  table_ = new QTableView(split);
  table_->setModel(&rows_);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->setTextElideMode(Qt::ElideMiddle);  // only where even 3/5 of the view is too narrow (present())
  table_->setHorizontalScrollBarPolicy(Qt::ScrollBarAsNeeded);
  table_->verticalHeader()->setVisible(false);
  table_->verticalHeader()->setDefaultSectionSize(20);
  table_->horizontalHeader()->setStretchLastSection(true);
  connect(table_, &QTableView::clicked, this, [this](const QModelIndex& i) {
    setDataset(rows_.rows().at(size_t(i.row())).at(0).toString());
  });
  plot_ = make_plot(split, "ULP distance");
  heat_ = add_heatmap(plot_, "ULP distance (log; blank = identical bits)");
  split->addWidget(table_);
  split->addWidget(plot_);
  split->setStretchFactor(1, 1);
  split->setSizes({430, 750});
  l->addWidget(split, 1);
  connect(st_, &InspectorState::primaryChanged, this, &CompareView::scheduleRefresh);
  connect(st_, &InspectorState::otherChanged, this, &CompareView::scheduleRefresh);
  connect(st_, &InspectorState::stepChanged, this, &CompareView::scheduleRefresh);
  connect(st_, &InspectorState::expertChanged, this, &CompareView::scheduleRefresh);
  connect(st_->traces(), &TraceListModel::overlayChanged, this, &CompareView::scheduleRefresh);
}

void CompareView::setDataset(const QString& name) {
  dataset_ = name;
  scheduleRefresh();
}

void CompareView::fillPickers() {
  const int a = st_->traces()->indexOf(st_->primary()), b = st_->traces()->indexOf(st_->other());
  if (a_pick_->currentIndex() != a) a_pick_->setCurrentIndex(a);
  if (b_pick_->currentIndex() != b) b_pick_->setCurrentIndex(b);
}

void CompareView::refresh() {
  struct Guard {
    bool& b;
    explicit Guard(bool& x) : b(x) { b = true; }
    ~Guard() { b = false; }
  } guard(in_refresh_);
  fillPickers();
  cmp_ok_ = ulp_ok_ = false;
  cmp_err_.clear();
  sel_step_ = st_->step();
  TraceDocument *A = st_->primary(), *B = st_->other();
  if (!A || !B || A == B || A->state() != TraceDocument::State::Ready || B->state() != TraceDocument::State::Ready) {
    cmp_err_ = "Open two traces (A = the primary trace, B = the comparison trace) to compare them.";
    return;
  }
  const QString pb = B->path();
  const uint64_t ka = A->steps(), kb = B->steps();
  const ReaderRef refb = B->readerRef();
  load<CompareData>(
      A, QString("cmp:%1#%2#%3").arg(pb).arg(ka).arg(kb), "cmp",
      [pa = A->path(), pb, refb](const trace::Reader& ra) {
        if (!*refb) throw trace::TraceError(pb.toStdString() + ": closed");
        const trace::Reader& rb = **refb;
        const trace::CompareResult c = trace::compare(ra, rb);
        CompareData d;
        d.a = pa;
        d.b = pb;
        d.steps_a = c.steps_a;
        d.steps_b = c.steps_b;
        d.compared = c.steps_compared;
        d.row_a = int64_t(c.alignment.row_a);
        d.row_b = int64_t(c.alignment.row_b);
        d.by_global_step = c.alignment.by_global_step;
        d.alignment_note = QString::fromStdString(c.alignment.note);
        d.identical = c.identical();
        // A's trace row of a step as trace::CompareResult names it (step_of: the global step, or
        // the compared index when paired by index)
        const auto row_of = [&c](int64_t step) {
          return step < 0 ? int64_t(-1)
                          : c.alignment.by_global_step ? step - c.alignment.first_step_a : int64_t(c.alignment.row_a) + step;
        };
        if (c.first_difference) {
          d.first_step = int64_t(c.first_difference->row_a);  // this view works in A's trace rows
          d.first_dataset = QString::fromStdString(c.first_difference->dataset);
          d.first_element = c.first_difference->element;
        }
        for (const auto& cd : c.config_diffs)
          d.config_diffs << QString("%1: %2 -> %3").arg(QString::fromStdString(cd.key), QString::fromStdString(cd.a),
                                                       QString::fromStdString(cd.b));
        // every common dataset's first differing step, over the steps paired as above
        for (const auto& pd : c.per_dataset) {
          CompareData::Row row;
          row.name = QString::fromStdString(pd.dataset);
          row.snapshot = ra.info(pd.dataset).snapshot;
          row.first_step = row_of(pd.first_step);
          row.steps_differing = pd.steps_differing;
          row.max_abs_diff = pd.max_abs_diff;
          d.rows.push_back(row);
        }
        for (const auto& n : c.only_a) d.rows.push_back({QString::fromStdString(n), "only in A", -1, 0, 0, false});
        for (const auto& n : c.only_b) d.rows.push_back({QString::fromStdString(n), "only in B", -1, 0, 0, false});
        for (const auto& n : c.mismatched) d.rows.push_back({QString::fromStdString(n), "dtype or shape differ", -1, 0, 0, false});
        std::stable_sort(d.rows.begin(), d.rows.end(), [](const auto& x, const auto& y) {
          const int64_t a = x.first_step < 0 ? INT64_MAX : x.first_step, b = y.first_step < 0 ? INT64_MAX : y.first_step;
          return a < b;
        });
        return d;
      },
      [this](const CompareData& d) {
        cmp_ = d;
        cmp_ok_ = true;
        if (dataset_.isEmpty() && !d.first_dataset.isEmpty()) dataset_ = d.first_dataset;  // the first difference's map
        // arrived after refresh() returned: the ULP map, which needs the pairing, is read now
        if (!in_refresh_ && !dataset_.isEmpty()) scheduleRefresh();
      },
      [this](const QString& e) { cmp_err_ = "Cannot compare: " + e; });
  // the ULP map of the chosen dataset (default: the first differing one) at the step, once the
  // comparison says which row of B pairs with the selected row of A
  QString ds = dataset_;
  if (ds.isEmpty() && cmp_ok_ && !cmp_.first_dataset.isEmpty()) ds = cmp_.first_dataset;
  if (ds.isEmpty() || !cmp_ok_) return;
  const std::string n = ds.toStdString();
  const trace::DatasetInfo *ia = A->meta().dataset(n), *ib = B->meta().dataset(n);
  if (!ia || !ib) return;
  const qint64 s = sel_step_;
  const int64_t sb = s - cmp_.row_a + cmp_.row_b;  // B's row of the same step
  const bool in_window = s >= cmp_.row_a && s - cmp_.row_a < int64_t(cmp_.compared);
  const int64_t gs = A->meta().global(uint64_t(std::max<qint64>(0, s)));
  const int expert = st_->expert();
  load<UlpMap>(
      A, QString("ulp:%1|%2@%3~%4/%5").arg(pb, ds).arg(s).arg(sb).arg(expert), "ulp",
      [n, pb, s, sb, in_window, gs, expert, refb](const trace::Reader& ra) {
        UlpMap u;
        const auto& in = ra.info(n);
        if (!*refb) throw trace::TraceError(pb.toStdString() + ": closed");
        const trace::Reader& rb = **refb;
        const auto& jn = rb.info(n);
        if (in.dtype != jn.dtype || in.row_shape != jn.row_shape) {
          u.note = "dtype or shape differ: no element-wise comparison";
          return u;
        }
        if (!in_window || uint64_t(s) >= ra.steps_completed() || sb < 0 || uint64_t(sb) >= rb.steps_completed()) {
          u.note = QString("step %1 is not among the steps both traces hold").arg(gs);
          return u;
        }
        const auto has_snap = [](const trace::DatasetInfo& i, int64_t r) {
          return std::find(i.snapshot_steps.begin(), i.snapshot_steps.end(), r) != i.snapshot_steps.end();
        };
        if (in.snapshot && (!has_snap(in, s) || !has_snap(jn, sb))) {
          u.note = QString("%1 has no snapshot at step %2 in %3").arg(QString::fromStdString(n)).arg(gs).arg(has_snap(in, s) ? "B" : "A");
          return u;
        }
        const auto a = row_bytes(ra, in, s), b = row_bytes(rb, jn, sb);
        // 2-D view: the last two dimensions; leading dimensions flattened and indexed by `expert`
        const auto& sh = in.row_shape;
        size_t lead = 1;
        if (sh.size() >= 2) {
          u.rows = int(sh[sh.size() - 2]);
          u.cols = int(sh.back());
          for (size_t i = 0; i + 2 < sh.size(); ++i) lead *= sh[i];
        } else {
          u.rows = 1;
          u.cols = sh.empty() ? 1 : int(sh[0]);
        }
        const size_t slice = std::min<size_t>(size_t(std::max(0, expert)), lead - 1);
        const size_t es = trace::dtype_size(in.dtype), per = size_t(u.rows) * size_t(u.cols);
        u.ulp.resize(per);
        for (size_t i = 0; i < per; ++i) {
          const size_t off = (slice * per + i) * es;
          bool nm = false;
          const double d = ulp_distance(in.dtype, a.data() + off, b.data() + off, &nm);
          u.ulp[i] = d;
          u.nan_mismatch += nm;
          u.differing += d != 0;
          if (d > u.max_ulp) {
            u.max_ulp = d;
            u.max_at = int64_t(i);
          }
        }
        if (lead > 1) u.note = QString("expert/slice %1 of %2").arg(slice).arg(lead);
        return u;
      },
      [this](const UlpMap& u) {
        ulp_ = u;
        ulp_ok_ = true;
      });
  dataset_ = ds;
}

void CompareView::present() {
  fillPickers();
  TraceDocument* A = st_->primary();
  // A's global optimizer step of A's trace row r, as the plots' axes show steps
  const auto step_of = [A](int64_t r) {
    return A && A->state() == TraceDocument::State::Ready && r >= 0 ? A->meta().global(uint64_t(r)) : r;
  };
  if (!cmp_ok_) {
    summary_->setText(cmp_err_.isEmpty() ? "comparing..." : cmp_err_);
    rows_.setRows({});
  } else {
    QString t = QString("<b>A</b> %1 (%2 steps) &nbsp; <b>B</b> %3 (%4 steps) &nbsp; compared %5 steps")
                    .arg(QFileInfo(cmp_.a).fileName())
                    .arg(cmp_.steps_a)
                    .arg(QFileInfo(cmp_.b).fileName())
                    .arg(cmp_.steps_b)
                    .arg(cmp_.compared);
    if (cmp_.compared > 0)
      t += QString(" (%1 %2 to %3%4)")
               .arg(cmp_.by_global_step ? "optimizer steps" : "A's steps")
               .arg(step_of(cmp_.row_a))
               .arg(step_of(cmp_.row_a + int64_t(cmp_.compared) - 1))
               .arg(cmp_.by_global_step ? QString() : ", row by row: " + cmp_.alignment_note.toHtmlEscaped());
    t += ": ";
    if (cmp_.first_step < 0)
      t += cmp_.identical ? "<b>bit-identical</b>" : "no bit difference in common data (datasets or step counts differ)";
    else
      t += QString("<b>first difference at step %1 in %2</b> (element %3)").arg(step_of(cmp_.first_step)).arg(cmp_.first_dataset).arg(cmp_.first_element);
    if (!cmp_.config_diffs.isEmpty()) t += "<br>config differs: " + cmp_.config_diffs.mid(0, 6).join("; ").toHtmlEscaped();
    summary_->setText(t);
    rows_.setHeaders({"dataset", "status", "first diff. step"});
    std::vector<std::vector<QVariant>> r;
    for (const auto& x : cmp_.rows) {
      QString status = x.status;
      if (status.isEmpty())
        status = x.first_step < 0 ? QString("identical")
                                  : QString("differs at %1 step%2, max |A - B| %3")
                                        .arg(x.steps_differing)
                                        .arg(x.steps_differing == 1 ? "" : "s")
                                        .arg(fmt_num(x.max_abs_diff, 3));
      r.push_back({x.name, status, x.first_step < 0 ? QVariant("-") : QVariant(qint64(step_of(x.first_step)))});
    }
    rows_.setRows(std::move(r));
    // Dataset paths differ anywhere (layer, operand, statistic): the name column is as wide as
    // the longest, and the table gets the width its columns need (up to 3/5 of the view).
    QHeaderView* h = table_->horizontalHeader();
    h->setStretchLastSection(true);
    h->setSectionResizeMode(0, QHeaderView::ResizeToContents);
    h->setSectionResizeMode(1, QHeaderView::ResizeToContents);
    h->setSectionResizeMode(2, QHeaderView::ResizeToContents);
    int need = 2 * table_->frameWidth() + table_->verticalScrollBar()->sizeHint().width() + 4;
    table_->resizeColumnsToContents();
    for (int c = 0; c < rows_.columnCount(); ++c) need += table_->columnWidth(c);
    const int total = split_->width() - split_->handleWidth();
    if (total > 0) {
      const int tw = std::min(need, total * 3 / 5);
      split_->setSizes({tw, total - tw});
    }
    for (int i = 0; i < rows_.rowCount(); ++i)
      if (rows_.rows()[size_t(i)][0].toString() == dataset_) table_->selectRow(i);
  }
  goto_first_->setEnabled(cmp_ok_ && cmp_.first_step >= 0);
  set_title(plot_, dataset_.isEmpty() ? "ULP distance A vs B" : QString("ULP distance A vs B: %1 at step %2").arg(dataset_).arg(step_of(sel_step_)));
  if (!ulp_ok_ || ulp_.ulp.empty()) {
    heat_.map->setVisible(false);
    set_plot_note(plot_, ulp_ok_ ? ulp_.note : dataset_.isEmpty() ? (cmp_ok_ ? "Pick a dataset in the table." : "") : "loading...");
  } else {
    std::vector<double> z = ulp_.ulp;
    for (double& v : z)
      if (v < 0) v = ulp_.max_ulp > 0 ? ulp_.max_ulp * 2 : 1;  // NaN on one side only: above the largest distance
    fill_heatmap(heat_, ulp_.cols, ulp_.rows, z, true);
    QCPColorGradient g = viridis();
    heat_.map->setGradient(g);
    plot_->xAxis->setLabel(ulp_.rows == 1 ? "element" : "column (last dimension)");
    plot_->yAxis->setLabel(ulp_.rows == 1 ? "" : "row");
    QString note = ulp_.differing == 0 ? "identical bits at this step"
                                       : QString("%1 of %2 differ, max %3 ULP at %4%5")
                                             .arg(ulp_.differing)
                                             .arg(ulp_.ulp.size())
                                             .arg(ulp_.max_ulp, 0, 'g', 3)
                                             .arg(ulp_.max_at)
                                             .arg(ulp_.nan_mismatch ? QString("\n%1 NaN on one side only").arg(ulp_.nan_mismatch) : QString());
    if (!ulp_.note.isEmpty()) note += "\n" + ulp_.note;
    set_title(plot_, QString("ULP distance A vs B: %1 at step %2\n%3").arg(dataset_).arg(step_of(sel_step_)).arg(note));
    set_plot_note(plot_, "");
  }
  plot_->replot();
}

void CompareView::writeCsv(QTextStream& out) const {
  // row: A's trace row; step: A's global optimizer step of that row (-1, -1: none)
  TraceDocument* A = st_->primary();
  const auto step_of = [A](int64_t r) {
    return A && A->state() == TraceDocument::State::Ready && r >= 0 ? A->meta().global(uint64_t(r)) : int64_t(-1);
  };
  out << "section,dataset,row,step,element,value\n";
  if (cmp_ok_) {
    out << "first_difference," << csv_field(cmp_.first_dataset) << ',' << cmp_.first_step << ',' << step_of(cmp_.first_step) << ','
        << cmp_.first_element << ",\n";
    for (const auto& r : cmp_.rows)
      out << "dataset," << csv_field(r.name) << ',' << r.first_step << ',' << step_of(r.first_step) << ",,"
          << csv_field(r.status.isEmpty() ? (r.first_step < 0 ? QString("identical") : QString("differs")) : r.status) << '\n';
  }
  if (ulp_ok_)
    for (size_t i = 0; i < ulp_.ulp.size(); ++i)
      out << "ulp," << csv_field(dataset_) << ',' << sel_step_ << ',' << step_of(sel_step_) << ',' << i << ',' << csv_num(ulp_.ulp[i]) << '\n';
}

}  // namespace mxsim::inspector
