// mxsim report: PNG plots of a trace for runs on machines without a display (docs/cli.md "report").
//
// The plots are the Qt inspector's (gui/): this command finds the mxsim-inspector binary and
// runs `mxsim-inspector --render` on Qt's offscreen platform, passing its exit status through.
// The CLI links no Qt, so a GPU machine without Qt still has every other command; there the
// report names what to install.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.hpp"
#include "common.hpp"

extern char** environ;

namespace mxsim::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kInspector = "mxsim-inspector";
constexpr const char* kInspectorEnv = "MXSIM_INSPECTOR";

bool executable_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

/// Where an inspector is looked for, in order: beside this mxsim (an installed prefix), the
/// build tree's gui/ beside its cli/, the install prefix's bin; then every PATH entry.
std::vector<fs::path> fixed_candidates() {
  std::vector<fs::path> c;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    c.push_back(self.parent_path() / kInspector);
    c.push_back(self.parent_path().parent_path() / "gui" / kInspector);
  }
#ifdef MXSIM_INSTALL_BINDIR
  c.push_back(fs::path(MXSIM_INSTALL_BINDIR) / kInspector);
#endif
  return c;
}
std::vector<fs::path> path_candidates() {
  std::vector<fs::path> c;
  if (const char* path = std::getenv("PATH"))
    for (std::string rest = path; !rest.empty();) {
      const size_t colon = rest.find(':');
      const std::string dir = rest.substr(0, colon);
      if (!dir.empty()) c.push_back(fs::path(dir) / kInspector);
      rest = colon == std::string::npos ? "" : rest.substr(colon + 1);
    }
  return c;
}

/// The inspector to run: --inspector, else $MXSIM_INSPECTOR (either must be one), else the
/// first candidate that is an executable file. Throws with what to install when there is none.
std::string find_inspector(const Parsed& p) {
  const char* from = p.has("inspector") ? "--inspector" : std::getenv(kInspectorEnv) ? kInspectorEnv : nullptr;
  if (from) {
    const std::string given = p.has("inspector") ? p.str("inspector") : std::getenv(kInspectorEnv);
    if (!executable_file(given))
      throw std::runtime_error(std::string(from) + " " + given +
                               ": no executable file there (it names the mxsim-inspector to run)");
    return given;
  }
  std::string looked;
  for (const fs::path& c : fixed_candidates()) {
    if (executable_file(c)) return c.string();
    looked += c.string() + ", ";
  }
  for (const fs::path& c : path_candidates())
    if (executable_file(c)) return c.string();
  throw std::runtime_error(
      "the report needs mxsim-inspector, the Qt inspector, and none was found (looked in " + looked +
      "and PATH). It is built with mxsim when CMake finds Qt 6 Widgets and QCustomPlot for Qt 6 (Debian 12: apt-get "
      "install qt6-base-dev libqcustomplot-dev, or scripts/deps.sh; then rebuild) and installed beside mxsim by "
      "cmake --install; --inspector PATH or MXSIM_INSPECTOR=PATH names one elsewhere");
}

std::string status_text(int st) {
  if (WIFSIGNALED(st)) return "was killed by signal " + std::to_string(WTERMSIG(st)) + " (" + strsignal(WTERMSIG(st)) + ")";
  return "ended with wait status " + std::to_string(st);
}

}  // namespace

