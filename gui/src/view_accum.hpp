// Gradient accumulation into main_grad: for a layer, expert and element (or
// the element's block), each micro-batch's contribution and the running FP32
// sum across the step, checked bit for bit against the stored main_grad; the
// main_grad map of the expert (click to pick the element); main_grad norms
// after each micro-batch; and the tokens each expert got per micro-batch
// (empty experts marked).
#pragma once
#include <QComboBox>

#include "plot_util.hpp"
#include "view.hpp"

namespace mxsim::inspector {

/// One expert's contributions [NMB, N, K] and main_grad [N, K] at a snapshot step.
struct AccumData {
  int NMB = 0, N = 0, K = 0;
  std::vector<float> contrib, main_grad;
  size_t bytes() const { return (contrib.size() + main_grad.size()) * 4 + 32; }
};

/// Element (or block) accumulation, computed from AccumData.
struct AccumPoint {
  std::vector<double> contrib;  ///< per micro-batch (element value, or block L2 norm)
  std::vector<double> running;  ///< after each micro-batch: fl32 running sum (element), its block L2 norm
  double main_grad = 0;         ///< stored value (element) or block L2 norm
  bool bit_equal = false;       ///< element: running sum after the last micro-batch == main_grad in bits
  int64_t mismatched = 0;       ///< block: elements whose running sum differs from main_grad in bits
};

/// Running FP32 sum of one element over micro-batches: acc = fl32(acc + c_i), from 0
/// (the unfused bridge's order; docs/trace-format.md /snap/<l>/wgrad_mb).
AccumPoint accumulate(const AccumData& a, int n, int k, int block_rows, int block_cols, bool block);

class AccumView : public View {
  Q_OBJECT
 public:
  explicit AccumView(InspectorState* st, QWidget* parent = nullptr);
  QString id() const override { return "accum"; }
  QString title() const override { return "Gradient accumulation"; }
  void writeCsv(QTextStream& out) const override;
  void setBlockMode(bool on);
  const AccumPoint* point() const { return point_ok_ ? &point_ : nullptr; }
  const std::vector<double>& tokens() const { return tokens_; }

 protected:
  void refresh() override;
  void present() override;

 private:
  void drawMap();
  void drawContrib();
  void drawNorms();
  void drawTokens();

  QComboBox* mode_pick_ = nullptr;
  QCustomPlot *map_plot_ = nullptr, *contrib_plot_ = nullptr, *norm_plot_ = nullptr, *tok_plot_ = nullptr;
  Heatmap heat_, tok_heat_;
  bool block_ = false;
  AccumData data_;
  bool data_ok_ = false;
  QString data_note_;
  AccumPoint point_;
  bool point_ok_ = false;
  std::vector<double> tokens_, norms_;
  int tok_nmb_ = 0, tok_e_ = 0;
  QString sel_layer_;
  int sel_expert_ = 0, sel_n_ = -1, sel_k_ = -1, bh_ = 32, bw_ = 32;
  qint64 sel_step_ = 0;
};

}  // namespace mxsim::inspector
