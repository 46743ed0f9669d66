// mxsim cast: convert single values to any format of the table with a chosen
// rounding mode and overflow policy (mxsim::encode, docs/numerics.md §2), and
// show the code and the value it decodes to: a check of one conversion.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "commands.hpp"
#include "common.hpp"
#include "mxsim/format.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::cli {
namespace {

std::string hex_code(uint32_t code, int bits) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%0*X", (bits + 3) / 4, code);
  return b;
}

std::string bin_code(const FormatSpec& f, uint32_t code) {
  // sign | exponent | mantissa, split with '.' as the format tables write them
  std::string s;
  int bit = f.bits - 1;
  auto take = [&](int n) {
    for (int i = 0; i < n; ++i, --bit) s += (code >> bit) & 1 ? '1' : '0';
  };
  if (f.has_sign) {
    take(1);
    s += '.';
  }
  take(f.exp_bits);
  if (f.man_bits) {
    s += '.';
    take(f.man_bits);
  }
  return s;
}

Format format_arg(const std::string& opt, const std::string& v) {
  Format f;
  if (!format_from_name(v, f)) {
    std::string known;
    for (int i = 0; i < kNumFormats; ++i) known += std::string(known.empty() ? "" : ", ") + short_name(Format(i));
    throw UsageError(opt + ": unknown format '" + v + "' (known: " + known + ")");
  }
  return f;
}

/// One value: decimal or hexadecimal float text (strtof: correctly rounded to
/// FP32, RNE), inf / nan, or with --bits an FP32 bit pattern; with --from a
/// code of that format.
uint32_t parse_value(const std::string& text, bool bits, const FormatSpec* from, float& as_f32) {
  if (bits || from) {
    const int nbits = from ? from->bits : 32;
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(text.c_str(), &end, 0);
    if (text.empty() || *end || errno || text[0] == '-' || (nbits < 64 && v >> nbits))
      throw UsageError("'" + text + "' is not a " + std::to_string(nbits) + "-bit code (decimal, 0x hex or 0 octal)");
    const uint32_t code = uint32_t(v);
    as_f32 = from ? decode(*from, code) : f32_from_bits(code);
    return f32_bits(as_f32);
  }
  char* end = nullptr;
  errno = 0;
  as_f32 = std::strtof(text.c_str(), &end);
  if (text.empty() || *end) throw UsageError("'" + text + "' is not a number (decimal, hex float, inf or nan)");
  return f32_bits(as_f32);  // ERANGE is fine: strtof gives +-inf or the rounded subnormal / zero
}

