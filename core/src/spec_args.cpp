// The keyword arguments of a QuantSpec (spec_args.hpp).
#include "mxsim/spec_args.hpp"

#include <cctype>
#include <charconv>
#include <stdexcept>

#include "mxsim/gemm_plan.hpp"
#include "mxsim/layouts.hpp"

namespace mxsim {

Format format_arg(std::string_view name) {
  if (name.rfind("torch.", 0) == 0) name.remove_prefix(6);
  Format f;
  if (!format_from_name(name, f)) throw std::invalid_argument("unknown format '" + std::string(name) + "'");
  return f;
}

ScaleRule scaling_mode_arg(std::string_view name) {
  std::string n(name);
  for (char& c : n) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (n.rfind("scalecalculationmode.", 0) == 0) n = n.substr(21);  // str(torchao's enum member)
  return scale_rule_from_name(n);
}

Axis axis_arg(std::string_view name) {
  if (name == "cols" || name == "rowwise" || name == "-1") return Axis::Cols;
  if (name == "rows" || name == "columnwise" || name == "0") return Axis::Rows;
  throw std::invalid_argument("axis must be 'cols' (rowwise) or 'rows' (columnwise), not '" + std::string(name) + "'");
}

QuantSpec make_spec(const SpecArgs& a, const QuantSpec* base) {
  QuantSpec s;
  if (base) {
    if (a.recipe) throw std::invalid_argument("recipe: a spec that overrides another cannot name a recipe");
    s = *base;
    if (a.elem_dtype) s.elem = format_arg(*a.elem_dtype);
  } else if (a.recipe) {
    s = *a.recipe == "bf16" ? bf16_spec() : named_spec(*a.recipe);
    if (a.elem_dtype) s.elem = format_arg(*a.elem_dtype);
  } else {
    s.elem = a.elem_dtype ? format_arg(*a.elem_dtype) : Format::E4M3;
    s.block_rows = 1;
    s.block_cols = 32;
    s.scale_kind = ScaleKind::E8M0;
    s.rule = ScaleRule::Floor;  // torchao to_mx default (ScaleCalculationMode.FLOOR)
  }
  // The codes are one per byte: an elem_dtype of fp32 / bf16 / fp16 would store fragments of codes.
  if (a.elem_dtype) layout::check_elem_width(s.elem, "elem_dtype", "a QuantizedTensor");
  if (a.block_size) {
    const std::vector<int>& v = *a.block_size;
    if (v.size() == 1) {
      if (v[0] < 0) throw std::invalid_argument("block_size must be >= 0");
      s.block_rows = v[0] == 0 ? 0 : 1;
      s.block_cols = v[0];
    } else if (v.size() == 2 && v[0] >= 0 && v[1] >= 0) {
      s.block_rows = v[0];
      s.block_cols = v[1];
    } else {
      throw std::invalid_argument("block_size must be an int or (rows, cols)");
    }
  }
  if (a.scaling_mode) {
    if (s.scale_kind != ScaleKind::E8M0) throw std::invalid_argument("scaling_mode applies to E8M0-scaled (MX) specs");
    s.rule = scaling_mode_arg(*a.scaling_mode);
  }
  if (a.rounding) s.round = round_mode_from_name(*a.rounding);
  if (a.seed || a.sr_stream || a.sr_index_base) {
    if (s.round != RoundMode::Stochastic)
      throw std::invalid_argument(std::string(a.seed ? "seed" : a.sr_stream ? "sr_stream" : "sr_index_base") +
                                  " applies to rounding='sr' only");
    if (a.seed) s.sr.seed = *a.seed;
    if (a.sr_stream) s.sr.stream = *a.sr_stream;
    if (a.sr_index_base) s.sr_index_base = *a.sr_index_base;
  }
  if (a.hadamard) s.hadamard16 = *a.hadamard;
  if (a.hadamard_signs) {
    if (!s.hadamard16) throw std::invalid_argument("hadamard_signs applies to hadamard=True only");
    if (*a.hadamard_signs > 0xFFFF) throw std::invalid_argument("hadamard_signs is a 16-bit mask (0 to 65535)");
    s.hadamard16_signs = uint16_t(*a.hadamard_signs);
  }
  if (a.scale_convention) set_scale_convention(s, scale_convention_from_name(*a.scale_convention), "scale_convention");
  if (a.amax_epsilon) set_amax_epsilon(s, *a.amax_epsilon, "amax_epsilon");
  if (a.pow2_scale) set_pow2_scale(s, *a.pow2_scale, "pow2_scale");
  if (a.hp_dtype) set_hp_dtype(s, format_arg(*a.hp_dtype), "hp_dtype");
  if (a.whole_tensor_scale) s.whole_tensor_scale = *a.whole_tensor_scale;
  // after every override (a base spec's flag meets a later hadamard or scale_convention too)
  if (s.whole_tensor_scale && !s.takes_whole_tensor_scale())
    throw std::invalid_argument(std::string("whole_tensor_scale: ") + QuantSpec::kWholeTensorScaleRule + "; got " +
                                s.describe());
  return s;
}

namespace {

[[noreturn]] void bad_value(std::string_view key, std::string_view value, const char* want) {
  throw std::invalid_argument("spec argument " + std::string(key) + " = '" + std::string(value) + "' is not " + want);
}

template <class T>
T parse_number(std::string_view key, std::string_view v, const char* want) {
  T out{};
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size()) bad_value(key, v, want);
  return out;
}

}  // namespace

