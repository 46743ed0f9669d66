// Shared plotting helpers over QCustomPlot: one look for every plot, heat
// maps with colour scales, the current-step marker, notes drawn inside a
// plot (so that exports carry them), TensorBoard-style smoothing.
#pragma once
#include <QColor>
#include <QString>
#include <QVector>
#include <qcustomplot.h>

namespace mxsim::inspector {

/// A plot with the project's defaults: white background, readable fonts,
/// drag/zoom on both axes, a title row.
QCustomPlot* make_plot(QWidget* parent, const QString& title = {});
/// Changes the title set by make_plot.
void set_title(QCustomPlot* p, const QString& title);
/// The title text set_title gave p ("" when none).
QString plot_title(QCustomPlot* p);
/// Where p's title text was drawn at its last replot (plot pixels; empty before the first).
QRect title_text_rect(QCustomPlot* p);
/// The title's row, as laid out at p's last replot (the text must fit inside it).
QRect title_box(QCustomPlot* p);

/// Colour of the i-th trace (overlay) or series; a qualitative palette
/// (Okabe-Ito, distinguishable with colour-vision deficiencies).
QColor palette_color(int i);

/// Perceptually uniform sequential map (matplotlib's viridis stops), for magnitudes.
QCPColorGradient viridis();
/// Diverging blue - white - red (ColorBrewer RdBu), for signed values centred on 0.
QCPColorGradient diverging();

struct Heatmap {
  QCPColorMap* map = nullptr;
  QCPColorScale* scale = nullptr;
};
/// A colour map on p's main axis rect with a colour scale on the right labelled `zlabel`.
Heatmap add_heatmap(QCustomPlot* p, const QString& zlabel);
/// Fills the map with an nx-by-ny grid: cell (ix, iy) = z[iy * nx + ix], cell centres at
/// x = ix, y = iy (so axis coordinates are element indices); y grows downwards like a matrix.
void fill_heatmap(Heatmap& h, int nx, int ny, const std::vector<double>& z, bool log_scale = false);

/// Vertical dashed line at x on p's main axis rect (the current step); created once, on
/// its own buffered layer so that moving it redraws only that layer (replot_marker).
void set_step_marker(QCustomPlot* p, double x);
/// Where p's step marker stands (x in axis coordinates); NaN when p has none.
double step_marker(QCustomPlot* p);
/// Redraws only the marker layer (after set_step_marker with the data unchanged).
void replot_marker(QCustomPlot* p);
/// A centred text inside the axis rect (a reason why nothing is drawn, or a hint); "" removes it.
void set_plot_note(QCustomPlot* p, const QString& text);

/// Removes every item of p (lines, texts), including the step marker and the note.
void clear_items(QCustomPlot* p);
/// The note item of p (nullptr when none was set).
QCPItemText* plot_note(QCustomPlot* p);
/// Where p's note box (text and padding) was drawn at its last replot (empty: none drawn).
QRect note_box(QCustomPlot* p);

/// TensorBoard's smoothing: debiased exponential moving average with weight w in [0, 1);
/// non-finite values pass through and do not enter the average.
QVector<double> smooth_ema(const QVector<double>& v, double w);

/// "1.234e-05" style numbers for tooltips and tables, enough digits to round-trip.
QString fmt_num(double v, int digits = 6);

}  // namespace mxsim::inspector

namespace mxsim::inspector {
/// Axis label with unit for a series dataset ("/train/loss" -> "loss (nats)").
QString axis_label_for(const QString& dataset);
}  // namespace mxsim::inspector
