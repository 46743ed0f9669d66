// A cached FP8 weight keeps the scale_inv it was cast with across every
// micro-batch of a step (training-mechanics.md §4-§5; TransformerEngine's
// cached FP8 weights): five micro-batches per step, scale_inv and codes of the
// cache checked after each one against values worked out from the contract
// (docs/numerics.md §3.3, §4.3), not read back from the code:
//   fp8_delayed, step 1: TE's initial scale 1, scale_inv fl32(1 / 1) = 1.
//   fp8_delayed, step 2: scale = fl32(448 / amax(W)) (history of one step,
//     margin 0), scale_inv = fl32(1 / scale).
//   fp8_current: scale = fl32(448 / max(amax(W), 1e-12f)), scale_inv = fl32(1 / scale).
// Mid-step the BF16 model copy is changed behind the cache's back (its version
// kept): the cache still holds the cast-time bytes and scale_inv; only an
// optimizer step (invalidate) leads to a new cast.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/model.hpp"

using namespace mxsim;
using namespace mxsim::sim;

namespace {

constexpr int kMicro = 5;

Config five_micro_batches(const std::string& recipe) {
  return parse_config(default_config_text(),
                      {"model.d_model=32", "model.d_ff=64", "model.experts=4", "model.top_k=2",
                       "batch.global_batch=160", "batch.num_microbatches=5", "recipe.fc2=" + recipe,
                       "recipe.fp8_amax_history=4", "recipe.fp8_margin=0"},
                      "test");
}

float host_amax(Backend& be, const Tensor& t) {
  float a = 0;
  for (float v : be.download3(t)) a = std::max(a, std::fabs(v));
  return a;
}

struct Inputs {
  std::vector<Tensor> x;
  Tensor y;
  explicit Inputs(Backend& be) {
    // A different input per micro-batch, so the activations' amaxes differ while W's scale must not.
    for (int mb = 0; mb < kMicro; ++mb) {
      Tensor2f xh = Tensor2f::from_shape({32, 784});
      for (size_t i = 0; i < xh.size(); ++i) xh.data()[i] = float((i + 7 * size_t(mb)) % 13) / float(13 - mb);
      x.push_back(be.upload(xh));
    }
    std::vector<uint8_t> yh(32);
    for (size_t i = 0; i < 32; ++i) yh[i] = uint8_t(i % 10);
    y = be.alloc(DType::u8, {32});
    be.upload(y, std::span<const uint8_t>(yh));
  }
};

/// Run the five micro-batches of `step`; after each, the cache's scale_inv
/// must be `want` and its codes those of micro-batch 0. After micro-batch 2
/// the model copy is doubled in place (version unchanged).
void run_step(Backend& be, Model& m, Weight& w, const Inputs& in, int step, float want) {
  for (Weight* v : m.weights()) v->zero_grad(be);
  std::vector<uint8_t> codes0;
  for (int mb = 0; mb < kMicro; ++mb) {
    m.train_microbatch(in.x[size_t(mb)], in.y, mb, kMicro, Step(step), 1.0f / 160, false, false, nullptr);
    ASSERT_TRUE(w.cache.valid) << "step " << step << " mb " << mb;
    const QuantizedTensor q = be.download(w.cache.q);
    ASSERT_EQ(q.scale_inv.size(), w.G);  // one per-tensor scale over all experts, stored per group
    for (size_t g = 0; g < w.G; ++g)
      EXPECT_EQ(q.scale_inv.data()[g], want) << "step " << step << " micro-batch " << mb << " group " << g;
    const std::vector<uint8_t> codes(q.data.begin(), q.data.end());
    if (mb == 0) codes0 = codes;
    EXPECT_EQ(codes, codes0) << "step " << step << " micro-batch " << mb << ": the cache was cast again";
    if (mb == 2) {
      Tensor3f d = be.download3(w.model);
      for (float& v : d) v *= 2.0f;  // exact in BF16
      be.upload(w.model, std::span<const float>(d.data(), d.size()));
    }
  }
}

}  // namespace

TEST(SimFp8WeightCache, DelayedScaleInvKeptAtEveryMicroBatch) {
  const Config c = five_micro_batches("fp8_delayed");
  auto be = emu::make_emu_backend();
  Model m(c, *be);
  Weight& w = m.weight("fc2");
  const Inputs in(*be);
  ASSERT_NO_FATAL_FAILURE(run_step(*be, m, w, in, 1, 1.0f));
  // The model copy was doubled after micro-batch 2; the amax the cast recorded is that of
  // the cast-time weight, half today's.
  const float amax = host_amax(*be, w.model) / 2.0f;
  ASSERT_EQ(w.pending_amax[0].size(), 1u);  // one cast of W in the step, its amax queued
  EXPECT_EQ(w.pending_amax[0][0], amax);
  w.update_scaling(*be);
  EXPECT_EQ(w.delayed[0]->history().back(), amax);  // recorded, then rolled to the last slot
  w.invalidate();  // as the optimizer step does
  const float scale = 448.0f / amax;
  EXPECT_EQ(w.delayed[0]->scale(), scale);
  // Step 2 casts the (doubled) model copy with the scale of step 1's history.
  ASSERT_NO_FATAL_FAILURE(run_step(*be, m, w, in, 2, 1.0f / scale));
}

TEST(SimFp8WeightCache, CurrentScaleInvKeptAtEveryMicroBatch) {
  const Config c = five_micro_batches("fp8_current");
  auto be = emu::make_emu_backend();
  Model m(c, *be);
  Weight& w = m.weight("fc2");
  const Inputs in(*be);
  const float a0 = std::max(host_amax(*be, w.model), 1e-12f);
  ASSERT_NO_FATAL_FAILURE(run_step(*be, m, w, in, 1, 1.0f / (448.0f / a0)));
  w.invalidate();
  const float a1 = std::max(host_amax(*be, w.model), 1e-12f);  // the doubled copy
  EXPECT_EQ(a1, 2.0f * a0);
  ASSERT_NO_FATAL_FAILURE(run_step(*be, m, w, in, 2, 1.0f / (448.0f / a1)));
}
