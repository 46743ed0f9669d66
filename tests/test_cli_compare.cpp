// `mxsim compare --json / --csv` on traces written here: the JSON schema parsed
// back, per-dataset first differences and the largest difference per step with
// values known from how the traces were written, and a text table that keeps
// long dataset names on one line.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_test_util.hpp"
#include "mxsim/trace/writer.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace mxsim::trace;

namespace {

const std::string kLong = "/layers/" + std::string(70, 'x') + "/grad_norm";

// /v [2] per step: {s, s + 0.5}; from `diff_step` on, element 1 is one ulp higher.
// kLong: a scalar s / 4. A snapshot /snap at steps 1 and 3, changed at 3 when diff_step >= 0.
void write_run(const fs::path& f, int steps, int diff_step) {
  Writer w(f, "lr = 0.1\n", make_provenance("emu", 3));
  w.declare_series("/v", DType::f32, {2});
  w.declare_series(kLong, DType::f32, {});
  w.declare_snapshot("/snap", DType::f64, {2}, {1, 3});
  w.start_swmr();
  for (int s = 0; s < steps; ++s) {
    float v[2] = {float(s), float(s) + 0.5f};
    if (diff_step >= 0 && s >= diff_step) v[1] = std::nextafter(v[1], 1e9f);
    w.append("/v", v);
    w.append(kLong, float(s) / 4);
    if (s == 1 || s == 3) {
      double sn[2] = {double(s), diff_step >= 0 && s == 3 ? 10.0 : 0.0};
      w.write_snapshot("/snap", sn);
    }
    w.end_step();
  }
}

int run(const std::string& args, std::string& out) {
  const std::string cmd = std::string("'") + MXSIM_BINARY_DIR + "/cli/mxsim' compare " + args + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  while (p && std::fgets(buf, sizeof buf, p)) out += buf;
  const int st = p ? pclose(p) : -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace

TEST(CliCompare, JsonReportsPerDatasetAndPerStepDifferences) {
  mxsim::test::TempDir d("cli_cmp");
  write_run(d.p / "a.h5", 6, -1);
  write_run(d.p / "b.h5", 6, 3);
  std::string out;
  ASSERT_EQ(run("--json '" + (d.p / "a.h5").string() + "' '" + (d.p / "b.h5").string() + "'", out), 1) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["command"], "compare");
  EXPECT_EQ(j["identical"], false);
  EXPECT_EQ(j["steps_compared"], 6);
  EXPECT_EQ(j["a"]["complete_steps"], 6);
  EXPECT_EQ(j["a"]["seed"], 3);
  // The first difference: step 3, where /snap (element 1: 0 vs 10) and /v (element 1: one ulp)
  // both differ; ties go to the first name in sorted order.
  EXPECT_EQ(j["first_difference"]["step"], 3);
  EXPECT_EQ(j["first_difference"]["dataset"], "/snap");
  EXPECT_EQ(j["first_difference"]["element"], 1);
  ASSERT_EQ(j["datasets"].size(), 3u);
  const auto& dl = j["datasets"][0];  // sorted by name: the long one first
  EXPECT_EQ(dl["dataset"], kLong);
  EXPECT_EQ(dl["identical"], true);
  EXPECT_TRUE(dl["first_step"].is_null());
  const auto& ds = j["datasets"][1];
  EXPECT_EQ(ds["dataset"], "/snap");
  EXPECT_EQ(ds["first_step"], 3);
  EXPECT_EQ(ds["steps_differing"], 1);
  EXPECT_EQ(ds["max_abs_diff"].get<double>(), 10.0);
  const auto& dv = j["datasets"][2];
  EXPECT_EQ(dv["dataset"], "/v");
  EXPECT_EQ(dv["first_step"], 3);
  EXPECT_EQ(dv["element"], 1);
  EXPECT_EQ(dv["steps_differing"], 3);
  EXPECT_EQ(dv["max_abs_diff"].get<double>(), std::ldexp(1.0, -21));  // one ulp of 4.5 and 5.5
  // Largest difference per step: step 3 is the snapshot's 10 (> ulp(3.5) = 2^-22), steps 4, 5 /v's ulp.
  ASSERT_EQ(j["steps"].size(), 3u);
  EXPECT_EQ(j["steps"][0]["step"], 3);
  EXPECT_EQ(j["steps"][0]["max_abs_diff"].get<double>(), 10.0);
  EXPECT_EQ(j["steps"][0]["dataset"], "/snap");
  for (int k : {1, 2}) {
    EXPECT_EQ(j["steps"][k]["step"], 3 + k);
    EXPECT_EQ(j["steps"][k]["max_abs_diff"].get<double>(), std::ldexp(1.0, -21));
    EXPECT_EQ(j["steps"][k]["dataset"], "/v");
  }
  EXPECT_TRUE(j["config_differences"].empty());
  EXPECT_TRUE(j["only_a"].empty());
  // These traces hold no /train/step: rows paired by index, steps are rows.
  EXPECT_EQ(j["compared"]["pairing"], "index");
  EXPECT_TRUE(j["compared"]["first_step"].is_null());
  EXPECT_EQ(j["compared"]["a_rows"], nlohmann::json::array({0, 5}));
  EXPECT_NE(j["compared"]["note"].get<std::string>().find("no /train/step in A and B"), std::string::npos);
  EXPECT_TRUE(j["a"]["first_step"].is_null());

  // Identical traces: exit 0, identical true, no steps listed.
  out.clear();
  ASSERT_EQ(run("--json '" + (d.p / "a.h5").string() + "' '" + (d.p / "a.h5").string() + "'", out), 0) << out;
  const auto same = nlohmann::json::parse(out);
  EXPECT_EQ(same["identical"], true);
  EXPECT_TRUE(same["first_difference"].is_null());
  EXPECT_TRUE(same["steps"].empty());
}

TEST(CliCompare, CsvAndTextKeepLongNamesOnOneLine) {
  mxsim::test::TempDir d("cli_cmp");
  write_run(d.p / "a.h5", 6, -1);
  write_run(d.p / "b.h5", 6, 3);
  const std::string ab = "'" + (d.p / "a.h5").string() + "' '" + (d.p / "b.h5").string() + "'";
  std::string csv;
  ASSERT_EQ(run("--csv " + ab, csv), 1);
  std::istringstream in(csv);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u) << csv;
  EXPECT_EQ(lines[0], "dataset,first_step,element,steps_differing,max_abs_diff,compared_first_step,compared_last_step");
  // No /train/step: rows paired by index, no global step range.
  EXPECT_EQ(lines[1], kLong + ",-1,0,0,0,,");
  EXPECT_EQ(lines[2], "/snap,3,1,1,10,,");
  std::string text;
  ASSERT_EQ(run(ab, text), 1);
  bool found = false;
  std::istringstream t(text);
  while (std::getline(t, line))
    if (line.find(kLong) != std::string::npos && line.find("1.25") != std::string::npos) {
      found = line.find("1.25", line.find("1.25") + 4) != std::string::npos;  // A and B values on the name's line
    }
  EXPECT_TRUE(found) << text;
  EXPECT_NE(text.find("datasets that differ (2 of 3)"), std::string::npos) << text;
  EXPECT_NE(text.find("largest difference per step (3 steps differ)"), std::string::npos) << text;
}

