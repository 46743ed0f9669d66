// mxsim train: run the MoE training simulator (docs/simulator.md).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include <boost/program_options.hpp>

#include "commands.hpp"
#include "common.hpp"
#include "mxsim/backend.hpp"
#include "mxsim/backend_profile.hpp"
#include "mxsim/data/fashion_mnist.hpp"
#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/recipe.hpp"
#include "mxsim/sim/parallel.hpp"
#include "mxsim/sim/process_group.hpp"
#include "mxsim/sim/trainer.hpp"
#include "train_progress.hpp"
#if defined(MXSIM_HAVE_GPU)
#include "mxsim/hip/comm.hpp"
#include "mxsim/hip/device.hpp"
#endif

namespace po = boost::program_options;

namespace mxsim::cli {

namespace {

// SIGINT / SIGTERM: the first asks the run to stop after the optimizer step in progress (the
// trace and the checkpoint then hold the completed steps, as with --stop-after, and the summary
// is printed); a second one ends the process at once, with the signal's default action.
std::atomic<bool> g_stop_requested{false};
volatile std::sig_atomic_t g_stop_signal = 0;
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal != 0) {
    std::signal(sig, SIG_DFL);  // both async-signal-safe
    std::raise(sig);
    return;
  }
  g_stop_signal = sig;
  g_stop_requested.store(true);
}

/// Installs on_stop_signal for SIGINT and SIGTERM while it lives (SA_RESTART: a read or write of
/// the trace in progress is not cut short by the signal).
struct StopSignals {
  struct sigaction old_int {}, old_term {};
  StopSignals() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
};

const char* signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

/// A process of `mxsim launch` (sim/process_group.hpp): rank 0 creates the NCCL unique id and
/// leaves it in the rendezvous folder, the others wait for it; then every rank joins the
/// communicator over its device's backend.
std::unique_ptr<sim::Comm> join_ranks(const sim::ProcessPlace& at, Backend& be) {
#if defined(MXSIM_HAVE_GPU)
  std::vector<uint8_t> id;
  if (at.rank == 0) {
    id = hip::nccl_unique_id(0);
    sim::publish_unique_id(at, id);
  } else {
    id = sim::await_unique_id(at, hip::kNcclIdBytes);
  }
  return hip::make_nccl_comm(be, at.rank, at.size, id);
#else
  (void)at;
  (void)be;
  throw std::runtime_error("this mxsim was built without a GPU backend: no NCCL communicator");
#endif
}

int run_train(const Args& args, const sim::ProcessPlace* place);

}  // namespace

int cmd_train(const Args& args) {
  // A file or a pipe gets whole lines as they are written (stdio would buffer 4 KiB of them): a
  // run followed with `tail -f`, or killed, leaves every line printed so far. Before any output.
  if (!isatty(STDOUT_FILENO)) std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  std::optional<sim::ProcessPlace> place;
  try {
    place = sim::process_place_from_env();
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("process mode (the variables mxsim launch sets): ") + e.what());
  }
  if (!place) return run_train(args, nullptr);
  // every message of a rank says which (the launcher names the rank that failed too)
  const std::string who = "rank " + std::to_string(place->rank) + " of " + std::to_string(place->size) + ": ";
  try {
    return run_train(args, &*place);
  } catch (const UsageError& e) {
    throw UsageError(who + e.what());
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    throw std::runtime_error(who + e.what());
  }
}

