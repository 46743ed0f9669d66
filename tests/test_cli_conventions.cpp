// The conventions every `mxsim` command follows (docs/cli.md): --version, one
// --help format, exit codes 0 / 1 / 2 per command, invalid values named with
// their allowed range, stray arguments refused, and no raw library exception
// text (a non-UTF-8 file name included).
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli_test_util.hpp"
#include "mxsim/build_info.hpp"

using mxsim::test::CliSandbox;
using mxsim::test::npy_bytes;

namespace {
// The commands of this CLI whose --help follows the common format.
const char* kCommands[] = {"cast", "compare", "dequantize", "gemm", "info", "launch", "quantize", "report", "train", "verify"};

std::string row32() {
  std::vector<float> v(32);
  for (int i = 0; i < 32; ++i) v[size_t(i)] = float(i) / 8;
  return std::string(reinterpret_cast<const char*>(v.data()), 128);
}
}  // namespace

TEST(CliConventions, VersionNamesTheBuildCommit) {
  CliSandbox s;
  const auto r = s.mxsim("--version");
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out, std::string("mxsim ") + mxsim::version() + " (commit " + mxsim::build_commit() + ")\n");
  EXPECT_EQ(s.mxsim("--version extra").rc, 2);
  const auto h = s.mxsim("--help");
  EXPECT_EQ(h.rc, 0);
  for (const char* c : kCommands) EXPECT_NE(h.out.find(std::string("  ") + c + " "), std::string::npos) << c;
  EXPECT_NE(h.out.find("exit status: 0 success, 1 runtime or data error, 2 usage error"), std::string::npos);
  EXPECT_EQ(s.mxsim("").rc, 2);
  const auto u = s.mxsim("frobnicate");
  EXPECT_EQ(u.rc, 2);
  EXPECT_NE(u.err.find("unknown command 'frobnicate'"), std::string::npos) << u.err;
}

TEST(CliConventions, EveryCommandHelpHasOneFormat) {
  CliSandbox s;
  for (const char* c : kCommands) {
    const auto r = s.mxsim(std::string(c) + " --help");
    EXPECT_EQ(r.rc, 0) << c;
    EXPECT_EQ(r.out.rfind(std::string("usage: mxsim ") + c, 0), 0u) << c << ":\n" << r.out;
    EXPECT_NE(r.out.find("exit status: "), std::string::npos) << c << ":\n" << r.out;
    EXPECT_NE(r.out.find("-h [ --help ]"), std::string::npos) << c << ":\n" << r.out;
    EXPECT_TRUE(r.err.empty()) << c << ": " << r.err;
  }
}

TEST(CliConventions, UnknownOptionsAndStrayArgumentsAreUsageErrors) {
  CliSandbox s;
  for (const char* c : kCommands) {
    const auto r = s.mxsim(std::string(c) + " --no-such-option");
    EXPECT_EQ(r.rc, 2) << c << ": " << r.err;
    EXPECT_NE(r.err.find(std::string("mxsim ") + c + ": usage error"), std::string::npos) << c << ": " << r.err;
  }
  for (const char* c : {"gemm stray", "info stray"}) {
    const auto r = s.mxsim(c);
    EXPECT_EQ(r.rc, 2) << c;
    EXPECT_NE(r.err.find("unexpected argument 'stray'"), std::string::npos) << c << ": " << r.err;
  }
}

