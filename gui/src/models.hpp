// Small Qt item models shared by the views: a table of cells (summary tables,
// dataset lists, comparison results) and a lazily formatted numeric array (the
// raw-array view of a series row or snapshot).
#pragma once
#include <QAbstractTableModel>
#include <QStringList>
#include <QVariant>
#include <vector>

#include "mxsim/trace/common.hpp"

namespace mxsim::inspector {

/// Rows of cells; Qt::DisplayRole shows the cell (Qt::ToolTipRole too: the whole text where a
/// column is too narrow), Qt::UserRole holds a sort/raw value.
class TableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  using QAbstractTableModel::QAbstractTableModel;
  void setHeaders(const QStringList& h);
  void setRows(std::vector<std::vector<QVariant>> rows);
  const std::vector<std::vector<QVariant>>& rows() const { return rows_; }
  QStringList headers() const { return headers_; }
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;

 private:
  QStringList headers_;
  std::vector<std::vector<QVariant>> rows_;
};

/// A 2-D window [rows, cols] onto a flat array of raw little-endian values of one dtype;
/// shows decimal values with enough digits to round-trip, or the bits in hex.
class ArrayModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  using QAbstractTableModel::QAbstractTableModel;
  void setArray(std::vector<unsigned char> raw, trace::DType t, size_t rows, size_t cols, size_t offset_elems = 0);
  void setHex(bool on);
  /// Vertical header labels (e.g. the optimizer steps of a column of trace rows); empty: the row index.
  void setRowLabels(std::vector<int64_t> labels);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation o, int role) const override;
  /// Value of cell (r, c) as double and as text.
  double value(size_t r, size_t c) const;
  QString text(size_t r, size_t c) const;

 private:
  std::vector<unsigned char> raw_;
  trace::DType t_ = trace::DType::f32;
  size_t rows_ = 0, cols_ = 0, off_ = 0;
  bool hex_ = false;
  std::vector<int64_t> row_labels_;
};

}  // namespace mxsim::inspector
