#include "common.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <iostream>
#include <new>
#include <sstream>

#include "mxsim/build_info.hpp"
#include "mxsim/io/atomic_output.hpp"
#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/sim/recipe.hpp"

namespace mxsim::cli {

QuantSpec spec_option(const char* option, const std::string& name) {
  try {
    return named_spec(name);
  } catch (const std::invalid_argument& e) {
    const std::string r = sim::canonical_recipe_name(name);
    if (!r.empty()) {
      std::string specs;
      for (const auto& n : named_spec_names()) specs += (specs.empty() ? "" : ", ") + n;
      throw UsageError(std::string(option) + " " + name + ": that is a per-linear training recipe (mxsim train --set " +
                       "recipe.<layer>=" + name + "), not a spec of one tensor; specs: " + specs);
    }
    throw UsageError(std::string(option) + ": " + e.what());
  }
}

void print_help(std::FILE* to, const CommandHelp& h, const po::options_description& opts) {
  std::ostringstream o;
  o << opts;
  std::fprintf(to, "usage: mxsim %s %s\n\n%s\n\n%s", h.name.c_str(), h.synopsis.c_str(), h.summary.c_str(),
               o.str().c_str());
  if (!h.epilog.empty()) std::fprintf(to, "\n%s\n", h.epilog.c_str());
  std::fprintf(to, "\nexit status: %s\n",
               h.exit_note.empty() ? "0 success, 1 runtime or data error, 2 usage error" : h.exit_note.c_str());
}

namespace {
bool looks_negative_number(const std::string& t) {
  if (t.size() < 2 || t[0] != '-') return false;
  const char c = t[1];
  if ((c >= '0' && c <= '9') || c == '.') return true;
  std::string rest = t.substr(1);
  for (char& ch : rest) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return rest == "inf" || rest == "infinity" || rest == "nan";
}

/// Moves every positional argument behind a "--", so that a negative number
/// ("-0.75") is a value, not an unknown option; the value of an option that
/// takes one stays with it. Order among positionals is kept.
Args positionals_last(const Args& args, const po::options_description& opts) {
  Args named, pos;
  bool rest = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& t = args[i];
    if (rest) {
      pos.push_back(t);
      continue;
    }
    if (t == "--") {
      rest = true;
      continue;
    }
    if (t.size() > 1 && t[0] == '-' && !looks_negative_number(t)) {
      named.push_back(t);
      const bool is_long = t.rfind("--", 0) == 0;
      std::string name = is_long ? t.substr(2) : t.substr(0, 2);  // Boost keeps short names with the dash
      if (is_long && name.find('=') != std::string::npos) continue;
      if (!is_long && t.size() > 2) continue;  // "-ofile"
      const po::option_description* d = opts.find_nothrow(name, false, false, false);
      if (d && d->semantic()->max_tokens() > 0 && i + 1 < args.size()) named.push_back(args[++i]);
      continue;
    }
    pos.push_back(t);
  }
  if (!pos.empty()) {
    named.push_back("--");
    named.insert(named.end(), pos.begin(), pos.end());
  }
  return named;
}
}  // namespace