TEST(CliCompare, UsageAndDataErrorsUseTheCommonExitCodes) {
  mxsim::test::TempDir d("cli_cmp");
  write_run(d.p / "a.h5", 2, -1);
  std::string out;
  EXPECT_EQ(run("'" + (d.p / "a.h5").string() + "'", out), 2);                       // one trace: usage
  EXPECT_EQ(run("--bogus a b", out), 2);                                              // unknown option
  EXPECT_EQ(run("--json --csv a b", out), 2);
  EXPECT_EQ(run("'" + (d.p / "a.h5").string() + "' '" + (d.p / "nope.h5").string() + "'", out), 1);  // data
  out.clear();
  EXPECT_EQ(run("--help", out), 0);
  EXPECT_NE(out.find("usage: mxsim compare"), std::string::npos) << out;
}

// Issue 34: a config of 200 KB (here an unparsable one, compared as one text value) was printed
// whole, every row of the table padded to its width: megabytes of output. Long values are
// abbreviated around where they first differ, with their length and that offset; --json keeps
// them whole.
TEST(CliCompare, LongConfigValuesAreAbbreviatedAroundTheirFirstDifference) {
  mxsim::test::TempDir d("cli_cmp");
  const std::string head = "not toml ";  // 9 bytes, then 200000 'a'; B has 'b' at byte 9 + 100000
  std::string ca = head + std::string(200000, 'a'), cb = ca;
  cb[9 + 100000] = 'b';
  for (const auto& [name, cfg] : {std::pair{"a.h5", ca}, std::pair{"b.h5", cb}}) {
    Writer w(d.p / name, cfg, make_provenance("emu", 3));
    w.declare_series("/v", DType::f32, {});
    w.start_swmr();
    const float v = 1;
    w.append("/v", &v);
    w.end_step();
  }
  const std::string ab = "'" + (d.p / "a.h5").string() + "' '" + (d.p / "b.h5").string() + "'";
  std::string text;
  EXPECT_EQ(run(ab, text), 0);  // the data are identical; the config differences are reported
  EXPECT_LT(text.size(), 4000u) << text.substr(0, 4000);
  EXPECT_NE(text.find("config differences: 1"), std::string::npos) << text;
  // 16 bytes before the difference and 48 from it, cut on both sides
  const std::string tail = " (200009 bytes, first difference at byte 100009)";
  EXPECT_NE(text.find("..." + std::string(64, 'a') + "..." + tail), std::string::npos) << text;
  EXPECT_NE(text.find("..." + std::string(16, 'a') + "b" + std::string(47, 'a') + "..." + tail), std::string::npos)
      << text;
  std::string json;
  EXPECT_EQ(run("--json " + ab, json), 0);
  const auto j = nlohmann::json::parse(json);
  EXPECT_EQ(j["config_differences"][0]["a"], ca);
  EXPECT_EQ(j["config_differences"][0]["b"], cb);
}

