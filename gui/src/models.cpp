#include "models.hpp"

#include <cstring>

#include "plot_util.hpp"

namespace mxsim::inspector {

void TableModel::setHeaders(const QStringList& h) {
  beginResetModel();
  headers_ = h;
  endResetModel();
}

void TableModel::setRows(std::vector<std::vector<QVariant>> rows) {
  beginResetModel();
  rows_ = std::move(rows);
  endResetModel();
}

int TableModel::rowCount(const QModelIndex& p) const { return p.isValid() ? 0 : int(rows_.size()); }
int TableModel::columnCount(const QModelIndex& p) const { return p.isValid() ? 0 : int(headers_.size()); }

QVariant TableModel::data(const QModelIndex& i, int role) const {
  if (!i.isValid() || size_t(i.row()) >= rows_.size()) return {};
  const auto& r = rows_[size_t(i.row())];
  if (size_t(i.column()) >= r.size()) return {};
  const QVariant& v = r[size_t(i.column())];
  if (role == Qt::UserRole) return v;
  if (role == Qt::ToolTipRole) return data(i, Qt::DisplayRole);  // the whole text where a narrow column elides it
  if (role == Qt::TextAlignmentRole)
    return v.typeId() == QMetaType::QString ? QVariant(Qt::AlignLeft | Qt::AlignVCenter)
                                            : QVariant(Qt::AlignRight | Qt::AlignVCenter);
  if (role != Qt::DisplayRole) return {};
  if (v.typeId() == QMetaType::Double) return fmt_num(v.toDouble(), 6);
  return v;
}

QVariant TableModel::headerData(int s, Qt::Orientation o, int role) const {
  if (role != Qt::DisplayRole) return {};
  if (o == Qt::Horizontal) return s < headers_.size() ? headers_[s] : QVariant();
  return s + 1;
}

void ArrayModel::setArray(std::vector<unsigned char> raw, trace::DType t, size_t rows, size_t cols, size_t off) {
  beginResetModel();
  raw_ = std::move(raw);
  t_ = t;
  rows_ = rows;
  cols_ = cols;
  off_ = off;
  endResetModel();
}

void ArrayModel::setHex(bool on) {
  beginResetModel();
  hex_ = on;
  endResetModel();
}

int ArrayModel::rowCount(const QModelIndex& p) const { return p.isValid() ? 0 : int(rows_); }
int ArrayModel::columnCount(const QModelIndex& p) const { return p.isValid() ? 0 : int(cols_); }

double ArrayModel::value(size_t r, size_t c) const {
  const size_t sz = trace::dtype_size(t_), i = off_ + r * cols_ + c;
  if ((i + 1) * sz > raw_.size()) return 0;
  const unsigned char* p = raw_.data() + i * sz;
  switch (t_) {
    case trace::DType::f32: { float v; std::memcpy(&v, p, 4); return v; }
    case trace::DType::f64: { double v; std::memcpy(&v, p, 8); return v; }
    case trace::DType::u8: return *p;
    case trace::DType::i32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case trace::DType::u32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    case trace::DType::i64: { int64_t v; std::memcpy(&v, p, 8); return double(v); }
    case trace::DType::u64: { uint64_t v; std::memcpy(&v, p, 8); return double(v); }
  }
  return 0;
}

QString ArrayModel::text(size_t r, size_t c) const {
  const size_t sz = trace::dtype_size(t_), i = off_ + r * cols_ + c;
  if ((i + 1) * sz > raw_.size()) return {};
  const unsigned char* p = raw_.data() + i * sz;
  if (hex_) {
    uint64_t b = 0;
    std::memcpy(&b, p, sz);
    return QString("0x%1").arg(b, int(sz * 2), 16, QChar('0'));
  }
  switch (t_) {
    case trace::DType::f32: return fmt_num(value(r, c), 9);
    case trace::DType::f64: return fmt_num(value(r, c), 17);
    case trace::DType::i64: { int64_t v; std::memcpy(&v, p, 8); return QString::number(v); }
    case trace::DType::u64: { uint64_t v; std::memcpy(&v, p, 8); return QString::number(v); }
    default: return QString::number(qint64(value(r, c)));
  }
}

QVariant ArrayModel::data(const QModelIndex& i, int role) const {
  if (!i.isValid()) return {};
  if (role == Qt::DisplayRole) return text(size_t(i.row()), size_t(i.column()));
  if (role == Qt::TextAlignmentRole) return QVariant(Qt::AlignRight | Qt::AlignVCenter);
  return {};
}

void ArrayModel::setRowLabels(std::vector<int64_t> labels) {
  row_labels_ = std::move(labels);
  emit headerDataChanged(Qt::Vertical, 0, std::max(0, rowCount() - 1));
}

QVariant ArrayModel::headerData(int s, Qt::Orientation o, int role) const {
  if (role != Qt::DisplayRole) return {};
  if (o == Qt::Vertical && size_t(s) < row_labels_.size()) return QVariant(qint64(row_labels_[size_t(s)]));
  return QVariant(s);
}

}  // namespace mxsim::inspector
