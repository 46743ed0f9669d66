#include "main_window.hpp"

#include <QApplication>
#include <QDockWidget>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QMenuBar>
#include <QMimeData>
#include <QSettings>
#include <QStatusBar>
#include <QToolBar>
#include <QUrl>
#include <QVBoxLayout>
#include <algorithm>
#include <functional>

#include "names.hpp"
#include "run_panel.hpp"
#include "view_accum.hpp"
#include "view_compare.hpp"
#include "view_curves.hpp"
#include "view_data.hpp"
#include "view_osc.hpp"
#include "view_quant.hpp"

namespace mxsim::inspector {

namespace {
/// PageUp / PageDown move the step by this many steps.
constexpr int kPageSteps = 10;

/// Drops and File > Open take HDF5 files by these suffixes (case-insensitive).
bool is_trace_file(const QUrl& u) {
  if (!u.isLocalFile()) return false;
  const QString s = QFileInfo(u.toLocalFile()).suffix().toLower();
  return s == "h5" || s == "hdf5";
}

/// The scrubber's spin box: its value is the trace row (what InspectorState holds), its text the
/// row's global optimizer step, as the views and the plots' axes show steps; typing a step
/// selects the row holding it.
class StepSpinBox : public QSpinBox {
 public:
  StepSpinBox(QWidget* parent, std::function<const TraceMeta*()> meta) : QSpinBox(parent), meta_(std::move(meta)) {}

 protected:
  QString textFromValue(int row) const override {
    const TraceMeta* m = meta_();
    return QString::number(m ? m->global(uint64_t(std::max(0, row))) : qint64(row));
  }
  int valueFromText(const QString& text) const override {
    bool ok = false;
    const qint64 s = text.trimmed().toLongLong(&ok);
    const TraceMeta* m = meta_();
    if (!ok) return value();
    if (!m) return int(s);
    const int64_t r = m->row_of(s);
    return r >= 0 ? int(r) : value();
  }
  QValidator::State validate(QString& input, int&) const override {
    const QString t = input.trimmed();
    if (t.isEmpty()) return QValidator::Intermediate;
    bool ok = false;
    const qint64 s = t.toLongLong(&ok);
    if (!ok) return QValidator::Invalid;
    const TraceMeta* m = meta_();
    if (!m) return QValidator::Acceptable;
    const int64_t r = m->row_of(s);
    return r >= minimum() && r <= maximum() ? QValidator::Acceptable : QValidator::Intermediate;
  }

 private:
  std::function<const TraceMeta*()> meta_;
};
}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("mxsim-inspector");
  setAcceptDrops(true);
  resize(1280, 800);

  auto* central = new QWidget(this);
  auto* cl = new QVBoxLayout(central);
  cl->setContentsMargins(4, 4, 4, 4);
  cl->setSpacing(4);
  banner_ = new QLabel(central);
  banner_->setWordWrap(true);
  banner_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  banner_->setStyleSheet("QLabel { background: #fde8e8; color: #7a1010; border: 1px solid #e0a0a0; padding: 6px; }");
  banner_->hide();
  cl->addWidget(banner_);
  tabs_ = new QTabWidget(central);
  cl->addWidget(tabs_, 1);

  // step scrubber
  auto* scrub = new QHBoxLayout;
  step_slider_ = new QSlider(Qt::Horizontal, central);
  step_slider_->setFocusPolicy(Qt::StrongFocus);
  step_slider_->installEventFilter(this);
  step_spin_ = new StepSpinBox(central, [this]() -> const TraceMeta* {
    const TraceDocument* d = state_.primary();
    return d && d->state() == TraceDocument::State::Ready ? &d->meta() : nullptr;
  });
  step_spin_->setToolTip("global optimizer step (/train/step); type a step to go there");
  step_spin_->installEventFilter(this);
  step_label_ = new QLabel(central);
  step_label_->setMinimumWidth(260);
  scrub->addWidget(new QLabel("Step:", central));
  scrub->addWidget(step_slider_, 1);
  scrub->addWidget(step_spin_);
  scrub->addWidget(step_label_);
  cl->addLayout(scrub);
  connect(step_slider_, &QSlider::valueChanged, this, [this](int v) { state_.setStep(v); });
  connect(step_spin_, qOverload<int>(&QSpinBox::valueChanged), this, [this](int v) { state_.setStep(v); });
  connect(&state_, &InspectorState::stepChanged, this, [this](qint64 s) {
    if (step_slider_->value() != s) step_slider_->setValue(int(s));
    if (step_spin_->value() != s) step_spin_->setValue(int(s));
    updateScrubber();
  });
  setCentralWidget(central);

