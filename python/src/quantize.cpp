// mxsim.quantize / dequantize / qdq / quant_stats / block_stats, QuantSpec and
// QuantizedTensor, and QuantizedTensor from torchao / TE / mxsim arrays.
#include <algorithm>
#include <climits>
#include <cmath>

#include "common.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/layouts.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::py {
namespace {

std::vector<size_t> out_dims(const PyQuantized& p, size_t a, size_t b) {
  if (p.rank == 3) return {p.q.groups, a, b};
  if (p.rank == 1 && a == 1) return {b};
  return {a, b};
}

pyb::object qdata(const PyQuantized& p) {
  const auto& d = p.q.data;
  return to_numpy(d.data(), out_dims(p, d.shape()[1], d.shape()[2]));
}
pyb::object scale(const PyQuantized& p) {
  if (p.q.spec.scale_kind == ScaleKind::FP32) {
    const auto& s = p.q.scale_inv;
    return to_numpy(s.data(), out_dims(p, s.shape()[1], s.shape()[2]));
  }
  const auto& s = p.q.scale_bytes;
  return to_numpy(s.data(), out_dims(p, s.shape()[1], s.shape()[2]));
}

PyQuantized quantize_py(const pyb::array& x, const std::optional<std::string>& recipe,
                        const std::optional<pyb::object>& elem_dtype, const std::optional<pyb::object>& block_size,
                        const std::optional<std::string>& scaling_mode, const std::optional<std::string>& rounding,
                        const std::optional<uint64_t>& seed, const std::optional<bool>& hadamard,
                        const std::string& axis, uint64_t stream, const std::optional<QuantSpec>& spec,
                        const std::optional<double>& amax_epsilon, const std::optional<bool>& pow2_scale,
                        const std::optional<std::string>& scale_convention,
                        const std::optional<pyb::object>& hp_dtype) {
  PyQuantized p;
  p.shape = shape_of(x);
  p.rank = p.shape.size();
  QuantSpec s = spec ? *spec
                     : make_spec(recipe, elem_dtype, block_size, scaling_mode, rounding, seed, hadamard, amax_epsilon,
                                 pow2_scale, scale_convention, hp_dtype);
  // the FP32-scale settings also apply on top of a given spec
  if (spec) apply_fp32_settings(s, amax_epsilon, pow2_scale, scale_convention, hp_dtype);
  const bool hp_given = (hp_dtype && !hp_dtype->is_none()) || (spec && spec->hp_dtype != Format::FP32);
  if (!hp_given && x.dtype().kind() == 'f' && x.dtype().itemsize() == 2) s = spec_for_input(s, Format::FP16);
  s.sr.stream = stream;
  const Axis ax = axis_arg(axis);
  if (x.dtype().kind() == 'f' && x.dtype().itemsize() == 8) {
    // float64: MX elements rounded once from FP64 (emu::quantize_f64, docs/numerics.md §4.7).
    const auto a = pyb::array_t<double, pyb::array::c_style | pyb::array::forcecast>::ensure(x);
    const auto sh = shape_of(a);
    if (sh.empty() || sh.size() > 3)
      throw std::invalid_argument("quantize: x: " + std::to_string(sh.size()) + "-D; 1-D, 2-D or 3-D [G, N, K] expected");
    const size_t G = sh.size() == 3 ? sh[0] : 1, R = sh.size() == 1 ? 1 : sh[sh.size() - 2], C = sh.back();
    pyb::gil_scoped_release nogil;
    p.q = emu::quantize_f64(a.data(), G, R, C, s, ax);
    return p;
  }
  Tensor3f t = to_tensor3(x, "quantize: x");
  check_hp_values(s, t.data(), t.size(), "quantize");
  {
    pyb::gil_scoped_release nogil;
    p.q = emu::quantize(t, s, ax);
  }
  return p;
}

pyb::array dequantize_py(const PyQuantized& p, const std::string& dtype) {
  Tensor3f d;
  {
    pyb::gil_scoped_release nogil;
    d = emu::dequantize3(p.q);
  }
  std::vector<size_t> shape = p.shape;
  if (shape.empty()) shape = {p.q.groups, p.q.rows, p.q.cols};
  if (dtype == "float32") return to_numpy(d.data(), shape);
  if (dtype == "bfloat16_bits") {  // NumPy has no bfloat16: the BF16 bit patterns as uint16 (RNE)
    pyb::array_t<uint16_t> out(shape);
    uint16_t* o = out.mutable_data();
    for (size_t i = 0; i < d.size(); ++i) o[i] = uint16_t(round_bf16_code(f32_bits(d.data()[i])));
    return out;
  }
  throw std::invalid_argument("dtype must be 'float32' or 'bfloat16_bits'");
}

pyb::dict stats_py(const pyb::array& x, const PyQuantized& p) {
  Tensor3f t = to_tensor3(x, "quant_stats: x");
  const emu::QuantStats s = emu::quant_stats(t, p.q);
  pyb::dict d;
  d["count"] = s.count;
  d["nonfinite_in"] = s.nonfinite_in;
  d["nan_out"] = s.nan_out;
  d["underflow"] = s.underflow;
  d["saturated"] = s.saturated;
  d["mse"] = s.mse;
  d["max_abs_err"] = s.max_abs_err;
  d["signal_power"] = s.signal_power;
  d["sqnr_db"] = s.sqnr_db;
  d["mean_err"] = s.mean_err;
  d["rounded"] = s.rounded;
  d["rounded_up"] = s.rounded_up;
  d["expected_up"] = s.expected_up;
  d["tensor_scale_inv"] = s.tensor_scale_inv;
  return d;
}

pyb::dict block_stats_py(const pyb::array& x, const PyQuantized& p) {
  Tensor3f t = to_tensor3(x, "block_stats: x");
  const auto bs = emu::block_stats(t, p.q);
  const size_t n = bs.size();
  pyb::array_t<float> amax(n);
  pyb::array_t<int32_t> sexp(n);
  pyb::array_t<double> sq(n);
  pyb::array_t<uint64_t> sat(n), und(n);
  for (size_t i = 0; i < n; ++i) {
    amax.mutable_data()[i] = bs[i].amax;
    sexp.mutable_data()[i] = bs[i].scale_exp;
    sq.mutable_data()[i] = bs[i].sq_err;
    sat.mutable_data()[i] = bs[i].saturated;
    und.mutable_data()[i] = bs[i].underflow;
  }
  pyb::dict d;
  d["amax"] = amax;
  d["scale_exp"] = sexp;
  d["sq_err"] = sq;
  d["saturated"] = sat;
  d["underflow"] = und;
  return d;
}

using U8Array = pyb::array_t<uint8_t, pyb::array::c_style | pyb::array::forcecast>;
std::span<const uint8_t> bytes_of(const pyb::array& a) {
  if (a.itemsize() != 1) throw std::invalid_argument("codes and scale bytes must be 1-byte arrays (uint8, int8, float8 views)");
  return {static_cast<const uint8_t*>(a.data()), size_t(a.size())};
}
pyb::array c_contig(const pyb::array& a) { return pyb::array::ensure(a, pyb::array::c_style); }

std::string dtype_name(const pyb::array& a) { return pyb::str(a.dtype()).cast<std::string>(); }

/// Scale bytes of `kind`: raw bytes (uint8, int8) or the ml_dtypes type of that
/// kind; any other 1-byte type (an E4M3 array given as E8M0 scales, ...) is refused.
std::span<const uint8_t> scale_bytes_of(const pyb::array& a, ScaleKind kind, const char* what) {
  const std::string n = dtype_name(a);
  const char* typed = kind == ScaleKind::E8M0 ? "float8_e8m0fnu" : "float8_e4m3fn";
  if (n != "uint8" && n != "int8" && n != typed)
    throw std::invalid_argument(std::string(what) + " is " + n + ": " +
                                (kind == ScaleKind::E8M0 ? "E8M0 scale bytes (uint8, int8 or float8_e8m0fnu)"
                                                         : "UE4M3 scale bytes (uint8, int8 or float8_e4m3fn)") +
                                " expected");
  return bytes_of(a);
}
/// Packed E2M1 bytes (two codes per byte): uint8 / int8 views; an unpacked
/// one-code-per-byte float4_e2m1fn array is refused.
std::span<const uint8_t> packed_e2m1_of(const pyb::array& a, const char* what) {
  const std::string n = dtype_name(a);
  if (n != "uint8" && n != "int8")
    throw std::invalid_argument(std::string(what) + " is " + n +
                                ": packed E2M1 bytes (uint8, two codes per byte, element 2i in the low nibble; "
                                "mxsim.pack_fp4 packs codes) expected");
  return bytes_of(a);
}
/// FP8 codes one per byte: a float8 array (ml_dtypes float8_e4m3fn, float8_e5m2,
/// ...: its dtype names the format) or uint8 / int8 bytes with elem_dtype. A
/// dtype that names another format than elem_dtype is refused.
Format fp8_codes_format(const pyb::array& a, const std::optional<pyb::object>& elem_dtype, const char* what) {
  const std::string n = dtype_name(a);
  std::optional<Format> typed;
  if (n.rfind("float8_", 0) == 0) {
    Format f;
    if (format_from_name(n, f)) typed = f;
  }
  if (!typed && n != "uint8" && n != "int8")
    throw std::invalid_argument(std::string(what) + " is " + n + ": FP8 codes (uint8 / int8 bytes, or a float8 array) "
                                "expected");
  std::optional<Format> given;
  if (elem_dtype && !elem_dtype->is_none())
    given = format_arg(pyb::isinstance<pyb::str>(*elem_dtype) ? elem_dtype->cast<std::string>()
                                                              : std::string(pyb::str(*elem_dtype)));
  if (typed && given && *typed != *given)
    throw std::invalid_argument(std::string(what) + " is " + n + " but elem_dtype says " + short_name(*given));
  if (given) layout::check_elem_width(*given, "elem_dtype", std::string(what) + " (" + n + ")");
  if (typed) return *typed;
  if (given) return *given;
  throw std::invalid_argument(std::string(what) + " is " + n + ": give elem_dtype (float8_e4m3fn, float8_e5m2) for "
                              "FP8 codes as bytes");
}
/// An FP32 scale array, refused (not converted) in any other dtype: "<what> is <dtype>: float32
/// <expected>" (TE's scale_inv, torchao's FP8 scales: both float32).
std::span<const float> f32_of(const pyb::array& a, const char* what, const char* expected = "scale_inv expected") {
  if (!a.dtype().is(pyb::dtype::of<float>()))
    throw std::invalid_argument(std::string(what) + " is " + dtype_name(a) + ": float32 " + expected);
  return {static_cast<const float*>(a.data()), size_t(a.size())};
}
/// torchao's FP8 scales (float32 in torchao).
std::span<const float> f32_scale_of(const pyb::array& a, const char* what) {
  return f32_of(a, what, "expected (torchao's FP8 scales are float32; np.float32(...) for one value)");
}

}  // namespace

