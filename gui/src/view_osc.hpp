// Weight oscillation: a heat map of one expert's per-element flip counts,
// EMA flip frequency or DistRatio at a snapshot step; clicking an element
// opens its timeline: the FP32 master value against the horizontal lines of
// its block's quantization grid (which move when the block scale changes),
// the quantized value the forward GEMM used, and de-oscillation snaps; below,
// the layer's oscillation metrics over steps.
#pragma once
#include <QComboBox>

#include "plot_util.hpp"
#include "view.hpp"

namespace mxsim::inspector {

/// One expert's [N, K] slice of an element map (or of master - weight_q when no map exists).
struct ElementMap {
  int N = 0, K = 0;
  std::vector<double> v;
  size_t bytes() const { return v.size() * 8 + 32; }
};

/// One weight element over the snapshot steps.
struct ElementTimeline {
  std::vector<double> steps;       ///< trace rows
  std::vector<double> master, wq;  ///< FP32 master, dequantized W fprop used
  std::vector<double> scale;       ///< block scale per step (its byte, or FP32 scale_inv); empty = unknown
  ScaleKind kind = ScaleKind::E8M0;  ///< how `scale` reads (a byte: E8M0 or UE4M3, by the layer's recipe)
  std::vector<double> tensor_scale;  ///< UE4M3: W's FP32 tensor scale at each point (quant/w/tensor_scale_inv)
  /// The block's decode factor at point i: 2^(byte - 127), scale_inv, or E4M3(byte) x the tensor scale
  /// (NaN where that is unknown).
  double scale_value(size_t i) const;
  std::vector<double> snaps;       ///< cumulative snaps of the element; empty = unknown
  bool every_step = false;         ///< from the watched-element series (trace format 4), else the snapshots
  size_t bytes() const { return (steps.size() * 5 + tensor_scale.size()) * 8 + 64; }
};

class OscView : public View {
  Q_OBJECT
 public:
  explicit OscView(InspectorState* st, QWidget* parent = nullptr);
  QString id() const override { return "osc"; }
  QString title() const override { return "Weight oscillation"; }
  void writeCsv(QTextStream& out) const override;

  /// 0 flips, 1 EMA frequency, 2 DistRatio.
  void setMetric(int m);
  const ElementTimeline* timeline() const { return tl_ok_ ? &tl_ : nullptr; }
  const ElementMap* map() const { return map_ok_ ? &map_ : nullptr; }
  QCustomPlot* mapPlot() const { return heat_plot_; }
  QCustomPlot* timelinePlot() const { return tl_plot_; }
  /// The layer's oscillations per step with its de-osc snaps per window end (tests).
  QCustomPlot* flipPlot() const { return flip_plot_; }

 protected:
  void refresh() override;
  void present() override;

 private:
  void drawMap();
  void drawTimeline();
  void drawCurves();
  QString osc_missing() const;

  QComboBox* metric_pick_ = nullptr;
  QCustomPlot *heat_plot_ = nullptr, *tl_plot_ = nullptr, *flip_plot_ = nullptr, *freq_plot_ = nullptr;
  Heatmap heat_;
  int metric_ = 0;
  bool user_metric_ = false;
  ElementMap map_;
  bool map_ok_ = false;
  QString map_note_, tl_note_;
  ElementTimeline tl_;
  bool tl_ok_ = false;
  std::map<std::string, SeriesData> curves_;
  QString sel_layer_, curves_key_;
  int sel_expert_ = 0, sel_n_ = -1, sel_k_ = -1;
  qint64 sel_step_ = 0;
};

}  // namespace mxsim::inspector
