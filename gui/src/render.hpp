// Headless rendering: every view of a trace as PNG (and its data as CSV),
// with no display (Qt's offscreen platform), for every layer and operand the
// trace holds, plus overview figures across layers and an index page.
// `mxsim-inspector --render`, and `mxsim report` through it.
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
  qint64 step = -1;            ///< global optimizer step to show (--step, as every label names it); -1 = unset
  qint64 row = -1;             ///< trace row to show (--row, 0-based; past the end: the last); -1 = unset
                               ///< neither set: the last complete step (set both: a usage error)
  QString layer;               ///< "" = every layer the trace holds; else only this one
  QString op;                  ///< "" = every operand the trace holds for the layer; else only this one
  int expert = 0;
  bool expert_set = false;     ///< false: the expert of the layer's first watched element (else 0)
  int elem_n = -1, elem_k = -1;  ///< element of the oscillation/accumulation views
  QStringList views;           ///< ids (kRenderViews); empty = all but compare with one trace
  QString dataset;             ///< dataset of the compare and raw-data views ("" = their defaults)
  bool window = true;          ///< PNG of the whole window (true) or of the view only
  int timeout_ms = 120000;     ///< per view
};

/// Waits (processing events) until `w` has nothing outstanding or `ms` passed; false on timeout.
bool wait_idle(MainWindow& w, int ms);

/// The ids --views takes: the window's views and "overview" (the figures across layers).
inline const QStringList kRenderViews = {"curves", "overview", "quant", "osc", "accum", "compare", "data"};

/// Renders into o.out_dir, prints each file it wrote, and returns the process exit status:
/// 0 ok; 1 a trace could not be opened, a view timed out or a file could not be written;
/// 2 a usage error (a --layer the trace lacks, an unknown --tensor or --views id). Files:
/// curves, data (and compare with two traces) once; per layer quant-<layer>-<tensor> for
/// each operand it holds statistics or block maps of, osc-<layer> (layers with oscillation
/// metrics), accum-<layer> (layers with main_grad snapshots); overview-{sqnr,saturation,
/// underflow,osc}; each a PNG and a CSV; then index.html listing them.
int render(const RenderOptions& o);

}  // namespace mxsim::inspector