namespace {

// ---------------------------------------------------------------- parse

/// The command line of `mxsim train`.
struct TrainArgs {
  std::string config, trace, resume, ckpt, backend = "auto";
  std::vector<std::string> sets;
  int64_t threads = 0;
  int64_t stop_after = 0;
  bool print_config = false, json = false, force_threads = false, profile = false, profile_host = false;
};

/// Worker threads: at most the online cores (more only oversubscribe them; 20000 threads drove the
/// load average to ~1900) unless --force-threads, and never above kMaxThreads (libgomp allocates
/// per-thread state up front: 2^31 threads ran it out of memory). 0 means all cores.
int64_t checked_threads(int64_t threads, bool force_threads) {
  constexpr int64_t kMaxThreads = 1024;
  const int64_t cores = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  if (threads < 0 || threads > kMaxThreads || (threads > cores && !force_threads)) {
    const std::string t = "--threads " + std::to_string(threads) + ": ";
    if (force_threads || threads < 0)
      throw UsageError(t + "expected 0 (all cores) or 1 to " + std::to_string(force_threads ? kMaxThreads : cores) +
                       (force_threads ? " (the bound with --force-threads)" : " (the online cores)"));
    throw UsageError(t + "more than the " + std::to_string(cores) + " online cores (expected 0 = all cores, or 1 to " +
                     std::to_string(cores) + "); --force-threads allows up to " + std::to_string(kMaxThreads));
  }
  return threads == 0 ? cores : threads;
}

/// The arguments, or nullopt after printing --help. Usage errors (UsageError: "mxsim train:
/// usage error: ..." and the --help pointer, exit 2) are found here, before anything starts.
std::optional<TrainArgs> parse_train_args(const Args& args) {
  TrainArgs a;
  po::options_description d("options");
  d.add_options()("help,h", "this help")
      ("config", po::value(&a.config), "TOML config (default: the embedded examples/default.toml)")
      ("set", po::value(&a.sets)->composing(), "override: section.key=value (repeatable)")
      ("backend", po::value(&a.backend)->default_value("auto"), "auto | emu | hip")
      ("trace", po::value(&a.trace), "write an HDF5 trace here")
      ("resume", po::value(&a.resume), "resume from this checkpoint")
      ("checkpoint", po::value(&a.ckpt), "write a checkpoint here (at the end / every trace.checkpoint_every)")
      ("threads", po::value(&a.threads)->default_value(0), "worker threads, 1 to the online cores (0 = all cores)")
      ("force-threads", po::bool_switch(&a.force_threads), "allow --threads above the online cores (up to 1024)")
      ("stop-after", po::value(&a.stop_after)->default_value(0),
       "stop once this many optimizer steps are done (global, 1-based; 0 = run the whole schedule); with "
       "--checkpoint the checkpoint is written there, so --resume continues the same run")
      ("print-config", po::bool_switch(&a.print_config), "print the resolved config and exit")
      ("profile", po::bool_switch(&a.profile),
       "time every backend op (the backend is synchronised after each op) and print the table after the summary "
       "(stderr with --json)")
      ("profile-host", po::bool_switch(&a.profile_host),
       "as --profile, timing only the host side of every op (validation, allocation, launches; no synchronisation "
       "added): how much of a GPU run the host spends driving the device")
      ("json", po::bool_switch(&a.json), "print the summary as one JSON object on stdout (progress goes to stderr)");
  const CommandHelp help{
      "train", "[--config FILE] [--set section.key=value]... [--trace OUT.h5] [--backend auto|emu|hip] [options]",
      "Trains the Mixture-of-Experts classifier on Fashion-MNIST with the recipes of the config (default: the\n"
      "embedded examples/default.toml) and writes an HDF5 trace of every step (docs/simulator.md,\n"
      "docs/trace-format.md). Progress goes to stdout (stderr with --json): on a terminal one line fitting\n"
      "its width, otherwise whole plain lines; then a summary. SIGINT or SIGTERM stops the run after the\n"
      "step in progress (the trace and the checkpoint hold the completed steps) and prints the summary; a\n"
      "second one ends it at once.",
      "Config keys: docs/config.md (mxsim train --print-config shows the resolved config).",
      "0 success, 1 runtime or data error, 2 usage error, 130 / 143 stopped by SIGINT / SIGTERM (cleanly,\n"
      "the summary printed)"};
  const Parsed p = parse(args, d);  // stray positional arguments are usage errors
  if (p.vm.count("help")) {
    print_help(stdout, help, d);
    return std::nullopt;
  }
  if (a.stop_after < 0) throw UsageError("--stop-after " + std::to_string(a.stop_after) + ": must be >= 0");
  a.threads = checked_threads(a.threads, a.force_threads);
  return a;
}

// ---------------------------------------------------------------- plan

/// The run's config: --config (or the embedded default) with the --set overrides.
sim::Config read_config(const TrainArgs& a) {
  std::string text = sim::default_config_text(), source = "default config";
  if (!a.config.empty()) {
    std::ifstream f(a.config);
    // a missing input file is a runtime / data error (exit 1), as for every command
    if (!f) throw std::runtime_error("--config " + a.config + ": cannot read: " + std::strerror(errno));
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
    source = a.config;
  }
  try {
    return sim::parse_config(text, a.sets, source);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("bad config: ") + e.what());  // a key or value of the run's configuration
  }
}

