#include <cmath>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "mxsim/quant_spec.hpp"

#include "mxsim/names.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim {
namespace {

QuantSpec mx(Format elem, int br, int bc, ScaleRule rule) {
  QuantSpec s;
  s.elem = elem;
  s.block_rows = br;
  s.block_cols = bc;
  s.scale_kind = ScaleKind::E8M0;
  s.rule = rule;
  return s;
}

QuantSpec fp32_scaled(Format elem, int br, int bc, bool pow2) {
  QuantSpec s;
  s.elem = elem;
  s.block_rows = br;
  s.block_cols = bc;
  s.scale_kind = ScaleKind::FP32;
  s.pow2_scale = pow2;
  return s;
}

QuantSpec nvfp4(int br, int bc) {
  QuantSpec s;
  s.elem = Format::E2M1;
  s.block_rows = br;
  s.block_cols = bc;
  s.scale_kind = ScaleKind::UE4M3;
  return s;
}

struct Named {
  const char* name;
  QuantSpec spec;
};

const std::vector<Named>& table() {
  static const std::vector<Named> t = {
      {"mxfp4", mx(Format::E2M1, 1, 32, ScaleRule::Even)},
      {"mxfp4_2d", mx(Format::E2M1, 32, 32, ScaleRule::Even)},
      {"mxfp4_ocp", mx(Format::E2M1, 1, 32, ScaleRule::Floor)},
      {"mxfp6_e2m3", mx(Format::E2M3, 1, 32, ScaleRule::Rceil)},
      {"mxfp6_e3m2", mx(Format::E3M2, 1, 32, ScaleRule::Rceil)},
      {"mxfp8", mx(Format::E4M3, 1, 32, ScaleRule::Rceil)},
      {"mxfp8_e5m2", mx(Format::E5M2, 1, 32, ScaleRule::Rceil)},
      {"mxfp8_2d", mx(Format::E4M3, 32, 32, ScaleRule::Rceil)},
      {"fp8_tensor", fp32_scaled(Format::E4M3, 0, 0, false)},
      {"fp8_tensor_e5m2", fp32_scaled(Format::E5M2, 0, 0, false)},
      {"fp8_row", fp32_scaled(Format::E4M3, 1, 0, false)},
      {"fp8_block", fp32_scaled(Format::E4M3, 1, 128, true)},
      {"fp8_block2d", fp32_scaled(Format::E4M3, 128, 128, true)},
      {"nvfp4", nvfp4(1, 16)},
      {"nvfp4_2d", nvfp4(16, 16)},
  };
  return t;
}

}  // namespace

std::string canonical_spec_name(std::string_view name) {
  for (const auto& n : table())
    if (name == n.name) return n.name;
  for (const SpecAlias& a : kSpecAliases)
    if (name == a.alias) return a.spec;
  return "";
}

QuantSpec named_spec(std::string_view name) {
  const std::string canonical = canonical_spec_name(name);
  for (const auto& n : table())
    if (canonical == n.name) return n.spec;
  std::vector<std::string> words = named_spec_names();
  std::string known, aliases;
  for (const auto& w : words) known += (known.empty() ? "" : ", ") + w;
  for (const SpecAlias& a : kSpecAliases) {
    words.emplace_back(a.alias);
    aliases += std::string("; ") + a.alias + " = " + a.spec;
  }
  throw std::invalid_argument("unknown recipe '" + std::string(name) + "'" + did_you_mean(name, words) +
                              " (a spec of one tensor; known: " + known + aliases + ")");
}

std::vector<std::string> named_spec_names() {
  std::vector<std::string> v;
  for (const auto& n : table()) v.emplace_back(n.name);
  return v;
}

ScaleRule scale_rule_from_name(std::string_view n) {
  if (n == "floor") return ScaleRule::Floor;
  if (n == "rceil") return ScaleRule::Rceil;
  if (n == "even") return ScaleRule::Even;
  if (n == "ceil") return ScaleRule::Ceil;
  throw std::invalid_argument("unknown scale rule '" + std::string(n) + "' (known: floor, rceil, even, ceil)");
}

RoundMode round_mode_from_name(std::string_view n) {
  if (n == "rne") return RoundMode::RNE;
  if (n == "rz") return RoundMode::RZ;
  if (n == "sr" || n == "stochastic") return RoundMode::Stochastic;
  throw std::invalid_argument("unknown rounding '" + std::string(n) + "' (known: rne, rz, sr)");
}