  views_ = {new CurvesView(&state_), new QuantView(&state_), new OscView(&state_),
            new AccumView(&state_),  new CompareView(&state_), new DataView(&state_)};
  for (View* v : views_) {
    tabs_->addTab(v, v->title());
    connect(v, &View::updated, this, [this, v] {
      statusBar()->showMessage(QString("%1 updated in %2 ms").arg(v->title()).arg(v->lastUpdateMs(), 0, 'f', 1), 4000);
    });
  }

  // traces dock
  auto* dock = new QDockWidget("Traces (checked: overlaid in curves)", this);
  dock->setObjectName("traces");
  trace_list_ = new QListView(dock);
  trace_list_->setModel(state_.traces());
  trace_list_->setMinimumWidth(170);
  trace_list_->setMaximumWidth(230);
  dock->setWidget(trace_list_);
  addDockWidget(Qt::LeftDockWidgetArea, dock);
  connect(trace_list_, &QListView::activated, this,
          [this](const QModelIndex& i) { state_.setPrimary(state_.traces()->at(i.row())); });

  run_ = new RunPanel(this);
  run_->setMaximumWidth(230);
  auto* rdock = new QDockWidget("Run", this);
  rdock->setObjectName("run");
  rdock->setWidget(run_);
  addDockWidget(Qt::LeftDockWidgetArea, rdock);
  connect(run_, &RunPanel::traceStarted, this, [this](const QString& path) {
    TraceDocument* d = openTrace(path);
    state_.setPrimary(d);
    connect(d, &TraceDocument::opened, this, [this, d] {
      d->setFollow(true, 250);
      setFollow(true);
    });
  });

  buildPickers();
  buildMenus();
  connect(&state_, &InspectorState::primaryChanged, this, &MainWindow::primaryChanged);
  // the layer's watched element stands in until the user picks one (setLayer clears the pick)
  connect(&state_, &InspectorState::layerChanged, this, [this] {
    pickWatchedElement(false);
    updateScrubber();  // the label names the layer's map steps
  });
  connect(&state_, &InspectorState::expertChanged, this, [this] {
    if (auto_elem_.x() >= 0 && QPoint(state_.elemCol(), state_.elemRow()) == auto_elem_) {
      state_.setElement(-1, -1);  // the watched element of the other expert, if any, else the views' own pick
      pickWatchedElement(false);
    }
  });
  connect(&state_, &InspectorState::elementChanged, this, [this] {
    if (QPoint(state_.elemCol(), state_.elemRow()) != auto_elem_) auto_elem_ = QPoint(-1, -1);
  });
  connect(&state_, &InspectorState::primarySteps, this, [this](quint64 k) {
    updateScrubber();
    if (follow_ && k > 0) state_.setStep(qint64(k) - 1);
  });
  updateScrubber();
}

MainWindow::~MainWindow() = default;

void MainWindow::buildPickers() {
  auto* tb = addToolBar("Selection");
  tb->setObjectName("selection");
  tb->addWidget(new QLabel(" Trace: "));
  trace_pick_ = new QComboBox;
  trace_pick_->setModel(state_.traces());
  trace_pick_->setMinimumWidth(200);
  tb->addWidget(trace_pick_);
  connect(trace_pick_, qOverload<int>(&QComboBox::activated), this,
          [this](int i) { state_.setPrimary(i >= 0 ? state_.traces()->at(i) : nullptr); });
  tb->addWidget(new QLabel("  Layer: "));
  layer_pick_ = new QComboBox;
  layer_pick_->setObjectName("layerPick");
  layer_pick_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  tb->addWidget(layer_pick_);
  connect(layer_pick_, &QComboBox::currentTextChanged, this, [this](const QString& t) {
    if (!t.isEmpty()) state_.setLayer(t.section(' ', 0, 0));
  });
  tb->addWidget(new QLabel("  Tensor: "));
  op_pick_ = new QComboBox;
  for (const auto& o : kOperandInfo) op_pick_->addItem(o.label, QString(o.key));
  tb->addWidget(op_pick_);
  connect(op_pick_, qOverload<int>(&QComboBox::currentIndexChanged), this,
          [this](int i) { state_.setOperand(op_pick_->itemData(i).toString()); });
  connect(&state_, &InspectorState::operandChanged, this, [this] {
    const int i = op_pick_->findData(state_.operand());
    if (i >= 0 && i != op_pick_->currentIndex()) op_pick_->setCurrentIndex(i);
  });
  connect(&state_, &InspectorState::layerChanged, this, [this] {
    for (int i = 0; i < layer_pick_->count(); ++i)
      if (layer_pick_->itemText(i).section(' ', 0, 0) == state_.layer() && i != layer_pick_->currentIndex())
        layer_pick_->setCurrentIndex(i);
  });
  tb->addWidget(new QLabel("  Expert: "));
  expert_pick_ = new QSpinBox;
  expert_pick_->setRange(0, 0);
  tb->addWidget(expert_pick_);
  connect(expert_pick_, qOverload<int>(&QSpinBox::valueChanged), this, [this](int v) { state_.setExpert(v); });
  connect(&state_, &InspectorState::expertChanged, this, [this] {
    if (expert_pick_->value() != state_.expert()) expert_pick_->setValue(state_.expert());
  });
}

