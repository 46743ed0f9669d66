#include "state.hpp"

#include <QFileInfo>
#include <algorithm>

namespace mxsim::inspector {

int TraceListModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : int(docs_.size()); }

QVariant TraceListModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= size()) return {};
  const TraceDocument* d = docs_[size_t(index.row())];
  switch (role) {
    case Qt::DisplayRole:
      switch (d->state()) {
        case TraceDocument::State::Opening: return d->displayName() + "  (opening...)";
        case TraceDocument::State::Failed: return d->displayName() + "  (cannot open)";
        case TraceDocument::State::Ready:
          return QString("%1  (%2 steps%3)")
              .arg(d->displayName())
              .arg(d->steps())
              .arg(d->following() ? ", following" : "");
      }
      return {};
    case Qt::ToolTipRole: return d->state() == TraceDocument::State::Failed ? d->error() : d->path();
    case Qt::CheckStateRole: return checked_[size_t(index.row())] ? Qt::Checked : Qt::Unchecked;
    default: return {};
  }
}

bool TraceListModel::setData(const QModelIndex& index, const QVariant& value, int role) {
  if (!index.isValid() || role != Qt::CheckStateRole) return false;
  checked_[size_t(index.row())] = value.toInt() == Qt::Checked;
  emit dataChanged(index, index, {role});
  emit overlayChanged();
  return true;
}

Qt::ItemFlags TraceListModel::flags(const QModelIndex& index) const {
  return QAbstractListModel::flags(index) | Qt::ItemIsUserCheckable;
}

TraceDocument* TraceListModel::add(const QString& path) {
  // One document per file: one cache, one follow timer, one set of views onto it.
  const QString canon = QFileInfo(path).canonicalFilePath();
  for (TraceDocument* o : docs_)
    if (!canon.isEmpty() && QFileInfo(o->path()).canonicalFilePath() == canon && o->state() != TraceDocument::State::Failed)
      return o;
  auto* d = new TraceDocument(path, this);
  beginInsertRows({}, size(), size());
  docs_.push_back(d);
  checked_.push_back(true);
  endInsertRows();
  connect(d, &TraceDocument::opened, this, [this, d] { changed(d); emit overlayChanged(); });
  connect(d, &TraceDocument::failed, this, [this, d] { changed(d); });
  connect(d, &TraceDocument::stepsChanged, this, [this, d] { changed(d); });
  d->open();
  return d;
}

void TraceListModel::remove(TraceDocument* d) {
  const int i = indexOf(d);
  if (i < 0) return;
  beginRemoveRows({}, i, i);
  docs_.erase(docs_.begin() + i);
  checked_.erase(checked_.begin() + i);
  endRemoveRows();
  d->deleteLater();
  emit overlayChanged();
}

int TraceListModel::indexOf(const TraceDocument* d) const {
  auto it = std::find(docs_.begin(), docs_.end(), d);
  return it == docs_.end() ? -1 : int(it - docs_.begin());
}

bool TraceListModel::overlaid(const TraceDocument* d) const {
  const int i = indexOf(d);
  return i >= 0 && checked_[size_t(i)];
}

std::vector<TraceDocument*> TraceListModel::overlay() const {
  std::vector<TraceDocument*> r;
  for (size_t i = 0; i < docs_.size(); ++i)
    if (checked_[i] && docs_[i]->state() == TraceDocument::State::Ready) r.push_back(docs_[i]);
  return r;
}

void TraceListModel::changed(TraceDocument* d) {
  const int i = indexOf(d);
  if (i >= 0) emit dataChanged(index(i), index(i));
}

InspectorState::InspectorState(QObject* parent) : QObject(parent) {}

void InspectorState::setPrimary(TraceDocument* d) {
  if (primary_ == d) return;
  if (primary_) disconnect(primary_, nullptr, this, nullptr);
  primary_ = d;
  if (d) connect(d, &TraceDocument::stepsChanged, this, &InspectorState::primarySteps);
  emit primaryChanged();
}

void InspectorState::setOther(TraceDocument* d) {
  if (other_ == d) return;
  other_ = d;
  emit otherChanged();
}

void InspectorState::setStep(qint64 s) {
  if (s < 0) s = 0;
  if (s == step_) return;
  step_ = s;
  emit stepChanged(s);
}

void InspectorState::setLayer(const QString& l) {
  if (l == layer_) return;
  layer_ = l;
  elem_n_ = elem_k_ = -1;
  emit layerChanged();
}

void InspectorState::setOperand(const QString& o) {
  if (o == operand_) return;
  operand_ = o;
  emit operandChanged();
}

void InspectorState::setExpert(int e) {
  if (e == expert_) return;
  expert_ = e;
  emit expertChanged();
}

void InspectorState::setElement(int n, int k) {
  if (n == elem_n_ && k == elem_k_) return;
  elem_n_ = n;
  elem_k_ = k;
  emit elementChanged();
}

}  // namespace mxsim::inspector
