// `mxsim train` as a user runs it: help, a small run ending with the summary
// table, and bad input (unknown key, wrong type, impossible size, unknown
// option, unreadable config, global batch larger than the data) giving an
// error that names the key, a non-zero exit and no trace file.
#include <gtest/gtest.h>

#if MXSIM_HAVE_GPU
#include "mxsim/hip/device.hpp"
#endif
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct CliRun {
  int rc = -1;
  std::string out;  // stdout and stderr together
};

CliRun mxsim_train(const std::string& args) {
  const std::string cmd = std::string("'") + MXSIM_BINARY_DIR + "/cli/mxsim' train " + args + " 2>&1";
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[1024];
  while (p && std::fgets(buf, sizeof buf, p)) r.out += buf;
  const int st = p ? ::pclose(p) : -1;
  r.rc = (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string tmp(const std::string& n) {
  return (std::filesystem::temp_directory_path() / ("mxsim_cli_train_" + std::to_string(::getpid()) + "_" + n)).string();
}

const char* kSmall =
    "--threads 1 --set run.max_steps=3 --set run.train_limit=512 --set run.test_limit=200 --set model.d_model=32 "
    "--set model.d_ff=64 --set model.experts=4 --set batch.global_batch=128 ";

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

}  // namespace

TEST(CliTrain, HelpListsOptions) {
  const CliRun r = mxsim_train("--help");
  EXPECT_EQ(r.rc, 0) << r.out;
  for (const char* o : {"--config", "--set", "--backend", "--trace", "--resume", "--checkpoint", "--threads"})
    EXPECT_TRUE(has(r.out, o)) << o << "\n" << r.out;
}

TEST(CliTrain, SmallRunEndsWithSummaryTable) {
  const std::string trace = tmp("ok.h5");
  const CliRun r = mxsim_train(std::string(kSmall) + "--trace '" + trace + "'");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "summary: 3 steps")) << r.out;
  EXPECT_TRUE(has(r.out, "test accuracy")) << r.out;
  // the table: a header and one row per layer with its recipe; snaps '-' where not eligible
  const auto hdr = r.out.find("layer    recipe");
  ASSERT_NE(hdr, std::string::npos) << r.out;
  const std::string table = r.out.substr(hdr);
  for (const char* row : {"\nembed    bf16", "\nrouter   bf16", "\nfc1      mxfp4", "\nfc2      mxfp4", "\nhead     bf16"})
    EXPECT_TRUE(has(table, row)) << row << "\n" << r.out;
  // Row by row: a bf16 layer's weight is not quantized, so w_mse, w_sqnr_dB and osc_flips do not
  // apply ('-'); an mxfp4 layer has numbers there, and a snap count (de-oscillated; none yet).
  std::istringstream rows(table);
  std::string line;
  std::getline(rows, line);  // the header
  int seen = 0;
  while (std::getline(rows, line) && !line.empty() && line.rfind("trace:", 0) != 0) {
    std::istringstream f(line);
    std::vector<std::string> c;
    for (std::string w; f >> w;) c.push_back(w);
    ASSERT_EQ(c.size(), 6u) << line;
    ++seen;
    if (c[1] == "bf16") {
      EXPECT_EQ(std::vector<std::string>(c.begin() + 2, c.end()), std::vector<std::string>(4, "-")) << line;
    } else {
      EXPECT_EQ(c[1], "mxfp4") << line;
      EXPECT_GT(std::stod(c[2]), 0.0) << line;  // w_mse of a quantized weight
      EXPECT_GT(std::stod(c[3]), 0.0) << line;  // w_sqnr_dB
      EXPECT_EQ(c[4].find_first_not_of("0123456789"), std::string::npos) << line;  // osc_flips, a count
      EXPECT_EQ(c[5], "0") << line;  // deosc.start_step = 200: no snaps in 3 steps
    }
  }
  EXPECT_EQ(seen, 5) << r.out;
  EXPECT_TRUE(has(table, "trace: " + trace)) << r.out;
  EXPECT_TRUE(std::filesystem::exists(trace));
  std::filesystem::remove(trace);
}