void MainWindow::buildMenus() {
  QMenu* file = menuBar()->addMenu("&File");
  file->addAction("&Open trace...", QKeySequence::Open, this, [this] {
    const QStringList fs = QFileDialog::getOpenFileNames(this, "Open mxsim trace", {}, "mxsim traces (*.h5 *.hdf5);;All files (*)");
    for (const auto& f : fs) openTrace(f);
  });
  recent_menu_ = file->addMenu("Open &recent");
  rebuildRecentMenu();
  file->addAction("&Close trace", this, [this] {
    if (TraceDocument* d = state_.primary()) {
      state_.setPrimary(nullptr);
      state_.traces()->remove(d);
      if (state_.traces()->size() > 0) state_.setPrimary(state_.traces()->at(0));
    }
  });
  file->addSeparator();
  file->addAction("Export view as &PNG...", QKeySequence("Ctrl+E"), this, [this] { exportCurrent(true); });
  file->addAction("Export view data as &CSV...", QKeySequence("Ctrl+Shift+E"), this, [this] { exportCurrent(false); });
  file->addAction("Export &all views...", this, &MainWindow::exportAll);
  file->addSeparator();
  file->addAction("&Quit", QKeySequence::Quit, this, &QWidget::close);

  QMenu* view = menuBar()->addMenu("&View");
  follow_act_ = view->addAction("&Follow latest step", QKeySequence("Ctrl+L"), this, [this](bool on) { setFollow(on); });
  follow_act_->setCheckable(true);
  for (size_t i = 0; i < views_.size(); ++i)
    view->addAction(views_[i]->title(), QKeySequence(QString("Alt+%1").arg(i + 1)), this,
                    [this, i] { tabs_->setCurrentIndex(int(i)); });

  QMenu* run = menuBar()->addMenu("&Run");
  run_->addActions(run);
}

TraceDocument* MainWindow::openTrace(const QString& path) {
  const QString abs = QFileInfo(path).absoluteFilePath();
  const int before = state_.traces()->size();
  TraceDocument* d = state_.traces()->add(abs);
  if (state_.traces()->size() == before) {  // open already (TraceListModel::add): bring it forward
    if (d->state() == TraceDocument::State::Ready) {
      addRecent(abs);
      if (state_.other() == d) state_.setOther(state_.primary());
      state_.setPrimary(d);
    }
    return d;
  }
  connect(d, &TraceDocument::failed, this, [this](const QString& m) { showBanner(m); });
  // A damaged chunk (or any failed read) is said, not just left out of a plot (issue 34).
  connect(d, &TraceDocument::readFailed, this, [this, d](const QString& dataset, const QString& m) {
    const QString text = dataset.isEmpty()
                             ? QString("%1: a read failed, its data is not shown: %2").arg(d->displayName(), m)
                             : QString("%1: %2 is damaged or unreadable, not shown: %3").arg(d->displayName(), dataset, m);
    showBanner(text);
    statusBar()->showMessage(text);
  });
  connect(d, &TraceDocument::opened, this, [this, d, abs] {
    addRecent(abs);
    if (!state_.primary() || state_.primary()->state() != TraceDocument::State::Ready) {
      state_.setPrimary(d);
      if (!follow_) openAtLastMaps();  // following shows the newest step instead
    } else if (!state_.other()) {
      state_.setOther(d);
    }
    if (!d->meta().config_note.isEmpty()) showBanner(d->displayName() + ": " + d->meta().config_note);
    if (follow_) d->setFollow(true);
  });
  return d;
}