/// One file may not serve two roles: a trace written over the checkpoint it resumes from (or a
/// checkpoint over the trace) destroys one of them, and an output over the config or the dataset
/// destroys an input. --resume and --checkpoint may name the same file: the run replaces the
/// checkpoint it started from (atomically, at its end).
void refuse_path_conflicts(const TrainArgs& a, const sim::Config& cfg) {
  namespace fs = std::filesystem;
  const std::pair<const char*, std::string> paths[] = {{"--trace", a.trace}, {"--resume", a.resume}, {"--checkpoint", a.ckpt}};
  auto norm = [](const std::string& p) {
    std::error_code e;
    // absolute first: weakly_canonical leaves a relative path to a missing file relative, so
    // "a.h5" and "./a.h5" (neither there yet) compared unequal and one run wrote both roles
    const fs::path a = fs::absolute(p, e);
    fs::path c = fs::weakly_canonical(a, e);  // resolves symlinks of existing parts
    return e ? a.lexically_normal() : c;
  };
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = i + 1; j < 3; ++j) {
      const std::string& x = paths[i].second;
      const std::string& y = paths[j].second;
      if (x.empty() || y.empty() || (i == 1 && j == 2)) continue;
      std::error_code ec;
      if (norm(x) == norm(y) || (fs::exists(x, ec) && fs::exists(y, ec) && fs::equivalent(x, y, ec)))
        throw UsageError(std::string(paths[i].first) + " '" + x + "' and " + paths[j].first + " '" + y +
                         "' are the same file; give them different paths");
    }
  // The config was read already, the dataset is read later: an output over either destroys it.
  std::vector<InputPath> read;
  if (!a.config.empty()) read.push_back({a.config, "--config input file"});
  for (const auto& f : mxsim::data::fashion_mnist_files(cfg.data_dir)) read.push_back({f, "dataset file (run.data_dir)"});
  for (const auto& [opt, out] : {std::pair<const char*, std::string>{"--trace", a.trace}, {"--checkpoint", a.ckpt}})
    if (!out.empty()) try {
        refuse_overwriting_input(out, read, opt);
      } catch (const std::runtime_error& e) {
        throw UsageError(e.what());  // as the other conflicts of paths above
      }
}

/// The backend a run trains on, the communicator of a process of `mxsim launch`, and the
/// profiler wrapped around the backend (--profile / --profile-host).
struct RunBackend {
  std::unique_ptr<Backend> be;
  std::string chosen_because;  ///< --backend auto: why this one (the log's first line says)
  std::unique_ptr<sim::Comm> comm;
  ProfilingBackend* profiler = nullptr;
};

