#include "view_data.hpp"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QSplitter>
#include <QVBoxLayout>

#include "names.hpp"

namespace mxsim::inspector {

namespace {
QString shape_text(const std::vector<uint64_t>& s) {
  QStringList p;
  for (auto d : s) p << QString::number(d);
  return "[" + p.join(", ") + "]";
}
}  // namespace

DataView::DataView(InspectorState* st, QWidget* parent) : View(st, parent) {
  auto* split = new QSplitter(Qt::Horizontal, this);
  list_view_ = new QTableView(split);
  list_view_->setModel(&list_);
  list_view_->setSelectionBehavior(QAbstractItemView::SelectRows);
  list_view_->setSelectionMode(QAbstractItemView::SingleSelection);
  list_view_->verticalHeader()->setVisible(false);
  list_view_->verticalHeader()->setDefaultSectionSize(20);
  list_view_->horizontalHeader()->setStretchLastSection(true);
  connect(list_view_, &QTableView::clicked, this,
          [this](const QModelIndex& i) { setDataset(list_.rows().at(size_t(i.row())).at(0).toString()); });
  auto* right = new QWidget(split);
  auto* rl = new QVBoxLayout(right);
  rl->setContentsMargins(0, 0, 0, 0);
  auto* bar = new QHBoxLayout;
  info_ = new QLabel(right);
  info_->setWordWrap(true);
  slice_ = new QSpinBox(right);
  slice_->setPrefix("slice ");
  connect(slice_, qOverload<int>(&QSpinBox::valueChanged), this, [this] { present(); });
  hex_ = new QCheckBox("bits (hex)", right);
  connect(hex_, &QCheckBox::toggled, this, [this](bool on) { array_.setHex(on); });
  bar->addWidget(info_, 1);
  bar->addWidget(slice_);
  bar->addWidget(hex_);
  rl->addLayout(bar);
  array_view_ = new QTableView(right);
  array_view_->setModel(&array_);
  array_view_->verticalHeader()->setDefaultSectionSize(20);
  array_view_->horizontalHeader()->setDefaultSectionSize(120);
  rl->addWidget(array_view_, 1);
  split->addWidget(list_view_);
  split->addWidget(right);
  split->setSizes({540, 700});
  auto* l = new QVBoxLayout(this);
  l->setContentsMargins(2, 2, 2, 2);
  l->addWidget(split);
  connect(st_, &InspectorState::primaryChanged, this, &DataView::scheduleRefresh);
  connect(st_, &InspectorState::stepChanged, this, &DataView::scheduleRefresh);
  connect(st_, &InspectorState::primarySteps, this, &DataView::scheduleRefresh);
}

void DataView::setDataset(const QString& name) {
  dataset_ = name;
  scheduleRefresh();
}

void DataView::refresh() {
  row_ok_ = false;
  note_.clear();
  sel_step_ = st_->step();
  TraceDocument* d = st_->primary();
  std::vector<std::vector<QVariant>> rows;
  if (!d || d->state() != TraceDocument::State::Ready) {
    list_.setHeaders({"dataset", "kind", "dtype", "shape per step"});
    list_.setRows({});
    note_ = d ? d->error() : "Open a trace.";
    return;
  }
  const TraceMeta& m = d->meta();
  list_.setHeaders({"dataset", "kind", "dtype", "shape per step", "steps"});
  for (const auto& ds : m.datasets)
    rows.push_back({QString::fromStdString(ds.name), ds.snapshot ? "snapshot" : "series", trace::dtype_name(ds.dtype),
                    shape_text(ds.row_shape),
                    ds.snapshot ? QVariant(qint64(ds.snapshot_steps.size())) : QVariant(qint64(m.steps))});
  list_.setRows(std::move(rows));
  if (dataset_.isEmpty()) dataset_ = QString::fromStdString(names::kLoss);
  const std::string n = dataset_.toStdString();
  const trace::DatasetInfo* in = m.dataset(n);
  if (!in) {
    note_ = dataset_ + " is not in this trace.";
    return;
  }
  const qint64 s = sel_step_;
  const uint64_t k = m.steps;
  if (in->snapshot && std::find(in->snapshot_steps.begin(), in->snapshot_steps.end(), s) == in->snapshot_steps.end()) {
    note_ = QString("%1: no snapshot at step %2 (snapshot steps: %3)")
                .arg(dataset_)
                .arg(step_of(d, s))
                .arg(in->snapshot_steps.empty() ? QString("none") : steps_list(d, in->snapshot_steps));
    return;
  }
  const bool column = !in->snapshot && in->row_shape.empty();  // a scalar series: every step
  load<RawRow>(
      d, column ? QString("raw:%1#%2").arg(dataset_).arg(k) : QString("raw:%1@%2").arg(dataset_).arg(s), "raw",
      [n, s, k, column](const trace::Reader& r) {
        const auto& i = r.info(n);
        RawRow rr;
        rr.dtype = i.dtype;
        if (column) {
          rr.raw = r.read_raw(n, i.dtype, 0, k);
          rr.shape = {k};
        } else {
          rr.raw = i.snapshot ? r.read_snapshot_raw(n, i.dtype, s) : r.read_raw(n, i.dtype, uint64_t(s), 1);
          rr.shape = i.row_shape;
        }
        return rr;
      },
      [this](const RawRow& r) {
        row_ = r;
        row_ok_ = true;
      },
      [this](const QString& e) { note_ = "Cannot read: " + e; });
}

void DataView::present() {
  list_view_->resizeColumnsToContents();
  for (int i = 0; i < list_.rowCount(); ++i)
    if (list_.rows()[size_t(i)][0].toString() == dataset_) {
      list_view_->selectRow(i);
      list_view_->scrollTo(list_.index(i, 0));
    }
  if (!row_ok_) {
    info_->setText(note_.isEmpty() ? "loading..." : note_);
    array_.setArray({}, trace::DType::f32, 0, 0);
    return;
  }
  const auto& sh = row_.shape;
  rows_ = 1;
  cols_ = 1;
  slices_ = 1;
  if (sh.size() == 1) {
    rows_ = sh[0];  // a column: one row per step, or the elements of a 1-D row
  } else if (sh.size() >= 2) {
    rows_ = sh[sh.size() - 2];
    cols_ = sh.back();
    for (size_t i = 0; i + 2 < sh.size(); ++i) slices_ *= sh[i];
  }
  slice_->blockSignals(true);
  slice_->setRange(0, int(std::max<size_t>(1, slices_)) - 1);
  slice_->setVisible(slices_ > 1);
  slice_->blockSignals(false);
  const size_t sl = size_t(slice_->value());
  array_.setArray(row_.raw, row_.dtype, rows_, cols_, sl * rows_ * cols_);
  TraceDocument* d = st_->primary();
  array_view_->horizontalHeader()->setDefaultSectionSize(row_.dtype == trace::DType::f64 ? 170 : row_.dtype == trace::DType::f32 ? 110 : 64);
  const bool column = sh.size() == 1 && d && d->meta().dataset(dataset_.toStdString()) &&
                      d->meta().dataset(dataset_.toStdString())->row_shape.empty();
  // a scalar series' column: one row per trace row, labelled by its optimizer step
  std::vector<int64_t> labels;
  if (column)
    for (size_t r = 0; r < rows_; ++r) labels.push_back(step_of(d, int64_t(r)));
  array_.setRowLabels(std::move(labels));
  info_->setText(QString("<b>%1</b> (%2) %3%4")
                     .arg(dataset_, trace::dtype_name(row_.dtype))
                     .arg(column ? QString("all %1 steps (rows labelled by optimizer step)").arg(sh[0])
                                 : QString("at step %1, shape %2").arg(step_of(d, sel_step_)).arg(shape_text(sh)))
                     .arg(slices_ > 1 ? QString(", showing slice %1 of %2 leading-index slices").arg(sl).arg(slices_) : QString()));
}

QString DataView::infoText() const { return info_->text(); }

void DataView::writeCsv(QTextStream& out) const {
  // row, step: the trace row shown and its global optimizer step (a scalar series' column: each
  // array row i is trace row i); i, j: the array's row and column
  out << "dataset,row,step,i,j,value\n";
  if (!row_ok_) return;
  const TraceDocument* d = st_->primary();
  const bool column = row_.shape.size() == 1 && d && d->meta().dataset(dataset_.toStdString()) &&
                      d->meta().dataset(dataset_.toStdString())->row_shape.empty();
  for (size_t r = 0; r < rows_; ++r)
    for (size_t c = 0; c < cols_; ++c) {
      const int64_t row = column ? int64_t(r) : sel_step_;
      out << csv_field(dataset_) << ',' << row << ',' << step_of(d, row) << ',' << r << ',' << c << ',' << array_.text(r, c) << '\n';
    }
}

}  // namespace mxsim::inspector
