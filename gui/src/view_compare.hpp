// Compare two traces (emulator vs GPU, two recipes, two seeds): the first
// differing step and dataset (mxsim compare's rule), every dataset's first
// differing step, and for a chosen dataset at the selected step a map of bit
// differences as ULP distance.
#pragma once
#include <QComboBox>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QTableView>

#include "models.hpp"
#include "plot_util.hpp"
#include "view.hpp"

namespace mxsim::inspector {

/// The comparison of A (primary) with B, rows paired as `mxsim compare` pairs them
/// (trace::Alignment: by global step when both traces hold /train/step, else row i with row i).
/// Steps here are A's trace rows (what the scrubber selects); the view shows them as A's global
/// optimizer steps (TraceMeta::global), as the plots' axes do.
struct CompareData {
  QString a, b;
  uint64_t steps_a = 0, steps_b = 0, compared = 0;
  int64_t row_a = 0, row_b = 0;  ///< first compared row of A and of B (A's row r pairs with B's row r - row_a + row_b)
  bool by_global_step = false;
  QString alignment_note;        ///< why rows are paired by index ("" when by global step)
  bool identical = false;
  int64_t first_step = -1;       ///< A's trace row of the first difference; -1: none
  QString first_dataset;
  uint64_t first_element = 0;
  struct Row {
    QString name, status;
    int64_t first_step = -1;  ///< A's trace row of the dataset's first difference; -1: none (or not comparable)
    uint64_t steps_differing = 0;
    double max_abs_diff = 0;
    bool snapshot = false;
  };
  std::vector<Row> rows;
  QStringList config_diffs;
  size_t bytes() const { return rows.size() * 96 + 256; }
};

/// ULP distance per element of one row (series) or snapshot at one step.
struct UlpMap {
  int rows = 1, cols = 1;
  std::vector<double> ulp;  ///< -1 where exactly one side is NaN, else |ordered(a) - ordered(b)|
  uint64_t differing = 0, nan_mismatch = 0;
  double max_ulp = 0;
  int64_t max_at = -1;
  QString note;
  size_t bytes() const { return ulp.size() * 8 + 64; }
};

/// Distance in units in the last place between two values of one dtype, from their
/// bits (floats mapped to a monotone integer order; +0 and -0 are 1 apart); integers: |a - b|.
double ulp_distance(trace::DType t, const unsigned char* a, const unsigned char* b, bool* nan_mismatch);

class CompareView : public View {
  Q_OBJECT
 public:
  explicit CompareView(InspectorState* st, QWidget* parent = nullptr);
  QString id() const override { return "compare"; }
  QString title() const override { return "Compare"; }
  void writeCsv(QTextStream& out) const override;
  void setDataset(const QString& name);
  const CompareData* result() const { return cmp_ok_ ? &cmp_ : nullptr; }
  const UlpMap* ulp() const { return ulp_ok_ ? &ulp_ : nullptr; }
  /// The per-dataset table, the summary line and the ULP plot as shown (tests).
  const QTableView* table() const { return table_; }
  QString summaryText() const { return summary_->text(); }
  QCustomPlot* ulpPlot() const { return plot_; }

 protected:
  void refresh() override;
  void present() override;

 private:
  void fillPickers();
  QComboBox *a_pick_ = nullptr, *b_pick_ = nullptr;
  QLabel* summary_ = nullptr;
  QPushButton* goto_first_ = nullptr;
  QTableView* table_ = nullptr;
  QSplitter* split_ = nullptr;
  TableModel rows_;
  QCustomPlot* plot_ = nullptr;
  Heatmap heat_;
  CompareData cmp_;
  bool cmp_ok_ = false;
  QString cmp_err_;
  UlpMap ulp_;
  bool ulp_ok_ = false;
  QString dataset_;
  qint64 sel_step_ = 0;
  bool in_refresh_ = false;
};

}  // namespace mxsim::inspector
