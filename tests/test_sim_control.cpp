// TrainOptions::control (the inspector's run mode): called after every micro-batch and
// every optimizer step, in order; returning false stops the run with the trace complete up
// to the last finished step and the weights of that step (a stop after a micro-batch drops
// the step's partial main_grad): the same weights and checkpoint as stop_after.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/trainer.hpp"
#include "mxsim/trace/checkpoint.hpp"
#include "mxsim/trace/reader.hpp"
#include "mxsim/trace/schema.hpp"
#include "test_util.hpp"

using namespace mxsim;

namespace {

sim::Config tiny() {
  return sim::parse_config(sim::default_config_text(),
                           {"run.epochs=1", "run.max_steps=6", "run.train_limit=2048", "run.test_limit=200",
                            "model.d_model=32", "model.d_ff=64", "model.experts=4", "batch.global_batch=128",
                            "batch.num_microbatches=4", "optim.warmup_steps=2", "deosc.period=2", "deosc.start_step=1"},
                           "tiny");
}

struct Event {
  int64_t step;
  int mb;
};

}  // namespace

TEST(SimControl, CalledAfterEveryMicroBatchAndStepInOrder) {
  auto be = emu::make_emu_backend();
  sim::TrainOptions o;
  o.evaluate = false;
  std::vector<Event> ev;
  o.control = [&](const sim::Progress& p) {
    EXPECT_EQ(p.total, 6);
    EXPECT_EQ(p.num_microbatches, 4);
    ev.push_back({p.step, p.microbatch});
    return true;
  };
  const sim::TrainResult r = sim::train(tiny(), *be, o);
  ASSERT_EQ(r.steps, 6);
  ASSERT_EQ(ev.size(), 6u * 5u);
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i].step, int64_t(i / 5) + 1) << i;
    EXPECT_EQ(ev[i].mb, i % 5 == 4 ? -1 : int(i % 5)) << i;
  }
}

// Also under fp8_delayed: the abandoned step's queued amaxes are dropped with it, so the
// checkpoint's amax history is the step before's (a stop once left them queued, and the
// checkpoint refused them).
class SimControlRecipes : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(Recipes, SimControlRecipes, ::testing::Values("mxfp4", "fp8_delayed"));

TEST_P(SimControlRecipes, StopAfterAMicroBatchEqualsStopAfterTheStepBefore) {
  test::TempDir d("sim_control");
  sim::Config c = tiny();
  c = sim::parse_config(sim::to_toml(c), {std::string("recipe.fc2=\"") + GetParam() + "\""}, "tiny");
  auto be = emu::make_emu_backend();
  // reference: stop_after = 2 steps
  sim::TrainOptions a;
  a.evaluate = false;
  a.stop_after = 2;
  a.checkpoint_path = (d.p / "a.ckpt").string();
  const sim::TrainResult ra = sim::train(c, *be, a);
  // the hook stops during step 3, after its second micro-batch
  auto be2 = emu::make_emu_backend();
  sim::TrainOptions b;
  b.evaluate = false;
  b.trace_path = (d.p / "b.h5").string();
  b.checkpoint_path = (d.p / "b.ckpt").string();
  double step2_loss = 0;
  b.control = [&](const sim::Progress& p) {
    if (p.microbatch < 0 && p.step == 2) step2_loss = p.loss;
    return !(p.step == 3 && p.microbatch == 1);
  };
  const sim::TrainResult rb = sim::train(c, *be2, b);
  EXPECT_EQ(rb.steps, 2);
  ASSERT_EQ(ra.final_masters.size(), rb.final_masters.size());
  for (size_t l = 0; l < ra.final_masters.size(); ++l)
    EXPECT_TRUE(ra.final_masters[l] == rb.final_masters[l]) << "layer " << l;  // bit for bit (floats, no NaN)
  EXPECT_EQ(trace::Checkpoint(b.checkpoint_path).get_u64(trace::schema::ckpt::kStep), 2u);
  if (std::string(GetParam()) == "fp8_delayed")
    for (const char* op : {"w", "x", "dy"}) {
      const std::string h = trace::schema::ckpt::delayed("fc2", op, "history");
      const auto ha = trace::Checkpoint(a.checkpoint_path).get_f32(h), hb = trace::Checkpoint(b.checkpoint_path).get_f32(h);
      EXPECT_EQ(ha.data, hb.data) << op;  // bits: amaxes are finite here
      EXPECT_GT(*std::max_element(hb.data.begin(), hb.data.end()), 0.0f) << op << ": the two steps' amaxes are there";
    }
  const trace::Reader r(b.trace_path);
  EXPECT_EQ(r.steps_completed(), 2u);
  const auto loss = r.read_series<double>(trace::schema::kTrainLoss);
  EXPECT_EQ(std::memcmp(&loss[1], &step2_loss, sizeof(double)), 0);  // the hook's step loss is the trace's
}