View* MainWindow::view(const QString& id) const {
  for (View* v : views_)
    if (v->id() == id) return v;
  return nullptr;
}

void MainWindow::showView(const QString& id) {
  if (View* v = view(id)) tabs_->setCurrentWidget(v);
}

QString MainWindow::bannerText() const { return banner_->isVisible() || !banner_->isHidden() ? banner_->text() : QString(); }

void MainWindow::showBanner(const QString& text) {
  banner_->setText(text);
  banner_->setVisible(!text.isEmpty());
}

void MainWindow::setFollow(bool on) {
  follow_ = on;
  if (follow_act_->isChecked() != on) follow_act_->setChecked(on);
  for (int i = 0; i < state_.traces()->size(); ++i) {
    TraceDocument* d = state_.traces()->at(i);
    if (d->state() == TraceDocument::State::Ready && d->following() != on) d->setFollow(on);
  }
  if (on && state_.primary() && state_.primary()->steps() > 0) state_.setStep(qint64(state_.primary()->steps()) - 1);
}

bool MainWindow::idle() const {
  for (View* v : views_)
    if (v->isVisible() && v->busy()) return false;
  for (int i = 0; i < state_.traces()->size(); ++i)
    if (state_.traces()->at(i)->pending() > 0) return false;
  return true;
}

void MainWindow::primaryChanged() {
  TraceDocument* d = state_.primary();
  const int row = state_.traces()->indexOf(d);
  if (row >= 0 && trace_pick_->currentIndex() != row) trace_pick_->setCurrentIndex(row);
  layer_pick_->blockSignals(true);
  layer_pick_->clear();
  int sel = -1;
  if (d && d->state() == TraceDocument::State::Ready) {
    for (const auto& l : d->meta().layers) {
      layer_pick_->addItem(l.name + (l.recipe.isEmpty() ? QString() : "  (" + l.recipe + ")"));
      if (l.name == state_.layer()) sel = layer_pick_->count() - 1;
    }
    // default to the first quantized layer
    if (sel < 0)
      for (int i = 0; i < int(d->meta().layers.size()); ++i)
        if (d->meta().layers[size_t(i)].quantized) {
          sel = i;
          break;
        }
    if (sel < 0 && layer_pick_->count() > 0) sel = 0;
    layer_pick_->setCurrentIndex(sel);
    int groups = d->meta().experts;  // tokens_per_expert's width, else the widest weight
    for (const auto& l : d->meta().layers) groups = std::max(groups, int(l.shape[0]));
    expert_pick_->setRange(0, std::max(0, groups - 1));
    expert_pick_->setValue(state_.expert());
  }
  layer_pick_->blockSignals(false);
  if (sel >= 0) state_.setLayer(layer_pick_->itemText(sel).section(' ', 0, 0));
  showBanner(d && d->state() == TraceDocument::State::Failed ? d->error() : QString());
  updateScrubber();
  if (d && d->steps() > 0 && state_.step() >= qint64(d->steps())) state_.setStep(qint64(d->steps()) - 1);
  if (follow_ && d && d->steps() > 0) state_.setStep(qint64(d->steps()) - 1);
  pickWatchedElement(true);
  setWindowTitle(d ? "mxsim-inspector - " + d->displayName() : "mxsim-inspector");
}

namespace {
/// The complete snapshot rows of a layer (the rows its element, block and main_grad maps exist at).
std::vector<int64_t> map_rows(const TraceDocument* d, const LayerMeta& lm) {
  std::vector<int64_t> r;
  for (int64_t s : lm.snapshot_steps)
    if (s >= 0 && uint64_t(s) < d->steps()) r.push_back(s);
  return r;
}

/// Global steps of `rows` with runs of consecutive steps as "a-b": "2, 4", "280-320".
QString step_ranges(const TraceMeta& m, const std::vector<int64_t>& rows) {
  QStringList out;
  for (size_t i = 0; i < rows.size();) {
    size_t j = i;
    while (j + 1 < rows.size() && m.global(uint64_t(rows[j + 1])) == m.global(uint64_t(rows[j])) + 1) ++j;
    const int64_t a = m.global(uint64_t(rows[i])), b = m.global(uint64_t(rows[j]));
    out << (j == i ? QString::number(a) : j == i + 1 ? QString("%1, %2").arg(a).arg(b) : QString("%1-%2").arg(a).arg(b));
    i = j + 1;
  }
  return out.join(", ");
}
}  // namespace

