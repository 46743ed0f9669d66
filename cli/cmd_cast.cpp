// mxsim cast: convert single values to any format of the table with a chosen
// rounding mode and overflow policy (mxsim::encode_f64: values are read as
// FP64 and rounded once, docs/numerics.md §2), and show the code and the value
// it decodes to: a check of one conversion. With --scale-rule, a value is an
// amax and the result its E8M0 scale byte (§3.1); with --input, a whole .npy
// tensor is converted (cmd_cast_tensor.cpp).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cast.hpp"
#include "commands.hpp"
#include "common.hpp"
#include "mxsim/format.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::cli {
namespace {

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

/// One value as FP64 bits: decimal or hexadecimal float text (strtod:
/// correctly rounded to FP64, RNE; hex floats of up to 53 significant bits are
/// exact), inf / nan, or with --bits an FP32 bit pattern; with --from a code
/// of that format (both FP32 values, widened exactly).
uint64_t parse_value(const std::string& text, bool bits, const FormatSpec* from) {
  if (bits || from) {
    const int nbits = from ? from->bits : 32;
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(text.c_str(), &end, 0);
    if (text.empty() || *end || errno || text[0] == '-' || (nbits < 64 && v >> nbits))
      throw UsageError("'" + text + "' is not a " + std::to_string(nbits) + "-bit code (decimal, 0x hex or 0 octal)");
    const uint32_t code = uint32_t(v);
    return f64_bits(double(from ? decode(*from, code) : f32_from_bits(code)));
  }
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(text.c_str(), &end);
  if (text.empty() || *end) throw UsageError("'" + text + "' is not a number (decimal, hex float, inf or nan)");
  return f64_bits(d);  // ERANGE is fine: strtod gives +-inf or the rounded subnormal / zero
}

RoundMode cast_round_mode(const std::string& n) {
  if (n == "ru" || n == "up") return RoundMode::RU;
  try {
    return round_mode_from_name(n);
  } catch (const std::invalid_argument&) {
    throw UsageError("--round must be rne, rz, sr or ru, not '" + n + "'");
  }
}

std::string f64_text(double v) { return num(v, "%.17g"); }

}  // namespace

std::string widening_note(const CastOptions& o) {
  if (!o.widening()) return "";
  return std::string(" (widening from ") + short_name(*o.source) + ": exact, the overflow policy does not apply)";
}