void init_quantize(pyb::module_& m) {
  pyb::enum_<ScaleKind>(m, "ScaleKind")
      .value("E8M0", ScaleKind::E8M0)
      .value("FP32", ScaleKind::FP32)
      .value("UE4M3", ScaleKind::UE4M3);

  pyb::class_<QuantSpec>(m, "QuantSpec", "How one tensor is quantized (mxsim/quant_spec.hpp); build with mxsim.spec().")
      .def_property_readonly("elem_dtype", [](const QuantSpec& s) { return short_name(s.elem); })
      .def_property_readonly("block_size", [](const QuantSpec& s) { return std::make_pair(s.block_rows, s.block_cols); })
      .def_property_readonly("scale_kind", [](const QuantSpec& s) { return std::string(name_of(s.scale_kind)); })
      .def_property_readonly("scaling_mode", [](const QuantSpec& s) { return std::string(name_of(s.rule)); })
      .def_property_readonly("rounding", [](const QuantSpec& s) { return std::string(name_of(s.round)); })
      .def_property_readonly("seed", [](const QuantSpec& s) { return s.sr.seed; })
      .def_property_readonly("hadamard", [](const QuantSpec& s) { return s.hadamard16; })
      .def_property_readonly("hadamard_signs", [](const QuantSpec& s) { return s.hadamard16_signs; })
      .def_property_readonly("pow2_scale", [](const QuantSpec& s) { return s.pow2_scale; })
      .def_property_readonly("amax_epsilon", [](const QuantSpec& s) { return s.amax_epsilon; })
      .def_property_readonly("scale_convention", [](const QuantSpec& s) { return std::string(name_of(s.scale_convention)); })
      .def_property_readonly("hp_dtype", [](const QuantSpec& s) { return std::string(spec_of(s.hp_dtype).name); })
      .def("__repr__", [](const QuantSpec& s) { return "QuantSpec(" + s.describe() + ")"; });

  m.def("spec", &make_spec, pyb::arg("recipe") = pyb::none(), pyb::arg("elem_dtype") = pyb::none(),
        pyb::arg("block_size") = pyb::none(), pyb::arg("scaling_mode") = pyb::none(), pyb::arg("rounding") = pyb::none(),
        pyb::arg("seed") = pyb::none(), pyb::arg("hadamard") = pyb::none(), pyb::arg("amax_epsilon") = pyb::none(),
        pyb::arg("pow2_scale") = pyb::none(), pyb::arg("scale_convention") = pyb::none(),
        pyb::arg("hp_dtype") = pyb::none(), pyb::arg("hadamard_signs") = pyb::none(),
        R"(A QuantSpec from a recipe name (mxsim.recipes()) and/or torchao-style arguments:
elem_dtype (e2m1 / float4_e2m1fn_x2, e4m3 / float8_e4m3fn, e5m2, e2m3 / fp6_e2m3, e3m2 / fp6_e3m2,
or a torch dtype), block_size (int: 1 x n blocks along the last axis; (rows, cols): tiles; 0:
per-tensor), scaling_mode (floor, rceil, even, ceil: the E8M0 scale rule), rounding (rne, rz,
sr), seed (Philox seed for sr), hadamard (16-point transform first); for FP32-scaled recipes
(fp8_tensor, fp8_row, fp8_block, ...) amax_epsilon (amax used = max(amax, eps), stored as FP32;
TE's amax_epsilon) and pow2_scale (scale rounded down to a power of two; TE's
force_pow_2_scales) (docs/numerics.md §3.3; ValueError for other specs), scale_convention ('te',
'torchao', 'torchao_cuda', 'torchao_training': whose scale arithmetic, §3.4; set before
amax_epsilon and pow2_scale, a torchao one turns pow2_scale off) and hp_dtype (torchao /
torchao_cuda: the dtype torchao computes the scale in). Without a recipe the spec
is OCP MX: E8M0 scales, blocks of 32, scaling_mode floor (torchao to_mx's defaults).)");
  m.def("recipes", &tensor_recipe_names, "Names of the single-tensor recipes (mxsim/quant_spec.hpp).");

  pyb::class_<PyQuantized>(m, "QuantizedTensor",
                           "Codes and block scales of one tensor (mxsim/quantized_tensor.hpp).")
      .def_property_readonly("qdata", &qdata,
                             "uint8 codes in storage order: the source's shape with the last axis in codes (E2M1: "
                             "packed two per byte as float4_e2m1fn_x2, element 2i in the low nibble); columnwise "
                             "(axis='rows') the last two axes swapped")
      .def_property_readonly("scale", &scale,
                             "block scales: uint8 E8M0 bytes (MX) or UE4M3 bytes (NVFP4), or float32 scale_inv "
                             "(FP8 recipes; from_torchao_float8_training: the _scale divisors as given, "
                             "fp32_scale_use 'divide_by_scale'); one per block, blocks along the storage rows")
      .def_property_readonly("fp32_scale_use",
                             [](const PyQuantized& p) -> std::optional<std::string> {
                               if (p.q.spec.scale_kind != ScaleKind::FP32) return std::nullopt;
                               return p.q.divides_by_scale() ? "divide_by_scale" : "multiply_scale_inv";
                             },
                             "FP32 scales: 'multiply_scale_inv' (x = fl32(code * scale)) or 'divide_by_scale' "
                             "(x = fl32(code / scale): torchao Float8TrainingTensor); None for other scales")
      .def_property_readonly("tensor_scale_inv", [](const PyQuantized& p) { return p.q.tensor_scale_inv; })
      .def_property_readonly("spec", [](const PyQuantized& p) { return p.q.spec; })
      .def_property_readonly("elem_dtype", [](const PyQuantized& p) { return short_name(p.q.spec.elem); })
      .def_property_readonly("scale_kind", [](const PyQuantized& p) { return std::string(name_of(p.q.spec.scale_kind)); })
      .def_property_readonly("block", [](const PyQuantized& p) { return std::make_pair(p.q.block_rows(), p.q.block_cols()); })
      .def_property_readonly("transposed", [](const PyQuantized& p) { return p.q.transposed; })
      .def_property_readonly("shape", [](const PyQuantized& p) { return p.shape; })
      .def("__repr__", [](const PyQuantized& p) {
        std::string s = "QuantizedTensor(shape=[";
        for (size_t i = 0; i < p.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(p.shape[i]);
        return s + "], " + p.q.spec.describe() + (p.q.transposed ? ", columnwise" : "") +
               (p.q.divides_by_scale() ? ", divide_by_scale" : "") + ")";
      });

  m.def("quantize", &quantize_py, pyb::arg("x"), pyb::arg("recipe") = pyb::none(), pyb::kw_only(),
        pyb::arg("elem_dtype") = pyb::none(), pyb::arg("block_size") = pyb::none(),
        pyb::arg("scaling_mode") = pyb::none(), pyb::arg("rounding") = pyb::none(), pyb::arg("seed") = pyb::none(),
        pyb::arg("hadamard") = pyb::none(), pyb::arg("axis") = "cols", pyb::arg("stream") = 0,
        pyb::arg("spec") = pyb::none(), pyb::arg("amax_epsilon") = pyb::none(), pyb::arg("pow2_scale") = pyb::none(),
        pyb::arg("scale_convention") = pyb::none(), pyb::arg("hp_dtype") = pyb::none(),
        R"(Quantize x (float16/32/64 array, 1-D, 2-D or 3-D [G, N, K]) exactly as emu::quantize
(docs/numerics.md); float64 as emu::quantize_f64 (§4.7: amax and scales from x rounded to
float32, MX elements rounded once from float64, other recipes from the float32 rounding). The spec from `recipe` and the torchao-style keywords (mxsim.spec), or
`spec`. axis: 'cols' (blocks along the last axis, rowwise) or 'rows' (down the columns,
columnwise; codes stored transposed). stream: the Philox stream of rounding='sr' (mxsim
quantize --all-tensors uses the tensor's position). Returns a QuantizedTensor.

scale_convention (FP32-scaled recipes; docs/numerics.md §3.4): 'te' (default), 'torchao' /
'torchao_cuda' (torchao Float8Tensor's _choose_scale_float8 + _quantize_affine_float8 as
PyTorch computes them on the CPU / on CUDA: q.scale is torchao's `scale`, x ~= code * scale),
'torchao_training' (Float8TrainingTensor's amax_to_scale + _ToFloat8ConstrFunc: q.scale is
`_scale`, q.fp32_scale_use 'divide_by_scale', x ~= code / _scale). hp_dtype ('float32',
'bfloat16', 'float16'; torchao / torchao_cuda only): the dtype of the tensor torchao was given,
in which it computes the scale; default float16 for a float16 x, else float32; a float32 x
with hp_dtype='bfloat16' must hold bfloat16 values (ValueError naming the first that is not).
float64 x is refused with a torchao convention (torchao's float64 scale arithmetic differs).)");
  m.def("dequantize", &dequantize_py, pyb::arg("q"), pyb::arg("dtype") = "float32",
        "Values of q in its source's shape (emu::dequantize3): float32, or 'bfloat16_bits' (uint16 BF16 "
        "patterns, one RNE rounding).");
  m.def(
      "qdq",
      [](const pyb::array& x, const std::optional<std::string>& recipe, const std::optional<pyb::object>& elem_dtype,
         const std::optional<pyb::object>& block_size, const std::optional<std::string>& scaling_mode,
         const std::optional<std::string>& rounding, const std::optional<uint64_t>& seed,
         const std::optional<bool>& hadamard, const std::string& axis, const std::optional<QuantSpec>& spec,
         const std::optional<double>& amax_epsilon, const std::optional<bool>& pow2_scale,
         const std::optional<std::string>& scale_convention, const std::optional<pyb::object>& hp_dtype) {
        return dequantize_py(quantize_py(x, recipe, elem_dtype, block_size, scaling_mode, rounding, seed, hadamard, axis,
                                         0, spec, amax_epsilon, pow2_scale, scale_convention, hp_dtype),
                             "float32");
      },
      pyb::arg("x"), pyb::arg("recipe") = pyb::none(), pyb::kw_only(), pyb::arg("elem_dtype") = pyb::none(),
      pyb::arg("block_size") = pyb::none(), pyb::arg("scaling_mode") = pyb::none(), pyb::arg("rounding") = pyb::none(),
      pyb::arg("seed") = pyb::none(), pyb::arg("hadamard") = pyb::none(), pyb::arg("axis") = "cols",
      pyb::arg("spec") = pyb::none(), pyb::arg("amax_epsilon") = pyb::none(), pyb::arg("pow2_scale") = pyb::none(),
      pyb::arg("scale_convention") = pyb::none(), pyb::arg("hp_dtype") = pyb::none(),
      "dequantize(quantize(x, ...)): the quantize-dequantize (QDQ) values, float32 (with a torchao scale "
      "convention torchao's dequantize: code * scale, or code / _scale for torchao_training).");
  m.def("quant_stats", &stats_py, pyb::arg("x"), pyb::arg("q"),
        "Error statistics of q against its source x (emu::quant_stats, docs/numerics.md §4.6) as a dict.");
  m.def("block_stats", &block_stats_py, pyb::arg("x"), pyb::arg("q"),
        "Per-block statistics in storage order (emu::block_stats): dict of arrays amax, scale_exp "
        "(-2^31 for a NaN scale), sq_err, saturated, underflow.");

  m.def(
      "from_torchao",
      [](const pyb::array& qd, const pyb::array& sc, const pyb::object& elem_dtype, int block_size, bool blocked_scales) {
        const pyb::array q = c_contig(qd), s = c_contig(sc);
        Format f = format_arg(pyb::isinstance<pyb::str>(elem_dtype) ? elem_dtype.cast<std::string>()
                                                                   : std::string(pyb::str(elem_dtype)));
        layout::check_elem_width(f, "elem_dtype", "qdata (" + dtype_name(q) + ")");
        PyQuantized p;
        const auto qb = f == Format::E2M1 ? packed_e2m1_of(q, "qdata") : bytes_of(q);
        p.q = layout::from_torchao(f, block_size, shape_of(q), qb, shape_of(s),
                                   scale_bytes_of(s, ScaleKind::E8M0, "scale"), blocked_scales);
        p.shape = shape_of(q);
        if (f == Format::E2M1) p.shape.back() *= 2;
        p.rank = p.shape.size();
        return p;
      },
      pyb::arg("qdata"), pyb::arg("scale"), pyb::arg("elem_dtype"), pyb::arg("block_size") = 32,
      pyb::kw_only(), pyb::arg("blocked_scales") = false,
      R"(A QuantizedTensor from torchao MXTensor arrays (mxsim/layouts.hpp layout::from_torchao).

qdata: uint8 [..., K] codes (1-D to 3-D; 3-D [E, N, K] is E groups), or for
  float4_e2m1fn_x2 [..., K/2] bytes, element 2i in the low nibble.
scale: uint8 E8M0 bytes (2^(byte - 127), 0xFF NaN), plain [..., ceil(K/block_size)].
elem_dtype: float8_e4m3fn, float8_e5m2, fp6_e2m3, fp6_e3m2, float4_e2m1fn_x2 (or mxsim names).
block_size: elements per scale along the last axis (torchao default 32).
blocked_scales: scale is in the swizzled layout cuBLAS / CUTLASS block-scaled GEMMs read and
  torchao's to_blocked writes (MXTensor with is_swizzled_scales): per group the
  [rows, ceil(K/block_size)] matrix padded to multiples of 128 x 4, cut into 128 x 4 tiles of
  512 bytes, scale (r, c) of a tile at byte (r % 32) * 16 + (r / 32) * 4 + c (cuBLAS docs
  "1D Block Scaling Factors Layout"). Any shape holding exactly groups x roundup(rows, 128) x
  roundup(ceil(K/block_size), 4) bytes; the padding bytes are never read.
Raises ValueError naming both shapes (or the byte counts) when they do not fit.)");
  m.def(
      "from_te_mxfp8",
      [](const pyb::array& dd, const pyb::array& sc, const std::string& elem, bool columnwise) {
        const pyb::array d = c_contig(dd), s = c_contig(sc);
        PyQuantized p;
        p.q = layout::from_te_mxfp8(format_arg(elem), columnwise, shape_of(d), bytes_of(d), shape_of(s),
                                    scale_bytes_of(s, ScaleKind::E8M0, "scale_inv"));
        p.shape = shape_of(d);
        p.rank = p.shape.size() == 1 ? 1 : 2;
        return p;
      },
      pyb::arg("data"), pyb::arg("scale_inv"), pyb::arg("elem_dtype") = "e4m3", pyb::arg("columnwise") = false,
      "A QuantizedTensor from TransformerEngine MXFP8Tensor data and padded E8M0 scale_inv (mxsim/layouts.hpp).");
  m.def(
      "from_torchao_nvfp4",
      [](const pyb::array& qd, const pyb::array& sc, std::optional<float> per_tensor_scale, bool blocked_scales) {
        const pyb::array q = c_contig(qd), s = c_contig(sc);
        PyQuantized p;
        p.q = layout::from_torchao_nvfp4(shape_of(q), packed_e2m1_of(q, "qdata"), shape_of(s),
                                         scale_bytes_of(s, ScaleKind::UE4M3, "scale"), per_tensor_scale.value_or(1.0f),
                                         blocked_scales);
        p.shape = shape_of(q);
        p.shape.back() *= 2;
        p.rank = p.shape.size();
        return p;
      },
      pyb::arg("qdata"), pyb::arg("scale"), pyb::arg("per_tensor_scale") = pyb::none(), pyb::kw_only(),
      pyb::arg("blocked_scales") = false,
      R"(A QuantizedTensor from torchao NVFP4Tensor arrays (mxsim/layouts.hpp layout::from_torchao_nvfp4).

qdata: uint8 [..., K/2] packed E2M1 (float4_e2m1fn_x2 viewed as uint8), element 2i in the low nibble.
scale: the E4M3 block scales (_scale_e4m3 as uint8 or float8_e4m3fn), blocks of 16 along the last
  axis: [..., ceil(K/16)], or the same bytes flattened; with blocked_scales the swizzled 128 x 4
  tile layout (_is_swizzled_scales), padding never read.
per_tensor_scale: torchao's _per_tensor_scale (the FP32 decode scale amax / 2688), None for
  single-level scaling (1).
Values: fl32(fl32(code * e4m3(scale)) * per_tensor_scale) (docs/numerics.md §2.4).
Raises ValueError naming the shapes, or a scale dtype that is not E4M3 bytes.)");
  m.def(
      "from_te_nvfp4",
      [](const pyb::array& dd, const pyb::array& sc, float amax, bool columnwise, bool swizzled_scales) {
        const pyb::array d = c_contig(dd), s = c_contig(sc);
        PyQuantized p;
        p.q = layout::from_te_nvfp4(columnwise, shape_of(d), packed_e2m1_of(d, "data"), shape_of(s),
                                    scale_bytes_of(s, ScaleKind::UE4M3, "scale_inv"), amax, swizzled_scales);
        p.shape = {p.q.rows, p.q.cols};
        if (!columnwise) {
          p.shape = shape_of(d);
          p.shape.back() *= 2;
        }
        p.rank = p.shape.size();
        return p;
      },
      pyb::arg("data"), pyb::arg("scale_inv"), pyb::arg("amax"), pyb::arg("columnwise") = false, pyb::kw_only(),
      pyb::arg("swizzled_scales") = false,
      R"(A QuantizedTensor from a TransformerEngine NVFP4Tensor copy (layout::from_te_nvfp4).

data: rowwise _rowwise_data uint8 [..., K/2], or columnwise _columnwise_data [K, M/2] (the transpose).
scale_inv: uint8 E4M3 bytes padded to [roundup(M, 128), roundup(ceil(K/16), 4)] (columnwise
  [roundup(K, 128), roundup(ceil(M/16), 4)]); padding never read; swizzled_scales: the GEMM
  tile layout (_with_gemm_swizzled_scales).
amax: _amax_rowwise / _amax_columnwise; the decode scale is S_dec of docs/numerics.md §3.3.
The result's shape is the logical [..., K] (columnwise: [M, K]).)");
  m.def(
      "from_te_fp8_blockwise",
      [](const pyb::array& dd, const pyb::array& sc, const std::string& elem, bool columnwise,
         std::optional<int> block_scaling_dim) {
        const pyb::array d = c_contig(dd), s = c_contig(sc);
        PyQuantized p;
        p.q = layout::from_te_fp8_blockwise(format_arg(elem), columnwise, block_scaling_dim.value_or(0), shape_of(d),
                                            bytes_of(d), shape_of(s), f32_of(s, "scale_inv"));
        p.shape = shape_of(d);
        if (columnwise && !p.shape.empty()) std::rotate(p.shape.begin(), p.shape.begin() + 1, p.shape.end());
        p.rank = p.shape.size();
        return p;
      },
      pyb::arg("data"), pyb::arg("scale_inv"), pyb::arg("elem_dtype") = "e4m3", pyb::arg("columnwise") = false,
      pyb::kw_only(), pyb::arg("block_scaling_dim") = pyb::none(),
      R"(A QuantizedTensor from a TransformerEngine Float8BlockwiseQTensor copy (layout::from_te_fp8_blockwise).

data: uint8 FP8 codes, rowwise [..., K] or columnwise [K, ...] (the transpose).
scale_inv: float32 in TE's layout: 1 x 128 blocks rowwise [ceil(K/128), roundup(M, 4)],
  columnwise [ceil(M/128), roundup(K, 4)]; 128 x 128 tiles rowwise [ceil(M/128),
  roundup(ceil(K/128), 4)], columnwise [ceil(K/128), roundup(ceil(M/128), 4)]; padding never read.
block_scaling_dim: 1 or 2; None takes it from the scale_inv shape (ValueError when both fit).)");
  m.def(
      "from_torchao_float8",
      [](const pyb::array& qd, const pyb::array& sc, const std::optional<std::vector<size_t>>& block_size,
         const std::optional<pyb::object>& elem_dtype) {
        const pyb::array q = c_contig(qd), s = c_contig(sc);
        PyQuantized p;
        p.q = layout::from_torchao_float8(fp8_codes_format(q, elem_dtype, "qdata"), shape_of(q), bytes_of(q),
                                          shape_of(s), f32_scale_of(s, "scale"), block_size);
        p.shape = shape_of(q);
        p.rank = p.shape.size();
        return p;
      },
      pyb::arg("qdata"), pyb::arg("scale"), pyb::arg("block_size") = pyb::none(), pyb::kw_only(),
      pyb::arg("elem_dtype") = pyb::none(),
      R"(A QuantizedTensor from a torchao Float8Tensor (torchao/quantization/quantize_/workflows/float8/
float8_tensor.py; mxsim/layouts.hpp layout::from_torchao_float8).

qdata: the FP8 codes [...] (1-D to 3-D; 3-D [E, N, K] is E groups), a float8 array
  (ml_dtypes float8_e4m3fn / float8_e5m2: the dtype gives the format) or uint8 bytes
  (t.qdata.view(torch.uint8).numpy()) with elem_dtype.
scale: float32, the rank of qdata with scale.shape[i] = qdata.shape[i] / block_size[i]:
  per tensor (one value, any shape such as [1, 1] or []), per row ([..., 1], PerRow) or
  blockwise (PerBlock: [M, K/128], [M/128, K/128], exact divisors only).
block_size: torchao's block_size attribute (a list of qdata's rank, [] for per tensor) to
  check the scale shape against; None takes the blocks from the two shapes.
elem_dtype: float8_e4m3fn, float8_e5m2 (also the fnuz variants) for byte codes.
Values: fl32(code * scale), torchao's dequantize() (_dequantize_affine_float8 in
  torchao/quantization/quant_primitives.py: qdata.to(float32) * scale); its `scale` is a
  scale_inv. NaN / Inf scales follow IEEE (code * NaN = NaN, 0 * Inf = NaN).
Raises ValueError naming both shapes when the scale fits none of these, or a dtype that
  is not FP8 codes / float32.)");
  m.def(
      "from_torchao_float8_training",
      [](const pyb::array& dd, const pyb::array& sc, const std::optional<pyb::object>& elem_dtype) {
        const pyb::array d = c_contig(dd), s = c_contig(sc);
        PyQuantized p;
        p.q = layout::from_torchao_float8_training(fp8_codes_format(d, elem_dtype, "data"), shape_of(d), bytes_of(d),
                                                   shape_of(s), f32_scale_of(s, "scale"));
        p.shape = shape_of(d);
        p.rank = p.shape.size();
        return p;
      },
      pyb::arg("data"), pyb::arg("scale"), pyb::kw_only(), pyb::arg("elem_dtype") = pyb::none(),
      R"(A QuantizedTensor from a torchao Float8TrainingTensor (torchao/float8/float8_training_tensor.py;
layout::from_torchao_float8_training).

data: _data, FP8 codes (as qdata of from_torchao_float8), 1-D to 3-D.
scale: _scale, float32: one value (tensorwise, torchao's 0-D tensor) or the rank of data with
  each axis 1 or data's extent (axiswise: [M, 1] for axiswise_dim -1, [1, K] for 0).
Values: fl32(code / scale), one RNE division as torchao's to_original_precision
  (_FromFloat8ConstrFunc: _data.to(orig_dtype) / _scale): _scale is the quantization scale
  (fp8_max / amax), not a scale_inv. A zero scale gives +-Inf (0 / 0: NaN), an infinite one
  +-0, NaN gives NaN. In grouped_* GEMMs each scale enters as scale_inv = fl32(1 / scale), as
  torchao's matmul passes _scale.reciprocal() (docs/numerics.md §5.2).
Raises ValueError naming both shapes otherwise.)");
  m.def(
      "from_te_fp8",
      [](const pyb::array& dd, float scale_inv, const std::string& elem) {
        const pyb::array d = c_contig(dd);
        PyQuantized p;
        p.q = layout::from_te_fp8(format_arg(elem), shape_of(d), bytes_of(d), scale_inv);
        p.shape = {p.q.rows, p.q.cols};
        return p;
      },
      pyb::arg("data"), pyb::arg("scale_inv"), pyb::arg("elem_dtype") = "e4m3",
      "A QuantizedTensor from a TransformerEngine Float8Tensor (data, one FP32 scale_inv).");
}

}  // namespace mxsim::py