const char* name_of(ScaleRule r) {
  switch (r) {
    case ScaleRule::Floor: return "floor";
    case ScaleRule::Rceil: return "rceil";
    case ScaleRule::Even: return "even";
    case ScaleRule::Ceil: return "ceil";
  }
  return "?";
}
const char* name_of(RoundMode r) {
  switch (r) {
    case RoundMode::RNE: return "rne";
    case RoundMode::RZ: return "rz";
    case RoundMode::Stochastic: return "sr";
    case RoundMode::RU: return "ru";
  }
  return "?";
}
ScaleConvention scale_convention_from_name(std::string_view n0) {
  std::string n(n0);
  for (char& c : n)
    if (c == '-') c = '_';
  if (n == "te") return ScaleConvention::TE;
  if (n == "torchao") return ScaleConvention::Torchao;
  if (n == "torchao_cuda") return ScaleConvention::TorchaoCuda;
  if (n == "torchao_training") return ScaleConvention::TorchaoTraining;
  throw std::invalid_argument("unknown scale convention '" + std::string(n0) +
                              "' (known: te, torchao, torchao_cuda, torchao_training)");
}

const char* name_of(ScaleConvention c) {
  switch (c) {
    case ScaleConvention::TE: return "te";
    case ScaleConvention::Torchao: return "torchao";
    case ScaleConvention::TorchaoCuda: return "torchao_cuda";
    case ScaleConvention::TorchaoTraining: return "torchao_training";
  }
  return "?";
}

const char* name_of(ScaleKind k) {
  switch (k) {
    case ScaleKind::E8M0: return "e8m0";
    case ScaleKind::FP32: return "fp32";
    case ScaleKind::UE4M3: return "ue4m3";
  }
  return "?";
}

namespace {
void need_fp32_scales(const QuantSpec& s, const std::string& what) {
  if (s.scale_kind != ScaleKind::FP32)
    throw std::invalid_argument(what + " applies to FP32-scaled specs (fp8_tensor, fp8_row, fp8_block, ...); this one has " +
                                name_of(s.scale_kind) + " scales");
  if (s.fixed_scale != 0.0f)
    throw std::invalid_argument(what + " applies to current scaling; this spec has a fixed (delayed-scaling) scale");
}
}  // namespace

void set_amax_epsilon(QuantSpec& s, double eps, const std::string& what) {
  need_fp32_scales(s, what);
  if (s.scale_convention == ScaleConvention::TorchaoTraining && eps != 0.0)
    throw std::invalid_argument(what + " does not apply to scale convention torchao_training: torchao float8 training's "
                                "epsilon is fixed (EPS = 1e-12 in torchao/float8/float8_utils.py, amax_to_scale)");
  if (!std::isfinite(eps) || eps < 0)
    throw std::invalid_argument(what + " must be a finite number >= 0, not " + std::to_string(eps));
  const float f = float(eps);
  if (!std::isfinite(f)) throw std::invalid_argument(what + " " + std::to_string(eps) + " overflows FP32");
  if (f == 0.0f && eps != 0.0) {
    std::ostringstream o;
    o << what << " " << eps << " becomes 0 in FP32 (the scale arithmetic's type; smallest positive "
      << std::numeric_limits<float>::denorm_min() << ")";
    throw std::invalid_argument(o.str());
  }
  s.amax_epsilon = f;
}

void set_pow2_scale(QuantSpec& s, bool on, const std::string& what) {
  need_fp32_scales(s, what);
  if (on && (s.scale_convention == ScaleConvention::Torchao || s.scale_convention == ScaleConvention::TorchaoCuda))
    throw std::invalid_argument(what + " on does not apply to scale convention " + name_of(s.scale_convention) +
                                ": torchao's Float8Tensor scale (_choose_scale_float8) has no power-of-two option");
  s.pow2_scale = on;
}

void set_scale_convention(QuantSpec& s, ScaleConvention c, const std::string& what) {
  need_fp32_scales(s, what);
  if (c == ScaleConvention::TorchaoTraining && s.amax_epsilon != 0.0f)
    throw std::invalid_argument(what + " torchao_training: the spec has amax_epsilon set, and torchao float8 "
                                "training's epsilon is fixed (EPS = 1e-12)");
  s.scale_convention = c;
  s.hp_dtype = Format::FP32;
  if (is_torchao(c)) s.pow2_scale = false;  // torchao's default; fp8_block's TE default dropped
}

