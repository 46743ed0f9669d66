// The pieces of a headless report that are not one of the window's views: the
// overview figures (one quantity over steps, every layer a line with a legend,
// one panel per operand) and the index page listing every image written.
// `mxsim-inspector --render` (render.cpp) and `mxsim report` use them.
#pragma once
#include <QSize>
#include <QString>
#include <QStringList>
#include <vector>

#include "trace_doc.hpp"

namespace mxsim::inspector {

/// One image of a report, as the index lists it.
struct ReportImage {
  QString section;  ///< heading it goes under ("Overview", "Layer fc1", ...)
  QString png;      ///< file name inside the output folder ("quant-fc1-w.png")
  QString csv;      ///< its data ("" when none)
  QString caption;  ///< one line: what the image shows
};

/// The overview figures and the layers they cover.
struct OverviewOptions {
  QStringList layers;  ///< layers to draw (model order); others are left out
  QSize size{1280, 800};
  QString out_dir;
  int timeout_ms = 120000;  ///< for reading the series on the document's I/O thread
};

/// Writes overview-sqnr, overview-saturation, overview-underflow (per-step statistics of W,
/// x and dy: one panel per operand, one line per quantized layer) and overview-osc
/// (oscillations per step, cumulative, the share above the EMA threshold: one line per
/// layer with oscillation metrics), each as PNG of `size` and CSV. A figure with nothing to
/// draw (no quantized layer among `layers`) is not written. Appends what it wrote to
/// `images`; false with `err` set when the series cannot be read or a file cannot be written.
bool render_overviews(TraceDocument* d, const OverviewOptions& o, std::vector<ReportImage>& images, QString* err);

/// Writes DIR/index.html: the trace, its provenance and the row shown, then every image
/// under its section heading in order (with the section's note from `notes`, if any), each
/// with its caption and a link to its CSV.
bool write_index(const QString& out_dir, const TraceMeta& m, qint64 row, const std::vector<ReportImage>& images,
                 const std::vector<std::pair<QString, QString>>& notes, QString* err);

/// The layer colour of every overview figure: a layer keeps its colour across figures.
QColor layer_color(const QString& layer);

}  // namespace mxsim::inspector