RunBackend open_backend(TrainArgs& a, const sim::ProcessPlace* place) {
  // One process per rank (mxsim launch): the GPU of the rank, and NCCL between the processes.
  if (place) {
    if (a.backend == "emu")
      throw UsageError("--backend emu: a run of one process per rank (mxsim launch) needs --backend hip (NCCL "
                       "moves the ranks' device buffers)");
    a.backend = "hip";
#if defined(MXSIM_HAVE_GPU)
    std::string no_gpu;
    if (hip::available(&no_gpu)) hip::select_device(place->rank);  // else make_backend says why below
#endif
  }
  // "auto": the GPU when one is usable, else the emulator.
  RunBackend r;
  std::string why;
  if (a.backend == "auto") {
    r.be = make_backend("hip", &why);
    if (r.be) {
      r.chosen_because = "--backend auto found a usable GPU";
    } else {
      r.chosen_because = "--backend auto: no usable GPU: " + why;
      r.be = make_backend("emu", &why);
    }
  } else if (a.backend == "emu" || a.backend == "hip") {
    r.be = make_backend(a.backend, &why);
    // a runtime condition, not a usage error (cmd_train names the rank in process mode)
    if (!r.be) throw std::runtime_error("--backend " + a.backend + ": " + why);
  } else {
    throw UsageError("unknown --backend '" + a.backend + "' (expected auto, emu or hip)");
  }
  if (place) r.comm = join_ranks(*place, *r.be);  // before the profiler wraps be: NCCL needs the hip backend
  if (a.profile || a.profile_host) {
    auto p = std::make_unique<ProfilingBackend>(std::move(r.be), a.profile_host ? ProfilingBackend::Mode::Host
                                                                                : ProfilingBackend::Mode::Device);
    r.profiler = p.get();
    r.be = std::move(p);
  }
  return r;
}

// ---------------------------------------------------------------- report

const char* profile_flag(const TrainArgs& a) { return a.profile_host ? "--profile-host" : "--profile"; }
/// Weight statistics of a recipe that does not quantize the weight (bf16) do not apply: '-' in
/// the table, null in JSON.
bool weight_stats_apply(const sim::LayerSummary& l) { return l.quantized; }

void print_run_header(std::FILE* log, const RunBackend& rb, const TrainArgs& a, const sim::Config& cfg,
                      const sim::ProcessPlace* place) {
  std::fprintf(log, "mxsim train: backend %s (%s%s%s), %lld threads, recipes", rb.be->name().c_str(),
               rb.be->device().c_str(), rb.chosen_because.empty() ? "" : "; ", rb.chosen_because.c_str(),
               (long long)a.threads);
  for (sim::Layer l : sim::kLayers)
    std::fprintf(log, " %s=%s", sim::name_of(l), sim::linear_recipe_name(cfg.recipe.linear(l)).c_str());
  std::fprintf(log, ", %d micro-batches", cfg.num_microbatches);
  if (place) std::fprintf(log, ", %d processes (one per GPU; rank 0 reports)", place->size);
  std::fprintf(log, "\n");
}

void print_json_summary(const sim::TrainResult& r, const RunBackend& rb, const TrainArgs& a, const sim::Config& cfg,
                        int stop_signal) {
  using J = nlohmann::ordered_json;
  J j{{"command", "train"},          {"backend", rb.be->name()},
      {"threads", a.threads},        {"steps", r.steps},
      {"seconds", r.seconds},        {"final_loss", json_number(r.final_loss)},
      {"train_accuracy", json_number(r.final_train_acc)},
      {"test_accuracy", r.test_accuracy >= 0 ? json_number(r.test_accuracy) : J()}};
  j["layers"] = J::array();
  for (const auto& l : r.layers) {
    const bool w = weight_stats_apply(l);
    j["layers"].push_back({{"name", l.name},
                           {"recipe", l.recipe},
                           {"w_mse", w ? json_number(l.w_mse) : J()},
                           {"w_sqnr_db", w ? json_number(l.w_sqnr_db) : J()},
                           {"osc_flips", w ? J(l.flips_total) : J()},
                           {"snaps", l.deosc_eligible && cfg.deosc ? J(l.snaps_total) : J()}});
  }
  j["trace"] = a.trace.empty() ? J() : J(a.trace);
  j["interrupted"] = stop_signal != 0 ? J(signal_name(stop_signal)) : J();
  print_json(j);
  if (rb.profiler) std::fprintf(stderr, "\nbackend ops (%s):\n%s", profile_flag(a), rb.profiler->report().c_str());
}

