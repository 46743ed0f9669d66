// The nvfp4 training recipe (sim/recipe.hpp Nvfp4Recipe; docs/simulator.md): each of its
// rules is a test that fails when the rule is broken: 1x16 activations and gradients, 16x16
// weights (one set of bytes for fprop and dgrad), the random Hadamard transform with TE's
// signs on the two wgrad operands only, stochastic rounding on the gradient dy only, dW
// accumulated into main_grad by the GEMM; the options turn the transform and SR off; the
// config writes its options only where they matter; expert parallelism refuses it (its
// tensor amax would cross ranks); a short run trains with it; and the tensor scale is a trace
// series of its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/trace/reader.hpp"
#include "mxsim/trace/schema.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/recipe.hpp"
#include "mxsim/sim/trainer.hpp"

namespace {
using namespace mxsim;
using namespace mxsim::sim;

Config tiny(std::vector<std::string> extra) {
  std::vector<std::string> s = {"run.epochs=1",           "run.max_steps=3",         "run.train_limit=512",
                                "run.test_limit=100",     "model.d_model=32",        "model.d_ff=64",
                                "model.experts=4",        "model.top_k=2",           "batch.global_batch=64",
                                "batch.num_microbatches=2", "trace.snapshot_steps=[]", "deosc.enable=false",
                                "recipe.fc1=\"nvfp4\"",   "recipe.fc2=\"nvfp4\""};
  s.insert(s.end(), extra.begin(), extra.end());
  return parse_config(default_config_text(), s, "tiny");
}

QuantSpec plain(const char* name) { return named_spec(name); }

}  // namespace

TEST(SimNvfp4, OperandSpecsFollowNvidiasRecipe) {
  const OperandSpecs s = operand_specs(make_recipe("nvfp4", RecipeConfig{}));
  // fprop: x 1x16 under RNE, W in 16x16 tiles; neither transformed
  EXPECT_EQ(s.x_fprop, plain("nvfp4"));
  EXPECT_EQ(s.w, plain("nvfp4_2d"));
  EXPECT_EQ(s.w.block_rows, 16);
  EXPECT_EQ(s.w.block_cols, 16);
  // dgrad: dy 1x16 with stochastic rounding, not transformed
  EXPECT_EQ(s.dy_dgrad.round, RoundMode::Stochastic);
  EXPECT_FALSE(s.dy_dgrad.hadamard16);
  // wgrad: both operands through the random Hadamard transform with TE's signs; SR on dy only
  for (const QuantSpec* w : {&s.dy_wgrad, &s.x_wgrad}) {
    EXPECT_TRUE(w->hadamard16);
    EXPECT_EQ(w->hadamard16_signs, kTeNvfp4WgradSigns);
    EXPECT_EQ(w->scale_kind, ScaleKind::UE4M3);
    EXPECT_EQ(w->block_rows, 1);
    EXPECT_EQ(w->block_cols, 16);
  }
  EXPECT_EQ(s.dy_wgrad.round, RoundMode::Stochastic);
  EXPECT_EQ(s.x_wgrad.round, RoundMode::RNE);
  const Recipe r = make_recipe("nvfp4", RecipeConfig{});
  EXPECT_TRUE(fused_wgrad_accum(r));       // TE's epilogue adds dW into main_grad (beta = 1)
  EXPECT_FALSE(deosc_eligible(r));         // de-oscillation snaps to the MXFP4 grid: mxfp4 only
  EXPECT_TRUE(LinearRecipe(r).dgrad_reuses_fprop_w());  // 2-D tiles: fprop's bytes serve dgrad
}

TEST(SimNvfp4, OptionsTurnTheTransformAndStochasticRoundingOff) {
  RecipeConfig rc;
  set_recipe_option(rc, "nvfp4_hadamard_wgrad", "false");
  set_recipe_option(rc, "nvfp4_sr_grad", "false");
  const OperandSpecs s = operand_specs(make_recipe("nvfp4", rc));
  for (const QuantSpec* q : {&s.x_fprop, &s.dy_dgrad, &s.dy_wgrad, &s.x_wgrad}) {
    EXPECT_EQ(*q, plain("nvfp4"));  // RNE, no transform, no signs
  }
  EXPECT_THROW(set_recipe_option(rc, "nvfp4_hadamard", "true"), std::invalid_argument);
}

TEST(SimNvfp4, ConfigWritesItsOptionsOnlyWhereTheyMatter) {
  const std::string plain_cfg = to_toml(parse_config(default_config_text(), {}, "default"));
  EXPECT_EQ(plain_cfg.find("nvfp4"), std::string::npos) << plain_cfg;  // the default config reads as before
  const std::string t = to_toml(tiny({"recipe.nvfp4_sr_grad=false"}));
  EXPECT_NE(t.find("nvfp4_sr_grad = false"), std::string::npos) << t;
  EXPECT_NE(t.find("nvfp4_hadamard_wgrad = true"), std::string::npos) << t;
  EXPECT_EQ(to_toml(parse_config(t, {}, "again")), t);
  EXPECT_FALSE(parse_config(t, {}, "again").recipe.nvfp4_sr_grad);
}

