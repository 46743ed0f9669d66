// Quantization error of one layer's operand: the per-block error map at the
// selected step (SQNR or MSE over the recipe's block grid; hover shows a
// block's scale byte, amax, error and element codes), the histogram of block
// scale exponents with underflow / saturation / NaN counts, the same
// statistics as curves over steps, and a per-tensor summary table of every
// quantized operand at the step.
#pragma once
#include <QComboBox>
#include <cmath>
#include <QTableView>

#include "models.hpp"
#include "plot_util.hpp"
#include "view.hpp"

namespace mxsim::inspector {

/// Per-tensor statistics of every quantized (layer, operand) at one step.
struct QuantStep {
  struct Entry {
    QString layer, op;
    double mse = 0, sqnr_db = 0;
    double underflow = 0, saturated = 0, count = 0;
    std::vector<double> hist;  ///< 256 bins, E8M0 byte order; bin 255 = NaN scales
  };
  std::vector<Entry> e;
  size_t bytes() const { return e.size() * (sizeof(Entry) + 256 * 8); }
  const Entry* find(const QString& l, const QString& op) const;
};

/// Per-block maps of one operand at one snapshot step (schema::block_map).
struct BlockMaps {
  int G = 0, BR = 0, BC = 0;  ///< block grid per group
  int R = 0, C = 0;           ///< logical rows, cols per group
  std::vector<float> mse, sqnr_db, amax;
  std::vector<double> scale;  ///< the stored block scale: its byte (E8M0, UE4M3) or FP32 scale_inv
  ScaleKind kind = ScaleKind::E8M0;  ///< which (a byte's kind from the layer's recipe)
  /// UE4M3: each group's FP32 tensor scale at the step ([G]: the block maps' own tensor_scale_inv,
  /// or the operand's series value for every group); empty where the trace holds neither
  std::vector<float> tensor_scales;
  /// Group g's tensor scale (NaN when unknown).
  float tensor_scale(size_t g) const { return g < tensor_scales.size() ? tensor_scales[g] : NAN; }
  /// hd::scale_exp_bin of block i: the one binning of the per-step histograms (the product of both
  /// levels for UE4M3; the E4M3 scale alone where the tensor scale is unknown, an older trace's)
  unsigned bin(size_t i) const;
  std::vector<uint8_t> codes;  ///< [G, R, C], empty when absent
  std::vector<int64_t> rows;   ///< activation operands: rows of each group at the step (R is the capacity)
  int block_h = 1;             ///< logical rows per block (activation operands' used block rows)
  size_t bytes() const { return (mse.size() + sqnr_db.size() + amax.size()) * 4 + scale.size() * 8 + codes.size(); }
};

class QuantView : public View {
  Q_OBJECT
 public:
  explicit QuantView(InspectorState* st, QWidget* parent = nullptr);
  QString id() const override { return "quant"; }
  QString title() const override { return "Quantization error"; }
  void writeCsv(QTextStream& out) const override;

  /// The left map: per-block SQNR or MSE at the step, or the scale-exponent histogram over all steps.
  enum class Metric { Sqnr, Mse, ExpOverSteps };
  void setMetric(Metric m);
  /// What the views show now (tests).
  const QuantStep* stepData() const { return step_ok_ ? &step_ : nullptr; }
  const TableModel& summary() const { return summary_; }
  QCustomPlot* histogramPlot() const { return hist_; }
  QCustomPlot* qualityPlot() const { return gq_curve_; }
  QCustomPlot* shadowPlot() const { return gs_curve_; }
  QCustomPlot* mapPlot() const { return map_; }
  /// Tooltip text of block (group g, block row br, block col bc); "" without maps.
  /// "E2M1 1x32, E8M0" of the selected operand ("" when the recipe is unknown).
  QString block_grid_text() const;
  QString blockInfo(int g, int br, int bc) const;

 protected:
  void refresh() override;
  void present() override;

 private:
  void drawMap();
  void drawTensorScale(const TraceDocument& d, int nx);
  void drawHist();
  void drawCurves();
  /// Bias and rounding of the selected operand over steps (numerics.md §4.6 "Gradient quality"):
  /// the norm ratio ||x|| / ||d - x|| with the sqrt(3) threshold of Chmiel et al. (2025), the
  /// round-up share against its stochastic-rounding expectation, and the bias over the RMS.
  void drawQuality();
  /// The layer's quantized GEMMs against their BF16 shadow over steps (numerics.md §4.8): each
  /// GEMM's output SQNR (micro-batch 0) beside its token operand's own SQNR.
  void drawShadow();
  void fillSummary();

  QComboBox* metric_pick_ = nullptr;
  QCustomPlot *map_ = nullptr, *hist_ = nullptr, *err_curve_ = nullptr, *uf_curve_ = nullptr, *gq_curve_ = nullptr,
              *gs_curve_ = nullptr;
  Heatmap heat_;
  QCPItemText* hist_text_ = nullptr;
  QTableView* table_ = nullptr;
  TableModel summary_;
  Metric metric_ = Metric::Sqnr;
  bool user_metric_ = false;
  /// The lower right plot: underflow and saturation, or bias and rounding (the default for dy
  /// while the trace has it, until the user picks one).
  QComboBox* lower_pick_ = nullptr;
  bool user_lower_ = false;
  void setLower(int i);
  /// Clears curves plot p to `note`: no stale axes of the previous selection behind it (the right
  /// axis hidden, a linear 0..1 left axis, the trace's steps along x).
  void emptyCurves(QCustomPlot* p, const QString& note);
  SeriesData hist_steps_;
  bool hist_steps_ok_ = false;

  QuantStep step_;
  bool step_ok_ = false;
  QString step_err_;
  BlockMaps maps_;
  bool maps_ok_ = false;
  QString maps_note_;
  std::map<std::string, SeriesData> curves_;
  QString sel_layer_, sel_op_, curves_key_;
  qint64 sel_step_ = -1;
};

}  // namespace mxsim::inspector