void MainWindow::openAtLastMaps() {
  TraceDocument* d = state_.primary();
  if (!d || d->state() != TraceDocument::State::Ready) return;
  const auto has_maps = [d](const LayerMeta* l) { return l && !map_rows(d, *l).empty(); };
  const LayerMeta* lm = d->meta().layer(state_.layer());
  for (int pass = 0; pass < 2 && !has_maps(lm); ++pass)  // the first quantized layer with maps, else any
    for (const LayerMeta& l : d->meta().layers)
      if ((pass == 1 || l.quantized) && has_maps(&l)) {
        lm = &l;
        break;
      }
  if (!has_maps(lm)) return;  // no maps anywhere: the first step, as before
  state_.setLayer(lm->name);
  state_.setStep(map_rows(d, *lm).back());
  pickWatchedElement(true);  // the layer may have changed
  updateScrubber();
}

void MainWindow::pickWatchedElement(bool any_expert) {
  const TraceDocument* d = state_.primary();
  if (!d || d->state() != TraceDocument::State::Ready || state_.elemRow() >= 0) return;
  const LayerMeta* lm = d->meta().layer(state_.layer());
  int g = 0, n = -1, k = -1;
  if (!lm || !(lm->first_watched(state_.expert(), g, n, k) || (any_expert && lm->first_watched(-1, g, n, k)))) return;
  state_.setExpert(g);
  auto_elem_ = QPoint(k, n);  // before setElement: its handler keeps what equals it
  state_.setElement(n, k);
}

void MainWindow::updateScrubber() {
  TraceDocument* d = state_.primary();
  const int k = d && d->state() == TraceDocument::State::Ready ? int(d->steps()) : 0;
  for (QAbstractSlider* s : {static_cast<QAbstractSlider*>(step_slider_)}) {
    s->blockSignals(true);
    s->setRange(0, std::max(0, k - 1));
    s->setValue(int(state_.step()));
    s->blockSignals(false);
  }
  step_spin_->blockSignals(true);
  step_spin_->setRange(0, std::max(0, k - 1));
  step_spin_->setValue(int(state_.step()));
  step_spin_->setPrefix(QString());  // re-renders the text: the same row of another trace is another step
  step_spin_->blockSignals(false);
  step_slider_->setPageStep(kPageSteps);  // as stepKey pages (the slider's keys go there; this is for clicks beside the handle)
  QString maps;  // where the layer's maps are, so that a step without them is no dead end
  if (const LayerMeta* lm = k ? d->meta().layer(state_.layer()) : nullptr)
    if (const std::vector<int64_t> r = map_rows(d, *lm); !r.empty())
      maps = QString("; %1 maps at step%2 %3").arg(lm->name, r.size() > 1 ? "s" : "", step_ranges(d->meta(), r));
  step_label_->setText(k ? QString("trace row %1 of %2 complete steps (optimizer steps %3 to %4)%5")
                               .arg(state_.step())
                               .arg(k)
                               .arg(d->meta().global(0))
                               .arg(d->meta().global(uint64_t(k - 1)))
                               .arg(maps)
                         : QString("no steps"));
}

bool MainWindow::stepKey(int key) {
  TraceDocument* d = state_.primary();
  const qint64 k = d && d->state() == TraceDocument::State::Ready ? qint64(d->steps()) : 0;
  qint64 s = state_.step();
  switch (key) {
    case Qt::Key_Left: s -= 1; break;
    case Qt::Key_Right: s += 1; break;
    case Qt::Key_PageUp: s -= kPageSteps; break;
    case Qt::Key_PageDown: s += kPageSteps; break;
    case Qt::Key_Home: s = 0; break;
    case Qt::Key_End: s = k - 1; break;
    default: return false;
  }
  state_.setStep(std::clamp<qint64>(s, 0, std::max<qint64>(0, k - 1)));
  return true;
}

void MainWindow::keyPressEvent(QKeyEvent* e) {
  if (e->modifiers() == Qt::NoModifier && stepKey(e->key())) return;
  QMainWindow::keyPressEvent(e);
}