int cmd_report(const Args& args) {
  po::options_description d("options");
  d.add_options()("help,h", "this help")
      ("output,o", po::value<std::string>(), "output folder (created): the PNGs, their CSVs and index.html")
      ("layer", po::value<std::string>(), "only this layer (embed, router, fc1, fc2, head); default: every layer")
      ("tensor", po::value<std::string>(), "only this operand (w, x, dy, x_wgrad, dy_wgrad); default: every one held")
      ("step", po::value<std::string>(),
       "global optimizer step the one-step views show, as the plots label it (default: the last complete step)")
      ("row", po::value<std::string>(), "trace row the one-step views show instead (0-based)")
      ("size", po::value<std::string>(), "image size WxH (default 1280x800, at least 320x240)")
      ("views", po::value<std::string>(), "comma-separated views: curves, overview, quant, osc, accum, compare, data (default: all; compare with "
       "two traces)")
      ("inspector", po::value<std::string>(),
       "the mxsim-inspector to run (default: $MXSIM_INSPECTOR, else beside this mxsim, the build tree's gui/, the "
       "install prefix's bin, PATH)");
  const CommandHelp help{
      "report", "TRACE.h5 [OTHER.h5] -o DIR [--layer L] [--tensor OP] [--step N | --row R] [options]",
      "Writes PNG plots of a trace, for runs on machines without a display: the training curves; overview\n"
      "figures of every layer's SQNR, saturation and underflow over steps (W, x, dy) and oscillations;\n"
      "per layer the quantization error of each operand, the weight oscillation and the gradient\n"
      "accumulation views; with OTHER.h5 the comparison of the two traces. Each PNG has its data as CSV\n"
      "beside it, and DIR/index.html lists them. The plots are the Qt inspector's: this runs\n"
      "`mxsim-inspector --render` with Qt's offscreen platform (no display needed).",
      "The inspector is built when CMake finds Qt 6 and QCustomPlot (docs/inspector.md); without it the\n"
      "command exits 1 saying what to install. docs/cli.md \"report\" lists the files.",
      "0 success, 1 a trace cannot be read, a file not written or no inspector found, 2 usage error (the\n"
      "inspector's status, passed through)"};
  const Parsed p = parse(args, d, "trace files");
  if (p.has("help")) {
    print_help(stdout, help, d);
    return kExitOk;
  }
  if (p.positional.empty()) throw UsageError("expected a trace file (TRACE.h5)");
  if (p.positional.size() > 2)
    throw UsageError("unexpected argument '" + p.positional[2] + "' (at most two traces: TRACE.h5 and OTHER.h5)");
  if (!p.has("output")) throw UsageError("-o DIR is required (the folder the images are written to)");
  std::vector<std::string> argv = {"", "--render"};
  for (const std::string& t : p.positional) argv.push_back(t);
  argv.insert(argv.end(), {"-o", p.str("output")});
  if (p.has("step") && p.has("row")) throw UsageError("--step and --row both given: one names the step to show");
  for (const char* o : {"step", "row"})
    if (p.has(o)) {
      const std::string opt = std::string("--") + o;
      argv.insert(argv.end(), {opt, std::to_string(parse_int(opt, p.str(o), 0, int64_t(1) << 53))});
    }
  if (p.has("size")) {
    const std::string s = p.str("size");
    const size_t x = s.find('x');
    if (x == std::string::npos) throw UsageError("--size " + s + ": expected WxH, e.g. 1280x800");
    const int64_t w = parse_int("--size width", s.substr(0, x), 320, 16384);
    const int64_t h = parse_int("--size height", s.substr(x + 1), 240, 16384);
    argv.insert(argv.end(), {"--size", std::to_string(w) + "x" + std::to_string(h)});
  }
  for (const char* o : {"layer", "tensor", "views"})
    if (p.has(o)) argv.insert(argv.end(), {std::string("--") + o, p.str(o)});
  const std::string inspector = find_inspector(p);
  argv[0] = inspector;

  // The child's environment: this one with QT_QPA_PLATFORM=offscreen (no display is needed or used).
  std::vector<std::string> env_s = {"QT_QPA_PLATFORM=offscreen"};
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, "QT_QPA_PLATFORM=", 16) != 0) env_s.push_back(*e);
  std::vector<char*> envp, av;
  for (std::string& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (std::string& a : argv) av.push_back(a.data());
  av.push_back(nullptr);
  std::fflush(nullptr);
  pid_t pid = -1;
  if (const int rc = posix_spawn(&pid, inspector.c_str(), nullptr, nullptr, av.data(), envp.data()); rc != 0)
    throw std::runtime_error("cannot run " + inspector + ": " + std::strerror(rc));
  int st = 0;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) throw std::runtime_error("waiting for " + inspector + ": " + std::strerror(errno));
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return kExitOk;
  if (WIFEXITED(st)) {
    // Its status is passed through (2: a usage error the inspector found); the inspector may
    // have said nothing, so say which program failed and how.
    std::fprintf(stderr, "mxsim report: error: %s --render exited with status %d (the report in %s may be "
                 "incomplete; the inspector's own messages, if any, are above)\n", inspector.c_str(),
                 WEXITSTATUS(st), p.str("output").c_str());
    return WEXITSTATUS(st);
  }
  throw std::runtime_error(inspector + " " + status_text(st));
}

}  // namespace mxsim::cli