TEST(SimNvfp4, ExpertParallelismIsRefusedNamingTheReason) {
  try {
    (void)tiny({"parallel.ranks=2"});
    FAIL() << "no refusal";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("nvfp4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("amax across ranks"), std::string::npos) << e.what();
  }
}

TEST(SimNvfp4, ShortRunTrainsAndRecordsTheExperts) {
  auto be = emu::make_emu_backend();
  const TrainResult r = train(tiny({}), *be, {});
  ASSERT_EQ(r.steps, 3);
  EXPECT_TRUE(std::isfinite(r.final_loss));
}

// The tensor level of NVFP4's two-level scale is a series of its own (quant/<op>/tensor_scale_inv)
// for the operands with per-step statistics (w, x, dy) of an NVFP4 layer, and for none of a
// one-level layer; the wgrad operands, one tensor scale per expert, have theirs beside their
// block maps at the snapshot steps. Its value at a snapshot step
// is checked against the same step's block maps, which record each block's source amax: S_dec =
// fl32(1 / fl32(2688 / amax)) of the largest (numerics.md §3.3, TE's per-tensor scale).
TEST(SimNvfp4, TensorScaleIsASeriesThatTheBlockMapsConfirm) {
  const std::string path = (std::filesystem::temp_directory_path() / "mxsim_nvfp4_tensor_scale.h5").string();
  auto be = emu::make_emu_backend();
  TrainOptions o;
  o.trace_path = path;
  o.threads = 1;
  const int64_t snap = 2, row = snap - 1;  // global step 2 is trace row 1
  (void)train(tiny({"recipe.fc2=\"mxfp4\"", "trace.snapshot_steps=[2]", "trace.snapshot_layers=[\"fc1\", \"fc2\"]"}), *be, o);
  trace::Reader rd(path);
  for (const char* op : {"w", "x", "dy"}) {
    EXPECT_FALSE(rd.has(trace::schema::quant("fc2", op, trace::schema::kTensorScaleInv.name))) << op;  // mxfp4: one level
    const auto ts = rd.read_series<float>(trace::schema::quant("fc1", op, trace::schema::kTensorScaleInv.name));
    ASSERT_EQ(ts.size(), 3u) << op;
    const auto amax = rd.read_snapshot<float>(trace::schema::block_map("fc1", op, "block_amax"), row);
    float m = 0;  // the activation maps pad each group's rows with NaN
    for (float a : amax)
      if (!std::isnan(a)) m = std::max(m, a);
    ASSERT_GT(m, 0.0f) << op;
    const float expect = 1.0f / ((448.0f * 6.0f) / m);
    EXPECT_EQ(ts[size_t(row)], expect) << op << ": amax " << m;
    EXPECT_NE(ts[size_t(row)], 1.0f) << op;  // a real second level, not the one-level default
  }
  // The wgrad operands are quantized per expert, each with its own S_dec: a snapshot [G] beside
  // their block maps, equal to that expert's largest block amax (of H x: the amax the recipe
  // takes after the random Hadamard transform), NaN for an expert without rows.
  for (const char* op : {"x_wgrad", "dy_wgrad"}) {
    const auto ts = rd.read_snapshot<float>(trace::schema::block_map("fc1", op, "tensor_scale_inv"), row);
    const auto amax = rd.read_snapshot<float>(trace::schema::block_map("fc1", op, "block_amax"), row);
    const auto rows = rd.read_snapshot<int64_t>(trace::schema::block_map("fc1", op, "rows"), row);
    ASSERT_EQ(ts.size(), rows.size()) << op;
    const size_t per = amax.size() / ts.size();
    int checked = 0;
    for (size_t g = 0; g < ts.size(); ++g) {
      if (rows[g] == 0) {
        EXPECT_TRUE(std::isnan(ts[g])) << op << " expert " << g;
        continue;
      }
      float m = 0;
      for (size_t i = g * per; i < (g + 1) * per; ++i)
        if (!std::isnan(amax[i])) m = std::max(m, amax[i]);
      EXPECT_EQ(ts[g], 1.0f / ((448.0f * 6.0f) / m)) << op << " expert " << g << ": amax " << m;
      ++checked;
    }
    EXPECT_GT(checked, 1) << op << ": at least two experts with rows, each its own scale";
    ASSERT_TRUE(rd.has(trace::schema::block_map("fc2", op, "block_amax")));  // fc2's maps are there ...
    EXPECT_FALSE(rd.has(trace::schema::block_map("fc2", op, "tensor_scale_inv")));  // ... mxfp4: one level
  }
  std::filesystem::remove(path);
}