TEST(CliTrain, BadInputNamedNonZeroNoTrace) {
  const std::string trace = tmp("bad.h5");
  const std::string cfg = tmp("bad.toml");
  {
    std::ofstream f(cfg);
    f << "[model]\nd_model = [1]\n";
  }
  struct Case {
    std::string args;
    int rc;
    std::vector<std::string> want;
  };
  std::vector<Case> cases = {
      {"--set model.nope=1", 2, {"'model.nope'", "unknown key", "model.d_model"}},      // unknown key, known ones listed
      {"--set nosection.x=1", 2, {"'nosection.x'", "unknown section"}},
      {"--set model.d_model=abc", 2, {"'model.d_model'", "expected an integer, got string", "--set"}},  // wrong type
      {"--set model.d_model=1.5", 2, {"'model.d_model'", "expected an integer"}},
      {"--set deosc.enable=3", 2, {"'deosc.enable'", "expected true or false"}},
      {"--set recipe.fc1=fp3", 2, {"'recipe.fc1'", "expected one of"}},
      {"--config '" + cfg + "'", 2, {cfg, "'model.d_model'", "expected an integer, got array"}},
      {"--set model.d_model=0", 2, {"'model.d_model'", ">= 1"}},                         // impossible sizes
      {"--set model.d_ff=4000000000", 2, {"'model.d_ff'", "<= 65536 (the documented bound"}},
      {"--set model.d_ff=65536 --set model.experts=1024", 2, {"'model.d_ff'", "impossible size"}},
      // documented bounds (docs/simulator.md "Limits")
      {"--set recipe.fp8_amax_history=2147483647", 2, {"'recipe.fp8_amax_history'", "<= 65536"}},
      {"--set model.d_model=65535", 2, {"'model.d_model'", "<= 16384"}},
      {"--set model.experts=100000", 2, {"'model.experts'", "<= 1024"}},
      {"--set batch.global_batch=1000000", 2, {"'batch.global_batch'", "<= 65536"}},
      // values that change meaning in FP32
      {"--set optim.eps=1e-50", 2, {"'optim.eps'", "1e-50 becomes 0 in FP32"}},
      {"--set optim.lr=inf", 2, {"'optim.lr'", "expected a finite number"}},
      // the run's memory, estimated before anything is allocated (terabytes: refused anywhere)
      {"--set model.experts=1024 --set model.top_k=1024 --set model.d_ff=2048 --set model.d_model=128 "
       "--set batch.global_batch=65536 --set batch.num_microbatches=1",
       1, {"mxsim train: error: the run needs about ", "the machine has ", "GiB"}},
      {"--set model.top_k=9", 2, {"'model.top_k'", "model.experts"}},
      {"--set batch.num_microbatches=3", 2, {"'batch.num_microbatches'", "divisor"}},
      {"--set batch.global_batch=1024 --set run.train_limit=512", 1, {"batch.global_batch", "larger than the training set"}},
      // a missing input file: a runtime / data error, as for every command (docs/cli.md)
      {"--config /nonexistent/x.toml", 1, {"mxsim train: error: --config /nonexistent/x.toml: cannot read: No such file"}},
      {"--bogus", 2, {"--bogus"}},
      {"--stop-after -1", 2, {"mxsim train: usage error: --stop-after -1: must be >= 0"}},
      {"--backend nope", 2, {"--backend 'nope'", "expected auto, emu or hip"}},
  };
#ifndef MXSIM_HAVE_GPU
  // A CPU-only build has no GPU backend: exit 1 with the runtime's reason (cmd_train.cpp).
  cases.push_back({"--backend hip", 1, {"mxsim train: error: --backend hip: ", "without a GPU backend"}});
#endif
  for (const Case& c : cases) {
    const CliRun r = mxsim_train(std::string(kSmall) + c.args + " --trace '" + trace + "'");
    EXPECT_EQ(r.rc, c.rc) << c.args << "\n" << r.out;
    // docs/cli.md's one format: exit 2 "mxsim train: usage error: ..." and the --help pointer,
    // exit 1 "mxsim train: error: ..."
    if (c.rc == 2) {
      EXPECT_TRUE(has(r.out, "mxsim train: usage error: ")) << c.args << "\n" << r.out;
      EXPECT_TRUE(has(r.out, "(mxsim train --help lists the options)")) << c.args << "\n" << r.out;
    } else {
      EXPECT_TRUE(has(r.out, "mxsim train: error: ")) << c.args << "\n" << r.out;
    }
    for (const auto& w : c.want) EXPECT_TRUE(has(r.out, w)) << c.args << ": wants '" << w << "'\n" << r.out;
    EXPECT_FALSE(has(r.out, "summary:")) << c.args;
    EXPECT_FALSE(std::filesystem::exists(trace)) << c.args << ": a trace was left behind";
    std::filesystem::remove(trace);
  }
  std::filesystem::remove(cfg);
}

