// Helpers shared by the binding files: NumPy <-> tensor copies, names -> enums,
// and the QuantSpec built from torchao-style keyword arguments.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "mxsim/quantized_tensor.hpp"
#include "mxsim/spec_args.hpp"
#include "mxsim/tensor.hpp"

namespace mxsim::py {

namespace pyb = pybind11;

/// mxsim.QuantizedTensor: a QuantizedTensor plus the rank of the array it came
/// from, so results keep the caller's shape (1-D in, 1-D codes out; 3-D
/// [G, N, K] in, [G, ...] out). Shared by quantize.cpp (which makes them) and
/// gemm.cpp (which multiplies given ones).
struct PyQuantized {
  QuantizedTensor q;
  size_t rank = 2;
  std::vector<size_t> shape;  ///< the source array's shape
};
using F32Array = pyb::array_t<float, pyb::array::c_style | pyb::array::forcecast>;

/// An array's shape as size_t.
std::vector<size_t> shape_of(const pyb::array& a);
/// A C-order float32 copy of x as [groups, rows, cols]: 1-D [K] is [1, 1, K],
/// 2-D [R, K] is [1, R, K], 3-D as is. float16 and float32 convert exactly;
/// float64 is rounded once to float32 (RNE, NumPy's astype). Throws
/// ValueError for other ranks and for non-float dtypes.
Tensor3f to_tensor3(const pyb::array& x, const char* what);
Tensor2f to_tensor2(const pyb::array& x, const char* what);
/// A new float32 NumPy array of `shape` holding n values from p.
pyb::array_t<float> to_numpy(const float* p, const std::vector<size_t>& shape);
pyb::array_t<uint8_t> to_numpy(const uint8_t* p, const std::vector<size_t>& shape);

RoundMode rounding_arg(const std::string& name);
// format_arg, scaling_mode_arg, axis_arg: core's (mxsim/spec_args.hpp).

/// The spec of the keyword arguments (docs/python.md), read by core's
/// make_spec (mxsim/spec_args.hpp) after the objects become text: start from `recipe`
/// (a tensor_recipe name, or "bf16"), or, when only elem_dtype is given, from
/// OCP MX (E8M0 scales, 1 x block_size, scaling_mode default "floor" as
/// torchao's to_mx); then apply the given overrides. scale_convention,
/// amax_epsilon, pow2_scale and hp_dtype: FP32-scaled specs only
/// (mxsim::set_scale_convention first, then set_amax_epsilon, set_pow2_scale,
/// set_hp_dtype).
QuantSpec make_spec(const std::optional<std::string>& recipe, const std::optional<pyb::object>& elem_dtype,
                    const std::optional<pyb::object>& block_size, const std::optional<std::string>& scaling_mode,
                    const std::optional<std::string>& rounding, const std::optional<uint64_t>& seed,
                    const std::optional<bool>& hadamard, const std::optional<double>& amax_epsilon = std::nullopt,
                    const std::optional<bool>& pow2_scale = std::nullopt,
                    const std::optional<std::string>& scale_convention = std::nullopt,
                    const std::optional<pyb::object>& hp_dtype = std::nullopt,
                    const std::optional<uint64_t>& hadamard_signs = std::nullopt);
/// The FP32-scale settings on a spec, in make_spec's order (a given spec's overrides).
void apply_fp32_settings(QuantSpec& s, const std::optional<double>& amax_epsilon, const std::optional<bool>& pow2_scale,
                         const std::optional<std::string>& scale_convention, const std::optional<pyb::object>& hp_dtype);
/// A dtype argument (a string such as 'bfloat16' or a torch / NumPy dtype) as a Format.
Format dtype_arg(const pyb::object& o);
/// A spec argument of the GEMM functions: a recipe name or a QuantSpec.
QuantSpec spec_arg(const pyb::object& o);

void init_codecs(pyb::module_& m);
void init_quantize(pyb::module_& m);
void init_gemm(pyb::module_& m);
void init_trace(pyb::module_& m);

}  // namespace mxsim::py
