// Traces of older formats open, and every view that lacks a dataset says which one and which
// trace format brings it ("this trace is format 1; ... come with trace format 2"). The old
// traces are a simulator trace of today with the newer datasets removed and the format
// attribute set back, which is what an older mxsim wrote (docs/trace-format.md "Layout").
#include <hdf5.h>

#include <QTest>
#include <string>
#include <vector>

#include "gui_test_util.hpp"
#include "mxsim/trace/schema.hpp"
#include "plot_util.hpp"
#include "state.hpp"
#include "view_osc.hpp"
#include "view_quant.hpp"

using namespace mxsim::inspector;
namespace schema = mxsim::trace::schema;

namespace {

/// Removes every dataset whose path contains one of `parts` and sets mxsim_trace_format.
void make_older(const QString& path, int format, const std::vector<std::string>& parts) {
  const hid_t f = H5Fopen(path.toStdString().c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  QVERIFY(f >= 0);
  std::vector<std::string> names;
  H5Lvisit(
      f, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t g, const char* name, const H5L_info_t*, void* out) -> herr_t {
        const hid_t o = H5Oopen(g, name, H5P_DEFAULT);
        if (o >= 0 && H5Iget_type(o) == H5I_DATASET) {
          std::string n = "/";
          n += name;
          static_cast<std::vector<std::string>*>(out)->push_back(n);
        }
        if (o >= 0) H5Oclose(o);
        return 0;
      },
      &names);
  int removed = 0;
  for (const std::string& n : names)
    for (const std::string& p : parts)
      if (n.find(p) != std::string::npos) {
        QVERIFY(H5Ldelete(f, n.c_str(), H5P_DEFAULT) >= 0);
        ++removed;
        break;
      }
  QVERIFY(removed > 0);
  const hid_t a = H5Aopen(f, schema::kFormatAttr, H5P_DEFAULT);
  QVERIFY(a >= 0);
  const uint64_t v = uint64_t(format);
  QVERIFY(H5Awrite(a, H5T_NATIVE_UINT64, &v) >= 0);
  H5Aclose(a);
  H5Fclose(f);
}

}  // namespace

class GuiOldFormat : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  InspectorState* st_ = nullptr;
  TraceDocument *v1_ = nullptr, *v3_ = nullptr;

  TraceDocument* open(const QString& p) {
    TraceDocument* d = st_->traces()->add(p);
    if (!QTest::qWaitFor([d] { return d->state() != TraceDocument::State::Opening; }, 20000)) return nullptr;
    return d;
  }

 private slots:
  void initTestCase() {
    const QString a = dir_.filePath("v1.h5"), b = dir_.filePath("v3.h5");
    guitest::write_trace(guitest::tiny(), a);
    QVERIFY(QFile::copy(a, b));
    // format 1: no block or element maps, no watched elements; format 3: no format-4 datasets
    make_older(a, 1, {"/quant/", "/osc/", "/watch/"});
    make_older(b, 3, {"/quant/x/", "/quant/dy/", "/quant/x_wgrad/", "/quant/dy_wgrad/", "/osc/snaps", "/watch/"});
    st_ = new InspectorState(this);
    v1_ = open(a);
    v3_ = open(b);
    QVERIFY(v1_ && v1_->state() == TraceDocument::State::Ready);
    QVERIFY(v3_ && v3_->state() == TraceDocument::State::Ready);
    QCOMPARE(v1_->meta().format, 1);
    QCOMPARE(v3_->meta().format, 3);
    st_->setLayer("fc1");
  }

  void quantizationMapNamesTheFormatThatBringsIt() {
    QuantView v(st_);
    v.resize(1100, 750);
    v.show();
    struct Case {
      TraceDocument* d;
      const char* op;
      QString want;
    };
    const Case cases[] = {{v1_, "w", "this trace is format 1; per-block maps come with trace format 2"},
                          {v1_, "x", "this trace is format 1; per-block maps come with trace format 4"},
                          {v3_, "x", "this trace is format 3; per-block maps come with trace format 4"},
                          {v3_, "dy_wgrad", "this trace is format 3; per-block maps come with trace format 4"}};
    for (const Case& c : cases) {
      st_->setPrimary(c.d);
      st_->setOperand(c.op);
      st_->setStep(1);  // a snapshot row
      v.setMetric(QuantView::Metric::Sqnr);
      QVERIFY(guitest::wait_view(&v));
      // x / w fall back to the scale exponents over steps (their histograms exist), with the reason
      // in the title; the wgrad operands have no per-step series: the reason is the plot's note
      const QString title = plot_title(v.mapPlot());
      const QCPItemText* note = plot_note(v.mapPlot());
      const QString text = title + "\n" + (note && note->visible() ? note->text() : QString());
      QVERIFY2(text.contains(c.want), qPrintable(c.op + QString(": ") + text));
      QVERIFY2(!text.contains("(trace format 2)"), qPrintable(text));
    }
  }

  void oscillationViewsNameTheFormatThatBringsThem() {
    OscView v(st_);
    v.resize(1100, 750);
    v.show();
    // format 3: the per-element snap map came with format 4
    st_->setPrimary(v3_);
    st_->setStep(1);
    st_->setExpert(0);
    st_->setElement(0, 0);
    v.setMetric(4);
    QVERIFY(guitest::wait_view(&v));
    const QCPItemText* note = plot_note(v.mapPlot());
    QVERIFY(note && note->visible());
    QVERIFY2(note->text().contains("this trace is format 3; per-element maps come with trace format 4"), qPrintable(note->text()));
    // format 1: the timeline has snapshots but no block scales (format 2): the grid's reason
    st_->setPrimary(v1_);
    v.setMetric(3);
    QVERIFY(guitest::wait_view(&v));
    const QString title = plot_title(v.timelinePlot());
    QVERIFY2(title.contains("this trace is format 1; block scales come with trace format 2"), qPrintable(title));
    QVERIFY2(!title.contains("(trace format 2)"), qPrintable(title));
  }
};

QTEST_MAIN(GuiOldFormat)
#include "test_gui_old_format.moc"
