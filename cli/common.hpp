// What every `mxsim` command shares: the exit-code scheme, the --help format,
// option parsing with range-checked numbers, errors that never show a raw
// exception, and the JSON / CSV writers. docs/cli.md documents the scheme.
#pragma once
#include <boost/program_options.hpp>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"
#include "mxsim/backend.hpp"
#include "mxsim/backend_select.hpp"
#include "mxsim/quant_spec.hpp"

namespace mxsim::cli {

namespace po = boost::program_options;

/// Exit status of every command.
inline constexpr int kExitOk = 0;     ///< success (compare: the traces are identical)
inline constexpr int kExitError = 1;  ///< runtime or data error (bad input file, shape, write failure; compare: different)
inline constexpr int kExitUsage = 2;  ///< usage error (unknown command or option, bad or missing value, stray argument)

/// A usage error: the command prints "mxsim CMD: usage error: <what>" and a
/// pointer to --help, and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The --help text of one command, printed in one format by print_help:
///   usage: mxsim NAME SYNOPSIS
///   <blank> SUMMARY <blank> options: ... <blank> EPILOG <blank> exit status line
struct CommandHelp {
  std::string name;      ///< "quantize"
  std::string synopsis;  ///< "--recipe NAME IN... [-o OUT] [options]"
  std::string summary;   ///< what the command does (a few lines)
  std::string epilog;    ///< extra reference text after the options ("" for none)
  std::string exit_note; ///< command-specific meaning of the exit codes ("" for the common one)
};
void print_help(std::FILE* to, const CommandHelp& h, const po::options_description& opts);

/// Parse `args` against `opts`. Positional arguments are returned in order
/// when `positional_name` is not empty (its meaning, for messages), and are a
/// usage error ("unexpected argument 'X'") otherwise. Boost errors (unknown
/// option, missing value, an option given twice) become UsageError.
struct Parsed {
  po::variables_map vm;
  std::vector<std::string> positional;
  bool has(const char* name) const { return vm.count(name) > 0; }
  bool flag(const char* name) const { return vm.count(name) && vm[name].as<bool>(); }
  std::string str(const char* name) const { return vm[name].as<std::string>(); }
};
Parsed parse(const Args& args, const po::options_description& opts, const std::string& positional_name = "");

/// The integer value of option `name` (declared as po::value<std::string>), in
/// [lo, hi]. Throws UsageError naming the option and the allowed range when
/// the text is not a decimal integer or is out of range ("--m: -5 is out of
/// range (allowed: 1 to 16384)"). `fallback` when the option is absent.
int64_t int_option(const Parsed& p, const char* name, int64_t lo, int64_t hi, int64_t fallback);
uint64_t uint_option(const Parsed& p, const char* name, uint64_t lo, uint64_t hi, uint64_t fallback);
/// A decimal integer of text in [lo, hi]; `what` names it in messages.
int64_t parse_int(const std::string& what, const std::string& text, int64_t lo, int64_t hi);

/// The spec of one tensor that option `option` ("--recipe") names: mxsim::named_spec, its
/// aliases included. Throws UsageError naming the option: for an unknown name with named_spec's
/// "did you mean" and the known names; for the name of a per-linear training recipe
/// (sim::kRecipeNames: bf16, fp8_delayed) saying so and where it belongs.
QuantSpec spec_option(const char* option, const std::string& name);

/// Run a command body with the common error handling: UsageError -> message
/// on stderr and exit 2; any other exception (std::bad_alloc included) ->
/// "mxsim NAME: error: ..." and exit 1. No exception text of a library is
/// shown without the command's own words around it.
int guarded(const std::string& name, const std::function<int()>& body);

/// Output formats of the reporting commands.
enum class OutputFormat { Text, Json, Csv };
/// From --json / --csv (exclusive: both is a usage error; --csv only where
/// `csv_allowed`).
OutputFormat output_format(const Parsed& p, bool csv_allowed);
/// Adds --json (and --csv when `csv`) to `opts`.
void add_format_options(po::options_description& opts, bool csv, const char* what);

/// Print JSON with a final newline; bytes that are not UTF-8 (a file name)
/// are replaced by U+FFFD instead of failing.
void print_json(const nlohmann::ordered_json& j);
/// A finite double as a JSON number; inf, -inf and NaN as the strings
/// "inf", "-inf", "nan" (JSON has no such numbers).
nlohmann::ordered_json json_number(double v);
/// One CSV record (RFC 4180: fields holding ',', '"', CR or LF are quoted,
/// quotes doubled), terminated by "\n".
std::string csv_row(const std::vector<std::string>& fields);
/// A double for CSV and text tables: "%.9g", or inf / -inf / nan.
std::string num(double v, const char* fmt = "%.9g");

/// A file a command reads, and what names it in messages: "input file" for
/// the main inputs, "--rand-file input file" for one an option names.
struct InputPath {
  std::filesystem::path path;
  std::string role = "input file";
};
/// Refuses an output that would replace a file the same command reads: throws
/// std::runtime_error "<out>: is the <role> <input>; refusing to overwrite it
/// (choose another <out_option>)" when `out` exists and is the same file
/// (device and inode: another spelling, a hard or symbolic link) as any of
/// `inputs`. Every command checks each output against every input it reads
/// with this, the main inputs and those options name alike.
void refuse_overwriting_input(const std::filesystem::path& out, const std::vector<InputPath>& inputs,
                              const std::string& out_option = "-o");

/// make_backend(name, why): mxsim/backend_select.hpp (one place for the CLI and the inspector).
using mxsim::make_backend;


/// "mxsim 0.1.0 (commit <build commit>)".
std::string version_line();

}  // namespace mxsim::cli