namespace {

/// One VALUE's conversion.
struct Row {
  std::string input;
  double x;
  uint64_t xbits;
  float x32;  ///< x rounded to FP32 (RNE)
  uint32_t code;
  float dec;
  const char* cls;
};

const CommandHelp& help() {
  static const CommandHelp h{"cast", "--to FORMAT [--round M] [--overflow P] [--scale-exp S] VALUE...\n"
                                 "       mxsim cast --to e8m0 --scale-rule R --elem F AMAX...\n"
                                 "       mxsim cast --to FORMAT [options] --input X.npy -o CODES.npy [--decoded Y.npy]",
                         "Converts each VALUE (a decimal or hex float, read as FP64 by correct rounding; or a code)\n"
                         "to FORMAT with the project's one rounding routine, rounding once, and prints the code and\n"
                         "what it decodes to. With --scale-rule, each VALUE is a block amax and the result its E8M0\n"
                         "scale byte. With --input, every value of a .npy tensor is converted and written as codes.",
                         "Columns: input, fp32 (the value rounded to FP32, %.9g: the amax used in scale mode),\n"
                         "fp32_bits, code (hex), code_bits (sign.exponent.mantissa), decoded, exact (decoded x 2^S\n"
                         "== the input; scale mode: scale_exp instead), class (zero, subnormal, normal, max: the\n"
                         "largest finite magnitude, inf, nan), f64 (the value as read, %.17g), f64_bits.",
                         ""};
  return h;
}

void add_options(po::options_description& opts) {
  opts.add_options()("help,h", "this help")
      ("to", po::value<std::string>(), "target format: fp32 bf16 fp16 e4m3 e5m2 e4m3fnuz e5m2fnuz e3m2 e2m3 e2m1 e8m0 (required)")
      ("round", po::value<std::string>()->default_value("rne"), "rne | rz | sr | ru (round up: toward +Inf; ceil for e8m0)")
      ("rand", po::value<std::string>(), "--round sr: the 32-bit random word (0 to 4294967295) compared with the discarded bits")
      ("overflow", po::value<std::string>()->default_value("saturate"),
       "saturate (clamp to +-max) | ieee (+-Inf, else NaN, else +-max: PyTorch/ml_dtypes casts)")
      ("scale-exp", po::value<std::string>(), "encode value * 2^-S, as a block scale 2^S does (default 0)")
      ("bits", po::bool_switch(), "VALUEs are FP32 bit patterns (0x3F800000)")
      ("from", po::value<std::string>(), "VALUEs are codes of this format (decoded exactly, then cast)")
      ("scale-rule", po::value<std::string>(),
       "with --to e8m0 and --elem: VALUEs are amax, the result their E8M0 scale byte under floor | rceil | even | ceil")
      ("elem", po::value<std::string>(), "--scale-rule: the element format of the block (e2m1 e2m3 e3m2 e4m3 e5m2 e4m3fnuz e5m2fnuz)")
      ("input", po::value<std::string>(), "tensor mode: convert every value of this .npy (F32, F16, BF16, F64) instead of VALUEs")
      ("output,o", po::value<std::string>(), "tensor mode: the codes as .npy (uint8; uint16 for bf16/fp16; uint32 for fp32)")
      ("decoded", po::value<std::string>(), "tensor mode: also the codes' values as an F32 .npy")
      ("rand-file", po::value<std::string>(), "tensor mode, --round sr: uint32 .npy of random words, one per element")
      ("nan", po::value<std::string>()->default_value("encode"),
       "tensor mode: encode (NaN -> the format's NaN, +max where it has none) | error (refuse NaN input)");
  add_format_options(opts, true, "the conversions");
}

/// The conversion of parsed options (UsageError for a combination the command refuses).
CastOptions parse_cast(const Parsed& p, bool tensor) {
  if (!p.has("to")) throw UsageError("--to FORMAT is required");
  if (tensor && !p.positional.empty()) throw UsageError("--input converts a file: VALUEs are not taken with it");
  if (!tensor && p.positional.empty()) throw UsageError("at least one VALUE (or --input FILE) is required");
  for (const char* o : {"output", "decoded", "rand-file"})
    if (!tensor && p.has(o)) throw UsageError(std::string("--") + o + " applies to tensor mode (--input) only");
  if (!tensor && !p.vm["nan"].defaulted()) throw UsageError("--nan applies to tensor mode (--input) only");
  CastOptions o;
  o.to = format_arg("--to", p.str("to"));
  o.f = spec_of(o.to);
  o.mode = cast_round_mode(p.str("round"));
  o.ovs = p.str("overflow");
  if (o.ovs == "saturate") o.ov = Overflow::Saturate;
  else if (o.ovs == "ieee") o.ov = Overflow::Ieee;
  else throw UsageError("--overflow must be saturate or ieee, not '" + o.ovs + "'");
  const bool sr = o.mode == RoundMode::Stochastic;
  if (p.has("rand") && !sr) throw UsageError("--rand applies to --round sr only (it would be ignored)");
  if (p.has("rand-file") && !sr) throw UsageError("--rand-file applies to --round sr only (it would be ignored)");
  if (sr && !tensor && !p.has("rand")) throw UsageError("--round sr needs --rand R (the random word)");
  if (sr && tensor && !p.has("rand-file")) throw UsageError("--round sr with --input needs --rand-file R.npy (uint32 words, one per element)");
  if (tensor && p.has("rand")) throw UsageError("--rand is one word for single VALUEs; with --input give --rand-file");
  o.rand = uint32_t(uint_option(p, "rand", 0, UINT32_MAX, 0));
  o.scale_exp = int(int_option(p, "scale-exp", -(1 << 20), 1 << 20, 0));
  if (p.flag("bits") && p.has("from")) throw UsageError("--bits and --from exclude each other");
  if (tensor && (p.flag("bits") || p.has("from"))) throw UsageError("--bits and --from apply to VALUEs, not to --input");
  if (p.has("elem") && !p.has("scale-rule")) throw UsageError("--elem applies to --scale-rule only");
  if (p.has("scale-rule")) {
    if (o.to != Format::E8M0) throw UsageError("--scale-rule gives E8M0 scale bytes: it needs --to e8m0");
    if (!p.has("elem")) throw UsageError("--scale-rule needs --elem F (the element format whose emax the rule uses)");
    try {
      o.rule = scale_rule_from_name(p.str("scale-rule"));
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--scale-rule: ") + e.what());
    }
    o.elem = format_arg("--elem", p.str("elem"));
    if (!has_role(o.elem, kRoleMxElem))
      throw UsageError("--elem " + p.str("elem") + ": not an element format of E8M0-scaled blocks (e2m1 e2m3 e3m2 e4m3 e5m2 e4m3fnuz e5m2fnuz)");
    for (const char* opt : {"round", "overflow"})
      if (!p.vm[opt].defaulted())
        throw UsageError(std::string("--") + opt + " does not apply to --scale-rule (the rule alone gives the byte)");
    if (p.has("scale-exp")) throw UsageError("--scale-exp does not apply to --scale-rule");
  }
  return o;
}

/// Each VALUE read (a float, FP32 bits or a code of --from) and converted.
std::vector<Row> convert_values(const Parsed& p, CastOptions& o) {
  std::optional<FormatSpec> from;
  if (p.has("from")) {
    o.source = format_arg("--from", p.str("from"));
    from = spec_of(*o.source);
  } else if (p.flag("bits")) {
    o.source = Format::FP32;
  }
  const FormatSpec& f = o.f;
  std::vector<Row> rows;
  for (const auto& v : p.positional) {
    Row r;
    r.input = v;
    r.xbits = parse_value(v, p.flag("bits"), from ? &*from : nullptr);
    r.x = f64_from_bits(r.xbits);
    r.x32 = static_cast<float>(r.x);
    r.code = o.code_of(r.xbits, o.rand);
    r.dec = decode(f, r.code);
    r.cls = code_class(f, r.code);
    rows.push_back(r);
  }
  return rows;
}

// Exact: the decoded code times 2^S is the input (NaN counts as exact when both are NaN).
bool exact(const Row& r, int scale_exp) {
  if (std::isnan(r.x) || std::isnan(r.dec)) return std::isnan(r.x) && std::isnan(r.dec);
  return std::ldexp(double(r.dec), scale_exp) == r.x;
}
bool is_f32(const Row& r) { return std::isnan(r.x) || double(r.x32) == r.x; }
std::string scale_exp_of(const Row& r) { return r.code == kE8M0Nan ? std::string("nan") : std::to_string(int(r.code) - 127); }

void report_json(const CastOptions& o, const std::vector<Row>& rows) {
  const FormatSpec& f = o.f;
  const bool sr = o.mode == RoundMode::Stochastic;
  nlohmann::ordered_json j;
  j["command"] = "cast";
  conversion_json(j, o);
  if (!o.rule && sr) j["rand"] = o.rand;
  j["values"] = nlohmann::ordered_json::array();
  for (const auto& r : rows) {
    nlohmann::ordered_json e{{"input", r.input},
                             {"f64", json_number(r.x)},
                             {"f64_bits", hex_code(r.xbits, 64)},
                             {"fp32", json_number(r.x32)},
                             {"fp32_bits", hex_code(f32_bits(r.x32), 32)},
                             {"code", r.code},
                             {"code_hex", hex_code(r.code, f.bits)},
                             {"code_bits", bin_code(f, r.code)},
                             {"decoded", json_number(r.dec)}};
    if (o.rule) {
      if (r.code == kE8M0Nan) e["scale_exp"] = nullptr;
      else e["scale_exp"] = int(r.code) - 127;
    } else {
      e["exact"] = exact(r, o.scale_exp);
    }
    e["class"] = r.cls;
    j["values"].push_back(e);
  }
  print_json(j);
}

void report_rows(const CastOptions& o, const std::vector<Row>& rows, OutputFormat outfmt) {
  const FormatSpec& f = o.f;
  if (outfmt == OutputFormat::Csv)
    std::printf("%s", csv_row({"input", "fp32", "fp32_bits", "code", "code_bits", "decoded", o.rule ? "scale_exp" : "exact",
                               "class", "f64", "f64_bits"})
                          .c_str());
  else if (o.rule)
    std::printf("to e8m0 scale bytes, rule %s, element %s (emax %d)\n", name_of(*o.rule), short_name(o.elem),
                spec_of(o.elem).emax());
  else
    std::printf("to %s (%s), round %s, overflow %s%s%s\n", short_name(o.to), f.name, name_of(o.mode), o.ovs.c_str(),
                o.scale_exp ? (", scale 2^" + std::to_string(o.scale_exp)).c_str() : "", widening_note(o).c_str());
  for (const auto& r : rows) {
    if (outfmt == OutputFormat::Csv) {
      std::printf("%s", csv_row({r.input, num(r.x32), hex_code(f32_bits(r.x32), 32), hex_code(r.code, f.bits),
                                 bin_code(f, r.code), num(r.dec), o.rule ? scale_exp_of(r) : (exact(r, o.scale_exp) ? "true" : "false"),
                                 r.cls, f64_text(r.x), hex_code(r.xbits, 64)})
                            .c_str());
    } else if (o.rule) {
      std::printf("  %s -> amax fp32 %s (%s) -> %s = %s (s = %s)  [%s]\n", r.input.c_str(), num(r.x32).c_str(),
                  hex_code(f32_bits(r.x32), 32).c_str(), hex_code(r.code, f.bits).c_str(), num(r.dec).c_str(),
                  scale_exp_of(r).c_str(), r.cls);
    } else {
      // An input that is an FP32 value is shown as FP32; any other as the FP64 value read.
      const std::string shown = is_f32(r) ? "fp32 " + num(r.x32) + " (" + hex_code(f32_bits(r.x32), 32) + ")"
                                          : "fp64 " + f64_text(r.x) + " (" + hex_code(r.xbits, 64) + ")";
      std::printf("  %s -> %s -> %s %s = %s%s  [%s]\n", r.input.c_str(), shown.c_str(), hex_code(r.code, f.bits).c_str(),
                  bin_code(f, r.code).c_str(), num(r.dec).c_str(), exact(r, o.scale_exp) ? " exact" : "", r.cls);
    }
  }
}

int run(const Args& args) {
  po::options_description opts("options");
  add_options(opts);
  const Parsed p = parse(args, opts, "VALUE");
  if (p.has("help")) {
    print_help(stdout, help(), opts);
    return kExitOk;
  }
  const OutputFormat outfmt = output_format(p, true);
  const bool tensor = p.has("input");
  CastOptions o = parse_cast(p, tensor);
  if (tensor) return cast_tensor(p, o, outfmt);
  const std::vector<Row> rows = convert_values(p, o);
  if (outfmt == OutputFormat::Json) report_json(o, rows);
  else report_rows(o, rows, outfmt);
  return kExitOk;
}

}  // namespace