TEST(CliConventions, InvalidValuesNameTheOptionAndTheRange) {
  CliSandbox s;
  const std::pair<const char*, const char*> cases[] = {
      {"gemm --m -5", "--m: -5 is out of range (allowed: 1 to 16384)"},
      {"gemm --m -1", "--m: -1 is out of range (allowed: 1 to 16384)"},
      {"gemm --m 0", "--m: 0 is out of range"},
      {"gemm --k 100000000000000", "--k: 100000000000000 is out of range (allowed: 1 to 1048576)"},
      {"gemm --k 99999999999999999999999", "--k: 99999999999999999999999 is out of range"},
      {"gemm --spread -5", "--spread: -5 is out of range (allowed: 0 to 120)"},
      {"gemm --n 12abc", "--n: '12abc' is not an integer"},
      {"gemm --seed 4294967296", "--seed: 4294967296 is out of range (allowed: 0 to 4294967295)"},
      {"gemm --m 16384 --k 16384", "exceeds the limit of 2^26"},
      {"gemm --recipe-a mxfp9", "unknown recipe 'mxfp9'"},
      {"gemm --model tpu", "unknown matrix-unit model 'tpu'"},
      {"cast --to e9m9 1", "--to: unknown format 'e9m9'"},
      {"cast --to e4m3 --overflow wrap 1", "--overflow must be saturate or ieee"},
      {"cast --to e4m3 --round sr 1", "--round sr needs --rand"},
      {"cast --to e4m3 --round sr --rand -1 1", "--rand: -1 is out of range"},
      {"cast --to e4m3 abc", "'abc' is not a number"},
      {"dequantize --block-size 0 x.npy", "--block-size: 0 is out of range (allowed: 1 to 65536)"},
      {"dequantize --dtype fp8 x.npy", "--dtype must be fp32 or bf16"},
      {"quantize --recipe mxfp4 --seed 18446744073709551616 --round sr x.npy", "--seed: 18446744073709551616 is out of range"},
      {"quantize --recipe nvfp4 --hadamard-signs 5 x.npy", "--hadamard-signs needs --hadamard"},
      {"quantize --recipe nvfp4 --hadamard --hadamard-signs 65536 x.npy", "--hadamard-signs: 65536 is out of range"},
  };
  for (const auto& [args, want] : cases) {
    const auto r = s.mxsim(args);
    EXPECT_EQ(r.rc, 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(r.err.find("std::"), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(r.err.find("bad_"), std::string::npos) << args << ": " << r.err;
  }
}

TEST(CliConventions, RuntimeAndDataErrorsExitOne) {
  CliSandbox s;
  s.put("x.npy", npy_bytes("<f4", "(1, 32)", row32()));
  const std::pair<const char*, const char*> cases[] = {
      {"quantize --recipe mxfp4 missing.npy", "missing.npy: cannot open"},
      {"dequantize x.npy", "no codes + scales pair found"},
      {"compare missing_a.h5 missing_b.h5", "missing_a.h5"},
      {"gemm --recipe-a nvfp4 --recipe-b mxfp4 --m 2 --n 2 --k 32", "mxsim gemm: error:"},
  };
  for (const auto& [args, want] : cases) {
    const auto r = s.mxsim(args);
    EXPECT_EQ(r.rc, 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << args << ": " << r.err;
  }
  // Success is 0 for each command.
  for (const char* ok : {"info", "gemm --m 4 --n 4 --k 32", "cast --to e2m1 1", "quantize --recipe mxfp4 x.npy"})
    EXPECT_EQ(s.mxsim(ok).rc, 0) << ok;
}

TEST(CliConventions, JsonOutputsParseBack) {
  CliSandbox s;
  s.put("x.npy", npy_bytes("<f4", "(1, 32)", row32()));
  const auto info = nlohmann::json::parse(s.mxsim("info --json").out);
  EXPECT_EQ(info["version"], mxsim::version());
  EXPECT_EQ(info["commit"], mxsim::build_commit());
  EXPECT_EQ(info["formats"].size(), 11u);
  EXPECT_EQ(info["formats"][9]["name"], "e2m1");
  EXPECT_EQ(info["formats"][9]["max"], 6.0);
  EXPECT_EQ(info["recipes"][0]["block_cols"], 32);
  const auto g = nlohmann::json::parse(s.mxsim("gemm --m 4 --n 4 --k 64 --model contract --json").out);
  EXPECT_EQ(g["outputs"], 16);
  EXPECT_EQ(g["max_ulp"], 0);  // the contract against itself
  ASSERT_EQ(g["buckets"].size(), 1u);
  EXPECT_EQ(g["buckets"][0]["count"], 16);
  const auto q = nlohmann::json::parse(s.mxsim("quantize --recipe mxfp8 x.npy --json").out);
  EXPECT_EQ(q["tensors"][0]["shape"], nlohmann::json::array({1, 32}));
  EXPECT_EQ(q["tensors"][0]["elements"], 32);
  EXPECT_TRUE(q["outputs"].empty());
}

TEST(CliConventions, NonUtf8FileNameIsNoRawException) {
  CliSandbox s;
  const std::string name = "w\xff\xfe.npy";
  s.put(name, npy_bytes("<f4", "(1, 32)", row32()));
  std::filesystem::create_directory(s.p / "o");
  // /bin/sh (dash) has no $'...': printf writes the two bytes.
  const auto r = s.mxsim("quantize --recipe mxfp4 --json \"$(printf 'w\\377\\376.npy')\" -o o");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);  // valid UTF-8: the bad bytes became U+FFFD
  EXPECT_EQ(j["inputs"][0], "w\xEF\xBF\xBD\xEF\xBF\xBD.npy");
  EXPECT_TRUE(std::filesystem::exists(s.p / "o" / ("w\xff\xfe" + std::string(".meta.json"))));
}

TEST(CliConventions, TrainJsonSummaryParsesBack) {
  // One step on a few samples: the summary is JSON on stdout, progress on stderr.
  CliSandbox s;
  const auto r = s.mxsim("train --set run.max_steps=1 --set run.train_limit=256 --set run.test_limit=64 --threads 2 --force-threads --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["command"], "train");
  EXPECT_EQ(j["steps"], 1);
  EXPECT_TRUE(j["final_loss"].is_number());
  EXPECT_TRUE(j["trace"].is_null());
  ASSERT_FALSE(j["layers"].empty());
  // embed (bf16): the weight statistics do not apply, null; fc1 (mxfp4): numbers
  ASSERT_EQ(j["layers"].size(), 5u);
  EXPECT_EQ(j["layers"][0]["name"], "embed");
  EXPECT_EQ(j["layers"][2]["name"], "fc1");
  for (const char* k : {"w_mse", "w_sqnr_db", "osc_flips", "snaps"}) {
    EXPECT_TRUE(j["layers"][0][k].is_null()) << k << ": " << r.out;
    EXPECT_TRUE(j["layers"][2][k].is_number()) << k << ": " << r.out;  // snaps: fc1 is de-oscillated
  }
  EXPECT_TRUE(j["layers"][2]["osc_flips"].is_number_unsigned());
  EXPECT_GT(j["layers"][2]["w_mse"].get<double>(), 0.0);
  EXPECT_TRUE(j["interrupted"].is_null()) << r.out;
  EXPECT_TRUE(j["test_accuracy"].is_number()) << r.out;  // the run's last step evaluates
  EXPECT_NE(r.err.find("mxsim train: backend"), std::string::npos) << r.err;
  // Stopped before an epoch end (4 steps per epoch): no evaluation ran, so test_accuracy is null (not -1).
  const auto st = s.mxsim("train --set run.max_steps=3 --stop-after 1 --set run.train_limit=1024 --set run.test_limit=64 "
                          "--threads 2 --force-threads --json");
  ASSERT_EQ(st.rc, 0) << st.err;
  const auto js = nlohmann::json::parse(st.out);
  EXPECT_EQ(js["steps"], 1);
  EXPECT_TRUE(js["test_accuracy"].is_null()) << st.out;
}

TEST(CliConventions, MissingDataDirectoryNamesTheRealOption) {
  CliSandbox s;
  const auto r = s.mxsim("train --set run.data_dir=/nonexistent/fmnist --set run.max_steps=1");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/fmnist/train-images-idx3-ubyte.gz: missing"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--set run.data_dir=DIR"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("--data DIR"), std::string::npos) << r.err;
}
