// `mxsim verify` (cli/cmd_verify.cpp): emu against a second emu passes with
// the table and the summary line; without a GPU backend the default (hip)
// says why in one line and exits 1; --json rows; usage errors exit 2.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_test_util.hpp"

using mxsim::test::CliSandbox;

TEST(CliVerify, EmuAgainstEmuPassesAndPrintsTheTable) {
  CliSandbox s;
  const auto r = s.mxsim("verify --backend emu --cases 2 --threads 1");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  for (const char* col : {"op", "shape", "recipe", "compared", "mismatches", "max ULP", "first mismatch"})
    EXPECT_NE(r.out.find(col), std::string::npos) << col;
  for (const char* op : {"\nmemory ", "\nquantize ", "\ngemm_quantized ", "\nsoftmax ", "\nosc_metrics "})
    EXPECT_NE(r.out.find(op), std::string::npos) << op;
  const size_t last = r.out.rfind("verify: ");
  ASSERT_NE(last, std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" cases, 0 mismatching elements\n", last), std::string::npos) << r.out.substr(last);
}

TEST(CliVerify, JsonHasOneObjectPerRow) {
  CliSandbox s;
  const auto r = s.mxsim("verify --backend emu --cases 1 --op softmax --seed 9 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["command"], "verify");
  EXPECT_EQ(j["candidate"], "emu");
  EXPECT_EQ(j["mismatching_elements"], 0);
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_EQ(j["rows"][0]["op"], "softmax");
  EXPECT_TRUE(j["rows"][0]["first_mismatch"].is_null());
  EXPECT_GT(j["rows"][0]["compared"].get<int>(), 0);
}

TEST(CliVerify, WithoutAGpuBackendTheDefaultExitsOneWithTheReason) {
#ifdef MXSIM_HAVE_GPU
  GTEST_SKIP() << "built with the GPU backend: the outcome depends on the machine";
#else
  CliSandbox s;
  const auto r = s.mxsim("verify");
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "mxsim verify: no hip backend: this mxsim was built without a GPU backend\n");
  EXPECT_TRUE(r.out.empty()) << r.out;
#endif
}

TEST(CliVerify, BadOptionsAreUsageErrors) {
  CliSandbox s;
  const std::pair<const char*, const char*> cases[] = {
      {"verify --backend cuda", "--backend: unknown backend 'cuda' (expected hip or emu)"},
      {"verify --op nope", "--op: unknown op 'nope' (known: memory, quantize,"},
      {"verify --cases 0", "--cases: 0 is out of range (allowed: 1 to 1000)"},
      {"verify stray", "unexpected argument 'stray'"}};
  for (const auto& [args, msg] : cases) {
    const auto r = s.mxsim(args);
    EXPECT_EQ(r.rc, 2) << args;
    EXPECT_NE(r.err.find(msg), std::string::npos) << args << ": " << r.err;
  }
}