// --backend hip where no GPU is usable: exit 1 (a runtime condition, not a
// usage error) with the runtime's reason, and nothing written. --backend auto
// then falls back to the emulator and says why in its first line.
TEST(CliTrain, BackendHipWithoutGpuExitsOneWithTheReason) {
#if MXSIM_HAVE_GPU
  if (mxsim::hip::available()) GTEST_SKIP() << "a GPU is usable here: --backend hip runs";
#endif
  const std::string trace = tmp("nogpu.h5");
  const CliRun r = mxsim_train(std::string(kSmall) + " --backend hip --trace '" + trace + "'");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(has(r.out, "mxsim train: error: --backend hip: ")) << r.out;
  EXPECT_FALSE(has(r.out, "summary:"));
  EXPECT_FALSE(std::filesystem::exists(trace));
  const CliRun a = mxsim_train(std::string(kSmall) + " --set run.max_steps=1 --backend auto");
  EXPECT_EQ(a.rc, 0) << a.out;
  EXPECT_TRUE(has(a.out, "mxsim train: backend emu (")) << a.out;
  EXPECT_TRUE(has(a.out, "--backend auto: no usable GPU: ")) << a.out;
}

// Worker threads: at most the online cores (20000 drove the load average to ~1900) unless
// --force-threads, and never above 1024 (2^31 ran libgomp out of memory); refused before
// anything runs. Forced, more threads than cores run (results never depend on the count).
TEST(CliTrain, ThreadsBoundedByCores) {
  const std::string small =
      "--set run.max_steps=1 --set run.train_limit=256 --set run.test_limit=64 --set model.d_model=32 "
      "--set model.d_ff=64 --set model.experts=4 --set batch.global_batch=128 ";
  const long cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  struct Case {
    std::string args;
    std::vector<std::string> want;
  };
  const std::string over = std::to_string(cores + 1);
  const std::vector<Case> cases = {
      {"--threads 20000", {"--threads 20000: more than the " + std::to_string(cores) + " online cores",
                           "--force-threads allows up to 1024"}},
      {"--threads " + over, {"--threads " + over + ": more than the"}},
      {"--threads 2147483647 --force-threads", {"--threads 2147483647", "1 to 1024"}},
      {"--threads 1025 --force-threads", {"--threads 1025", "1 to 1024"}},
      {"--threads -1", {"--threads -1", "expected 0 (all cores) or 1 to"}},
  };
  for (const Case& c : cases) {
    const CliRun r = mxsim_train(small + c.args);
    EXPECT_EQ(r.rc, 2) << c.args << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "mxsim train: usage error: --threads ")) << c.args << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "(mxsim train --help lists the options)")) << c.args << "\n" << r.out;
    for (const auto& w : c.want) EXPECT_TRUE(has(r.out, w)) << c.args << ": wants '" << w << "'\n" << r.out;
    EXPECT_FALSE(has(r.out, "mxsim train: backend")) << c.args << ": started\n" << r.out;
  }
  const CliRun forced = mxsim_train(small + "--threads " + over + " --force-threads");
  EXPECT_EQ(forced.rc, 0) << forced.out;
  EXPECT_TRUE(has(forced.out, over + " threads")) << forced.out;
  EXPECT_TRUE(has(forced.out, "summary: 1 steps")) << forced.out;
}

