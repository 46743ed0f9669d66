#include "common.hpp"

#include <cstring>
#include <stdexcept>

#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/layouts.hpp"
#include "mxsim/quant_spec.hpp"

namespace mxsim::py {

std::vector<size_t> shape_of(const pyb::array& a) {
  std::vector<size_t> s;
  for (pyb::ssize_t i = 0; i < a.ndim(); ++i) s.push_back(size_t(a.shape(i)));
  return s;
}

namespace {
F32Array as_f32(const pyb::array& x, const char* what) {
  const char kind = x.dtype().kind();
  if (kind != 'f') throw std::invalid_argument(std::string(what) + ": dtype " + std::string(pyb::str(x.dtype())) +
                                               " is not a float dtype (float16, float32, float64)");
  return F32Array::ensure(x);  // float64 -> float32: NumPy's cast, one RNE rounding
}
}  // namespace

Tensor3f to_tensor3(const pyb::array& x, const char* what) {
  const F32Array a = as_f32(x, what);
  const auto s = shape_of(a);
  if (s.empty() || s.size() > 3)
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(s.size()) + "-D; 1-D, 2-D or 3-D [G, N, K] expected");
  const size_t G = s.size() == 3 ? s[0] : 1, R = s.size() == 1 ? 1 : s[s.size() - 2], C = s.back();
  Tensor3f t = Tensor3f::from_shape({G, R, C});
  if (t.size()) std::memcpy(t.data(), a.data(), t.size() * 4);
  return t;
}

Tensor2f to_tensor2(const pyb::array& x, const char* what) {
  const F32Array a = as_f32(x, what);
  const auto s = shape_of(a);
  if (s.size() != 2) throw std::invalid_argument(std::string(what) + ": " + std::to_string(s.size()) + "-D; 2-D expected");
  Tensor2f t = Tensor2f::from_shape({s[0], s[1]});
  if (t.size()) std::memcpy(t.data(), a.data(), t.size() * 4);
  return t;
}

pyb::array_t<float> to_numpy(const float* p, const std::vector<size_t>& shape) {
  pyb::array_t<float> a(shape);
  if (a.size()) std::memcpy(a.mutable_data(), p, size_t(a.size()) * 4);
  return a;
}
pyb::array_t<uint8_t> to_numpy(const uint8_t* p, const std::vector<size_t>& shape) {
  pyb::array_t<uint8_t> a(shape);
  if (a.size()) std::memcpy(a.mutable_data(), p, size_t(a.size()));
  return a;
}

RoundMode rounding_arg(const std::string& name) { return round_mode_from_name(name); }

namespace {
std::string name_of_object(const pyb::object& o) {
  if (pyb::isinstance<pyb::str>(o)) return o.cast<std::string>();
  return std::string(pyb::str(o));  // torch.float8_e4m3fn -> "torch.float8_e4m3fn"
}
}  // namespace

QuantSpec make_spec(const std::optional<std::string>& recipe, const std::optional<pyb::object>& elem_dtype,
                    const std::optional<pyb::object>& block_size, const std::optional<std::string>& scaling_mode,
                    const std::optional<std::string>& rounding, const std::optional<uint64_t>& seed,
                    const std::optional<bool>& hadamard, const std::optional<double>& amax_epsilon,
                    const std::optional<bool>& pow2_scale, const std::optional<std::string>& scale_convention,
                    const std::optional<pyb::object>& hp_dtype, const std::optional<uint64_t>& hadamard_signs) {
  SpecArgs a;  // core's one reading of the arguments (spec_args.hpp); Python only converts objects
  a.recipe = recipe;
  if (elem_dtype) a.elem_dtype = name_of_object(*elem_dtype);
  if (block_size) {
    if (pyb::isinstance<pyb::int_>(*block_size)) a.block_size = std::vector<int>{block_size->cast<int>()};
    else a.block_size = block_size->cast<std::vector<int>>();
    if (a.block_size->size() != 1 && a.block_size->size() != 2)
      throw std::invalid_argument("block_size must be an int or (rows, cols)");
  }
  a.scaling_mode = scaling_mode;
  a.rounding = rounding;
  a.seed = seed;
  a.hadamard = hadamard;
  a.hadamard_signs = hadamard_signs;
  a.amax_epsilon = amax_epsilon;
  a.pow2_scale = pow2_scale;
  a.scale_convention = scale_convention;
  if (hp_dtype && !hp_dtype->is_none()) a.hp_dtype = name_of_object(*hp_dtype);
  return mxsim::make_spec(a);
}

Format dtype_arg(const pyb::object& o) { return format_arg(name_of_object(o)); }

void apply_fp32_settings(QuantSpec& s, const std::optional<double>& amax_epsilon, const std::optional<bool>& pow2_scale,
                         const std::optional<std::string>& scale_convention, const std::optional<pyb::object>& hp_dtype) {
  // The FP32 settings of make_spec on a given spec, in its order.
  if (scale_convention) set_scale_convention(s, scale_convention_from_name(*scale_convention), "scale_convention");
  if (amax_epsilon) set_amax_epsilon(s, *amax_epsilon, "amax_epsilon");
  if (pow2_scale) set_pow2_scale(s, *pow2_scale, "pow2_scale");
  if (hp_dtype && !hp_dtype->is_none()) set_hp_dtype(s, dtype_arg(*hp_dtype), "hp_dtype");
}

QuantSpec spec_arg(const pyb::object& o) {
  if (pyb::isinstance<QuantSpec>(o)) return o.cast<QuantSpec>();
  const std::string n = o.cast<std::string>();
  return n == "bf16" ? bf16_spec() : tensor_recipe(n);
}

}  // namespace mxsim::py
