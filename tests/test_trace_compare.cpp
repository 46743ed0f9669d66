// trace::compare and `mxsim compare` on traces written here.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sys/wait.h>

#include "mxsim/trace/compare.hpp"
#include "mxsim/trace/writer.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace mxsim::trace;

namespace {
fs::path temp_dir() { return mxsim::test::make_temp_dir("cmp"); }

// Writes `steps` steps; if diff_step >= 0, /b/vec element 1 is perturbed by one ulp from that step on.
void write_run(const fs::path& f, int steps, int diff_step, const std::string& config, bool extra = false,
               bool keep_open_steps = false) {
  Writer w(f, config, make_provenance("emu", 3));
  w.declare_series("/a/loss", DType::f32, {});
  w.declare_series("/b/vec", DType::f32, {3});
  w.declare_snapshot("/snap/w", DType::u8, {2, 2}, {1, 3});
  if (extra) w.declare_series("/c/extra", DType::u64, {});
  w.start_swmr();
  for (int s = 0; s < steps; ++s) {
    w.append("/a/loss", 1.0f / float(s + 1));
    float v[3] = {float(s), float(s) + 0.5f, -float(s)};
    if (diff_step >= 0 && s >= diff_step) v[1] = std::nextafter(v[1], 100.0f);
    w.append("/b/vec", v);
    if (extra) w.append("/c/extra", uint64_t(s));
    if (s == 1 || s == 3) {
      const uint8_t snap[4] = {uint8_t(s), 1, 2, 3};
      w.write_snapshot("/snap/w", snap);
    }
    w.end_step();
  }
  (void)keep_open_steps;
}

int run_cli(const std::string& args, std::string* out) {
  const std::string cmd = std::string(MXSIM_BINARY_DIR) + "/cli/mxsim compare " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  char buf[512];
  while (p && std::fgets(buf, sizeof buf, p)) *out += buf;
  const int st = p ? pclose(p) : -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
}  // namespace

TEST(TraceCompare, IdenticalRuns) {
  auto d = temp_dir();
  write_run(d / "a.h5", 5, -1, "lr = 0.1\n");
  write_run(d / "b.h5", 5, -1, "lr = 0.1\n");
  auto r = compare(d / "a.h5", d / "b.h5");
  EXPECT_TRUE(r.identical());
  EXPECT_EQ(r.steps_compared, 5u);
  EXPECT_EQ(r.common.size(), 3u);
  ASSERT_EQ(r.finals.size(), 1u);
  EXPECT_EQ(r.finals[0].name, "/a/loss");
  EXPECT_EQ(*r.finals[0].a, double(1.0f / 5.0f));
  EXPECT_TRUE(r.config_diffs.empty());
  fs::remove_all(d);
}

TEST(TraceCompare, FirstDifferenceStepDatasetElement) {
  auto d = temp_dir();
  write_run(d / "a.h5", 6, -1, "lr = 0.1\n[model]\nexperts = 4\n");
  write_run(d / "b.h5", 6, 2, "lr = 0.2\n[model]\nexperts = 4\ntop_k = 2\n");
  auto r = compare(d / "a.h5", d / "b.h5");
  EXPECT_FALSE(r.identical());
  ASSERT_TRUE(r.first_difference);
  EXPECT_EQ(r.first_difference->step, 2);
  EXPECT_EQ(r.first_difference->dataset, "/b/vec");
  EXPECT_EQ(r.first_difference->element, 1u);
  ASSERT_EQ(r.config_diffs.size(), 2u);
  EXPECT_EQ(r.config_diffs[0].key, "lr");
  EXPECT_EQ(r.config_diffs[1].key, "model.top_k");
  EXPECT_EQ(r.config_diffs[1].a, "");
  EXPECT_EQ(r.config_diffs[1].b, "2");
  fs::remove_all(d);
}

TEST(TraceCompare, ShorterRunAndExtraSeries) {
  auto d = temp_dir();
  write_run(d / "a.h5", 6, -1, "");
  write_run(d / "b.h5", 4, -1, "", true);
  auto r = compare(d / "a.h5", d / "b.h5");
  EXPECT_EQ(r.steps_compared, 4u);
  EXPECT_FALSE(r.first_difference);  // common prefix is bit-identical
  EXPECT_EQ(r.only_b, (std::vector<std::string>{"/c/extra"}));
  EXPECT_FALSE(r.identical());
  fs::remove_all(d);
}

TEST(TraceCompare, ErrorsNameTheFile) {
  auto d = temp_dir();
  write_run(d / "a.h5", 2, -1, "");
  try {
    compare(d / "a.h5", d / "nope.h5");
    FAIL();
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("nope.h5: missing"), std::string::npos) << e.what();
  }
  {
    Writer w(d / "other.h5", "", make_provenance("emu", 1));
    w.declare_series("/zzz", DType::f32, {});
    w.start_swmr();
  }
  try {
    compare(d / "a.h5", d / "other.h5");
    FAIL();
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("no common series"), std::string::npos) << e.what();
  }
  fs::remove_all(d);
}