bool bool_arg(std::string_view key, std::string_view v) {
  if (v == "1" || v == "true" || v == "True") return true;
  if (v == "0" || v == "false" || v == "False") return false;
  bad_value(key, v, "a boolean (0, 1, true, false)");
}

double double_arg(std::string_view key, std::string_view v) {
  return parse_number<double>(key, v, "a number");  // from_chars: the C locale's '.', whatever the process's
}

void set_spec_arg(SpecArgs& a, std::string_view key, std::string_view v) {
  const std::string text(v);
  if (key == "recipe") a.recipe = text;
  else if (key == "elem_dtype") a.elem_dtype = text;
  else if (key == "scaling_mode") a.scaling_mode = text;
  else if (key == "rounding") a.rounding = text;
  else if (key == "scale_convention") a.scale_convention = text;
  else if (key == "hp_dtype") a.hp_dtype = text;
  else if (key == "seed") a.seed = parse_number<uint64_t>(key, v, "an unsigned 64-bit integer");
  else if (key == "sr_stream") a.sr_stream = parse_number<uint64_t>(key, v, "an unsigned 64-bit integer");
  else if (key == "sr_index_base") a.sr_index_base = parse_number<uint64_t>(key, v, "an unsigned 64-bit integer");
  else if (key == "hadamard") a.hadamard = bool_arg(key, v);
  else if (key == "hadamard_signs") a.hadamard_signs = parse_number<uint64_t>(key, v, "a 16-bit mask");
  else if (key == "pow2_scale") a.pow2_scale = bool_arg(key, v);
  else if (key == "amax_epsilon") a.amax_epsilon = double_arg(key, v);
  else if (key == "whole_tensor_scale") a.whole_tensor_scale = bool_arg(key, v);
  else if (key == "block_size") {
    std::vector<int> b;
    for (size_t start = 0;;) {
      const size_t comma = v.find(',', start);
      const std::string_view part = v.substr(start, comma - start);
      int n = 0;
      const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), n);
      if (ec != std::errc() || end != part.data() + part.size()) bad_value(key, v, "an int or 'rows,cols'");
      b.push_back(n);
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    a.block_size = b;
  } else {
    throw std::invalid_argument("unknown spec argument '" + std::string(key) +
                                "' (recipe, elem_dtype, block_size, scaling_mode, rounding, seed, sr_stream, sr_index_base, hadamard, hadamard_signs, "
                                "amax_epsilon, pow2_scale, scale_convention, hp_dtype, whole_tensor_scale)");
  }
}

}  // namespace mxsim
