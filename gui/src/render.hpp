// Headless rendering: every view of a trace as PNG (and its data as CSV),
// with no display (Qt's offscreen platform). `mxsim-inspector --render`.
#pragma once
#include <QSize>
#include <QString>
#include <QStringList>

namespace mxsim::inspector {

class MainWindow;

struct RenderOptions {
  QStringList traces;          ///< first = primary; a second one is the comparison trace
  QString out_dir;
  QSize size{1280, 800};
  qint64 step = -1;            ///< trace row; -1 = the last complete step
  QString layer;               ///< "" = the first quantized layer
  QString op;                  ///< "" = w
  int expert = 0;
  int elem_n = -1, elem_k = -1;  ///< element of the oscillation/accumulation views
  QStringList views;           ///< ids; empty = all
  QString dataset;             ///< dataset of the compare and raw-data views ("" = their defaults)
  bool window = true;          ///< PNG of the whole window (true) or of the view only
  int timeout_ms = 120000;     ///< per view
};

/// Waits (processing events) until `w` has nothing outstanding or `ms` passed; false on timeout.
bool wait_idle(MainWindow& w, int ms);

/// Renders; returns the process exit status (0 ok, 2 a trace could not be opened,
/// 1 a view timed out or a file could not be written) and prints what it wrote.
int render(const RenderOptions& o);

}  // namespace mxsim::inspector
