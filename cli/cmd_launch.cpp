// mxsim launch: one process per GPU for a run of one process per rank (docs/cli.md "launch").
//
// The launcher is mxsim itself rather than mpirun or torchrun because neither is on the GPU
// machines: it forks P children running this mxsim binary (or --program) with the command after
// "--", gives rank r MXSIM_RANK=r, MXSIM_WORLD_SIZE=P and a private rendezvous folder
// (sim/process_group.hpp: rank 0 puts the NCCL unique id there, the others wait for it), waits
// for all of them, and when one fails stops the others (SIGTERM, then SIGKILL after a grace
// period) and exits 1 naming the rank. A child whose launcher dies is killed
// (PR_SET_PDEATHSIG), so no rank outlives it waiting on a collective.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "common.hpp"
#include "mxsim/sim/config.hpp"

namespace mxsim::cli {

namespace {

volatile sig_atomic_t g_signal = 0;  // a termination signal the launcher received
void on_signal(int s) { g_signal = s; }

std::string self_exe() {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find this mxsim binary (/proc/self/exe: " + ec.message() + ")");
  return p.string();
}

std::string status_text(int st) {
  if (WIFEXITED(st)) return "exited with status " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return "was killed by signal " + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")";
  return "ended with wait status " + std::to_string(st);
}

/// The child side of fork(): its environment, then exec. Never returns.
[[noreturn]] void run_child(int rank, pid_t launcher, const std::vector<std::string>& argv_s) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(1);  // the launcher died before prctl took effect
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  setenv("MXSIM_RANK", std::to_string(rank).c_str(), 1);
  std::vector<char*> argv;
  for (const std::string& a : argv_s) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  std::fprintf(stderr, "mxsim launch: rank %d: cannot run %s: %s\n", rank, argv[0], std::strerror(errno));
  _exit(127);
}

struct Child {
  pid_t pid = -1;
  bool done = false;
};

const CommandHelp& help() {
  static const CommandHelp h{
      "launch", "-n P [--timeout S] [--grace S] [--program PATH] -- COMMAND [ARGS]...",
      "Starts P processes of `mxsim COMMAND ARGS...` (e.g. train --backend hip ...), one per GPU, for a run of one\n"
      "process per rank: rank r gets MXSIM_RANK=r, MXSIM_WORLD_SIZE=P, MXSIM_RENDEZVOUS (a private folder,\n"
      "removed at the end, where rank 0 leaves the NCCL unique id), MXSIM_RENDEZVOUS_TIMEOUT, and\n"
      "NCCL_NVLS_ENABLE=0 unless the environment sets it. Waits for every rank; when one fails, stops the\n"
      "others and exits 1 naming it. SIGINT / SIGTERM / SIGHUP to the launcher stop every rank.",
      "Every rank gets the same arguments; `mxsim train` in this mode writes the trace and checkpoints and\n"
      "prints from rank 0 only (docs/simulator.md \"Parallel simulation\", docs/cli.md \"launch\").",
      "0 every rank succeeded, 1 a rank failed or the launcher was stopped (stderr names the rank), 2 usage "
      "error"};
  return h;
}

void add_options(po::options_description& d) {
  d.add_options()("help,h", "this help")
      ("procs,n", po::value<std::string>(), "P, the number of processes: rank r runs on GPU r (1 to 1024)")
      ("timeout", po::value<std::string>(),
       "seconds the ranks wait for rank 0's NCCL unique id (MXSIM_RENDEZVOUS_TIMEOUT; default 120)")
      ("grace", po::value<std::string>(), "seconds between SIGTERM and SIGKILL when stopping the ranks (default 10)")
      ("program", po::value<std::string>(),
       "run this program instead of this mxsim binary (e.g. a wrapper); it gets the same arguments and environment");
}

/// The rendezvous folder of a run (mode 0700: only this user reads the unique id), removed when
/// the launcher ends.
struct Rendezvous {
  std::string dir;
  Rendezvous() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mxsim-launch-XXXXXX").string();
    if (!mkdtemp(tmpl.data()))
      throw std::runtime_error("cannot create a rendezvous folder from " + tmpl + ": " + std::strerror(errno));
    dir = tmpl;
  }
  ~Rendezvous() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;
};

/// NCCL_NVLS_ENABLE=0 for every child unless the environment sets it (then a warning).
void default_nccl_nvls() {
  if (const char* v = std::getenv("NCCL_NVLS_ENABLE"); !v) setenv("NCCL_NVLS_ENABLE", "0", 1);
  else if (std::string(v) != "0")
    std::fprintf(stderr,
                 "mxsim launch: warning: NCCL_NVLS_ENABLE=%s kept as set; the project's GPU machines need 0 "
                 "(docs/gpu.md)\n",
                 v);
}

