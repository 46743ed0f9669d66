// mxsim compare A.h5 B.h5: side-by-side summary of two traces, the first bit
// difference, per-dataset first differences and the largest difference per step.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>

#include "commands.hpp"
#include "common.hpp"
#include "mxsim/trace/compare.hpp"
#include "mxsim/trace/reader.hpp"

namespace mxsim::cli {
namespace {

std::string opt_num(const std::optional<double>& v) { return v ? num(*v) : "-"; }

/// "first-last" of a range of steps or rows.
std::string range(int64_t first, int64_t last) { return std::to_string(first) + "-" + std::to_string(last); }
/// A trace's global steps ("-" where its /train/step is not usable or it has no complete step).
std::string global_range(int64_t first, uint64_t steps) {
  return first < 0 || steps == 0 ? "-" : range(first, first + int64_t(steps) - 1);
}
nlohmann::ordered_json opt_json(const std::optional<double>& v) { return v ? json_number(*v) : nlohmann::ordered_json(); }

/// Config values longer than this are abbreviated in the text report (a config may hold a value
/// of 200 KB, which the table would print whole, padding every row to its width); --json keeps them.
constexpr size_t kValueShown = 64;

/// Where two config values first differ (a byte offset), or npos when one side lacks the key.
size_t first_difference(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return std::string::npos;
  return size_t(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}

/// `v` for the text table: whole when short, else kValueShown bytes around `diff` (where the
/// two sides first differ; the start when npos) with "..." where it was cut, its length and
/// that offset: "...aaab... (200017 bytes, first difference at byte 104857)".
std::string shown_value(const std::string& v, size_t diff) {
  if (v.empty()) return "-";
  if (v.size() <= kValueShown) return v;
  const auto continuation = [&](size_t i) { return i < v.size() && (uint8_t(v[i]) & 0xC0) == 0x80; };
  size_t from = diff == std::string::npos ? 0 : std::min(diff, v.size());
  from = from > kValueShown / 4 ? from - kValueShown / 4 : 0;
  size_t to = std::min(v.size(), from + kValueShown);
  while (continuation(from) && from > 0) --from;  // whole UTF-8 characters only
  while (continuation(to)) --to;
  std::string s = (from > 0 ? "..." : "") + v.substr(from, to - from) + (to < v.size() ? "..." : "");
  s += " (" + std::to_string(v.size()) + " bytes";
  if (diff != std::string::npos) s += ", first difference at byte " + std::to_string(diff);
  return s + ")";
}

/// A two-column table whose first column is as wide as its longest entry, so long
/// dataset names never push the values out of line.
struct Table {
  std::vector<std::vector<std::string>> rows;
  void print(const char* indent = "  ") const {
    std::vector<size_t> w;
    for (const auto& r : rows)
      for (size_t i = 0; i < r.size(); ++i) {
        if (w.size() <= i) w.push_back(0);
        w[i] = std::max(w[i], r[i].size());
      }
    for (const auto& r : rows) {
      std::string line = indent;
      for (size_t i = 0; i < r.size(); ++i) {
        line += r[i];
        if (i + 1 < r.size()) line += std::string(w[i] - r[i].size() + 2, ' ');
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      std::printf("%s\n", line.c_str());
    }
  }
};

/// The two traces compared, with what every report shows of them.
struct Compared {
  std::string fa, fb;
  trace::CompareResult r;
  trace::Provenance pa, pb;
  bool have_range = false;  ///< rows paired by global step and some step compared
  int64_t lo = -1, hi = -1;  ///< the global steps compared (have_range)
};

Compared compare_traces(const std::string& fa, const std::string& fb) {
  Compared c{fa, fb, trace::compare(fa, fb), trace::Reader(fa).provenance(), trace::Reader(fb).provenance()};
  c.have_range = c.r.alignment.by_global_step && c.r.steps_compared > 0;
  if (c.have_range) c.lo = c.r.step_of(0), c.hi = c.r.step_of(c.r.steps_compared - 1);
  return c;
}

const CommandHelp& help() {
  static const CommandHelp h{
      "compare", "A.h5 B.h5 [--json|--csv]",
      "Compares two mxsim traces (live files too: opened with SWMR read): final value of every scalar\n"
      "series, config differences, the first step and dataset whose bits differ, and for every common\n"
      "dataset its first differing step and largest difference. Rows are paired by global step\n"
      "(/train/step): a run resumed from a checkpoint is compared over the global steps both traces\n"
      "cover, and steps are reported as global steps; traces without a consecutive /train/step are\n"
      "paired row by row (steps are then trace rows, 0-based).",
      "CSV: one row per common dataset (dataset, first_step, element, steps_differing, max_abs_diff,\n"
      "compared_first_step, compared_last_step; first_step -1 = bit-identical; the compared range is\n"
      "empty where rows are paired by index or no step is common).",
      "0 identical, 1 different (or a runtime / data error: a missing or unreadable trace), 2 usage error"};
  return h;
}

void report_json(const Compared& c) {
  const trace::CompareResult& r = c.r;
  const std::string &fa = c.fa, &fb = c.fb;
  const trace::Provenance &pa = c.pa, &pb = c.pb;
  const auto& al = r.alignment;
  const bool have_range = c.have_range;
  const int64_t lo = c.lo, hi = c.hi;
  nlohmann::ordered_json j;
  j["command"] = "compare";
  j["identical"] = r.identical();
  auto side = [](const std::string& f, uint64_t steps, int64_t first, const trace::Provenance& pr) {
    const bool known = first >= 0 && steps > 0;
    return nlohmann::ordered_json{{"file", f},
                                  {"complete_steps", steps},
                                  {"first_step", known ? nlohmann::ordered_json(first) : nlohmann::ordered_json()},
                                  {"last_step", known ? nlohmann::ordered_json(first + int64_t(steps) - 1)
                                                      : nlohmann::ordered_json()},
                                  {"backend", pr.backend},
                                  {"seed", pr.seed},
                                  {"version", pr.version},
                                  {"commit", pr.git_describe},
                                  {"date", pr.date},
                                  {"host", pr.host}};
  };
  j["a"] = side(fa, r.steps_a, al.first_step_a, pa);
  j["b"] = side(fb, r.steps_b, al.first_step_b, pb);
  j["steps_compared"] = r.steps_compared;
  {
    auto rows = [&](uint64_t first) {
      return r.steps_compared == 0 ? nlohmann::ordered_json()
                                   : nlohmann::ordered_json::array({first, first + r.steps_compared - 1});
    };
    j["compared"] = {{"pairing", al.by_global_step ? "global_step" : "index"},
                     {"first_step", have_range ? nlohmann::ordered_json(lo) : nlohmann::ordered_json()},
                     {"last_step", have_range ? nlohmann::ordered_json(hi) : nlohmann::ordered_json()},
                     {"a_rows", rows(al.row_a)},
                     {"b_rows", rows(al.row_b)},
                     {"note", al.note.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(al.note)}};
  }
  j["config_differences"] = nlohmann::ordered_json::array();
  for (const auto& d : r.config_diffs)
    j["config_differences"].push_back({{"key", d.key},
                                       {"a", d.a.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(d.a)},
                                       {"b", d.b.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(d.b)}});
  j["finals"] = nlohmann::ordered_json::array();
  for (const auto& f : r.finals) j["finals"].push_back({{"name", f.name}, {"a", opt_json(f.a)}, {"b", opt_json(f.b)}});
  j["only_a"] = r.only_a;
  j["only_b"] = r.only_b;
  j["mismatched"] = r.mismatched;
  j["only_a_outside"] = r.only_a_outside;
  j["only_b_outside"] = r.only_b_outside;
  if (r.first_difference)
    j["first_difference"] = {{"step", r.first_difference->step},
                             {"dataset", r.first_difference->dataset},
                             {"element", r.first_difference->element},
                             {"a_row", r.first_difference->row_a},
                             {"b_row", r.first_difference->row_b}};
  else
    j["first_difference"] = nullptr;
  j["datasets"] = nlohmann::ordered_json::array();
  for (const auto& d : r.per_dataset) {
    nlohmann::ordered_json e{{"dataset", d.dataset}, {"identical", d.first_step < 0}};
    e["first_step"] = d.first_step < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(d.first_step);
    e["element"] = d.first_step < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(d.element);
    e["steps_differing"] = d.steps_differing;
    e["max_abs_diff"] = json_number(d.max_abs_diff);
    j["datasets"].push_back(e);
  }
  j["steps"] = nlohmann::ordered_json::array();
  for (const auto& s : r.per_step)
    j["steps"].push_back({{"step", s.step}, {"max_abs_diff", json_number(s.max_abs_diff)}, {"dataset", s.dataset}});
  print_json(j);
}

void report_csv(const Compared& c) {
  const trace::CompareResult& r = c.r;
  std::printf("%s", csv_row({"dataset", "first_step", "element", "steps_differing", "max_abs_diff",
                             "compared_first_step", "compared_last_step"})
                        .c_str());
  const std::string cf = c.have_range ? std::to_string(c.lo) : "", cl = c.have_range ? std::to_string(c.hi) : "";
  for (const auto& d : r.per_dataset)
    std::printf("%s", csv_row({d.dataset, std::to_string(d.first_step), std::to_string(d.first_step < 0 ? 0 : d.element),
                               std::to_string(d.steps_differing), num(d.max_abs_diff), cf, cl})
                          .c_str());
}

/// The text report's tables: provenance, config differences, final values, datasets of one side.
void report_text_tables(const Compared& c) {
  const trace::CompareResult& r = c.r;
  const std::string &fa = c.fa, &fb = c.fb;
  const trace::Provenance &pa = c.pa, &pb = c.pb;
  const auto& al = r.alignment;
  Table head;
  head.rows = {{"", "A", "B"},
               {"file", fa, fb},
               {"complete steps", std::to_string(r.steps_a), std::to_string(r.steps_b)},
               {"global steps", global_range(al.first_step_a, r.steps_a), global_range(al.first_step_b, r.steps_b)},
               {"backend", pa.backend, pb.backend},
               {"seed", std::to_string(pa.seed), std::to_string(pb.seed)},
               {"version", pa.version, pb.version},
               {"commit", pa.git_describe, pb.git_describe}};
  head.print("");
  std::printf("\nconfig differences: %zu\n", r.config_diffs.size());
  Table cfg;
  for (const auto& d : r.config_diffs) {
    const size_t at = first_difference(d.a, d.b);
    cfg.rows.push_back({d.key, shown_value(d.a, at), shown_value(d.b, at)});
  }
  cfg.print();
  std::printf("\nfinal values (last complete step):\n");
  Table fin;
  for (const auto& f : r.finals) {
    const bool same = f.a && f.b && *f.a == *f.b;
    fin.rows.push_back({f.name, opt_num(f.a), opt_num(f.b), same ? "" : "*"});
  }
  fin.print();
  for (const auto& n : r.only_a) std::printf("only in A: %s\n", n.c_str());
  for (const auto& n : r.only_b) std::printf("only in B: %s\n", n.c_str());
  for (const auto& n : r.mismatched) std::printf("dtype/shape differ: %s\n", n.c_str());
  for (const auto& n : r.only_a_outside) std::printf("only in A, no snapshot in the compared steps: %s\n", n.c_str());
  for (const auto& n : r.only_b_outside) std::printf("only in B, no snapshot in the compared steps: %s\n", n.c_str());
}

/// The text report's differing datasets and steps.
void report_text_differences(const trace::CompareResult& r) {
  size_t differing = 0;
  for (const auto& d : r.per_dataset) differing += d.first_step >= 0;
  if (differing) {
    std::printf("\ndatasets that differ (%zu of %zu):\n", differing, r.per_dataset.size());
    Table t;
    t.rows.push_back({"dataset", "first step", "element", "steps differing", "max |A-B|"});
    for (const auto& d : r.per_dataset)
      if (d.first_step >= 0)
        t.rows.push_back({d.dataset, std::to_string(d.first_step), std::to_string(d.element),
                          std::to_string(d.steps_differing), num(d.max_abs_diff)});
    t.print();
    std::printf("\nlargest difference per step (%zu steps differ):\n", r.per_step.size());
    Table s;
    s.rows.push_back({"step", "max |A-B|", "dataset"});
    constexpr size_t kShown = 50;  // the text stays readable; --json / --csv list every step
    for (size_t i = 0; i < r.per_step.size() && i < kShown; ++i)
      s.rows.push_back({std::to_string(r.per_step[i].step), num(r.per_step[i].max_abs_diff), r.per_step[i].dataset});
    s.print();
    if (r.per_step.size() > kShown) std::printf("  ... %zu more steps (--json lists all)\n", r.per_step.size() - kShown);
  }
}

/// The text report's last lines: what was compared and the first difference.
void report_text_summary(const Compared& c) {
  const trace::CompareResult& r = c.r;
  const auto& al = r.alignment;
  const int64_t lo = c.lo, hi = c.hi;
  // Rows paired with an offset (a resumed run): name the global steps and the rows of each file.
  const bool offset = al.by_global_step && al.first_step_a != al.first_step_b;
  if (!al.note.empty()) std::printf("\nnote: %s\n", al.note.c_str());
  if (offset && r.steps_compared == 0) {
    std::printf("\ncompared %zu common datasets over no common global steps (A %s, B %s): nothing compared\n",
                r.common.size(), global_range(al.first_step_a, r.steps_a).c_str(),
                global_range(al.first_step_b, r.steps_b).c_str());
  } else {
    if (offset)
      std::printf("\ncompared %zu common datasets over global steps %s (A rows %s, B rows %s): ", r.common.size(),
                  range(lo, hi).c_str(), range(int64_t(al.row_a), int64_t(al.row_a + r.steps_compared - 1)).c_str(),
                  range(int64_t(al.row_b), int64_t(al.row_b + r.steps_compared - 1)).c_str());
    else
      std::printf("\ncompared %zu common datasets over %llu steps: ", r.common.size(), (unsigned long long)r.steps_compared);
    if (r.first_difference) {
      std::printf("first difference at step %lld in %s (element %llu)", (long long)r.first_difference->step,
                  r.first_difference->dataset.c_str(), (unsigned long long)r.first_difference->element);
      if (offset)
        std::printf(" (A row %llu, B row %llu)", (unsigned long long)r.first_difference->row_a,
                    (unsigned long long)r.first_difference->row_b);
      std::printf("\n");
    } else {
      std::printf("bit-identical\n");
    }
  }
  std::printf("result: %s\n", r.identical() ? "identical" : "different");
}

int run(const Args& args) {
  po::options_description opts("options");
  opts.add_options()("help,h", "this help");
  add_format_options(opts, true, "the comparison");
  const Parsed p = parse(args, opts, "A.h5 B.h5");
  if (p.has("help")) {
    print_help(stdout, help(), opts);
    return kExitOk;
  }
  const OutputFormat out = output_format(p, true);
  if (p.positional.size() != 2)
    throw UsageError("expected two traces A.h5 B.h5, got " + std::to_string(p.positional.size()) + " argument(s)");
  const Compared c = compare_traces(p.positional[0], p.positional[1]);
  if (out == OutputFormat::Json) {
    report_json(c);
  } else if (out == OutputFormat::Csv) {
    report_csv(c);
  } else {
    report_text_tables(c);
    report_text_differences(c.r);
    report_text_summary(c);
  }
  return c.r.identical() ? kExitOk : kExitError;
}

}  // namespace

int cmd_compare(const Args& args) { return guarded("compare", [&] { return run(args); }); }

}  // namespace mxsim::cli