// A trace written over the checkpoint being resumed (or a checkpoint written
// over the trace) would destroy it: refused before anything runs, naming both
// options, and the existing file is left as it was.
TEST(CliTrain, SamePathForTwoRolesRefused) {
  const std::string f = tmp("same.h5");
  const std::string dir = tmp("samedir");
  std::filesystem::create_directories(dir);
  {
    std::ofstream o(f);
    o << "keep";
  }
  const std::string alias = dir + "/../" + std::filesystem::path(f).filename().string();  // same file, other spelling
  const std::string link = dir + "/link.h5";
  std::filesystem::create_symlink(f, link);
  struct Case {
    std::string args;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"--trace '" + f + "' --resume '" + f + "'", {"--trace", "--resume", "same file"}},
      {"--trace '" + f + "' --checkpoint '" + f + "'", {"--trace", "--checkpoint", "same file"}},
      {"--trace '" + alias + "' --checkpoint '" + f + "'", {"--trace", "--checkpoint", "same file"}},
      {"--trace '" + link + "' --resume '" + f + "'", {"--trace", "--resume", "same file"}},
  };
  for (const Case& c : cases) {
    const CliRun r = mxsim_train(std::string(kSmall) + c.args);
    EXPECT_EQ(r.rc, 2) << c.args << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "mxsim train: usage error: ")) << c.args << "\n" << r.out;
    for (const auto& w : c.want) EXPECT_TRUE(has(r.out, w)) << c.args << ": wants '" << w << "'\n" << r.out;
    EXPECT_FALSE(has(r.out, "summary:")) << c.args;
    std::ifstream in(f);
    std::string body;
    in >> body;
    EXPECT_EQ(body, "keep") << c.args;
  }
  // a trace path that does not exist yet but equals the checkpoint after normalization
  const std::string nf = tmp("fresh.h5");
  const CliRun r = mxsim_train(std::string(kSmall) + "--trace '" + nf + "' --checkpoint '" + dir + "/../" +
                               std::filesystem::path(nf).filename().string() + "'");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_FALSE(std::filesystem::exists(nf));
  // relative spellings of one path that does not exist yet, "rel.h5" and "./rel.h5": the check once
  // compared them unequal (weakly_canonical keeps a missing relative path relative), and the run
  // wrote its checkpoint over its own trace
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  const CliRun rel = mxsim_train(std::string(kSmall) + "--trace rel.h5 --checkpoint ./rel.h5");
  std::filesystem::current_path(cwd);
  EXPECT_EQ(rel.rc, 2) << rel.out;
  EXPECT_TRUE(has(rel.out, "same file")) << rel.out;
  EXPECT_FALSE(std::filesystem::exists(dir + "/rel.h5"));
  std::filesystem::remove(link);
  std::filesystem::remove(f);
  std::filesystem::remove_all(dir);
}

// A damaged checkpoint (docs/trace-format.md "Integrity"): `--resume` refuses it naming the
// file, exit 1, before the trace is created, and the file is left as it was even when it is also
// the `--checkpoint` to write. One bit flipped in the config entry's data chunk (Fletcher-32)
// and one in the messages of an object header (HDF5's lookup3 metadata checksum).
TEST(CliTrain, DamagedCheckpointRefusedOnResumeNothingWritten) {
  const std::string ck = tmp("dmg.ckpt"), trace = tmp("dmg.h5"), bad = tmp("dmg-bad.ckpt");
  const CliRun w = mxsim_train(std::string(kSmall) + "--stop-after 2 --checkpoint '" + ck + "'");
  ASSERT_EQ(w.rc, 0) << w.out;
  std::string bytes;
  {
    std::ifstream in(ck, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  // The config entry stores the canonical TOML text as its bytes.
  const std::size_t in_config = bytes.find("global_batch = 128");
  ASSERT_NE(in_config, std::string::npos);
  // The third version-2 object header: prefix (signature, version, flags, optional times and
  // phase change values, chunk-0 size in 1 << (flags & 3) bytes), then its first message.
  std::size_t oh = bytes.find("OHDR");
  for (int k = 0; k < 2 && oh != std::string::npos; ++k) oh = bytes.find("OHDR", oh + 4);
  ASSERT_NE(oh, std::string::npos);
  const unsigned flags = uint8_t(bytes[oh + 5]);
  const std::size_t in_header =
      oh + 6 + ((flags & 0x20) ? 16 : 0) + ((flags & 0x10) ? 4 : 0) + (std::size_t(1) << (flags & 3)) + 2;
  for (const std::size_t at : {in_config, in_header}) {
    std::string b = bytes;
    b[at] = char(uint8_t(b[at]) ^ 0x04);
    {
      std::ofstream o(bad, std::ios::binary | std::ios::trunc);
      o << b;
    }
    std::filesystem::remove(trace);
    const CliRun r = mxsim_train(std::string(kSmall) + "--resume '" + bad + "' --checkpoint '" + bad + "' --trace '" + trace + "'");
    EXPECT_EQ(r.rc, 1) << "byte " << at << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "mxsim train: error: " + bad + ": ")) << "byte " << at << "\n" << r.out;
    EXPECT_FALSE(has(r.out, "summary:")) << r.out;
    EXPECT_FALSE(std::filesystem::exists(trace)) << "byte " << at;
    std::ifstream in(bad, std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), b) << "byte " << at << ": the checkpoint changed";
  }
  std::filesystem::remove(ck);
  std::filesystem::remove(bad);
}
