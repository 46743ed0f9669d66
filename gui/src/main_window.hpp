// The inspector window: traces on the left, the views as tabs, pickers for
// trace, layer, operand and expert on top, the step scrubber below; menus
// for files (open, recent, drag and drop, export), live follow and run mode.
#pragma once
#include <QComboBox>
#include <QLabel>
#include <QListView>
#include <QMainWindow>
#include <QPoint>
#include <QSlider>
#include <QSpinBox>
#include <QTabWidget>
#include <vector>

#include "state.hpp"
#include "view.hpp"

namespace mxsim::inspector {

class RunPanel;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  InspectorState* state() { return &state_; }
  /// Opens a trace (asynchronously); the first one opened becomes the primary trace.
  TraceDocument* openTrace(const QString& path);
  const std::vector<View*>& views() const { return views_; }
  View* view(const QString& id) const;
  void showView(const QString& id);
  /// The message banner's text ("" when hidden): open errors and similar.
  QString bannerText() const;
  /// Follow the newest step of the primary trace as it grows.
  void setFollow(bool on);
  bool follow() const { return follow_; }
  RunPanel* runPanel() const { return run_; }
  /// Whether traces opened go into File > Open recent (QSettings); a headless render sets false.
  void setRememberRecent(bool on) { remember_recent_ = on; }
  /// Views, documents and runs have nothing outstanding.
  bool idle() const;
  /// The step scrubber's slider and spin box (value: the trace row; the spin box's text: its
  /// global optimizer step) and the label beside them (tests).
  QSlider* stepSlider() const { return step_slider_; }
  QSpinBox* stepSpin() const { return step_spin_; }
  QString stepLabel() const { return step_label_->text(); }
  /// File > Open recent: one action per remembered trace, its path in data() (tests).
  QMenu* recentMenu() const { return recent_menu_; }

 protected:
  void dragEnterEvent(QDragEnterEvent* e) override;
  void dropEvent(QDropEvent* e) override;
  void keyPressEvent(QKeyEvent* e) override;
  /// The scrubber's slider and spin box hand their step keys to stepKey (one behaviour wherever the focus is).
  bool eventFilter(QObject* o, QEvent* e) override;

 private:
  void buildMenus();
  void buildPickers();
  void showBanner(const QString& text);
  void primaryChanged();
  void updateScrubber();
  /// A trace that opens as the primary one shows its maps (docs/inspector.md "Views"): the step
  /// moves to the selected layer's last snapshot row (the element, block and main_grad maps exist
  /// only there), the layer to one with snapshots when the selected one has none.
  void openAtLastMaps();
  /// Before the user picks a weight element: the layer's first watched element in the expert
  /// (trace.watch_elements; its timeline has every step), with `any_expert` in whichever expert
  /// holds one (the expert follows). Without one the views pick their own (the map's largest value).
  void pickWatchedElement(bool any_expert);
  /// Moves the step for a scrubber key (docs/inspector.md "Views"); false for any other key.
  bool stepKey(int key);
  void addRecent(const QString& path);
  void removeRecent(const QString& path);
  void openRecent(const QString& path);
  void rebuildRecentMenu();
  void exportCurrent(bool png);
  void exportAll();

  InspectorState state_;
  std::vector<View*> views_;
  QTabWidget* tabs_ = nullptr;
  QListView* trace_list_ = nullptr;
  QLabel* banner_ = nullptr;
  QComboBox *trace_pick_ = nullptr, *layer_pick_ = nullptr, *op_pick_ = nullptr;
  QSpinBox* expert_pick_ = nullptr;
  QSlider* step_slider_ = nullptr;
  QSpinBox* step_spin_ = nullptr;
  QLabel* step_label_ = nullptr;
  QMenu* recent_menu_ = nullptr;
  QAction* follow_act_ = nullptr;
  RunPanel* run_ = nullptr;
  bool follow_ = false;
  bool remember_recent_ = true;
  /// The element pickWatchedElement chose (n, k); (-1, -1): none, or the user picked another.
  QPoint auto_elem_{-1, -1};
};

}  // namespace mxsim::inspector