void conversion_json(nlohmann::ordered_json& j, const CastOptions& o) {
  j["to"] = short_name(o.to);
  if (o.rule) {
    j["scale_rule"] = name_of(*o.rule);
    j["elem"] = short_name(o.elem);
  } else {
    j["round"] = name_of(o.mode);
    j["overflow"] = o.ovs;
    j["scale_exp"] = o.scale_exp;
    if (o.widening()) j["widening"] = true;
  }
}

std::string hex_code(uint64_t code, int bits) {
  char b[24];  // 0x and at most 16 hex digits of a 64-bit code (bits <= 64): no truncation
  const int digits = std::clamp((bits + 3) / 4, 1, 16);
  std::snprintf(b, sizeof b, "0x%0*llX", digits, static_cast<unsigned long long>(code));
  return b;
}

const char* code_class(const FormatSpec& f, uint32_t code) {
  const uint32_t mag = code & ~f.sign_bit();
  const float dec = decode(f, code);
  if (is_nan_code(f, code)) return "nan";
  if (std::isinf(dec)) return "inf";
  if (dec == 0) return "zero";
  if (mag == f.max_code()) return "max";
  if (f.has_subnormals && (mag >> f.man_bits) == 0) return "subnormal";
  return "normal";
}

int cmd_cast(const Args& args) { return guarded("cast", [&] { return run(args); }); }

}  // namespace mxsim::cli
