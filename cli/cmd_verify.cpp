// mxsim verify: every op of a backend (default: the GPU's) against a fresh
// emulator, bit for bit, on seeded adversarial inputs (mxsim::verify_backends,
// core/include/mxsim/verify.hpp; docs/cli.md, docs/gpu.md).
#include <cstdio>
#include <string>

#include "commands.hpp"
#include "common.hpp"
#include "mxsim/verify.hpp"

namespace mxsim::cli {
namespace {

constexpr int64_t kMaxCases = 1000;

std::string op_list() {
  std::string s;
  for (const std::string& n : verify_op_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::string first_index(const VerifyRow& r) { return r.first_mismatch < 0 ? "-" : std::to_string(r.first_mismatch); }

void print_table(const std::vector<VerifyRow>& rows) {
  std::printf("%-20s %-34s %-52s %10s %10s %8s %14s\n", "op", "shape", "recipe", "compared", "mismatches", "max ULP",
              "first mismatch");
  for (const VerifyRow& r : rows) {
    std::printf("%-20s %-34s %-52s %10llu %10llu %8llu %14s%s%s\n", r.op.c_str(), r.shape.c_str(), r.recipe.c_str(),
                (unsigned long long)r.compared, (unsigned long long)r.mismatches, (unsigned long long)r.max_ulp,
                first_index(r).c_str(), r.note.empty() ? "" : "  ", r.note.c_str());
  }
}

nlohmann::ordered_json rows_json(const std::vector<VerifyRow>& rows) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const VerifyRow& r : rows)
    a.push_back({{"op", r.op},
                 {"shape", r.shape},
                 {"recipe", r.recipe},
                 {"compared", r.compared},
                 {"mismatches", r.mismatches},
                 {"max_ulp", r.max_ulp},
                 {"first_mismatch", r.first_mismatch < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(r.first_mismatch)},
                 {"note", r.note}});
  return a;
}

int run(const Args& args) {
  po::options_description opts("options");
  opts.add_options()("help,h", "this help")
      ("backend", po::value<std::string>()->default_value("hip"), "the backend checked against the emulator: hip | emu")
      ("cases", po::value<std::string>(), ("seeded cases per op, 1 to " + std::to_string(kMaxCases) + " (default 3)").c_str())
      ("seed", po::value<std::string>(), "random seed, 0 to 18446744073709551615 (default 1)")
      ("op", po::value<std::string>(), "only this op (see below)")
      ("threads", po::value<std::string>(), "worker threads of both backends, 1 to 1024 (default: the backends' own; results never depend on it)");
  add_format_options(opts, false, "the rows");
  const CommandHelp help{
      "verify", "[--backend hip|emu] [--cases N] [--seed S] [--op NAME] [--threads N] [--json]",
      "Run every operation of a backend and of a fresh CPU emulator on the same seeded adversarial inputs\n"
      "(ragged and empty groups, NaN / Inf, extreme scales, saturating blocks, ties, rounding midpoints) and\n"
      "compare the results bit for bit: one row per case with the elements compared, the mismatching ones,\n"
      "the largest ULP distance and the first mismatching index. --backend emu checks the emulator against\n"
      "a second instance of itself.",
      "ops: " + op_list(),
      "0 every result identical, 1 a mismatch or no usable backend, 2 usage error"};
  const Parsed p = parse(args, opts);
  if (p.has("help")) {
    print_help(stdout, help, opts);
    return kExitOk;
  }
  const OutputFormat out = output_format(p, false);
  VerifyOptions o;
  o.cases = int(int_option(p, "cases", 1, kMaxCases, 3));
  o.seed = uint_option(p, "seed", 0, UINT64_MAX, 1);
  if (p.has("op")) {
    o.op = p.str("op");
    if (!verify_op_from_name(o.op)) throw UsageError("--op: unknown op '" + o.op + "' (known: " + op_list() + ")");
  }
  const std::string name = p.str("backend");
  if (name != "hip" && name != "emu") throw UsageError("--backend: unknown backend '" + name + "' (expected hip or emu)");
  std::string why;
  std::unique_ptr<Backend> candidate = make_backend(name, &why);
  if (!candidate) {
    std::fprintf(stderr, "mxsim verify: no %s backend: %s\n", name.c_str(), why.c_str());
    return kExitError;
  }
  std::unique_ptr<Backend> reference = make_backend("emu", &why);
  if (p.has("threads")) {
    const int threads = int(int_option(p, "threads", 1, 1024, 1));
    reference->set_threads(threads);
    candidate->set_threads(threads);
  }
  const std::vector<VerifyRow> rows = verify_backends(*reference, *candidate, o);

  uint64_t mismatching = 0;
  for (const VerifyRow& r : rows) mismatching += r.mismatches;
  const uint64_t cases = rows.size();
  const bool failed = mismatching > 0;
  if (out == OutputFormat::Json) {
    nlohmann::ordered_json j{{"command", "verify"},       {"reference", reference->name()},
                             {"candidate", candidate->name()}, {"cases_per_op", o.cases},
                             {"seed", o.seed},             {"op", o.op.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(o.op)},
                             {"cases", cases},             {"mismatching_elements", mismatching},
                             {"ok", !failed}};
    j["rows"] = rows_json(rows);
    print_json(j);
  } else {
    std::printf("mxsim verify: %s against %s, %d cases per op, seed %llu\n", candidate->name().c_str(),
                reference->name().c_str(), o.cases, (unsigned long long)o.seed);
    print_table(rows);
    std::printf("verify: %llu cases, %llu mismatching elements\n", (unsigned long long)cases,
                (unsigned long long)mismatching);
  }
  return failed ? kExitError : kExitOk;
}

}  // namespace

int cmd_verify(const Args& args) { return guarded("verify", [&] { return run(args); }); }

}  // namespace mxsim::cli