void print_text_summary(const sim::TrainResult& r, const RunBackend& rb, const TrainArgs& a, const sim::Config& cfg) {
  // test_accuracy < 0: no evaluation ran (a run stopped before its last step)
  char test_acc[32] = "n/a (not evaluated)";
  if (r.test_accuracy >= 0) std::snprintf(test_acc, sizeof test_acc, "%.4f", r.test_accuracy);
  std::printf("\nsummary: %lld steps in %.1f s, final loss %.4f, train acc %.4f, test accuracy %s\n",
              (long long)r.steps, r.seconds, r.final_loss, r.final_train_acc, test_acc);
  int rw = 12;  // the recipe column fits per-GEMM names (mxfp4,dgrad=mxfp8,wgrad=bf16)
  for (const auto& l : r.layers) rw = std::max(rw, int(l.recipe.size()));
  std::printf("%-8s %-*s %12s %10s %12s %8s\n", "layer", rw, "recipe", "w_mse", "w_sqnr_dB", "osc_flips", "snaps");
  for (const auto& l : r.layers) {
    char mse[32] = "-", sqnr[32] = "-", flips[32] = "-";
    if (weight_stats_apply(l)) {
      std::snprintf(mse, sizeof mse, "%.4e", l.w_mse);
      std::snprintf(sqnr, sizeof sqnr, "%.2f", l.w_sqnr_db);
      std::snprintf(flips, sizeof flips, "%llu", (unsigned long long)l.flips_total);
    }
    std::printf("%-8s %-*s %12s %10s %12s %8s\n", l.name.c_str(), rw, l.recipe.c_str(), mse, sqnr, flips,
                l.deosc_eligible && cfg.deosc ? std::to_string(l.snaps_total).c_str() : "-");
  }
  if (!a.trace.empty()) std::printf("trace: %s\n", a.trace.c_str());
  if (rb.profiler)
    std::printf("\nbackend ops (%s; %.1f s of the run's %.1f s):\n%s", profile_flag(a), rb.profiler->total_seconds(),
                r.seconds, rb.profiler->report().c_str());
}

// ---------------------------------------------------------------- execute

int run_train(const Args& args, const sim::ProcessPlace* place) {
  std::optional<TrainArgs> parsed = parse_train_args(args);
  if (!parsed) return kExitOk;  // --help
  TrainArgs& a = *parsed;
  const sim::Config cfg = read_config(a);
  if (a.print_config) {
    std::cout << sim::to_toml(cfg);
    return kExitOk;
  }
  refuse_path_conflicts(a, cfg);
  RunBackend rb = open_backend(a, place);
  sim::TrainOptions opt;
  opt.trace_path = a.trace;
  opt.resume_path = a.resume;
  opt.checkpoint_path = a.ckpt;
  opt.threads = int(a.threads);
  opt.stop_after = a.stop_after;
  opt.comm = rb.comm.get();
  if (place && place->rank != 0) {  // rank 0 prints, writes the trace and the checkpoints
    sim::train(cfg, *rb.be, opt);
    return kExitOk;
  }
  std::FILE* log = a.json ? stderr : stdout;  // --json: stdout holds the JSON summary only
  print_run_header(log, rb, a, cfg, place);
  TrainProgress progress(log, isatty(fileno(log)), std::chrono::steady_clock::now());
  opt.on_step = [&](const sim::StepInfo& s) { progress.step(s); };
  opt.stop_requested = &g_stop_requested;
  const sim::TrainResult r = [&] {
    const StopSignals during_the_run;
    return sim::train(cfg, *rb.be, opt);
  }();
  progress.finish();
  const int stop_signal = g_stop_signal;
  if (stop_signal != 0) {
    const char* kept = a.trace.empty() ? (a.ckpt.empty() ? "" : "; the checkpoint holds them")
                                       : (a.ckpt.empty() ? "; the trace holds them" : "; the trace and the checkpoint hold them");
    std::fprintf(stderr, "mxsim train: %s: stopped after %lld steps of this run%s\n", signal_name(stop_signal),
                 (long long)r.steps, kept);
  }
  if (a.json) print_json_summary(r, rb, a, cfg, stop_signal);
  else print_text_summary(r, rb, a, cfg);
  // Shells report a run ended by a signal as 128 + its number; so does an interrupted run here,
  // although it ended cleanly, so that `mxsim train ... && next` does not go on.
  return stop_signal != 0 ? 128 + stop_signal : kExitOk;
}

}  // namespace

}  // namespace mxsim::cli
