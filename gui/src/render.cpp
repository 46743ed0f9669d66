#include "render.hpp"

#include <QApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QThread>
#include <cstdio>

#include "main_window.hpp"
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

int render(const RenderOptions& o) {
  MainWindow w;
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
      status = 2;
    }
  }
  if (status) return status;
  if (st->traces()->size() > 0) st->setPrimary(st->traces()->at(0));
  if (st->traces()->size() > 1) st->setOther(st->traces()->at(1));
  TraceDocument* d = st->primary();
  if (!o.layer.isEmpty()) st->setLayer(o.layer);
  if (!o.op.isEmpty()) st->setOperand(o.op);
  st->setExpert(o.expert);
  if (o.elem_n >= 0) st->setElement(o.elem_n, o.elem_k);
  if (d && d->steps() > 0) st->setStep(o.step >= 0 ? std::min<qint64>(o.step, qint64(d->steps()) - 1) : qint64(d->steps()) - 1);
  if (!o.dataset.isEmpty()) {
    if (auto* c = qobject_cast<CompareView*>(w.view("compare"))) c->setDataset(o.dataset);
    if (auto* dv = qobject_cast<DataView*>(w.view("data"))) dv->setDataset(o.dataset);
  }
  QDir().mkpath(o.out_dir);
  for (View* v : w.views()) {
    if (!o.views.isEmpty() && !o.views.contains(v->id())) continue;
    w.showView(v->id());
    if (!wait_idle(w, o.timeout_ms)) {
      std::fprintf(stderr, "mxsim-inspector: view %s timed out\n", qPrintable(v->id()));
      status = 1;
      continue;
    }
    const QString png = o.out_dir + "/" + v->id() + ".png", csv = o.out_dir + "/" + v->id() + ".csv";
    const QPixmap pm = o.window ? w.grab() : v->grab();
    if (!pm.save(png, "PNG") || !v->exportCsv(csv)) {
      std::fprintf(stderr, "mxsim-inspector: cannot write %s\n", qPrintable(png));
      status = 1;
      continue;
    }
    std::printf("%s  %s (%dx%d, view updated in %.1f ms)\n", qPrintable(png), qPrintable(v->title()), pm.width(),
                pm.height(), v->lastUpdateMs());
  }
  return status;
}

}  // namespace mxsim::inspector
