// The progress of `mxsim train` as a user sees it: on a terminal (a pty of a chosen width) one
// line that fits it, with elapsed time, ETA and the evaluation; into a file, whole lines as they
// happen, kept when the run is stopped by SIGINT or SIGTERM, which stops it cleanly.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "mxsim/trace/reader.hpp"
#include "test_util.hpp"

namespace {

const std::string kBin = std::string(MXSIM_BINARY_DIR) + "/cli/mxsim";

std::vector<std::string> small_run(std::vector<std::string> extra) {
  std::vector<std::string> a = {kBin, "train", "--threads", "1", "--set", "model.d_model=32", "--set", "model.d_ff=64",
                                "--set", "model.experts=4", "--set", "batch.global_batch=128", "--set",
                                "run.train_limit=512", "--set", "run.test_limit=200"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

[[noreturn]] void exec(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  ::execv(argv[0], argv.data());
  ::_exit(127);
}

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

/// Everything `args` writes to a terminal of `cols` columns (0: a pty that reports no width),
/// and its exit status.
std::pair<std::string, int> run_on_pty(const std::vector<std::string>& args, unsigned short cols) {
  winsize ws{};
  ws.ws_row = 24;
  ws.ws_col = cols;
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, &ws);
  if (pid == 0) exec(args);
  std::string out;
  if (pid < 0) return {out, -1};
  char buf[4096];
  for (;;) {  // until the child's side closes (EIO on Linux)
    const ssize_t n = ::read(master, buf, sizeof buf);
    if (n > 0) out.append(buf, size_t(n));
    else if (n < 0 && errno == EINTR) continue;
    else break;
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  ::close(master);
  return {out, WIFEXITED(st) ? WEXITSTATUS(st) : -1};
}

/// The progress lines of terminal output: each piece written after a '\r' up to the erase to
/// the end of the line (ESC [K) that ends it.
std::vector<std::string> progress_lines(const std::string& out) {
  std::vector<std::string> v;
  for (size_t p = out.find('\r'); p != std::string::npos; p = out.find('\r', p + 1)) {
    const size_t e = out.find("\x1b[K", p);
    if (e == std::string::npos) break;
    if (out.find_first_of("\r\n", p + 1) < e) continue;  // a \r\n line end, not a progress line
    v.push_back(out.substr(p + 1, e - p - 1));
  }
  return v;
}

}  // namespace

// Widths 40, 60 and 132, and a pty without a width (taken as 80): every progress line stays
// short of the last column (so it cannot wrap), and the step, loss, steps/s, elapsed time and ETA
// are there whenever the width holds them; the evaluation at the last step shows its test
// accuracy. Wide enough, the accuracy, learning rate and a bar come too.
TEST(CliTrainProgress, TerminalLineFitsTheWidthWithElapsedAndEta) {
  for (unsigned short cols : {40, 60, 132, 0}) {
    const auto [out, rc] = run_on_pty(small_run({"--set", "run.max_steps=3"}), cols);
    ASSERT_EQ(rc, 0) << cols << " columns:\n" << out;
    const size_t width = cols ? cols : 80;
    const std::vector<std::string> lines = progress_lines(out);
    ASSERT_EQ(lines.size(), 3u) << cols << " columns: one line per step\n" << out;
    for (const std::string& l : lines) {
      EXPECT_LT(l.size(), width) << cols << " columns: '" << l << "'";
      EXPECT_EQ(l.find_first_of("\r\n\x1b"), std::string::npos) << l;
    }
    const std::string& last = lines.back();
    if (width >= 60) {
      for (const char* w : {"3/3 ", "loss ", "/s ", "elapsed 0:0", "eta 0:00", "test 0."})
        EXPECT_TRUE(has(last, w)) << cols << " columns: wants '" << w << "' in '" << last << "'";
      EXPECT_TRUE(has(lines[0], "eta ")) << lines[0];
    } else {
      EXPECT_EQ(last.rfind("3/3 loss ", 0), 0u) << last;  // the short forms, cut at the end
      EXPECT_TRUE(has(last, " test 0.")) << last;
      EXPECT_EQ(last.size(), width - 1) << last;
    }
    if (width >= 132) {
      for (const char* w : {"[", "] step 3/3  loss ", "  acc ", "  lr ", " steps/s  elapsed "})
        EXPECT_TRUE(has(last, w)) << "wants '" << w << "': " << last;
    }
    // the evaluation's line is kept: it ends with a newline, before the summary
    EXPECT_TRUE(has(out, last + "\x1b[K\r\n")) << out;
  }
}

// Into a file, stdout is line-buffered: while the run goes on the file already holds the header
// and the step lines. SIGINT (or SIGTERM) then stops the run after the step in progress: exit
// 128 + the signal, the summary printed, every line kept, and the trace closed with exactly the
// steps the summary counts.
class CliTrainStopSignal : public ::testing::TestWithParam<int> {};

TEST_P(CliTrainStopSignal, PipedRunKeepsItsLinesAndStopsCleanly) {
  const int sig = GetParam();
  mxsim::test::TempDir dir("train_signal");
  const std::string out = (dir.p / "out.txt").string(), err = (dir.p / "err.txt").string(),
                    trace = (dir.p / "t.h5").string();
  // 4 steps per epoch, 10^5 epochs: the run cannot end before the signal
  const std::vector<std::string> args = small_run({"--set", "run.epochs=100000", "--trace", trace});
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644),
              e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(e, 2);
    exec(args);
  }
  // Wait for the second step line (the first and every evaluation print one) while the run goes on.
  std::string text;
  const auto t0 = std::chrono::steady_clock::now();
  size_t step_lines = 0;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
    if (!std::filesystem::exists(out)) continue;  // not opened yet
    text = mxsim::test::read_bytes(out);
    step_lines = 0;
    for (size_t p = text.find("\nstep "); p != std::string::npos; p = text.find("\nstep ", p + 1)) ++step_lines;
    if (step_lines >= 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  int st = 0;
  if (step_lines < 2) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &st, 0);
    FAIL() << "no step lines in the file while the run went on (stdout not line-buffered?): '" << text << "'";
  }
  // Line-buffered, the lines arrive one by one; stdio's full buffering would hold them back
  // until a block of 4 KiB (or more) filled, and then write the whole block at once.
  EXPECT_LT(text.size(), 4096u) << "the first lines came in one block, not line by line";
  EXPECT_TRUE(has(text, "mxsim train: backend emu")) << text;
  EXPECT_TRUE(has(text, "elapsed ")) << text;
  ASSERT_EQ(::kill(pid, sig), 0);
  ::waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFEXITED(st)) << "ended by signal " << (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  EXPECT_EQ(WEXITSTATUS(st), 128 + sig);
  const std::string all = mxsim::test::read_bytes(out), msgs = mxsim::test::read_bytes(err);
  EXPECT_EQ(all.rfind(text, 0), 0u) << "the lines seen before the signal were kept";
  const std::string name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  EXPECT_TRUE(has(msgs, "mxsim train: " + name + ": stopped after ")) << msgs;
  EXPECT_TRUE(has(msgs, "; the trace holds them")) << msgs;
  const size_t s = all.find("\nsummary: ");
  ASSERT_NE(s, std::string::npos) << all;
  const long long steps = std::stoll(all.substr(s + 10));
  EXPECT_GE(steps, 2) << all;
  EXPECT_TRUE(has(msgs, "stopped after " + std::to_string(steps) + " steps")) << msgs;
  EXPECT_TRUE(has(all, "test accuracy n/a (not evaluated)") || has(all, "test accuracy 0.")) << all;
  const mxsim::trace::Reader r(trace);  // closed and readable, with the steps the summary counts
  EXPECT_EQ(r.steps_completed(), uint64_t(steps));
}

