// trace::compare and `mxsim compare` on traces written here.
#include <gtest/gtest.h>

#include <unistd.h>

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
