// mxsim compare A.h5 B.h5: side-by-side summary of two traces and the first bit difference.
// Exit status (like cmp/diff): 0 identical, 1 different, 2 usage or I/O error.
#include <cstdio>
#include <string>

#include "commands.hpp"
#include "mxsim/trace/compare.hpp"
#include "mxsim/trace/reader.hpp"

namespace mxsim::cli {

namespace {
std::string fmt(const std::optional<double>& v) {
  if (!v) return "-";
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", *v);
  return b;
}
void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: mxsim compare A.h5 B.h5\n"
               "  Compares two mxsim traces (live files too: opened with SWMR read): final value of every\n"
               "  scalar series, config differences, and the first step and dataset whose bits differ\n"
               "  (every common series and snapshot, up to the shorter run's complete steps).\n"
               "  Exit status: 0 identical, 1 different, 2 usage or I/O error.\n");
}
}  // namespace

int cmd_compare(const Args& args) {
  if (args.size() == 1 && (args[0] == "-h" || args[0] == "--help")) {
    usage(stdout);
    return 0;
  }
  if (args.size() != 2) {
    usage(stderr);
    return 2;
  }
  try {
    const auto r = trace::compare(args[0], args[1]);
    const auto pa = trace::Reader(args[0]).provenance();
    const auto pb = trace::Reader(args[1]).provenance();
    std::printf("%-36s %-24s %-24s\n", "", "A", "B");
    std::printf("%-36s %-24s %-24s\n", "file", args[0].c_str(), args[1].c_str());
    std::printf("%-36s %-24llu %-24llu\n", "complete steps", (unsigned long long)r.steps_a,
                (unsigned long long)r.steps_b);
    std::printf("%-36s %-24s %-24s\n", "backend", pa.backend.c_str(), pb.backend.c_str());
    std::printf("%-36s %-24llu %-24llu\n", "seed", (unsigned long long)pa.seed, (unsigned long long)pb.seed);
    std::printf("%-36s %-24s %-24s\n", "version", pa.version.c_str(), pb.version.c_str());
    std::printf("%-36s %-24s %-24s\n", "git", pa.git_describe.c_str(), pb.git_describe.c_str());
    std::printf("\nconfig differences: %zu\n", r.config_diffs.size());
    for (const auto& d : r.config_diffs)
      std::printf("  %-34s %-24s %-24s\n", d.key.c_str(), d.a.empty() ? "-" : d.a.c_str(), d.b.empty() ? "-" : d.b.c_str());
    std::printf("\nfinal values (last complete step):\n");
    for (const auto& f : r.finals) {
      const bool same = f.a && f.b && *f.a == *f.b;
      std::printf("  %-34s %-24s %-24s%s\n", f.name.c_str(), fmt(f.a).c_str(), fmt(f.b).c_str(), same ? "" : "  *");
    }
    for (const auto& n : r.only_a) std::printf("only in A: %s\n", n.c_str());
    for (const auto& n : r.only_b) std::printf("only in B: %s\n", n.c_str());
    for (const auto& n : r.mismatched) std::printf("dtype/shape differ: %s\n", n.c_str());
    std::printf("\ncompared %zu common datasets over %llu steps: ", r.common.size(),
                (unsigned long long)r.steps_compared);
    if (r.first_difference)
      std::printf("first difference at step %lld in %s (element %llu)\n", (long long)r.first_difference->step,
                  r.first_difference->dataset.c_str(), (unsigned long long)r.first_difference->element);
    else
      std::printf("bit-identical\n");
    std::printf("result: %s\n", r.identical() ? "identical" : "different");
    return r.identical() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mxsim compare: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace mxsim::cli
