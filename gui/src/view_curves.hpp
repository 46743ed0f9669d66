// Training curves (TensorBoard's scalars, PlotJuggler's drag and drop):
// stacked panels of scalar series over the global optimizer step, every
// overlaid trace in its own colour, debiased-EMA smoothing with the raw
// values faint behind, the current step marked. Series are dragged from the
// tree onto a panel (or below the last one for a new panel).
#pragma once
#include <QLabel>
#include <QSlider>
#include <QStandardItemModel>
#include <QTreeView>
#include <QVBoxLayout>
#include <map>

#include "plot_util.hpp"
#include "view.hpp"

namespace mxsim::inspector {

/// Scalar series of every open trace, grouped by trace; items drag as
/// "application/x-mxsim-series" (the dataset name).
class SeriesTreeModel : public QStandardItemModel {
  Q_OBJECT
 public:
  explicit SeriesTreeModel(QObject* parent = nullptr);
  void rebuild(TraceListModel* traces);
  QStringList mimeTypes() const override;
  QMimeData* mimeData(const QModelIndexList& indexes) const override;
};

class CurvesView : public View {
  Q_OBJECT
 public:
  explicit CurvesView(InspectorState* st, QWidget* parent = nullptr);
  QString id() const override { return "curves"; }
  QString title() const override { return "Training curves"; }
  void writeCsv(QTextStream& out) const override;

  /// Panels and their series (dataset names); the defaults are loss, accuracy, lr.
  void setPanels(const std::vector<QStringList>& panels);
  std::vector<QStringList> panels() const;
  void addSeries(int panel, const QString& dataset);  ///< panel == size(): a new panel
  void setSmoothing(double w);
  double smoothing() const { return smooth_; }
  /// Raw values of (trace, dataset) as loaded (tests compare them with the trace).
  QVector<double> values(TraceDocument* d, const QString& dataset) const;

 protected:
  void refresh() override;
  void present() override;
  bool eventFilter(QObject* o, QEvent* e) override;

 private:
  struct Panel {
    QCustomPlot* plot = nullptr;
    QStringList series;
  };
  void rebuildPanels();
  void redraw();
  Panel& panelAt(int i);

  SeriesTreeModel tree_model_;
  QTreeView* tree_ = nullptr;
  QWidget* panel_box_ = nullptr;
  QVBoxLayout* panel_layout_ = nullptr;
  QLabel* drop_hint_ = nullptr;
  QSlider* smooth_slider_ = nullptr;
  QLabel* smooth_label_ = nullptr;
  std::vector<Panel> panels_;
  double smooth_ = 0.6;
  struct Loaded {
    QVector<double> x, y;
  };
  std::map<std::pair<const TraceDocument*, QString>, Loaded> data_;
  /// Series whose read failed (a damaged chunk): the message; said on their panel, never plotted.
  std::map<std::pair<const TraceDocument*, QString>, QString> failed_;
};

}  // namespace mxsim::inspector