/// The ranks' common environment (set here, before fork; each child adds MXSIM_RANK).
void set_child_environment(int P, int64_t timeout, const Rendezvous& rv) {
  setenv("MXSIM_WORLD_SIZE", std::to_string(P).c_str(), 1);
  setenv("MXSIM_RENDEZVOUS", rv.dir.c_str(), 1);
  setenv("MXSIM_RENDEZVOUS_TIMEOUT", std::to_string(timeout).c_str(), 1);
}

/// The P ranks, started and waited for: the first failure (a rank's, a fork's or the
/// launcher's signal) stops the others, SIGTERM then SIGKILL after `grace` seconds.
class Ranks {
 public:
  Ranks(int P, int64_t grace) : kids_(size_t(P)), grace_(grace) {}

  /// Forks every rank (a failed fork stops those already started).
  void start(const std::vector<std::string>& argv) {
    const pid_t self = getpid();
    std::fflush(nullptr);  // nothing buffered is written twice by the children
    for (size_t r = 0; r < kids_.size(); ++r) {
      const pid_t pid = fork();
      if (pid == 0) run_child(int(r), self, argv);
      if (pid < 0) {
        failure_ = "cannot start rank " + std::to_string(r) + ": fork: " + std::strerror(errno);
        break;
      }
      kids_[r].pid = pid;
      ++alive_;
    }
    if (!failure_.empty()) begin_stop();
  }

  /// Waits until every started rank has ended; returns the first failure ("" when all succeeded).
  std::string wait() {
    while (alive_ > 0) {
      int st = 0;
      const pid_t pid = waitpid(-1, &st, stopping_ ? WNOHANG : 0);
      if (pid > 0) {
        reap(pid, st);
        continue;
      }
      if (pid < 0 && errno == ECHILD) break;
      if (g_signal && !stopping_) {
        failure_ = std::string("the launcher received signal ") + std::to_string(g_signal) + " (" +
                   strsignal(g_signal) + ")";
        std::fprintf(stderr, "mxsim launch: %s; stopping every rank\n", failure_.c_str());
        begin_stop();
      }
      if (stopping_) {
        if (!killed_ && clock::now() >= kill_at_) {
          signal_all(SIGKILL);
          killed_ = true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    return failure_;
  }

 private:
  using clock = std::chrono::steady_clock;
  void signal_all(int sig) {
    for (const Child& c : kids_)
      if (c.pid > 0 && !c.done) kill(c.pid, sig);
  }
  void begin_stop() {
    if (stopping_) return;
    stopping_ = true;
    signal_all(SIGTERM);
    kill_at_ = clock::now() + std::chrono::seconds(grace_);
  }
  void reap(pid_t pid, int st) {
    for (size_t r = 0; r < kids_.size(); ++r) {
      if (kids_[r].pid != pid) continue;
      kids_[r].done = true;
      --alive_;
      const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!ok && failure_.empty()) {
        failure_ = "rank " + std::to_string(r) + " (pid " + std::to_string(pid) + ") " + status_text(st);
        std::fprintf(stderr, "mxsim launch: %s; stopping the other ranks\n", failure_.c_str());
        begin_stop();
      }
    }
  }
  std::vector<Child> kids_;
  int64_t grace_;
  int alive_ = 0;
  std::string failure_;  // the first rank's failure (or the launcher's signal)
  bool stopping_ = false, killed_ = false;
  clock::time_point kill_at_{};
};

}  // namespace

int cmd_launch(const Args& args) {
  po::options_description d("options");
  add_options(d);
  Args own, child;
  bool rest = false;
  for (const std::string& a : args) {
    if (!rest && a == "--") {
      rest = true;
      continue;
    }
    (rest ? child : own).push_back(a);
  }
  const Parsed p = parse(own, d);
  if (p.has("help")) {
    print_help(stdout, help(), d);
    return kExitOk;
  }
  if (!p.has("procs")) throw UsageError("-n P is required (the number of processes)");
  const int P = int(parse_int("-n", p.str("procs"), 1, sim::kMaxRanks));
  if (child.empty()) throw UsageError("expected -- COMMAND [ARGS]... after the launcher's options");
  const int64_t timeout = p.has("timeout") ? parse_int("--timeout", p.str("timeout"), 1, 86400) : 120;
  const int64_t grace = p.has("grace") ? parse_int("--grace", p.str("grace"), 0, 3600) : 10;
  const std::string program = p.has("program") ? p.str("program") : self_exe();

  default_nccl_nvls();
  const Rendezvous rv;
  set_child_environment(P, timeout, rv);
  std::vector<std::string> argv = {program};
  argv.insert(argv.end(), child.begin(), child.end());

  // Termination signals interrupt the wait below (no SA_RESTART) and stop the ranks.
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &sa, nullptr);

  Ranks ranks(P, grace);
  ranks.start(argv);
  const std::string failure = ranks.wait();
  if (!failure.empty()) {
    std::fprintf(stderr, "mxsim launch: failed: %s\n", failure.c_str());
    return kExitError;
  }
  return kExitOk;
}

}  // namespace mxsim::cli