bool MainWindow::eventFilter(QObject* o, QEvent* e) {
  if (e->type() == QEvent::KeyPress && (o == step_slider_ || o == step_spin_)) {
    auto* ke = static_cast<QKeyEvent*>(e);
    // the slider's own keys would page forward on PageUp and by its page step; the spin box's
    // Left/Right/Home/End move its text cursor and stay its own
    const bool ours = o == step_slider_ || ke->key() == Qt::Key_PageUp || ke->key() == Qt::Key_PageDown;
    if (ours && ke->modifiers() == Qt::NoModifier && stepKey(ke->key())) return true;
  }
  return QMainWindow::eventFilter(o, e);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
  // only HDF5 files on this machine: anything else is refused before the drop
  const auto urls = e->mimeData()->urls();
  if (std::any_of(urls.begin(), urls.end(), is_trace_file)) e->acceptProposedAction();
  else e->ignore();
}

void MainWindow::dropEvent(QDropEvent* e) {
  QStringList refused;
  int opened = 0;
  for (const QUrl& u : e->mimeData()->urls()) {
    if (is_trace_file(u)) {
      openTrace(u.toLocalFile());
      ++opened;
    } else {
      refused << (u.isLocalFile() ? QFileInfo(u.toLocalFile()).fileName() : u.toString());
    }
  }
  if (!refused.isEmpty())
    showBanner(QString("Not opened: %1 (drop mxsim traces: .h5 or .hdf5 files on this machine)").arg(refused.join(", ")));
  if (opened) e->acceptProposedAction();
  else e->ignore();
}

// File > Open recent lives in the application's QSettings (QCoreApplication's organisation
// and application name: mxsim / mxsim-inspector, set in main(); a test sets its own), key
// "recent": the last 10 traces opened, newest first, absolute paths.
void MainWindow::addRecent(const QString& path) {
  // nothing remembered for a headless render, nor for a program that named no organisation
  // (QSettings would write under "Unknown Organization")
  if (!remember_recent_ || QCoreApplication::organizationName().isEmpty()) return;
  QSettings s;
  QStringList r = s.value("recent").toStringList();
  r.removeAll(path);
  r.prepend(path);
  while (r.size() > 10) r.removeLast();
  s.setValue("recent", r);
  rebuildRecentMenu();
}

void MainWindow::removeRecent(const QString& path) {
  if (QCoreApplication::organizationName().isEmpty()) return;
  QSettings s;
  QStringList r = s.value("recent").toStringList();
  r.removeAll(path);
  s.setValue("recent", r);
  rebuildRecentMenu();
}

void MainWindow::openRecent(const QString& path) {
  if (!QFileInfo::exists(path)) {
    removeRecent(path);
    showBanner(QString("%1: no such file; removed from Open recent").arg(path));
    return;
  }
  openTrace(path);
}

void MainWindow::rebuildRecentMenu() {
  recent_menu_->clear();
  const QStringList r =
      QCoreApplication::organizationName().isEmpty() ? QStringList() : QSettings().value("recent").toStringList();
  for (const QString& p : r) {
    QAction* a = recent_menu_->addAction(QString(p).replace("&", "&&"), this, [this, p] { openRecent(p); });
    a->setData(p);
  }
  recent_menu_->setEnabled(!r.isEmpty());
}

void MainWindow::exportCurrent(bool png) {
  auto* v = qobject_cast<View*>(tabs_->currentWidget());
  if (!v) return;
  const QString f = QFileDialog::getSaveFileName(this, png ? "Export PNG" : "Export CSV", v->id() + (png ? ".png" : ".csv"),
                                                 png ? "PNG (*.png)" : "CSV (*.csv)");
  if (f.isEmpty()) return;
  const bool ok = png ? v->exportPng(f) : v->exportCsv(f);
  if (!ok) showBanner("Could not write " + f);
}

void MainWindow::exportAll() {
  const QString dir = QFileDialog::getExistingDirectory(this, "Export every view into");
  if (dir.isEmpty()) return;
  for (View* v : views_) {
    tabs_->setCurrentWidget(v);
    while (v->busy()) QApplication::processEvents(QEventLoop::WaitForMoreEvents, 50);
    v->exportPng(dir + "/" + v->id() + ".png");
    v->exportCsv(dir + "/" + v->id() + ".csv");
  }
}

}  // namespace mxsim::inspector
