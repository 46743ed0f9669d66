// Per-GEMM recipes (docs/config.md "Per-GEMM recipes"): recipe.<layer>_fprop / _dgrad / _wgrad
// run one GEMM of a linear as another named recipe runs it. The oracles here are hand counts of
// the backend's quantized and BF16 GEMM calls (ProfilingBackend), the emulator's quantizer called
// with a spec built from the named specs directly, and NaN for statistics no GEMM produces.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <type_traits>
#include <unistd.h>
#include <vector>

#include "mxsim/backend_profile.hpp"
#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/quant_stats.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/model.hpp"
#include "mxsim/sim/recipe.hpp"
#include "mxsim/sim/trainer.hpp"
#include "mxsim/spec_args.hpp"
#include "mxsim/trace/compare.hpp"
#include "mxsim/trace/reader.hpp"
#include "mxsim/trace/schema.hpp"

namespace {
using namespace mxsim;
using namespace mxsim::sim;

/// The bf16 layers of the default config, the experts as given; 2 micro-batches, 1 step.
Config tiny(std::vector<std::string> extra) {
  std::vector<std::string> s = {"run.epochs=1",           "run.max_steps=1",         "run.train_limit=512",
                                "run.test_limit=100",     "model.d_model=32",        "model.d_ff=64",
                                "model.experts=4",        "model.top_k=2",           "batch.global_batch=64",
                                "batch.num_microbatches=2", "trace.snapshot_steps=[]", "deosc.enable=false"};
  s.insert(s.end(), extra.begin(), extra.end());
  return parse_config(default_config_text(), s, "tiny");
}

std::string tmp(const std::string& n) {
  return (std::filesystem::temp_directory_path() / ("mxsim_pergemm_" + std::to_string(::getpid()) + "_" + n)).string();
}

/// Calls of the op labelled `label` in a ProfilingBackend report (0 when absent).
long long calls(const std::string& report, const std::string& label) {
  std::istringstream in(report);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(label + " ", 0) == 0) {
      std::istringstream rest(line.substr(label.size()));
      long long n = 0;
      rest >> n;
      return n;
    }
  return 0;
}

/// The backend's op report of one run of tiny(extra).
std::string profile(std::vector<std::string> extra) {
  ProfilingBackend prof(emu::make_emu_backend(), ProfilingBackend::Mode::Host);
  TrainOptions o;
  o.evaluate = false;
  train(tiny(std::move(extra)), prof, o);
  return prof.report();
}

}  // namespace

// A recipe's accessors hand out references into the recipe, so of a temporary recipe they return
// copies: `const OperandSpecs& s = operand_specs(make_recipe(...))` once held a reference into a
// destroyed recipe (ASan: stack-use-after-scope). The overloads for temporaries are the fix of
// that class; this checks their types.
TEST(SimPerGemm, SpecsOfATemporaryRecipeComeByValue) {
  static_assert(std::is_same_v<decltype(operand_specs(std::declval<Recipe>())), OperandSpecs>);
  static_assert(std::is_same_v<decltype(operand_specs(std::declval<const Recipe&>())), const OperandSpecs&>);
  static_assert(std::is_same_v<decltype(std::declval<LinearRecipe>().specs(GemmForm::Fprop)), OperandSpecs>);
  static_assert(std::is_same_v<decltype(std::declval<LinearRecipe>().weight_spec()), QuantSpec>);
  static_assert(std::is_same_v<decltype(std::declval<LinearRecipe>().role_spec(Role::W)), QuantSpec>);
  static_assert(std::is_same_v<decltype(std::declval<LinearRecipe>().of(GemmForm::Fprop)), Recipe>);
  static_assert(std::is_same_v<decltype(std::declval<const LinearRecipe&>().specs(GemmForm::Fprop)), const OperandSpecs&>);
  const OperandSpecs& s = operand_specs(make_recipe("mxfp4", {}));  // bound to the returned copy
  EXPECT_EQ(s.w.block_rows, 32);  // MXFP4 weights in 32 x 32 tiles
  EXPECT_EQ(s.w.elem, Format::E2M1);
}

