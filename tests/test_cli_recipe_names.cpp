// One vocabulary across `quantize`, `gemm`, `train` and `info`: the spec names of one tensor and
// the per-linear training recipes, each accepting the other's word for the same scheme
// (fp8_current <-> fp8_tensor), a "did you mean" for near misses, a name of the other
// vocabulary told as such, and `info --json` listing both kinds.
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.hpp"
#include "mxsim/names.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/sim/recipe.hpp"

using mxsim::test::CliSandbox;

namespace {

bool has(const std::string& s, const std::string& w) { return s.find(w) != std::string::npos; }

std::string f32_bytes(const std::vector<float>& v) {
  std::string b(v.size() * 4, '\0');
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace

TEST(Names, ClosestNameIsANearMissOnly) {
  const std::vector<std::string> known = {"mxfp4", "mxfp8", "fp8_block", "fp8_current"};
  EXPECT_EQ(mxsim::closest_name("mxfp44", known), "mxfp4");      // one insertion
  EXPECT_EQ(mxsim::closest_name("MXFP8", known), "mxfp8");       // case only
  EXPECT_EQ(mxsim::closest_name("fp8_blok", known), "fp8_block");
  EXPECT_EQ(mxsim::closest_name("fp8_curent", known), "fp8_current");
  EXPECT_EQ(mxsim::closest_name("fp8_cur", known), "");          // 4 edits: not a slip
  EXPECT_EQ(mxsim::closest_name("fp4", known), "");              // 2 edits of 3 letters: too short to tell
  EXPECT_EQ(mxsim::closest_name("", known), "");
  EXPECT_EQ(mxsim::closest_name("mxfp6", known), "mxfp4");       // equally close: the first
  EXPECT_EQ(mxsim::did_you_mean("mxfp44", known), " (did you mean 'mxfp4'?)");
  EXPECT_EQ(mxsim::did_you_mean("zzz", known), "");
}

// The aliases resolve both ways to the other vocabulary's scheme: spec fp8_current is spec
// fp8_tensor (E4M3, per tensor, FP32 scale), training recipe fp8_tensor is fp8_current.
TEST(Names, AliasesStandForTheOtherVocabularysName) {
  EXPECT_EQ(mxsim::canonical_spec_name("fp8_current"), "fp8_tensor");
  EXPECT_EQ(mxsim::canonical_spec_name("fp8_tensor"), "fp8_tensor");
  EXPECT_EQ(mxsim::canonical_spec_name("fp8_delayed"), "");
  EXPECT_EQ(mxsim::named_spec("fp8_current"), mxsim::named_spec("fp8_tensor"));
  EXPECT_EQ(mxsim::sim::canonical_recipe_name("fp8_tensor"), "fp8_current");
  EXPECT_EQ(mxsim::sim::canonical_recipe_name("mxfp4"), "mxfp4");
  EXPECT_EQ(mxsim::sim::canonical_recipe_name("nvfp4"), "nvfp4");  // a spec and a recipe of one name
  EXPECT_EQ(mxsim::sim::canonical_recipe_name("nvfp4_2d"), "");
  EXPECT_EQ(std::string(mxsim::sim::recipe_name(mxsim::sim::make_recipe("fp8_tensor", {}))), "fp8_current");
}

TEST(CliRecipeNames, QuantizeAndGemmTakeTheTrainingWordAndHintNearMisses) {
  CliSandbox s;
  std::vector<float> v(64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.37f - 9.0f;
  mxsim::test::write_bytes(s.p / "x.npy", mxsim::test::npy_bytes("<f4", "(2, 32)", f32_bytes(v)));
  const auto a = s.mxsim("quantize --recipe fp8_current x.npy --json");
  const auto b = s.mxsim("quantize --recipe fp8_tensor x.npy --json");
  ASSERT_EQ(a.rc, 0) << a.err;
  ASSERT_EQ(b.rc, 0) << b.err;
  EXPECT_EQ(a.out, b.out);  // the same statistics, labelled with the spec's own name
  EXPECT_EQ(nlohmann::json::parse(a.out)["recipe"], "fp8_tensor");
  EXPECT_EQ(s.mxsim("gemm --recipe-a fp8_current --recipe-b fp8_current --m 4 --n 4 --k 64 --json").rc, 0);
  struct Case {
    const char* args;
    std::vector<std::string> want;
  };
  const Case cases[] = {
      {"quantize --recipe mxfp44 x.npy", {"usage error: --recipe: unknown recipe 'mxfp44' (did you mean 'mxfp4'?)",
                                          "known: mxfp4, ", "fp8_current = fp8_tensor"}},
      {"quantize --recipe fp8_curent x.npy", {"(did you mean 'fp8_current'?)"}},
      {"quantize --recipe fp8_delayed x.npy", {"--recipe fp8_delayed: that is a per-linear training recipe",
                                               "recipe.<layer>=fp8_delayed", "specs: mxfp4, "}},
      {"quantize --recipe bf16 x.npy", {"--recipe bf16: that is a per-linear training recipe"}},
      {"gemm --recipe-a mxfp8_e5m3", {"usage error: --recipe-a: unknown recipe 'mxfp8_e5m3' (did you mean 'mxfp8_e5m2'?)"}},
      {"gemm --recipe-b fp8_delayed", {"--recipe-b fp8_delayed: that is a per-linear training recipe"}},
  };
  for (const Case& c : cases) {
    const auto r = s.mxsim(c.args);
    EXPECT_EQ(r.rc, 2) << c.args << ": " << r.err;
    for (const auto& w : c.want) EXPECT_TRUE(has(r.err, w)) << c.args << ": wants '" << w << "'\n" << r.err;
    EXPECT_TRUE(r.out.empty()) << c.args << ": " << r.out;
  }
}

TEST(CliRecipeNames, TrainTakesTheSpecWordAndHintsNearMisses) {
  CliSandbox s;
  const auto p = s.mxsim("train --set recipe.fc1=fp8_tensor --print-config");
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_TRUE(has(p.out, "\nfc1 = \"fp8_current\"\n")) << p.out;  // recorded under the recipe's own name
  struct Case {
    const char* args;
    std::vector<std::string> want;
  };
  const Case cases[] = {
      {"train --set recipe.fc1=mxfp44 --print-config",
       {"key 'recipe.fc1': expected one of bf16, mxfp4, mxfp8, fp8_current, fp8_delayed, fp8_block, nvfp4; alias "
        "fp8_tensor = "
        "fp8_current, got 'mxfp44' (did you mean 'mxfp4'?)"}},
      {"train --set recipe.head=fp8_delay --print-config", {"(did you mean 'fp8_delayed'?)"}},
      {"train --set recipe.fc2=nvfp4_2d --print-config",
       {"got 'nvfp4_2d': that is a spec of one tensor (mxsim quantize --recipe), not a per-linear training recipe"}},
  };
  for (const Case& c : cases) {
    const auto r = s.mxsim(c.args);
    EXPECT_EQ(r.rc, 2) << c.args << ": " << r.err;
    for (const auto& w : c.want) EXPECT_TRUE(has(r.err, w)) << c.args << ": wants '" << w << "'\n" << r.err;
  }
}

// info --json lists the training recipes too, with their aliases and the spec of every operand
// (values from sim/recipe.hpp's recipe definitions: docs/simulator.md "Recipes per linear").
TEST(CliRecipeNames, InfoJsonListsBothKinds) {
  CliSandbox s;
  const auto r = s.mxsim("info --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  std::vector<std::string> names;
  for (const auto& t : j["training_recipes"]) names.push_back(t["name"]);
  EXPECT_EQ(names,
            (std::vector<std::string>{"bf16", "mxfp4", "mxfp8", "fp8_current", "fp8_delayed", "fp8_block", "nvfp4"}));
  const auto& tr = j["training_recipes"];
  EXPECT_TRUE(tr[0]["specs"].is_null());
  EXPECT_FALSE(tr[0]["quantized"].get<bool>());
  EXPECT_EQ(tr[1]["specs"]["w"], "e2m1 32x32 scale=e8m0/even round=rne");  // MXFP4 weights: 32x32 tiles
  EXPECT_EQ(tr[1]["specs"]["x_fprop"], "e2m1 1x32 scale=e8m0/even round=rne");
  EXPECT_TRUE(tr[1]["deosc_eligible"].get<bool>());
  EXPECT_FALSE(tr[2]["deosc_eligible"].get<bool>());
  EXPECT_EQ(tr[3]["aliases"], nlohmann::json::array({"fp8_tensor"}));
  EXPECT_TRUE(tr[3]["fused_wgrad_accum"].get<bool>());
  EXPECT_EQ(tr[1]["aliases"], nlohmann::json::array());
  for (const auto& sp : j["recipes"])
    EXPECT_EQ(sp["aliases"], sp["name"] == "fp8_tensor" ? nlohmann::json::array({"fp8_current"}) : nlohmann::json::array())
        << sp["name"];
  // the text lists the aliases too
  const auto t = s.mxsim("info");
  EXPECT_TRUE(has(t.out, "(also: fp8_current)")) << t.out;
  EXPECT_TRUE(has(t.out, "fp8_block nvfp4 (fp8_tensor = fp8_current)")) << t.out;
  // nvfp4's operands as docs/simulator.md lists them (the wgrad ones transformed with TE's signs)
  EXPECT_EQ(tr[6]["specs"]["w"], "e2m1 16x16 scale=ue4m3 round=rne");
  EXPECT_EQ(tr[6]["specs"]["x_wgrad"], "e2m1 1x16 scale=ue4m3 round=rne hadamard16/signs=0xd7e8");
  EXPECT_EQ(tr[6]["specs"]["dy_dgrad"], "e2m1 1x16 scale=ue4m3 round=sr");
}
