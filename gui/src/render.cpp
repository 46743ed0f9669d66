#include "render.hpp"

#include <QApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QThread>
#include <cstdio>

#include "main_window.hpp"
#include "names.hpp"
#include "report.hpp"
#include "view_compare.hpp"
#include "view_data.hpp"

namespace mxsim::inspector {

bool wait_idle(MainWindow& w, int ms) {
  QElapsedTimer t;
  t.start();
  // two consecutive idle polls: a view may schedule a follow-up refresh (e.g. an element pick)
  int idle_polls = 0;
  while (t.elapsed() < ms) {
    QApplication::processEvents(QEventLoop::AllEvents, 20);
    if (w.idle()) {
      if (++idle_polls >= 3) return true;
    } else {
      idle_polls = 0;
    }
    QThread::msleep(2);
  }
  return false;
}

namespace {

int usage_error(const QString& what) {
  std::fprintf(stderr, "mxsim-inspector: usage error: %s\n(mxsim-inspector --help lists the options)\n", qPrintable(what));
  return 2;
}

/// One image to write: a view of the window with the selection it needs.
struct Target {
  QString view, layer, op;  ///< layer and op empty for the views that show no layer
  QString file;             ///< stem inside the output folder
  QString section, caption;
  qint64 row = -1;          ///< trace row shown; -1 = the render's row
};

/// The operands of `l` that the trace holds per-step statistics or block maps of, in kOperandInfo order.
QStringList operands_held(const TraceMeta& m, const QString& l) {
  QStringList ops;
  const std::string ln = l.toStdString();
  for (const auto& o : kOperandInfo)
    if (m.dataset(names::quant(ln, o.key, "sqnr_db")) || m.dataset(names::block_map(ln, o.key, "block_sqnr_db")))
      ops << o.key;
  return ops;
}

QString operand_label(const QString& op) {
  for (const auto& o : kOperandInfo)
    if (op == o.key) return QString(o.label).simplified();
  return op;
}

/// The images of a render, in index order: the curves, the overview (drawn separately), then
/// per layer its operands' quantization views, its oscillation and accumulation views, then
/// the comparison and the raw data.
std::vector<Target> plan(const RenderOptions& o, const TraceMeta& m, int traces, qint64 row) {
  const bool picked = o.step >= 0 || o.row >= 0;  // a step asked for: every view shows it
  auto wanted = [&](const char* id) {
    if (!o.views.isEmpty()) return o.views.contains(id);
    return QString(id) != "compare" || traces > 1;
  };
  std::vector<Target> t;
  if (wanted("curves")) t.push_back({"curves", "", "", "curves", "Training", "Training curves: loss, accuracy, learning rate"});
  const bool one = !o.layer.isEmpty();  // an explicit --layer: its views even where data is missing (they say why)
  for (const LayerMeta& lm : m.layers) {
    if (one && lm.name != o.layer) continue;
    const QString sec = "Layer " + lm.name + (lm.recipe.isEmpty() ? QString() : " (" + lm.recipe + ")");
    if (wanted("quant")) {
      QStringList ops = o.op.isEmpty() ? operands_held(m, lm.name) : QStringList{o.op};
      if (ops.isEmpty() && one) ops << "w";
      for (const QString& op : ops) {
        Target q{"quant", lm.name, op, QString("quant-%1-%2").arg(lm.name, op), sec,
                 QString("Quantization error of %1.%2, %3: per-block map, scale exponents, SQNR / MSE and "
                         "underflow / saturation over steps")
                     .arg(lm.name, op, operand_label(op))};
        // An operand with block maps: at its last snapshot row (the map exists only there; the curves
        // cover every step either way), unless --step says otherwise.
        const std::string ln = lm.name.toStdString(), on = op.toStdString();
        const trace::DatasetInfo* maps = m.dataset(names::block_map(ln, on, "block_sqnr_db"));
        if (!picked && maps)
          for (int64_t r : maps->snapshot_steps)
            if (r <= row) q.row = r;
        if (q.row >= 0)
          q.caption = QString("Quantization error of %1.%2, %3: per-block map and scale exponents at step %4 "
                              "(trace row %5), its last snapshot%6")
                          .arg(lm.name, op, operand_label(op))
                          .arg(m.global(uint64_t(q.row)))
                          .arg(q.row)
                          .arg(m.dataset(names::quant(ln, on, "sqnr_db"))
                                   ? QString("; SQNR / MSE and underflow / saturation over every step")
                                   : QString(" (per-step statistics are recorded for W, x and dy only)"));
        t.push_back(q);
      }
    }
    // The element and main_grad maps exist at snapshot rows only: the layer's last one, unless --step says.
    qint64 snap_row = -1;
    if (!picked)
      for (int64_t r : lm.snapshot_steps)
        if (r <= row) snap_row = r;
    const QString at = snap_row >= 0 ? QString(" (maps at step %1, trace row %2, the last snapshot)")
                                           .arg(m.global(uint64_t(snap_row)))
                                           .arg(snap_row)
                                     : QString();
    if (wanted("osc") && (lm.osc || one))
      t.push_back({"osc", lm.name, "w", "osc-" + lm.name, sec,
                   QString("Weight oscillation of %1: element map, one element's timeline against its block's grid, "
                           "oscillations and frequency over steps%2")
                       .arg(lm.name, at),
                   snap_row});
    if (wanted("accum") && (m.dataset(names::snap(lm.name.toStdString(), "main_grad")) || one))
      t.push_back({"accum", lm.name, "w", "accum-" + lm.name, sec,
                   QString("Gradient accumulation of %1: main_grad, micro-batch contributions, norms per micro-batch, "
                           "tokens per expert%2")
                       .arg(lm.name, at),
                   snap_row});
  }
  if (wanted("compare")) t.push_back({"compare", "", "", "compare", "Traces", "Comparison of the two traces (bit differences)"});
  if (wanted("data")) t.push_back({"data", "", "", "data", "Traces", "Raw data of one dataset at the step"});
  return t;
}

}  // namespace

int render(const RenderOptions& o) {
  for (const QString& v : o.views)
    if (!kRenderViews.contains(v))
      return usage_error(QString("--views: unknown view '%1' (views: %2)").arg(v, kRenderViews.join(", ")));
  if (!o.op.isEmpty()) {
    QStringList keys;
    for (const auto& x : kOperandInfo) keys << x.key;
    if (!keys.contains(o.op)) return usage_error(QString("--tensor %1: expected one of %2").arg(o.op, keys.join(", ")));
  }
  MainWindow w;
  w.setRememberRecent(false);  // a report is no visit: File > Open recent stays as it was
  w.resize(o.size);
  w.show();
  for (const QString& p : o.traces) w.openTrace(p);
  if (!wait_idle(w, o.timeout_ms)) {
    std::fprintf(stderr, "mxsim-inspector: timed out opening the traces\n");
    return 1;
  }
  InspectorState* st = w.state();
  int status = 0;
  for (int i = 0; i < st->traces()->size(); ++i) {
    TraceDocument* d = st->traces()->at(i);
    if (d->state() == TraceDocument::State::Failed) {
      std::fprintf(stderr, "mxsim-inspector: %s\n", qPrintable(d->error()));
      status = 1;  // a runtime / data error, as the CLI's scheme has it
    }
  }
  if (status) return status;
  if (st->traces()->size() > 0) st->setPrimary(st->traces()->at(0));
  if (st->traces()->size() > 1) st->setOther(st->traces()->at(1));
  TraceDocument* d = st->primary();
  if (!d) return usage_error("--render needs a trace file");
  const TraceMeta& m = d->meta();
  if (!o.layer.isEmpty() && !m.layer(o.layer)) {
    QStringList ls;
    for (const auto& l : m.layers) ls << l.name;
    return usage_error(QString("--layer %1: %2 holds no such layer (layers: %3)").arg(o.layer, d->path(), ls.join(", ")));
  }
  if (o.step >= 0 && o.row >= 0) return usage_error("--step and --row both given: one names the step to show");
  qint64 row = d->steps() > 0 ? qint64(d->steps()) - 1 : 0;
  if (o.row >= 0) row = std::min<qint64>(o.row, row);
  if (o.step >= 0) {
    row = m.row_of(o.step);
    if (row < 0)
      return usage_error(m.steps > 0 ? QString("--step %1: %2 holds steps %3 to %4 (rows 0 to %5)")
                                           .arg(o.step)
                                           .arg(d->path())
                                           .arg(m.global(0))
                                           .arg(m.global(m.steps - 1))
                                           .arg(m.steps - 1)
                                     : QString("--step %1: %2 holds no complete step").arg(o.step).arg(d->path()));
  }
  st->setStep(row);
  if (!o.dataset.isEmpty()) {
    if (auto* c = qobject_cast<CompareView*>(w.view("compare"))) c->setDataset(o.dataset);
    if (auto* dv = qobject_cast<DataView*>(w.view("data"))) dv->setDataset(o.dataset);
  }
  if (!QDir().mkpath(o.out_dir)) {
    std::fprintf(stderr, "mxsim-inspector: cannot create the output folder %s\n", qPrintable(o.out_dir));
    return 1;
  }
  QString default_layer = m.layers.empty() ? QString("fc1") : m.layers.front().name;  // the first quantized one
  for (auto it = m.layers.rbegin(); it != m.layers.rend(); ++it)
    if (it->quantized) default_layer = it->name;
  std::vector<ReportImage> images;
  const std::vector<Target> targets = plan(o, m, st->traces()->size(), row);
  auto write_view = [&](const Target& t) {
    View* v = w.view(t.view);
    st->setStep(t.row >= 0 ? t.row : row);
    if (t.layer.isEmpty()) {  // the views of no layer (compare, data) follow the options as given
      st->setLayer(o.layer.isEmpty() ? default_layer : o.layer);
      st->setOperand(o.op.isEmpty() ? QString("w") : o.op);
      st->setExpert(o.expert);
      if (o.elem_n >= 0) st->setElement(o.elem_n, o.elem_k);
    } else {
      st->setLayer(t.layer);
      st->setOperand(t.op);
      int g = 0, n = -1, k = -1;
      const bool watched = o.elem_n < 0 && m.layer(t.layer)->first_watched(-1, g, n, k);
      const int expert = o.expert_set || !watched ? o.expert : g;
      st->setExpert(expert);
      if (o.elem_n >= 0) st->setElement(o.elem_n, o.elem_k);
      else if (watched && g == expert) st->setElement(n, k);  // its timeline has every step
    }
    w.showView(t.view);
    if (!wait_idle(w, o.timeout_ms)) {
      std::fprintf(stderr, "mxsim-inspector: view %s timed out\n", qPrintable(t.file));
      status = 1;
      return;
    }
    const QString png = o.out_dir + "/" + t.file + ".png", csv = o.out_dir + "/" + t.file + ".csv";
    const QPixmap pm = o.window ? w.grab() : v->grab();
    if (!pm.save(png, "PNG") || !v->exportCsv(csv)) {
      std::fprintf(stderr, "mxsim-inspector: cannot write %s\n", qPrintable(png));
      status = 1;
      return;
    }
    images.push_back({t.section, t.file + ".png", t.file + ".csv", t.caption});
    std::printf("%s  %s (%dx%d, view updated in %.1f ms)\n", qPrintable(png), qPrintable(v->title()), pm.width(),
                pm.height(), v->lastUpdateMs());
  };
  size_t i = 0;
  if (i < targets.size() && targets[i].view == "curves") write_view(targets[i++]);
  if (o.views.isEmpty() || o.views.contains("overview")) {
    OverviewOptions ov;
    for (const auto& l : m.layers)
      if (o.layer.isEmpty() || l.name == o.layer) ov.layers << l.name;
    ov.size = o.size;
    ov.out_dir = o.out_dir;
    ov.timeout_ms = o.timeout_ms;
    QString err;
    if (!render_overviews(d, ov, images, &err)) {
      std::fprintf(stderr, "mxsim-inspector: overview figures: %s\n", qPrintable(err));
      status = 1;
    }
  }
  for (; i < targets.size(); ++i) write_view(targets[i]);
  std::vector<std::pair<QString, QString>> notes;
  for (const LayerMeta& lm : m.layers) {
    if (lm.snapshot_steps.empty()) continue;
    QStringList gs, rs;
    for (size_t j = 0; j < lm.snapshot_steps.size() && j < 16; ++j) {
      gs << QString::number(m.global(uint64_t(lm.snapshot_steps[j])));
      rs << QString::number(lm.snapshot_steps[j]);
    }
    if (lm.snapshot_steps.size() > 16) gs << "...", rs << "...";
    notes.push_back({"Layer " + lm.name + (lm.recipe.isEmpty() ? QString() : " (" + lm.recipe + ")"),
                     QString("Snapshots of %1 (block and element maps, micro-batch contributions) exist at steps %2 "
                             "(trace rows %3): render one with --step ROW.")
                         .arg(lm.name, gs.join(", "), rs.join(", "))});
  }
  QString err;
  if (!write_index(o.out_dir, m, row, images, notes, &err)) {
    std::fprintf(stderr, "mxsim-inspector: %s\n", qPrintable(err));
    status = 1;
  }
  // A series whose read failed (a damaged chunk) is missing from its images: a report that
  // looks complete without it would be wrong, so each one is named and the status is 1.
  for (int k = 0; k < st->traces()->size(); ++k)
    for (const auto& f : st->traces()->at(k)->readFailures()) {
      std::fprintf(stderr, "mxsim-inspector: error: %s%s (left out of the images)\n", qPrintable(f.message),
                   f.dataset.isEmpty() ? "" : qPrintable(" - " + f.dataset + " is damaged or unreadable"));
      status = 1;
    }
  return status;
}

}  // namespace mxsim::inspector