INSTANTIATE_TEST_SUITE_P(, CliTrainStopSignal, ::testing::Values(SIGINT, SIGTERM),
                         [](const auto& i) { return std::string(i.param == SIGINT ? "Sigint" : "Sigterm"); });

/// Waits until `sig`, sent to process `pid`, is no longer pending in it (its handler has been
/// entered: /proc/PID/status ShdPnd and SigPnd, the process- and thread-directed pending sets);
/// false after `ms`. A second signal sent before that could merge with the first.
bool signal_delivered(pid_t pid, int sig, int ms) {
  const std::string path = "/proc/" + std::to_string(pid) + "/status";
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(ms)) {
    const std::string st = mxsim::test::read_bytes(path);
    bool pending = false;
    for (const char* key : {"\nShdPnd:", "\nSigPnd:"}) {
      const size_t at = st.find(key);
      if (at == std::string::npos) return false;
      const unsigned long long mask = std::stoull(st.substr(at + std::strlen(key)), nullptr, 16);
      pending = pending || (mask >> (sig - 1) & 1u);
    }
    if (!pending) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// A second signal, while the first waits for the step in progress to end, ends the process at
// once with the signal's default action. The second SIGINT goes as soon as the first has been
// delivered (not after a fixed sleep: on a loaded machine the step in progress could end first
// and the run stop cleanly), in a run whose steps (global batch 4096) outlast that.
TEST(CliTrainProgress, SecondSignalEndsTheRunAtOnce) {
  mxsim::test::TempDir dir("train_signal2");
  const std::string out = (dir.p / "out.txt").string();
  const std::vector<std::string> args = {kBin, "train", "--threads", "1", "--set", "batch.global_batch=4096", "--set",
                                         "run.train_limit=16384", "--set", "run.test_limit=200"};
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(o, 1);
    ::dup2(o, 2);
    exec(args);
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {  // the first step done
    if (std::filesystem::exists(out) && has(mxsim::test::read_bytes(out), "\nstep 1/")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  ASSERT_TRUE(signal_delivered(pid, SIGINT, 10000)) << "the first SIGINT was not delivered within 10 s";
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  int st = 0;
  ::waitpid(pid, &st, 0);
  const std::string text = mxsim::test::read_bytes(out);
  ASSERT_TRUE(WIFSIGNALED(st)) << "exit " << (WIFEXITED(st) ? WEXITSTATUS(st) : -1) << "\n" << text;
  EXPECT_EQ(WTERMSIG(st), SIGINT);
  EXPECT_FALSE(has(text, "summary:")) << text;
}