TEST(MxsimCompareCli, ExitCodesAndTable) {
  // tests/CMakeLists.txt makes this test depend on the mxsim target: a missing binary is a build defect.
  const std::string bin = std::string(MXSIM_BINARY_DIR) + "/cli/mxsim";
  ASSERT_TRUE(fs::exists(bin)) << bin << ": mxsim CLI not built";
  auto d = temp_dir();
  write_run(d / "a.h5", 5, -1, "lr = 0.1\n");
  write_run(d / "b.h5", 5, -1, "lr = 0.1\n");
  write_run(d / "c.h5", 5, 3, "lr = 0.1\n");
  std::string out;
  EXPECT_EQ(run_cli((d / "a.h5").string() + " " + (d / "b.h5").string(), &out), 0) << out;
  EXPECT_NE(out.find("bit-identical"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run_cli((d / "a.h5").string() + " " + (d / "c.h5").string(), &out), 1) << out;
  EXPECT_NE(out.find("first difference at step 3 in /b/vec (element 1)"), std::string::npos) << out;
  out.clear();
  // One exit-code scheme (docs/cli.md): a missing trace is a runtime/data error (1), not usage (2).
  EXPECT_EQ(run_cli((d / "a.h5").string() + " " + (d / "missing.h5").string(), &out), 1) << out;
  EXPECT_NE(out.find("missing.h5"), std::string::npos) << out;
  fs::remove_all(d);
}

// --- rows paired by global step (/train/step): a resumed run against the uninterrupted one ---
namespace {
// A trace of global steps first .. first + count - 1 (/train/step holds them, or `steps` when
// given). /x f64 [2] = {g, g + 0.5}; from global step `diff_from` on (>= 0), element 1 is one
// ulp higher. /snap/w f64 [2] at the global steps of `snap_globals` this trace covers (rows
// g - first, as the recorder stores them; not declared when none) = {g, 10 where differing}.
void write_global(const fs::path& f, int64_t first, int count, int64_t diff_from, std::vector<int64_t> snap_globals,
                  std::vector<int64_t> steps = {}) {
  Writer w(f, "lr = 0.1\n", make_provenance("emu", 3));
  w.declare_series("/train/step", DType::i64, {});
  w.declare_series("/x", DType::f64, {2});
  std::vector<int64_t> rows;
  for (int64_t g : snap_globals)
    if (g >= first && g < first + count) rows.push_back(g - first);
  if (!rows.empty()) w.declare_snapshot("/snap/w", DType::f64, {2}, rows);
  w.start_swmr();
  for (int r = 0; r < count; ++r) {
    const int64_t g = first + r;
    w.append("/train/step", steps.empty() ? g : steps[size_t(r)]);
    const bool differs = diff_from >= 0 && g >= diff_from;
    double x[2] = {double(g), double(g) + 0.5};
    if (differs) x[1] = std::nextafter(x[1], 1e9);
    w.append("/x", x);
    if (std::find(rows.begin(), rows.end(), int64_t(r)) != rows.end()) {
      const double sn[2] = {double(g), differs ? 10.0 : 0.0};
      w.write_snapshot("/snap/w", sn);
    }
    w.end_step();
  }
}
}  // namespace

TEST(TraceCompareGlobalStep, ResumedTraceComparedOverCommonGlobalSteps) {
  auto d = temp_dir();
  write_global(d / "full.h5", 1, 6, -1, {2, 5});
  write_global(d / "rest.h5", 4, 3, -1, {2, 5});  // resumed after step 3: snapshot of step 5 at row 1
  auto r = compare(d / "full.h5", d / "rest.h5");
  EXPECT_TRUE(r.alignment.by_global_step);
  EXPECT_EQ(r.alignment.first_step_a, 1);
  EXPECT_EQ(r.alignment.first_step_b, 4);
  EXPECT_EQ(r.alignment.row_a, 3u);
  EXPECT_EQ(r.alignment.row_b, 0u);
  EXPECT_TRUE(r.alignment.note.empty());
  EXPECT_EQ(r.steps_compared, 3u);
  EXPECT_EQ(r.step_of(0), 4);
  EXPECT_EQ(r.common, (std::vector<std::string>{"/snap/w", "/train/step", "/x"}));  // snapshot lists {1, 4} vs {1}
  EXPECT_TRUE(r.mismatched.empty());
  EXPECT_FALSE(r.first_difference);
  EXPECT_TRUE(r.identical());  // same last global step
  // The other order pairs the same rows.
  auto q = compare(d / "rest.h5", d / "full.h5");
  EXPECT_EQ(q.alignment.row_a, 0u);
  EXPECT_EQ(q.alignment.row_b, 3u);
  EXPECT_TRUE(q.identical());
  // A run that goes on past the other's end is compared over the common steps but differs.
  write_global(d / "longer.h5", 4, 5, -1, {2, 5});
  auto l = compare(d / "full.h5", d / "longer.h5");
  EXPECT_EQ(l.steps_compared, 3u);
  EXPECT_FALSE(l.first_difference);
  EXPECT_FALSE(l.identical());
  // No common step: nothing compared, different.
  write_global(d / "first.h5", 1, 3, -1, {2, 5});
  auto e = compare(d / "first.h5", d / "rest.h5");
  EXPECT_TRUE(e.alignment.by_global_step);
  EXPECT_EQ(e.steps_compared, 0u);
  EXPECT_FALSE(e.identical());
  fs::remove_all(d);
}

TEST(TraceCompareGlobalStep, FirstDifferenceNamesTheGlobalStep) {
  auto d = temp_dir();
  write_global(d / "full.h5", 1, 6, -1, {2, 5});
  write_global(d / "rest.h5", 4, 3, 5, {2, 5});  // differs from global step 5 (row 1) on
  auto r = compare(d / "full.h5", d / "rest.h5");
  EXPECT_FALSE(r.identical());
  ASSERT_TRUE(r.first_difference);
  EXPECT_EQ(r.first_difference->step, 5);
  EXPECT_EQ(r.first_difference->dataset, "/snap/w");  // ties with /x at step 5: first name
  EXPECT_EQ(r.first_difference->element, 1u);
  EXPECT_EQ(r.first_difference->row_a, 4u);
  EXPECT_EQ(r.first_difference->row_b, 1u);
  ASSERT_EQ(r.per_dataset.size(), 3u);
  EXPECT_EQ(r.per_dataset[0].dataset, "/snap/w");
  EXPECT_EQ(r.per_dataset[0].first_step, 5);
  EXPECT_EQ(r.per_dataset[0].steps_differing, 1u);
  EXPECT_EQ(r.per_dataset[0].max_abs_diff, 10.0);
  EXPECT_EQ(r.per_dataset[1].first_step, -1);  // /train/step
  EXPECT_EQ(r.per_dataset[2].dataset, "/x");
  EXPECT_EQ(r.per_dataset[2].first_step, 5);
  EXPECT_EQ(r.per_dataset[2].steps_differing, 2u);
  ASSERT_EQ(r.per_step.size(), 2u);
  EXPECT_EQ(r.per_step[0].step, 5);
  EXPECT_EQ(r.per_step[0].dataset, "/snap/w");
  EXPECT_EQ(r.per_step[1].step, 6);
  EXPECT_EQ(r.per_step[1].dataset, "/x");
  // B against A: the same global step, the rows swapped.
  auto q = compare(d / "rest.h5", d / "full.h5");
  ASSERT_TRUE(q.first_difference);
  EXPECT_EQ(q.first_difference->step, 5);
  EXPECT_EQ(q.first_difference->row_a, 1u);
  EXPECT_EQ(q.first_difference->row_b, 4u);
  std::string out;
  EXPECT_EQ(run_cli((d / "full.h5").string() + " " + (d / "rest.h5").string(), &out), 1) << out;
  EXPECT_NE(out.find("compared 3 common datasets over global steps 4-6 (A rows 3-5, B rows 0-2): first difference at "
                     "step 5 in /snap/w (element 1) (A row 4, B row 1)"),
            std::string::npos)
      << out;
  fs::remove_all(d);
}

TEST(TraceCompareGlobalStep, SnapshotsOutsideTheCommonStepsAndDifferentSnapshotSteps) {
  auto d = temp_dir();
  write_global(d / "full.h5", 1, 6, -1, {2});
  write_global(d / "rest.h5", 4, 3, -1, {2});  // no snapshot in 4..6: /snap/w not declared
  auto r = compare(d / "full.h5", d / "rest.h5");
  EXPECT_TRUE(r.only_a.empty());
  EXPECT_EQ(r.only_a_outside, (std::vector<std::string>{"/snap/w"}));
  EXPECT_TRUE(r.identical());
  std::string out;
  EXPECT_EQ(run_cli((d / "full.h5").string() + " " + (d / "rest.h5").string(), &out), 0) << out;
  EXPECT_NE(out.find("only in A, no snapshot in the compared steps: /snap/w"), std::string::npos) << out;
  EXPECT_NE(out.find("over global steps 4-6 (A rows 3-5, B rows 0-2): bit-identical"), std::string::npos) << out;
  // Snapshots at different steps inside the compared steps: mismatched.
  write_global(d / "full5.h5", 1, 6, -1, {2, 5});
  write_global(d / "rest6.h5", 4, 3, -1, {6});
  auto m = compare(d / "full5.h5", d / "rest6.h5");
  EXPECT_EQ(m.mismatched, (std::vector<std::string>{"/snap/w"}));
  EXPECT_FALSE(m.identical());
  fs::remove_all(d);
}

TEST(TraceCompareGlobalStep, BothFromStepOnePairByIndexAsBefore) {
  auto d = temp_dir();
  write_global(d / "a.h5", 1, 6, -1, {2, 5});
  write_global(d / "b.h5", 1, 6, 4, {2, 5});
  auto r = compare(d / "a.h5", d / "b.h5");
  EXPECT_TRUE(r.alignment.by_global_step);
  EXPECT_EQ(r.alignment.row_a, 0u);
  EXPECT_EQ(r.alignment.row_b, 0u);
  EXPECT_EQ(r.steps_compared, 6u);
  ASSERT_TRUE(r.first_difference);
  EXPECT_EQ(r.first_difference->step, 4);  // global step 4 = row 3
  EXPECT_EQ(r.first_difference->row_a, 3u);
  EXPECT_EQ(r.first_difference->dataset, "/x");
  std::string out;
  EXPECT_EQ(run_cli((d / "a.h5").string() + " " + (d / "b.h5").string(), &out), 1) << out;
  EXPECT_NE(out.find("compared 3 common datasets over 6 steps: first difference at step 4 in /x (element 1)\n"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("note:"), std::string::npos) << out;
  // A shorter run from step 1 (the first part of a split run): compared over its steps, different.
  write_global(d / "first.h5", 1, 3, -1, {2, 5});
  auto f = compare(d / "a.h5", d / "first.h5");
  EXPECT_EQ(f.steps_compared, 3u);
  EXPECT_EQ(f.common.size(), 3u);  // snapshot rows {1, 4} vs {1}: the same within steps 1..3
  EXPECT_FALSE(f.first_difference);
  EXPECT_FALSE(f.identical());
  fs::remove_all(d);
}

TEST(TraceCompareGlobalStep, NonConsecutiveStepsFallBackToIndexPairing) {
  auto d = temp_dir();
  write_global(d / "a.h5", 1, 6, -1, {});
  write_global(d / "b.h5", 4, 3, -1, {}, {4, 5, 7});
  auto r = compare(d / "a.h5", d / "b.h5");
  EXPECT_FALSE(r.alignment.by_global_step);
  EXPECT_EQ(r.alignment.first_step_a, 1);
  EXPECT_EQ(r.alignment.first_step_b, -1);
  EXPECT_NE(r.alignment.note.find("/train/step is not consecutive (row 2 holds 7 after 5) in B"), std::string::npos)
      << r.alignment.note;
  EXPECT_EQ(r.steps_compared, 3u);
  ASSERT_TRUE(r.first_difference);  // row 0 (step 1) against row 0 (step 4)
  EXPECT_EQ(r.first_difference->step, 0);
  std::string out;
  EXPECT_EQ(run_cli((d / "a.h5").string() + " " + (d / "b.h5").string(), &out), 1) << out;
  EXPECT_NE(out.find("note: /train/step is not consecutive"), std::string::npos) << out;
  EXPECT_NE(out.find("rows paired by index, steps are trace rows (0-based)"), std::string::npos) << out;
  fs::remove_all(d);
}