Parsed parse(const Args& args_in, const po::options_description& opts, const std::string& positional_name) {
  const Args args = positionals_last(args_in, opts);
  po::options_description all;
  all.add(opts);
  all.add_options()("mxsim-positional", po::value<std::vector<std::string>>());
  po::positional_options_description pos;
  pos.add("mxsim-positional", -1);
  Parsed p;
  try {
    po::store(po::command_line_parser(args).options(all).positional(pos).run(), p.vm);
    po::notify(p.vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  if (p.vm.count("mxsim-positional")) p.positional = p.vm["mxsim-positional"].as<std::vector<std::string>>();
  if (positional_name.empty() && !p.positional.empty())
    throw UsageError("unexpected argument '" + p.positional[0] + "' (this command takes options only)");
  return p;
}

int64_t parse_int(const std::string& what, const std::string& text, int64_t lo, int64_t hi) {
  const std::string range = "(allowed: " + std::to_string(lo) + " to " + std::to_string(hi) + ")";
  int64_t v = 0;
  const char* b = text.data();
  const char* e = b + text.size();
  if (b != e && *b == '+') ++b;
  const auto r = std::from_chars(b, e, v);
  if (text.empty() || r.ptr != e) throw UsageError(what + ": '" + text + "' is not an integer " + range);
  if (r.ec == std::errc::result_out_of_range || v < lo || v > hi)
    throw UsageError(what + ": " + text + " is out of range " + range);
  return v;
}

int64_t int_option(const Parsed& p, const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  if (!p.vm.count(name)) return fallback;
  return parse_int(std::string("--") + name, p.vm[name].as<std::string>(), lo, hi);
}

uint64_t uint_option(const Parsed& p, const char* name, uint64_t lo, uint64_t hi, uint64_t fallback) {
  if (!p.vm.count(name)) return fallback;
  const std::string text = p.vm[name].as<std::string>();
  const std::string what = std::string("--") + name;
  const std::string range = "(allowed: " + std::to_string(lo) + " to " + std::to_string(hi) + ")";
  uint64_t v = 0;
  const char* b = text.data();
  const char* e = b + text.size();
  if (b != e && *b == '+') ++b;
  if (b != e && *b == '-') throw UsageError(what + ": " + text + " is out of range " + range);
  const auto r = std::from_chars(b, e, v);
  if (text.empty() || r.ptr != e) throw UsageError(what + ": '" + text + "' is not an integer " + range);
  if (r.ec == std::errc::result_out_of_range || v < lo || v > hi)
    throw UsageError(what + ": " + text + " is out of range " + range);
  return v;
}

int guarded(const std::string& name, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "mxsim %s: usage error: %s\n(mxsim %s --help lists the options)\n", name.c_str(), e.what(),
                 name.c_str());
    return kExitUsage;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "mxsim %s: error: out of memory (the input or the requested sizes are too large)\n",
                 name.c_str());
    return kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mxsim %s: error: %s\n", name.c_str(), e.what());
    return kExitError;
  }
}

void add_format_options(po::options_description& opts, bool csv, const char* what) {
  opts.add_options()("json", po::bool_switch(), (std::string("print ") + what + " as one JSON object").c_str());
  if (csv) opts.add_options()("csv", po::bool_switch(), (std::string("print ") + what + " as CSV (a header row, then one row per record)").c_str());
}

OutputFormat output_format(const Parsed& p, bool csv_allowed) {
  const bool j = p.flag("json");
  const bool c = csv_allowed && p.flag("csv");
  if (j && c) throw UsageError("--json and --csv exclude each other");
  return j ? OutputFormat::Json : c ? OutputFormat::Csv : OutputFormat::Text;
}

void print_json(const nlohmann::ordered_json& j) {
  std::printf("%s\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
}

nlohmann::ordered_json json_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

std::string csv_row(const std::vector<std::string>& fields) {
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    const std::string& f = fields[i];
    if (i) out += ',';
    if (f.find_first_of(",\"\r\n") == std::string::npos) {
      out += f;
      continue;
    }
    out += '"';
    for (char c : f) {
      if (c == '"') out += '"';
      out += c;
    }
    out += '"';
  }
  return out + "\n";
}

std::string num(double v, const char* fmt) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

void refuse_overwriting_input(const std::filesystem::path& out, const std::vector<InputPath>& inputs,
                              const std::string& out_option) {
  const std::optional<io::FileId> id = io::file_id(out);
  if (!id) return;  // a new file replaces nothing
  for (const auto& in : inputs)
    if (io::file_id(in.path) == id)
      throw std::runtime_error(out.string() + ": is the " + in.role + " " + in.path.string() +
                               "; refusing to overwrite it (choose another " + out_option + ")");
}

std::string version_line() {
  return std::string("mxsim ") + mxsim::version() + " (commit " + mxsim::build_commit() + ")";
}

}  // namespace mxsim::cli