// A run split with --stop-after 3 and --resume against the uninterrupted 6-step run: rows are
// paired by global step (the resumed trace's row 0 is step 4), snapshots of step 5 (row 4 in
// one trace, row 1 in the other) included, and the resumed run continues it bit for bit.
TEST(CliCompare, ResumedRunAgainstUninterruptedRunByGlobalStep) {
  mxsim::test::CliSandbox s;
  const std::string cfg =
      "train --threads 2 --set run.train_limit=512 --set run.test_limit=256 --set run.max_steps=6 "
      "--set 'trace.snapshot_steps=[2,5]' ";
  auto t = s.mxsim(cfg + "--trace full.h5");
  ASSERT_EQ(t.rc, 0) << t.err;
  t = s.mxsim(cfg + "--stop-after 3 --checkpoint ck.h5 --trace first.h5");
  ASSERT_EQ(t.rc, 0) << t.err;
  t = s.mxsim(cfg + "--resume ck.h5 --trace rest.h5");
  ASSERT_EQ(t.rc, 0) << t.err;

  auto r = s.mxsim("compare full.h5 rest.h5");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("over global steps 4-6 (A rows 3-5, B rows 0-2): bit-identical\nresult: identical"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("global steps    1-6"), std::string::npos) << r.out;
  r = s.mxsim("compare --json rest.h5 full.h5");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["identical"], true);
  EXPECT_EQ(j["a"]["first_step"], 4);
  EXPECT_EQ(j["a"]["last_step"], 6);
  EXPECT_EQ(j["b"]["first_step"], 1);
  EXPECT_EQ(j["steps_compared"], 3);
  EXPECT_EQ(j["compared"]["pairing"], "global_step");
  EXPECT_EQ(j["compared"]["first_step"], 4);
  EXPECT_EQ(j["compared"]["last_step"], 6);
  EXPECT_EQ(j["compared"]["a_rows"], nlohmann::json::array({0, 2}));
  EXPECT_EQ(j["compared"]["b_rows"], nlohmann::json::array({3, 5}));
  EXPECT_TRUE(j["compared"]["note"].is_null());
  EXPECT_TRUE(j["mismatched"].empty());
  EXPECT_TRUE(j["only_a"].empty() && j["only_b"].empty());
  bool snap = false;
  for (const auto& d : j["datasets"]) snap = snap || d["dataset"] == "/snap/fc1/master";
  EXPECT_TRUE(snap) << "the snapshots of step 5 are compared";
  r = s.mxsim("compare --csv full.h5 rest.h5");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("\n/train/loss,-1,0,0,0,4,6\n"), std::string::npos) << r.out;
  // The first part (steps 1-3) against the whole run: both from step 1, index pairing as before;
  // the common steps are identical, the run lengths differ.
  r = s.mxsim("compare first.h5 full.h5");
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("over 3 steps: bit-identical\nresult: different"), std::string::npos) << r.out;
  // The two parts share no step.
  r = s.mxsim("compare first.h5 rest.h5");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("over no common global steps (A 1-3, B 4-6): nothing compared"), std::string::npos) << r.out;
}
