// mxsim-inspector [TRACE.h5 ...]                 the window, traces opened
// mxsim-inspector --render TRACE.h5 [B.h5] -o DIR  every view of every layer as PNG + CSV, overview
//                                                 figures and index.html, no display needed
#include <QApplication>
#include <QCommandLineParser>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench.hpp"
#include "main_window.hpp"
#include "render.hpp"

namespace {
/// Headless modes: Qt's notes that are true of every offscreen run and say nothing about this one
/// (the offscreen platform cannot propagate size hints; no XDG_RUNTIME_DIR on a server) are
/// dropped, so that stderr holds only what went wrong.
void quiet_headless(QtMsgType type, const QMessageLogContext& ctx, const QString& msg) {
  if (msg.contains("does not support propagateSizeHints") || msg.startsWith("QStandardPaths: XDG_RUNTIME_DIR not set"))
    return;
  std::fprintf(stderr, "%s\n", qPrintable(qFormatLogMessage(type, ctx, msg)));
}
}  // namespace

int main(int argc, char** argv) {
  // Headless modes (and --help / --version, which only print) use Qt's offscreen platform
  // unless the caller chose one: the QApplication they need aborts without a display otherwise.
  for (int i = 1; i < argc; ++i)
    for (const char* o : {"--render", "--bench", "--help", "-h", "--help-all", "-?", "--version", "-v"})
      if (std::strcmp(argv[i], o) == 0) {
        if (!std::getenv("QT_QPA_PLATFORM")) setenv("QT_QPA_PLATFORM", "offscreen", 1);
        qInstallMessageHandler(quiet_headless);
      }
  QApplication app(argc, argv);
  QApplication::setOrganizationName("mxsim");  // QSettings (File > Open recent): mxsim/mxsim-inspector
  QApplication::setApplicationName("mxsim-inspector");
  QApplication::setApplicationVersion(MXSIM_VERSION);
  QCommandLineParser p;
  p.setApplicationDescription("mxsim-inspector: quantization error, weight oscillation and gradient accumulation of mxsim traces");
  p.addHelpOption();
  p.addVersionOption();
  p.addPositionalArgument("traces", "trace files (HDF5) to open; the first is the primary, the second the comparison trace",
                          "[TRACE.h5 ...]");
  p.addOption({"render",
               "render every view of every layer and operand the trace holds to PNG (and its data to CSV), overview "
               "figures across layers (overview-*.png) and DIR/index.html listing them, without a display, then exit "
               "(exit status 0 ok, 1 a trace cannot be read or a file written, 2 usage error)"});
  p.addOption({{"o", "out"}, "output directory of --render", "DIR", "."});
  p.addOption({"step", "global optimizer step the one-step views show, as every view labels it (default: the last "
               "complete step)", "N"});
  p.addOption({"row", "trace row the one-step views show instead (0-based; rows past the end: the last)", "R"});
  p.addOption({"layer", "layer (embed, router, fc1, fc2, head); --render: only this layer (default: every layer)", "L"});
  p.addOption({"tensor", "operand: w, x, dy, x_wgrad or dy_wgrad; --render: only this one (default: every one held)", "OP"});
  p.addOption({"expert", "expert index (--render default: the expert of the layer's first watched element, else 0)", "E", "0"});
  p.addOption({"element", "weight element n,k within the expert (oscillation and accumulation views)", "N,K"});
  p.addOption({"views", "comma-separated view ids to render (curves,overview,quant,osc,accum,compare,data; default: all, "
               "compare only with two traces)", "IDS"});
  p.addOption({"size", "window size for --render", "WxH", "1280x800"});
  p.addOption({"dataset", "--render: dataset shown by the compare and raw-data views", "NAME"});
  p.addOption({"view-only", "--render: PNG of the view without the window around it"});
  p.addOption({"follow", "follow the newest step of traces being written"});
  p.addOption({"bench", "measure opening, step changes per view and resident memory on the first trace, then exit"});
  p.addOption({"repeat", "--bench: step changes per view", "N", "20"});
  p.process(app);
  const QStringList traces = p.positionalArguments();
  if (p.isSet("bench")) {
    if (traces.isEmpty()) {
      std::fprintf(stderr, "mxsim-inspector: --bench needs a trace file\n");
      return 2;
    }
    mxsim::inspector::BenchOptions b;
    b.trace = traces.front();
    b.repeat = std::max(1, p.value("repeat").toInt());
    return mxsim::inspector::bench(b);
  }
  if (p.isSet("render")) {
    mxsim::inspector::RenderOptions o;
    o.traces = traces;
    o.out_dir = p.value("out");
    if (traces.isEmpty()) {
      std::fprintf(stderr, "mxsim-inspector: --render needs a trace file\n");
      return 2;
    }
    const QStringList wh = p.value("size").split('x');
    if (wh.size() != 2 || wh[0].toInt() < 320 || wh[1].toInt() < 240) {
      std::fprintf(stderr, "mxsim-inspector: --size '%s': expected WxH, at least 320x240\n", qPrintable(p.value("size")));
      return 2;
    }
    o.size = QSize(wh[0].toInt(), wh[1].toInt());
    for (const char* opt : {"step", "row"}) {
      if (!p.isSet(opt)) continue;
      bool ok = false;
      const qint64 v = p.value(opt).toLongLong(&ok);
      if (!ok || v < 0) {
        std::fprintf(stderr, "mxsim-inspector: --%s '%s': expected a non-negative integer\n", opt,
                     qPrintable(p.value(opt)));
        return 2;
      }
      (std::strcmp(opt, "step") == 0 ? o.step : o.row) = v;
    }
    o.layer = p.value("layer");
    o.op = p.value("tensor");
    o.expert = p.value("expert").toInt();
    o.expert_set = p.isSet("expert");
    if (p.isSet("element")) {
      const QStringList nk = p.value("element").split(',');
      if (nk.size() != 2) {
        std::fprintf(stderr, "mxsim-inspector: --element '%s': expected N,K\n", qPrintable(p.value("element")));
        return 2;
      }
      o.elem_n = nk[0].toInt();
      o.elem_k = nk[1].toInt();
    }
    if (p.isSet("views")) o.views = p.value("views").split(',', Qt::SkipEmptyParts);
    o.window = !p.isSet("view-only");
    o.dataset = p.value("dataset");
    return mxsim::inspector::render(o);
  }
  mxsim::inspector::MainWindow w;
  for (const QString& t : traces) w.openTrace(t);
  if (p.isSet("follow")) w.setFollow(true);
  w.show();
  return app.exec();
}