int run(const Args& args) {
  po::options_description opts("options");
  opts.add_options()("help,h", "this help")
      ("to", po::value<std::string>(), "target format: fp32 bf16 fp16 e4m3 e5m2 e4m3fnuz e5m2fnuz e3m2 e2m3 e2m1 e8m0 (required)")
      ("round", po::value<std::string>()->default_value("rne"), "rne | rz | sr")
      ("rand", po::value<std::string>(), "--round sr: the 32-bit random word (0 to 4294967295) compared with the discarded bits")
      ("overflow", po::value<std::string>()->default_value("saturate"),
       "saturate (clamp to +-max) | ieee (+-Inf, else NaN, else +-max: PyTorch/ml_dtypes casts)")
      ("scale-exp", po::value<std::string>(), "encode value * 2^-S, as a block scale 2^S does (default 0)")
      ("bits", po::bool_switch(), "VALUEs are FP32 bit patterns (0x3F800000)")
      ("from", po::value<std::string>(), "VALUEs are codes of this format (decoded exactly, then cast)");
  add_format_options(opts, true, "the conversions");
  const CommandHelp help{"cast", "--to FORMAT [--round M] [--overflow P] [--scale-exp S] VALUE...",
                         "Converts each VALUE (a decimal or hex float, read as FP32 by correct rounding; or a code)\n"
                         "to FORMAT with the project's one rounding routine and prints the code and what it decodes to.",
                         "Columns: input, fp32 (the value converted, %.9g), fp32_bits, code (hex), code_bits\n"
                         "(sign.exponent.mantissa), decoded, exact (decoded == fp32), class (zero, subnormal,\n"
                         "normal, max: the largest finite magnitude, inf, nan).",
                         ""};
  const Parsed p = parse(args, opts, "VALUE");
  if (p.has("help")) {
    print_help(stdout, help, opts);
    return kExitOk;
  }
  const OutputFormat outfmt = output_format(p, true);
  if (!p.has("to")) throw UsageError("--to FORMAT is required");
  if (p.positional.empty()) throw UsageError("at least one VALUE is required");
  const Format to = format_arg("--to", p.str("to"));
  const FormatSpec f = spec_of(to);
  RoundMode mode;
  try {
    mode = round_mode_from_name(p.str("round"));
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const std::string ovs = p.str("overflow");
  Overflow ov;
  if (ovs == "saturate") ov = Overflow::Saturate;
  else if (ovs == "ieee") ov = Overflow::Ieee;
  else throw UsageError("--overflow must be saturate or ieee, not '" + ovs + "'");
  if (p.has("rand") && mode != RoundMode::Stochastic) throw UsageError("--rand applies to --round sr only (it would be ignored)");
  if (mode == RoundMode::Stochastic && !p.has("rand")) throw UsageError("--round sr needs --rand R (the random word)");
  const uint32_t rand = uint32_t(uint_option(p, "rand", 0, UINT32_MAX, 0));
  const int scale_exp = int(int_option(p, "scale-exp", -(1 << 20), 1 << 20, 0));
  if (p.flag("bits") && p.has("from")) throw UsageError("--bits and --from exclude each other");
  std::optional<FormatSpec> from;
  if (p.has("from")) from = spec_of(format_arg("--from", p.str("from")));

  struct Row {
    std::string input;
    float x;
    uint32_t xbits, code;
    float dec;
    std::string cls;
  };
  std::vector<Row> rows;
  for (const auto& v : p.positional) {
    Row r;
    r.input = v;
    r.xbits = parse_value(v, p.flag("bits"), from ? &*from : nullptr, r.x);
    r.code = encode(f, r.xbits, scale_exp, mode, ov, rand);
    r.dec = decode(f, r.code);
    const uint32_t mag = r.code & ~f.sign_bit();
    if (is_nan_code(f, r.code)) r.cls = "nan";
    else if (std::isinf(r.dec)) r.cls = "inf";
    else if (r.dec == 0) r.cls = "zero";
    else if (mag == f.max_code()) r.cls = "max";
    else if (f.has_subnormals && (mag >> f.man_bits) == 0) r.cls = "subnormal";
    else r.cls = "normal";
    rows.push_back(r);
  }
  // Exact: the decoded code times 2^S is the input (NaN counts as exact when both are NaN).
  auto exact = [&](const Row& r) {
    if (std::isnan(r.x) || std::isnan(r.dec)) return std::isnan(r.x) && std::isnan(r.dec);
    return double(r.dec) * std::ldexp(1.0, scale_exp) == double(r.x);
  };
  if (outfmt == OutputFormat::Json) {
    nlohmann::ordered_json j;
    j["command"] = "cast";
    j["to"] = short_name(to);
    j["round"] = name_of(mode);
    j["overflow"] = ovs;
    j["scale_exp"] = scale_exp;
    if (mode == RoundMode::Stochastic) j["rand"] = rand;
    j["values"] = nlohmann::ordered_json::array();
    for (const auto& r : rows)
      j["values"].push_back({{"input", r.input},
                             {"fp32", json_number(r.x)},
                             {"fp32_bits", hex_code(r.xbits, 32)},
                             {"code", r.code},
                             {"code_hex", hex_code(r.code, f.bits)},
                             {"code_bits", bin_code(f, r.code)},
                             {"decoded", json_number(r.dec)},
                             {"exact", exact(r)},
                             {"class", r.cls}});
    print_json(j);
    return kExitOk;
  }
  if (outfmt == OutputFormat::Csv) std::printf("%s", csv_row({"input", "fp32", "fp32_bits", "code", "code_bits", "decoded", "exact", "class"}).c_str());
  else
    std::printf("to %s (%s), round %s, overflow %s%s\n", short_name(to), f.name, name_of(mode), ovs.c_str(),
                scale_exp ? (", scale 2^" + std::to_string(scale_exp)).c_str() : "");
  for (const auto& r : rows) {
    if (outfmt == OutputFormat::Csv) {
      std::printf("%s", csv_row({r.input, num(r.x), hex_code(r.xbits, 32), hex_code(r.code, f.bits), bin_code(f, r.code),
                                 num(r.dec), exact(r) ? "true" : "false", r.cls})
                            .c_str());
    } else {
      std::printf("  %s -> fp32 %s (%s) -> %s %s = %s%s  [%s]\n", r.input.c_str(), num(r.x).c_str(),
                  hex_code(r.xbits, 32).c_str(), hex_code(r.code, f.bits).c_str(), bin_code(f, r.code).c_str(),
                  num(r.dec).c_str(), exact(r) ? " exact" : "", r.cls.c_str());
    }
  }
  return kExitOk;
}

}  // namespace

int cmd_cast(const Args& args) { return guarded("cast", [&] { return run(args); }); }

}  // namespace mxsim::cli
