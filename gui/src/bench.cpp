#include "bench.hpp"

#include <QApplication>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "main_window.hpp"
#include "names.hpp"
#include "render.hpp"

namespace mxsim::inspector {

namespace {

/// VmRSS and VmHWM of this process in MiB (Linux /proc).
std::pair<double, double> rss_mib() {
  QFile f("/proc/self/status");
  double rss = 0, hwm = 0;
  if (f.open(QIODevice::ReadOnly))
    for (const QByteArray& l : f.readAll().split('\n')) {
      if (l.startsWith("VmRSS:")) rss = l.mid(6).trimmed().split(' ').front().toDouble() / 1024.0;
      if (l.startsWith("VmHWM:")) hwm = l.mid(6).trimmed().split(' ').front().toDouble() / 1024.0;
    }
  return {rss, hwm};
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int bench(const BenchOptions& o) {
  const auto [rss0, hwm0] = rss_mib();
  QElapsedTimer t;
  t.start();
  MainWindow w;
  w.setRememberRecent(false);  // a measurement is no visit: File > Open recent stays as it was
  w.resize(o.width, o.height);
  w.show();
  wait_idle(w, 10000);
  const double t_window = double(t.nsecsElapsed()) * 1e-6;
  t.restart();
  TraceDocument* d = w.openTrace(o.trace);
  while (d->state() == TraceDocument::State::Opening) QApplication::processEvents(QEventLoop::AllEvents, 5);
  const double t_meta = double(t.nsecsElapsed()) * 1e-6;
  if (d->state() != TraceDocument::State::Ready) {
    std::fprintf(stderr, "mxsim-inspector: %s\n", qPrintable(d->error()));
    return 2;
  }
  if (!wait_idle(w, 120000)) return 1;
  const double t_first = double(t.nsecsElapsed()) * 1e-6;
  const uint64_t k = d->steps();
  std::vector<int64_t> snap;
  if (const LayerMeta* l = d->meta().layer(w.state()->layer())) snap = l->snapshot_steps;
  std::printf("trace %s: %.1f MiB, %llu steps, %zu datasets, %zu snapshot steps of %s\n", qPrintable(o.trace),
              double(QFileInfo(o.trace).size()) / (1 << 20), (unsigned long long)k, d->meta().datasets.size(), snap.size(),
              qPrintable(w.state()->layer()));
  std::printf("window shown in %.1f ms; open: metadata %.1f ms, first view drawn %.1f ms (resident before: %.0f MiB)\n",
              t_window, t_meta, t_first, rss0);
  std::printf("%-22s %-10s %8s %8s %8s   (ms per step change, until the view is redrawn)\n", "view", "steps", "median",
              "max", "n");
  std::mt19937_64 rng(12345);
  for (View* v : w.views()) {
    w.showView(v->id());
    if (!wait_idle(w, 120000)) return 1;
    for (int set = 0; set < 2; ++set) {
      if (set == 1 && snap.empty()) continue;
      std::vector<double> ms;
      for (int i = 0; i < o.repeat; ++i) {
        const int64_t s = set == 0 ? int64_t(rng() % k) : snap[size_t(rng() % snap.size())];
        if (s == w.state()->step()) continue;
        QElapsedTimer u;
        u.start();
        w.state()->setStep(s);
        if (!wait_idle(w, 120000)) return 1;
        ms.push_back(std::max(v->lastUpdateMs(), 0.0));
      }
      std::printf("%-22s %-10s %8.1f %8.1f %8zu\n", qPrintable(v->title()), set == 0 ? "any" : "snapshot", median(ms),
                  ms.empty() ? 0.0 : *std::max_element(ms.begin(), ms.end()), ms.size());
    }
  }
  const auto [rss, hwm] = rss_mib();
  std::printf("resident memory: %.0f MiB now, %.0f MiB peak (cache %.1f MiB)\n", rss, hwm,
              double(d->cachedBytes()) / (1 << 20));
  return 0;
}

}  // namespace mxsim::inspector
