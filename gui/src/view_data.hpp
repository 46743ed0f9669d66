// The raw arrays (HDFView's "show me the data"): every series and snapshot of
// the trace with dtype and shape; the selected one's row at the current step
// (or its whole column over steps for scalars), values with round-trip digits
// or bits in hex; leading dimensions picked by index.
#pragma once
#include <QCheckBox>
#include <QLabel>
#include <QSpinBox>
#include <QTableView>

#include "models.hpp"
#include "view.hpp"

namespace mxsim::inspector {

struct RawRow {
  std::vector<unsigned char> raw;
  trace::DType dtype = trace::DType::f32;
  std::vector<uint64_t> shape;  ///< of the loaded block (scalars over steps: {k})
  size_t bytes() const { return raw.size() + 64; }
};

class DataView : public View {
  Q_OBJECT
 public:
  explicit DataView(InspectorState* st, QWidget* parent = nullptr);
  QString id() const override { return "data"; }
  QString title() const override { return "Raw data"; }
  void writeCsv(QTextStream& out) const override;
  void setDataset(const QString& name);
  const ArrayModel& array() const { return array_; }
  /// The line above the array: dataset, dtype, step, shape (tests).
  QString infoText() const;

 protected:
  void refresh() override;
  void present() override;

 private:
  TableModel list_;
  ArrayModel array_;
  QTableView *list_view_ = nullptr, *array_view_ = nullptr;
  QLabel* info_ = nullptr;
  QSpinBox* slice_ = nullptr;
  QCheckBox* hex_ = nullptr;
  QString dataset_, note_;
  RawRow row_;
  bool row_ok_ = false;
  qint64 sel_step_ = 0;
  size_t rows_ = 0, cols_ = 0, slices_ = 1;
};

}  // namespace mxsim::inspector