TEST(SimPerGemm, NamesParseAndRoundTrip) {
  const Config c = tiny({"recipe.fc1_wgrad=\"mxfp8\"", "recipe.fc2=\"bf16\"", "recipe.fc2_dgrad=\"mxfp4\""});
  const LinearRecipe f1 = c.recipe.linear(Layer::Fc1), f2 = c.recipe.linear(Layer::Fc2);
  EXPECT_TRUE(std::holds_alternative<Mxfp4Recipe>(f1.of(GemmForm::Fprop)));
  EXPECT_TRUE(std::holds_alternative<Mxfp4Recipe>(f1.of(GemmForm::Dgrad)));
  EXPECT_TRUE(std::holds_alternative<Mxfp8Recipe>(f1.of(GemmForm::Wgrad)));
  EXPECT_EQ(linear_recipe_name(f1), "mxfp4,wgrad=mxfp8");
  EXPECT_EQ(linear_recipe_name(f2), "bf16,dgrad=mxfp4");
  EXPECT_EQ(linear_recipe_name(c.recipe.linear(Layer::Head)), "bf16");
  for (const char* n : {"mxfp4", "bf16,dgrad=mxfp4", "mxfp4,wgrad=mxfp8", "bf16,dgrad=mxfp8,wgrad=fp8_block"})
    EXPECT_EQ(linear_recipe_name(parse_linear_recipe(n, {})), n);
  // a GEMM named as its base spells nothing; fprop= moves the base; an alias reads as its recipe
  EXPECT_EQ(linear_recipe_name(parse_linear_recipe("mxfp4,dgrad=mxfp4", {})), "mxfp4");
  EXPECT_EQ(linear_recipe_name(parse_linear_recipe("mxfp4,fprop=bf16", {})), "bf16,dgrad=mxfp4,wgrad=mxfp4");
  EXPECT_EQ(linear_recipe_name(parse_linear_recipe("bf16,wgrad=fp8_tensor", {})), "bf16,wgrad=fp8_current");
  for (const char* bad : {"mxfp4,wgrad", "mxfp4,bogus=bf16", "mxfp4,wgrad=bf16,wgrad=mxfp8", "mxfp4,wgrad=nvfp5",
                          "mxfp4,", "nvfp4_2d"})
    EXPECT_THROW(parse_linear_recipe(bad, {}), std::invalid_argument) << bad;
  // the canonical text carries only the keys that are set, and reads back the same
  const std::string t = to_toml(c);
  EXPECT_NE(t.find("fc1_wgrad = \"mxfp8\""), std::string::npos) << t;
  EXPECT_EQ(t.find("fc1_dgrad"), std::string::npos) << t;
  EXPECT_EQ(to_toml(parse_config(t)), t);
  const std::string plain = to_toml(tiny({}));
  for (const char* l : {"embed", "router", "fc1", "fc2", "head"})
    for (const char* g : kGemmNames) EXPECT_EQ(plain.find(std::string(l) + "_" + g), std::string::npos) << l << g;
}

