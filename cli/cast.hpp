// What `mxsim cast` shares between its single-value mode (cmd_cast.cpp) and
// its tensor mode (cmd_cast_tensor.cpp): the chosen conversion, applied to an
// FP64 value in one place.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "common.hpp"
#include "mxsim/format.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/scale_rule.hpp"

namespace mxsim::cli {

struct CastOptions {
  Format to = Format::FP32;
  FormatSpec f = spec_of(Format::FP32);
  RoundMode mode = RoundMode::RNE;
  Overflow ov = Overflow::Saturate;
  std::string ovs = "saturate";
  uint32_t rand = 0;  ///< single values, --round sr
  int scale_exp = 0;
  /// Scale mode (--scale-rule R --elem F, --to e8m0): a VALUE is an amax and
  /// the result the E8M0 scale byte of rule R for element format F.
  std::optional<ScaleRule> rule;
  Format elem = Format::E4M3;
  /// The format the values come from where they are codes or values of one
  /// (--from F, --bits: FP32, tensor mode: the F32 / F16 / BF16 dtype; none
  /// for FP64 text and F64 tensors). When `to` holds every value of it and no
  /// scale applies, the cast widens: exact, --overflow does not apply.
  std::optional<Format> source;

  /// Whether this cast widens (holds_every_value, rounding.hpp): every value
  /// of the source is a value of the target, Inf and NaN included.
  bool widening() const { return !rule && source && scale_exp == 0 && holds_every_value(spec_of(*source), f); }
  /// The overflow policy the conversion applies: --overflow when it narrows,
  /// IEEE (Inf stays Inf) when it widens (docs/numerics.md §2.3).
  Overflow overflow() const { return widening() ? Overflow::Ieee : ov; }

  /// The code of one value given as FP64 bits: encode_f64 (one rounding), or
  /// in scale mode e8m0_scale of |x| rounded once to FP32 (RNE), the FP32
  /// amax the rules are defined on (docs/numerics.md §3.1).
  uint32_t code_of(uint64_t x_bits, uint32_t rand32) const {
    if (rule) {
      const float amax = static_cast<float>(f64_from_bits(x_bits & ~(uint64_t(1) << 63)));
      return e8m0_scale(*rule, f32_bits(amax), spec_of(elem));
    }
    return encode_f64(f, x_bits, scale_exp, mode, overflow(), rand32);
  }
};

/// The conversion's JSON fields, shared by both modes' reports: "to", then
/// "scale_rule" and "elem" (scale mode) or "round", "overflow", "scale_exp"
/// (and "widening": true when the source's values all fit, so --overflow did not apply).
void conversion_json(nlohmann::ordered_json& j, const CastOptions& o);

/// " (widening from e4m3: exact, ...)" for the text header of a widening cast, else "".
std::string widening_note(const CastOptions& o);

/// --input mode of `mxsim cast` (docs/cli.md "Tensor mode").
int cast_tensor(const Parsed& p, const CastOptions& o, OutputFormat outfmt);

/// "0x3F" style hex of a code with (bits + 3) / 4 digits.
std::string hex_code(uint64_t code, int bits);
/// The class of a code: zero, subnormal, normal, max, inf, nan.
const char* code_class(const FormatSpec& f, uint32_t code);

}  // namespace mxsim::cli
