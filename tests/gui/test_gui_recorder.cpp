// A recorder's trace (mxsim.torch.Recorder: core's TraceRecorder over a RunPlan of a PyTorch
// model's modules) in the inspector: the layers are the module names the plan gave, in the
// trace's order (the simulator's names first, then the others by name), each with the recipe and
// weight shape of its layer group's attributes, and the window opens on them. The plan, not the
// window, gives the expected values.
#include <QComboBox>
#include <QTest>

#include "gui_test_util.hpp"
#include "main_window.hpp"
#include "mxsim/sim/recorder.hpp"
#include "render.hpp"

using namespace mxsim::inspector;

class GuiRecorder : public QObject {
  Q_OBJECT
  QTemporaryDir dir_;
  QString trace_;

 private slots:
  void initTestCase() {
    QVERIFY(dir_.isValid());
    trace_ = dir_.filePath("recorder.h5");
    mxsim::sim::RunPlan plan;
    plan.micro_batches = 2;
    plan.scalars = {"grad_norm"};
    auto layer = [](std::string name, size_t slot, std::string recipe, uint64_t G, uint64_t N, uint64_t K) {
      mxsim::sim::LayerPlan l;
      l.name = std::move(name), l.slot = slot, l.recipe = std::move(recipe), l.module = "GroupedLinear";
      l.G = G, l.N = N, l.K = K;
      l.quantized = l.recipe != "bf16";
      return l;
    };
    plan.layers = {layer("model.layers.1.mlp.experts", 0, "mxfp4", 4, 64, 32),
                   layer("model.layers.0.mlp.experts", 1, "mxfp8", 4, 32, 64), layer("head", 2, "bf16", 1, 10, 32)};
    mxsim::trace::Provenance prov = mxsim::trace::make_provenance("emu", 1);
    prov.producer = mxsim::trace::kProducerRecorder;
    prov.model = "ToyMoE";
    mxsim::sim::TraceRecorder rec(trace_.toStdString(), "[recorder]\n", prov, plan);
    for (int64_t s = 1; s <= 3; ++s) {
      mxsim::sim::StepRecord r;
      r.step = s, r.loss = 1.0 / double(s), r.lr = 1e-3f;
      r.scalars = {0.5 * double(s)};
      r.layers.resize(3);
      for (auto& l : r.layers) l.main_grad_norm = {1.0, 2.0};
      rec.append(r);
    }
    rec.close();
  }

  void theLayersAreTheModulesOfThePlan() {
    MainWindow w;
    w.show();
    w.openTrace(trace_);
    QVERIFY(wait_idle(w, 20000));
    TraceDocument* d = w.state()->primary();
    QVERIFY(d && d->state() == TraceDocument::State::Ready);
    const TraceMeta& m = d->meta();
    QCOMPARE(QString::fromStdString(m.prov.producer), QString(mxsim::trace::kProducerRecorder));
    QCOMPARE(QString::fromStdString(m.prov.model), QString("ToyMoE"));
    QCOMPARE(int(m.layers.size()), 3);
    // the simulator's names first (head), then the module names in name order
    QCOMPARE(m.layers[0].name, QString("head"));
    QCOMPARE(m.layers[1].name, QString("model.layers.0.mlp.experts"));
    QCOMPARE(m.layers[2].name, QString("model.layers.1.mlp.experts"));
    QCOMPARE(m.layers[1].recipe, QString("mxfp8"));
    QVERIFY(m.layers[1].quantized && !m.layers[0].quantized);
    QCOMPARE(m.layers[2].shape[0], uint64_t(4));  // from the group's weight_shape attribute
    QCOMPARE(m.layers[2].shape[1], uint64_t(64));
    QCOMPARE(m.layers[2].shape[2], uint64_t(32));
    QCOMPARE(m.layers[2].blocks[0].text(), QString("32x32"));  // mxfp4's W tiles, from the recipe name
    QVERIFY(m.config_note.isEmpty());  // a recorder's config is not the simulator's: no complaint
    auto* pick = w.findChild<QComboBox*>("layerPick");
    QVERIFY(pick);
    QStringList items;
    for (int i = 0; i < pick->count(); ++i) items << pick->itemText(i);
    QVERIFY2(items.contains("model.layers.1.mlp.experts  (mxfp4)"), qPrintable(items.join("|")));
  }
};

QTEST_MAIN(GuiRecorder)
#include "test_gui_recorder.moc"