TEST(SimPerGemm, RefusedCombinationsNameTheKey) {
  auto message = [](std::vector<std::string> extra) {
    try {
      tiny(std::move(extra));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const std::string mixed = message({"recipe.fc1_dgrad=\"fp8_delayed\""});
  EXPECT_NE(mixed.find("recipe.fc1"), std::string::npos) << mixed;
  EXPECT_NE(mixed.find("fp8_delayed"), std::string::npos) << mixed;
  EXPECT_NE(mixed.find("all three"), std::string::npos) << mixed;
  const std::string unknown = message({"recipe.fc2_wgrad=\"mxfp5\""});
  EXPECT_NE(unknown.find("recipe.fc2_wgrad"), std::string::npos) << unknown;
  EXPECT_NE(message({"parallel.ranks=2", "recipe.fc1_dgrad=\"fp8_current\""}).find("parallel.ranks"), std::string::npos);
  const std::string embed = message({"recipe.embed_dgrad=\"mxfp4\""});  // the embedding's input is the data
  EXPECT_NE(embed.find("recipe.embed_dgrad"), std::string::npos) << embed;
  EXPECT_NE(embed.find("no dgrad"), std::string::npos) << embed;
  // fp8_delayed in all three GEMMs is the named recipe, spelled by its overrides
  const Config all = tiny({"recipe.fc1_fprop=\"fp8_delayed\"", "recipe.fc1_dgrad=\"fp8_delayed\"",
                           "recipe.fc1_wgrad=\"fp8_delayed\""});
  EXPECT_EQ(linear_recipe_name(all.recipe.linear(Layer::Fc1)), "fp8_delayed");
}

// Each GEMM runs its own recipe: with every layer bf16 but one GEMM of fc1 in MXFP4, the run
// makes exactly one quantized GEMM of that form per micro-batch (2) and no other quantized GEMM;
// a quantized wgrad quantizes its two operands per group (quantize_grouped_colwise, 2 per
// micro-batch), no other GEMM does.
TEST(SimPerGemm, EachGemmRunsItsOwnRecipe) {
  const std::string base = "recipe.fc2=\"bf16\"";
  struct Case {
    const char* key;
    long long fprop_q, dgrad_q, wgrad_q, colwise;
  };
  for (const Case& k : {Case{"fprop", 2, 0, 0, 0}, Case{"dgrad", 0, 2, 0, 0}, Case{"wgrad", 0, 0, 2, 4}}) {
    const std::string r = profile({base, "recipe.fc1=\"bf16\"", std::string("recipe.fc1_") + k.key + "=\"mxfp4\""});
    EXPECT_EQ(calls(r, "grouped_fprop (quantized)"), k.fprop_q) << k.key << "\n" << r;
    EXPECT_EQ(calls(r, "grouped_dgrad (quantized)"), k.dgrad_q) << k.key << "\n" << r;
    EXPECT_EQ(calls(r, "grouped_wgrad (quantized)"), k.wgrad_q) << k.key << "\n" << r;
    EXPECT_EQ(calls(r, "quantize_grouped_colwise"), k.colwise) << k.key << "\n" << r;
  }
  // the uniform recipe, for contrast: all three quantized
  const std::string u = profile({base});
  EXPECT_EQ(calls(u, "grouped_fprop (quantized)"), 2);
  EXPECT_EQ(calls(u, "grouped_dgrad (quantized)"), 2);
  EXPECT_EQ(calls(u, "grouped_wgrad (quantized)"), 2);
}

// The wgrad GEMM's recipe decides how dW reaches main_grad: bf16 and fp8_current accumulate in
// the GEMM (no accumulate_groups), the others through the BF16 bridge (one accumulate_groups per
// micro-batch). fc1 mxfp4 with a bf16 wgrad is fused; fc2 mxfp4 is not: 2 bridge adds, not 4.
TEST(SimPerGemm, WgradDecidesTheMainGradBridge) {
  EXPECT_EQ(calls(profile({}), "accumulate_groups"), 4);
  EXPECT_EQ(calls(profile({"recipe.fc1_wgrad=\"bf16\""}), "accumulate_groups"), 2);
  EXPECT_EQ(calls(profile({"recipe.fc1_wgrad=\"fp8_current\"", "recipe.fc2_wgrad=\"fp8_current\""}),
                  "accumulate_groups"),
            0);
}

// dgrad quantizes W by its own spec when it differs from fprop's: mxfp4 fprop and mxfp8 dgrad
// give dgrad the bytes of the emulator's quantizer under mxfp8's 32x32 EVEN weight spec (built
// here from the named spec), and leave the E2M1 fprop cache as it was.
TEST(SimPerGemm, DgradQuantizesWByItsOwnSpec) {
  auto be = emu::make_emu_backend();
  Weight w;
  w.name = "fc1";
  w.G = 2, w.N = 64, w.K = 64;
  w.recipe = parse_linear_recipe("mxfp4,dgrad=mxfp8", {});
  Tensor3f x = Tensor3f::from_shape({2, 64, 64});
  for (size_t i = 0; i < x.size(); ++i) x.data()[i] = std::ldexp(float(int(i * 2654435761u % 2001) - 1000), -9);
  w.model = be->upload(x);
  QTensor s0, s1;
  const QuantizedTensor f = be->download(weight_for_fprop(*be, w, 0, 2, s0));
  const uint64_t before = w.quantizations();
  const QuantizedTensor d = be->download(weight_for_dgrad(*be, w, 0, 2, s1));
  (void)weight_for_dgrad(*be, w, 1, 2, s1);  // micro-batch 1: the same version, no new quantization
  EXPECT_EQ(w.quantizations(), before + 1) << "dgrad's own W: once per weight version";
  QuantSpec m8 = named_spec("mxfp8_2d");
  m8.rule = ScaleRule::Even;
  const QuantizedTensor want = emu::quantize(x, m8);
  EXPECT_EQ(f.spec.elem, Format::E2M1);
  EXPECT_EQ(d.spec.elem, Format::E4M3);
  auto same = [](const Bytes3& a, const Bytes3& b) {
    return a.size() == b.size() && std::equal(a.data(), a.data() + a.size(), b.data());
  };
  EXPECT_TRUE(same(d.data, want.data));
  EXPECT_TRUE(same(d.scale_bytes, want.scale_bytes));
  EXPECT_EQ(be->download(w.cache.q).spec.elem, Format::E2M1) << "the fprop cache is untouched";
  // the same spec in both GEMMs: dgrad reads the fprop cache itself (its bytes; a stale one is refused)
  w.recipe = parse_linear_recipe("mxfp4,dgrad=mxfp4", {});
  const QuantizedTensor shared = be->download(weight_for_dgrad(*be, w, 1, 2, s1));
  EXPECT_TRUE(same(shared.data, f.data));
  EXPECT_TRUE(same(shared.scale_bytes, f.scale_bytes));
  w.cache.version = w.version + 1;
  EXPECT_THROW(weight_for_dgrad(*be, w, 1, 2, s1), MechanicsError);
}

// Statistics follow the GEMM that quantizes each operand: fc1 with only dgrad in MXFP4 records W
// (dgrad's W) and dy, and x is NaN; fc2 with only wgrad in MXFP4 quantizes no W and has no
// quant/ series. De-oscillation eligibility follows fprop.
TEST(SimPerGemm, StatisticsFollowTheQuantizingGemm) {
  auto be = emu::make_emu_backend();
  TrainOptions o;
  o.evaluate = false;
  o.trace_path = tmp("stats.h5");
  const TrainResult r = train(tiny({"recipe.fc1=\"bf16\"", "recipe.fc1_dgrad=\"mxfp4\"", "recipe.fc2=\"bf16\"",
                                    "recipe.fc2_wgrad=\"mxfp4\""}),
                              *be, o);
  trace::Reader rd(o.trace_path);
  auto one = [&](const std::string& op, const char* stat) {
    return rd.read_series<double>(trace::schema::quant("fc1", op, stat)).at(0);
  };
  EXPECT_TRUE(std::isnan(one("x", "sqnr_db")));
  EXPECT_TRUE(std::isfinite(one("dy", "sqnr_db")));
  EXPECT_TRUE(std::isfinite(one("w", "sqnr_db")));
  EXPECT_FALSE(rd.has(trace::schema::quant("fc2", "w", "sqnr_db")));
  EXPECT_EQ(rd.group_string_attribute("/layers/fc1", trace::schema::kLayerRecipeAttr).value_or(""), "bf16,dgrad=mxfp4");
  EXPECT_EQ(rd.group_string_attribute("/layers/fc2", trace::schema::kLayerRecipeAttr).value_or(""), "bf16,wgrad=mxfp4");
  int seen = 0;
  for (const LayerSummary& l : r.layers) {
    if (l.name == "fc1") {
      EXPECT_TRUE(l.quantized);
      ++seen;
    }
    if (l.name == "fc2") {
      EXPECT_FALSE(l.quantized);
      ++seen;
    }
  }
  EXPECT_EQ(seen, 2);
  std::filesystem::remove(o.trace_path);
  // FP4 only in fprop: dgrad runs in BF16, so dy has no statistics
  TrainOptions o2;
  o2.evaluate = false;
  o2.trace_path = tmp("stats2.h5");
  train(tiny({"recipe.fc1_dgrad=\"bf16\"", "recipe.fc1_wgrad=\"bf16\""}), *be, o2);
  trace::Reader rd2(o2.trace_path);
  EXPECT_TRUE(std::isnan(rd2.read_series<double>(trace::schema::quant("fc1", "dy", "sqnr_db")).at(0)));
  EXPECT_TRUE(std::isfinite(rd2.read_series<double>(trace::schema::quant("fc1", "x", "sqnr_db")).at(0)));
  std::filesystem::remove(o2.trace_path);
  EXPECT_TRUE(parse_linear_recipe("mxfp8,fprop=mxfp4", {}).deosc_eligible());
  EXPECT_FALSE(parse_linear_recipe("mxfp4,fprop=mxfp8", {}).deosc_eligible());
  EXPECT_TRUE(parse_linear_recipe("mxfp4,wgrad=bf16", {}).deosc_eligible());
}

// output_error (numerics.md §4.8) by hand: ref {1, 2, 3, 4, NaN}, test {1, 2.5, 3, 3.5, 0}:
// errors {0, 0.5, 0, -0.5} over the four finite pairs, sum e^2 = 0.5, sum r^2 = 30; the largest
// |e| = 0.5 first at index 1 (index 3 ties); the NaN pair is not compared.
TEST(SimShadow, OutputErrorByHand) {
  const float ref[] = {1, 2, 3, 4, NAN}, test[] = {1, 2.5f, 3, 3.5f, 0};
  const OutputError o = output_error(ref, test, 5);
  EXPECT_EQ(o.count, 5u);
  EXPECT_EQ(o.nonfinite, 1u);
  EXPECT_EQ(o.rel_l2, std::sqrt(0.5 / 30.0));
  EXPECT_EQ(o.sqnr_db, 10.0 * std::log10(30.0 / 0.5));
  EXPECT_EQ(o.max_abs_err, 0.5);
  EXPECT_EQ(o.max_index, 1);
  const OutputError same = output_error(ref, ref, 4);
  EXPECT_EQ(same.max_index, -1);
  EXPECT_TRUE(std::isinf(same.sqnr_db));
  EXPECT_EQ(same.rel_l2, 0.0);
  // the backend op delivers the same (the emulator through the default)
  auto be = emu::make_emu_backend();
  Tensor r = be->alloc(DType::f32, {5}), t = be->alloc(DType::f32, {5});
  be->upload<float>(r, ref);
  be->upload<float>(t, test);
  OutputError d;
  be->output_error_deferred(r, t, &d);
  be->resolve_deferred();
  EXPECT_EQ(d.max_index, 1);
  EXPECT_EQ(d.rel_l2, o.rel_l2);
}

// A tiny GEMM whose shadow error is known: x = 1.25 (then zeros) against W = 1 (then zeros),
// K = 32. MXFP4 fprop quantizes x to 1 (the tie goes to the even code) and keeps W: y = 1, while
// the BF16 GEMM gives 1.25. rel_l2 = 0.25 / 1.25 = 0.2, the error at index 0.
TEST(SimShadow, TinyGemmShadowErrorByHand) {
  auto be = emu::make_emu_backend();
  Tensor2f xh = xt::zeros<float>({size_t(1), size_t(32)});
  xh(0, 0) = 1.25f;
  Tensor3f wh = Tensor3f::from_shape({1, 32, 32});
  wh.fill(0.0f);
  wh(0, 0, 0) = 1.0f;
  const Tensor x = be->upload(xh), W = be->upload(wh);
  const OperandSpecs sp = operand_specs(make_recipe("mxfp4", {}));
  const std::vector<int64_t> ms = {1};
  Tensor y = be->alloc(DType::f32, {1, 32}), ref = be->alloc(DType::f32, {1, 32});
  be->grouped_fprop(be->quantize(x, sp.x_fprop, Axis::Cols), be->quantize(W, sp.w, Axis::Cols), ms, y,
                    {Format::FP32, false});
  be->grouped_fprop(x, W, ms, ref, {Format::FP32, false});
  OutputError o;
  be->output_error_deferred(ref, y, &o);
  be->resolve_deferred();
  EXPECT_EQ(be->download<float>(y)[0], 1.0f);
  EXPECT_EQ(be->download<float>(ref)[0], 1.25f);
  EXPECT_EQ(o.rel_l2, std::sqrt(0.0625 / 1.5625));
  EXPECT_EQ(o.max_abs_err, 0.25);
  EXPECT_EQ(o.max_index, 0);
}

// The shadow reads, never writes: the default run (shadows of fc1 and fc2) and the same run with
// trace.shadow_layers = [] agree in every common dataset bit for bit; the shadow datasets are the
// only additions: one group of five per quantized GEMM of the shadowed layers (fc1's wgrad in
// BF16 has none), [micro-batches] each, with errors inside the GEMM's output.
TEST(SimShadow, ReadsNeverWritesAndCoversTheQuantizedGemms) {
  auto be = emu::make_emu_backend();
  auto trace = [&](const std::string& name, std::vector<std::string> extra) {
    TrainOptions o;
    o.evaluate = false;
    o.trace_path = tmp(name);
    extra.push_back("run.max_steps=2");
    train(tiny(std::move(extra)), *be, o);
    return o.trace_path;
  };
  const std::string on = trace("shadow_on.h5", {"recipe.fc1_wgrad=\"bf16\""});
  const std::string off = trace("shadow_off.h5", {"recipe.fc1_wgrad=\"bf16\"", "trace.shadow_layers=[]"});
  const trace::CompareResult c = trace::compare(on, off);
  EXPECT_FALSE(c.first_difference.has_value());
  EXPECT_TRUE(c.mismatched.empty());
  EXPECT_TRUE(c.only_b.empty());
  EXPECT_EQ(c.only_a.size(), 5u * 5u);  // fc1 fprop, dgrad; fc2 fprop, dgrad, wgrad
  for (const std::string& n : c.only_a) EXPECT_NE(n.find("/shadow/"), std::string::npos) << n;
  trace::Reader rd(on);
  EXPECT_FALSE(rd.has(trace::schema::shadow("fc1", "wgrad", "rel_l2")));
  for (const char* l : {"fc1", "fc2"})
    for (const char* g : {"fprop", "dgrad"}) {
      const auto rel = rd.read_series<double>(trace::schema::shadow(l, g, "rel_l2"));
      const auto idx = rd.read_series<int64_t>(trace::schema::shadow(l, g, "max_index"));
      ASSERT_EQ(rel.size(), 4u) << l << g;  // 2 steps x 2 micro-batches
      for (size_t i = 0; i < rel.size(); ++i) {
        EXPECT_GT(rel[i], 0.0) << l << g;  // MXFP4 is not exact on these operands
        EXPECT_LT(rel[i], 1.0) << l << g;
        EXPECT_GE(idx[i], 0) << l << g;
      }
    }
  std::filesystem::remove(on);
  std::filesystem::remove(off);
}
