// The keyword arguments that build a QuantSpec, read once for every front end
// that takes them by name: the Python module (python/src/common.cpp), the C
// layer (capi/, as key / value text) and so mxsim.torch. The names and their
// defaults are torchao's (to_mx: elem_dtype, block_size, scaling_mode) and
// TransformerEngine's / Primus-Turbo's; docs/python.md "Specs" lists them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mxsim/quant_spec.hpp"

namespace mxsim {

struct SpecArgs {
  /// A named spec (quant_spec.hpp's list, or "bf16"); unset: OCP MX with torchao's
  /// to_mx defaults (E8M0, 1 x 32, FLOOR) and elem_dtype (default E4M3).
  std::optional<std::string> recipe;
  std::optional<std::string> elem_dtype;    ///< a format name; "torch." prefixes are ignored
  std::optional<std::vector<int>> block_size;  ///< {b}: 1 x b (0: per tensor); {rows, cols}
  std::optional<std::string> scaling_mode;  ///< E8M0 rule: floor, ceil, even, rceil ("ScaleCalculationMode." ignored)
  std::optional<std::string> rounding;      ///< rne, rz, sr (round_mode_from_name)
  std::optional<uint64_t> seed;             ///< Philox key of rounding = sr (the CLI's --seed)
  std::optional<uint64_t> sr_stream;        ///< Philox stream of rounding = sr
  /// rounding = sr: the logical index of the tensor's first element in a larger one (a slice
  /// rows [m0, ...) of an [M, C] tensor: m0 * C), so the slice draws the whole tensor's words.
  std::optional<uint64_t> sr_index_base;
  std::optional<bool> hadamard;             ///< 16-point Hadamard along the blocks
  /// With hadamard: the random signs, a 16-bit mask (bit k negates element k of each run; 0 none)
  std::optional<uint64_t> hadamard_signs;
  std::optional<double> amax_epsilon;       ///< FP32-scaled specs
  std::optional<bool> pow2_scale;           ///< FP32-scaled specs
  std::optional<std::string> scale_convention;  ///< te, torchao, torchao_cuda, torchao_training
  std::optional<std::string> hp_dtype;      ///< FP32-scaled torchao conventions: float32, bfloat16, float16
  /// Per-tensor FP32 current scaling: one scale from the whole tensor's amax, found by the
  /// quantizer where the tensor lives (QuantSpec::whole_tensor_scale; no host amax, no wait)
  std::optional<bool> whole_tensor_scale;
};

/// The spec the arguments describe: the recipe (or OCP MX), then each given
/// override in the order of the fields above (FP32 settings as
/// set_scale_convention, set_amax_epsilon, set_pow2_scale, set_hp_dtype).
/// Throws std::invalid_argument naming the argument for an unknown name or a
/// setting the spec cannot take (scaling_mode on an FP32-scaled spec, seed
/// without rounding = sr, an elem_dtype wider than one byte).
/// With `base`: the overrides apply to *base instead (a recipe's operand spec
/// given a seed, an SR stream or an sr_index_base); a recipe is refused then.
QuantSpec make_spec(const SpecArgs& a, const QuantSpec* base = nullptr);

/// Sets one argument from text (the C layer's key / value form): key is a
/// field name above; integers in decimal, booleans "0" / "1" / "true" /
/// "false", block_size "32" or "32,32". Throws std::invalid_argument for an
/// unknown key or a value that does not parse, naming both.
void set_spec_arg(SpecArgs& a, std::string_view key, std::string_view value);

/// Text values of the key / value form: "0" / "1" / "true" / "false"; a
/// decimal number. Throw std::invalid_argument naming the key and the value.
bool bool_arg(std::string_view key, std::string_view value);
double double_arg(std::string_view key, std::string_view value);

/// A format by name, with "torch." prefixes ignored (torch.float8_e4m3fn).
Format format_arg(std::string_view name);
/// An E8M0 scale rule by name, case-insensitive, with torchao's
/// "ScaleCalculationMode." prefix ignored.
ScaleRule scaling_mode_arg(std::string_view name);
/// The block axis: "cols" / "rowwise" / "-1" or "rows" / "columnwise" / "0".
Axis axis_arg(std::string_view name);

}  // namespace mxsim