void set_hp_dtype(QuantSpec& s, Format hp, const std::string& what) {
  if (s.scale_kind != ScaleKind::FP32 ||
      !(s.scale_convention == ScaleConvention::Torchao || s.scale_convention == ScaleConvention::TorchaoCuda))
    throw std::invalid_argument(what + " applies to scale conventions torchao and torchao_cuda (the dtype "
                                "torchao's Float8Tensor computes its scale in)");
  if (hp != Format::FP32 && hp != Format::BF16 && hp != Format::FP16)
    throw std::invalid_argument(what + " must be float32, bfloat16 or float16, not " + spec_of(hp).name);
  s.hp_dtype = hp;
}

namespace {
bool float8_tensor(const QuantSpec& s) {
  return s.scale_convention == ScaleConvention::Torchao || s.scale_convention == ScaleConvention::TorchaoCuda;
}
}  // namespace

QuantSpec spec_for_input(QuantSpec s, Format input_dtype) {
  if (float8_tensor(s) && s.hp_dtype == Format::FP32 && (input_dtype == Format::FP16 || input_dtype == Format::BF16))
    s.hp_dtype = input_dtype;
  return s;
}

std::optional<QuantSpec> with_current_scale(QuantSpec s, float amax) {
  if (!s.per_tensor() || s.scale_kind != ScaleKind::FP32)
    throw std::invalid_argument(s.describe() + " is not a per-tensor FP32-scaled spec: current scaling applies to "
                                "fp8_tensor specs");
  s.fixed_scale = current_scale(spec_of(s.elem).max_value(), amax, s.amax_epsilon, s.pow2_scale);
  s.whole_tensor_scale = false;  // the given amax's scale replaces the quantizer's own
  if (std::isnan(s.fixed_scale)) return std::nullopt;
  return s;
}

bool needs_hp_value_check(const QuantSpec& s, Format input_dtype) {
  return float8_tensor(s) && s.hp_dtype != Format::FP32 && s.hp_dtype != input_dtype;
}

void check_hp_values(const QuantSpec& s, const float* x, size_t n, const std::string& op) {
  if (!float8_tensor(s) || s.hp_dtype == Format::FP32) return;
  const FormatSpec hf = spec_of(s.hp_dtype);
  for (size_t i = 0; i < n; ++i)
    if (x[i] == x[i] && decode(hf, encode(hf, f32_bits(x[i]), 0, RoundMode::RNE, Overflow::Ieee, 0)) != x[i])
      throw std::invalid_argument(op + ": hp_dtype " + hf.name + ": x holds " + std::to_string(x[i]) + " (flat index " +
                                  std::to_string(i) + "), which is not a " + hf.name +
                                  " value (torchao's Float8Tensor was given a " + hf.name + " tensor)");
}

std::string QuantSpec::describe() const {
  std::ostringstream o;
  o << short_name(elem) << " ";
  if (per_tensor()) o << "per-tensor";
  else o << (block_rows == 0 ? std::string("all") : std::to_string(block_rows)) << "x"
         << (block_cols == 0 ? std::string("all") : std::to_string(block_cols));
  o << " scale=" << name_of(scale_kind);
  if (scale_kind == ScaleKind::E8M0) o << "/" << name_of(rule);
  if (pow2_scale) o << "/pow2";
  if (amax_epsilon != 0.0f) o << " amax_epsilon=" << std::setprecision(9) << amax_epsilon << std::setprecision(6);
  if (fixed_scale != 0) o << " delayed(" << fixed_scale << ")";
  if (whole_tensor_scale) o << " whole-tensor";
  if (scale_convention != ScaleConvention::TE) o << " convention=" << name_of(scale_convention);
  if (hp_dtype != Format::FP32) o << " hp_dtype=" << short_name(hp_dtype);
  o << " round=" << name_of(round);
  if (hadamard16) o << " hadamard16";
  if (hadamard16 && hadamard16_signs) {
    char b[16];
    std::snprintf(b, sizeof b, "%04x", unsigned(hadamard16_signs));
    o << "/signs=0x" << b;
  }
  return o.str();
}

}  // namespace mxsim
