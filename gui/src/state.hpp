// What the user has selected: the open traces (a list model: name, steps,
// state, overlay check), the primary and the comparison trace, the step, the
// layer, operand, expert and element. Every view follows this one object.
#pragma once
#include <QAbstractListModel>
#include <QObject>
#include <QPointer>
#include <QString>
#include <vector>

#include "trace_doc.hpp"

namespace mxsim::inspector {

/// The open traces. Check state = overlaid in the training curves.
class TraceListModel : public QAbstractListModel {
  Q_OBJECT
 public:
  using QAbstractListModel::QAbstractListModel;
  int rowCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  bool setData(const QModelIndex& index, const QVariant& value, int role) override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;

  /// Opens `path` (asynchronously); returns the document (owned by the model). A file that
  /// is open already returns its document.
  TraceDocument* add(const QString& path);
  void remove(TraceDocument* d);
  TraceDocument* at(int row) const { return docs_.at(size_t(row)); }
  int indexOf(const TraceDocument* d) const;
  int size() const { return int(docs_.size()); }
  bool overlaid(const TraceDocument* d) const;
  /// Documents that are open and checked, in list order.
  std::vector<TraceDocument*> overlay() const;

 signals:
  void overlayChanged();

 private:
  void changed(TraceDocument* d);
  std::vector<TraceDocument*> docs_;
  std::vector<bool> checked_;
};

/// Logical operand of a linear (sim/recipe.hpp): the trace records the
/// quantization of W (fprop; dgrad uses the same bytes except under current
/// scaling), x (fprop) and dy (dgrad) at micro-batch 0 every step, and the block
/// maps of x, dy and the wgrad operands (x and dy quantized along M per expert) at
/// snapshot steps (trace format 4).
struct OperandInfo {
  const char* key;    ///< trace name: w, x, dy, x_wgrad, dy_wgrad (trace::schema)
  const char* label;  ///< UI text
};
inline constexpr OperandInfo kOperandInfo[] = {{"w", "W  (fprop/dgrad weight)"},
                                               {"x", "x  (fprop input)"},
                                               {"dy", "dy (dgrad grad_output)"},
                                               {"x_wgrad", "x  (wgrad, along M)"},
                                               {"dy_wgrad", "dy (wgrad, along M)"}};
/// Index of an operand key in kOperandInfo (LayerMeta::blocks); 0 for an unknown key.
inline int operand_index(const QString& key) {
  for (int i = 0; i < int(std::size(kOperandInfo)); ++i)
    if (key == kOperandInfo[i].key) return i;
  return 0;
}

class InspectorState : public QObject {
  Q_OBJECT
 public:
  explicit InspectorState(QObject* parent = nullptr);
  TraceListModel* traces() { return &traces_; }
  const TraceListModel* traces() const { return &traces_; }

  TraceDocument* primary() const { return primary_; }
  TraceDocument* other() const { return other_; }
  /// Trace row (0-based, < steps of the primary trace).
  qint64 step() const { return step_; }
  QString layer() const { return layer_; }
  QString operand() const { return operand_; }
  int expert() const { return expert_; }
  /// Selected weight element (n, k) within the expert; -1 = none.
  int elemRow() const { return elem_n_; }
  int elemCol() const { return elem_k_; }

  void setPrimary(TraceDocument* d);
  void setOther(TraceDocument* d);
  void setStep(qint64 s);
  void setLayer(const QString& l);
  void setOperand(const QString& o);
  void setExpert(int e);
  void setElement(int n, int k);

 signals:
  void primaryChanged();
  void otherChanged();
  void stepChanged(qint64 step);
  void layerChanged();
  void operandChanged();
  void expertChanged();
  void elementChanged();
  /// The primary trace got new complete steps (live follow).
  void primarySteps(quint64 steps);

 private:
  TraceListModel traces_;
  QPointer<TraceDocument> primary_, other_;
  qint64 step_ = 0;
  QString layer_ = "fc1", operand_ = "w";
  int expert_ = 0, elem_n_ = -1, elem_k_ = -1;
};

}  // namespace mxsim::inspector
