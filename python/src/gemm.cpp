// mxsim.grouped_fprop / grouped_dgrad / grouped_wgrad / gemm_class: the grouped
// GEMM contract (emu/include/mxsim/emu/grouped_gemm.hpp, docs/numerics.md §5)
// on high-precision operands quantized on the way in.
#include "common.hpp"
#include "mxsim/emu/grouped_gemm.hpp"

namespace mxsim::py {
namespace {

emu::GemmOptions options(const std::string& out_dtype, const std::string& impl, bool accumulate) {
  emu::GemmOptions o;
  if (out_dtype == "float32" || out_dtype == "fp32") o.out = Format::FP32;
  else if (out_dtype == "bfloat16" || out_dtype == "bf16") o.out = Format::BF16;
  else throw std::invalid_argument("out_dtype must be 'float32' or 'bfloat16'");
  if (impl == "fast") o.impl = emu::GemmImpl::Fast;
  else if (impl == "reference") o.impl = emu::GemmImpl::Reference;
  else throw std::invalid_argument("impl must be 'fast' or 'reference'");
  o.accumulate = accumulate;
  return o;
}

/// The FP32 accumulator wgrad starts from (accumulate into main_grad): float32 only,
/// since a conversion would change what is accumulated into.
Tensor3f main_grad_arg(const pyb::array& g) {
  if (g.dtype().kind() != 'f' || g.itemsize() != 4)
    throw std::invalid_argument("grouped_wgrad: main_grad must be float32 (it is accumulated into exactly)");
  return to_tensor3(g, "grouped_wgrad: main_grad");
}

pyb::array_t<float> fprop(const pyb::array& x, const pyb::array& w, const std::vector<int64_t>& m_splits,
                          const pyb::object& x_spec, const pyb::object& w_spec, const std::string& out_dtype,
                          const std::string& impl) {
  const Tensor2f X = to_tensor2(x, "grouped_fprop: x");
  const Tensor3f W = to_tensor3(w, "grouped_fprop: w");
  const QuantSpec sx = spec_arg(x_spec), sw = spec_arg(w_spec.is_none() ? x_spec : w_spec);
  Tensor2f y;
  {
    pyb::gil_scoped_release nogil;
    emu::grouped_fprop(X, sx, W, sw, m_splits, y, options(out_dtype, impl, false));
  }
  return to_numpy(y.data(), {y.shape()[0], y.shape()[1]});
}

pyb::array_t<float> dgrad(const pyb::array& dy, const pyb::array& w, const std::vector<int64_t>& m_splits,
                          const pyb::object& dy_spec, const pyb::object& w_spec, const std::string& out_dtype,
                          const std::string& impl) {
  const Tensor2f DY = to_tensor2(dy, "grouped_dgrad: dy");
  const Tensor3f W = to_tensor3(w, "grouped_dgrad: w");
  const QuantSpec sd = spec_arg(dy_spec), sw = spec_arg(w_spec.is_none() ? dy_spec : w_spec);
  Tensor2f dx;
  {
    pyb::gil_scoped_release nogil;
    emu::grouped_dgrad(DY, sd, W, sw, m_splits, dx, options(out_dtype, impl, false));
  }
  return to_numpy(dx.data(), {dx.shape()[0], dx.shape()[1]});
}

pyb::array_t<float> wgrad(const pyb::array& dy, const pyb::array& x, const std::vector<int64_t>& m_splits,
                          const pyb::object& dy_spec, const pyb::object& x_spec, const std::string& out_dtype,
                          const std::string& impl, const std::optional<pyb::array>& main_grad) {
  const Tensor2f DY = to_tensor2(dy, "grouped_wgrad: dy");
  const Tensor2f X = to_tensor2(x, "grouped_wgrad: x");
  const QuantSpec sd = spec_arg(dy_spec), sx = spec_arg(x_spec.is_none() ? dy_spec : x_spec);
  Tensor3f dw;
  if (main_grad) dw = main_grad_arg(*main_grad);
  {
    pyb::gil_scoped_release nogil;
    emu::grouped_wgrad(DY, sd, X, sx, m_splits, dw, options(out_dtype, impl, main_grad.has_value()));
  }
  return to_numpy(dw.data(), {dw.shape()[0], dw.shape()[1], dw.shape()[2]});
}

// ---- on given quantized operands (codes and scales made by mxsim.quantize or
// read from torchao / TE arrays by mxsim.from_*): one GEMM reproduced from a dump.

pyb::array_t<float> fprop_q(const PyQuantized& x, const PyQuantized& w, const std::vector<int64_t>& m_splits,
                            const std::string& out_dtype, const std::string& impl) {
  Tensor2f y;
  {
    pyb::gil_scoped_release nogil;
    emu::grouped_fprop(x.q, w.q, m_splits, y, options(out_dtype, impl, false));
  }
  return to_numpy(y.data(), {y.shape()[0], y.shape()[1]});
}

pyb::array_t<float> dgrad_q(const PyQuantized& dy, const PyQuantized& w, const std::vector<int64_t>& m_splits,
                            const std::string& out_dtype, const std::string& impl) {
  Tensor2f dx;
  {
    pyb::gil_scoped_release nogil;
    emu::grouped_dgrad(dy.q, w.q, m_splits, dx, options(out_dtype, impl, false));
  }
  return to_numpy(dx.data(), {dx.shape()[0], dx.shape()[1]});
}

pyb::array_t<float> wgrad_q(const std::vector<PyQuantized>& dy, const std::vector<PyQuantized>& x,
                            const std::vector<int64_t>& m_splits, const std::string& out_dtype, const std::string& impl,
                            const std::optional<pyb::array>& main_grad) {
  std::vector<QuantizedTensor> a, b;
  for (const PyQuantized& q : dy) a.push_back(q.q);
  for (const PyQuantized& q : x) b.push_back(q.q);
  Tensor3f dw;
  if (main_grad) dw = main_grad_arg(*main_grad);
  {
    pyb::gil_scoped_release nogil;
    emu::grouped_wgrad(a, b, m_splits, dw, options(out_dtype, impl, main_grad.has_value()));
  }
  return to_numpy(dw.data(), {dw.shape()[0], dw.shape()[1], dw.shape()[2]});
}

}  // namespace

void init_gemm(pyb::module_& m) {
  // Quantized-operand forms first: pybind tries overloads in order, and a
  // QuantizedTensor is no array.
  m.def("grouped_fprop", &fprop_q, pyb::arg("x"), pyb::arg("w"), pyb::arg("m_splits"), pyb::kw_only(),
        pyb::arg("out_dtype") = "float32", pyb::arg("impl") = "fast",
        "grouped_fprop on given QuantizedTensors: x [M, K] quantized along K (axis='cols'), w [G, N, K] along K "
        "(or 2-D tiles); their specs decide the block-dot class. Same contract and errors as the array form.");
  m.def("grouped_dgrad", &dgrad_q, pyb::arg("dy"), pyb::arg("w"), pyb::arg("m_splits"), pyb::kw_only(),
        pyb::arg("out_dtype") = "float32", pyb::arg("impl") = "fast",
        "grouped_dgrad on given QuantizedTensors: dy [M, N] along N, w [G, N, K] along N (axis='rows', or 2-D tiles).");
  m.def("grouped_wgrad", &wgrad_q, pyb::arg("dy"), pyb::arg("x"), pyb::arg("m_splits"), pyb::kw_only(),
        pyb::arg("out_dtype") = "float32", pyb::arg("impl") = "fast", pyb::arg("main_grad") = pyb::none(),
        "grouped_wgrad on given per-group QuantizedTensors: lists dy[g] [M_g, N] and x[g] [M_g, K], each quantized "
        "along M (axis='rows'); main_grad as in the array form.");
  m.def("grouped_fprop", &fprop, pyb::arg("x"), pyb::arg("w"), pyb::arg("m_splits"), pyb::arg("x_spec") = "mxfp8",
        pyb::arg("w_spec") = pyb::none(), pyb::arg("out_dtype") = "float32", pyb::arg("impl") = "fast",
        R"(Y[M, N] = X[M, K] . W[g][N, K]^T for the rows of each group (m_splits[g] consecutive rows,
sum = M). x: [M, K], w: [G, N, K] float arrays, quantized along K by x_spec / w_spec (a recipe
name, 'bf16', or a QuantSpec; w_spec defaults to x_spec). The contract of docs/numerics.md §5;
impl 'fast' and 'reference' give the same bits. out_dtype 'bfloat16' rounds the FP32
accumulator once (RNE) and returns those values as float32.)");
  m.def("grouped_dgrad", &dgrad, pyb::arg("dy"), pyb::arg("w"), pyb::arg("m_splits"), pyb::arg("dy_spec") = "mxfp8",
        pyb::arg("w_spec") = pyb::none(), pyb::arg("out_dtype") = "float32", pyb::arg("impl") = "fast",
        "dX[M, K] = dY[M, N] . W[g][N, K]: dy quantized along N, w along N (columnwise, or 2-D tiles).");
  m.def("grouped_wgrad", &wgrad, pyb::arg("dy"), pyb::arg("x"), pyb::arg("m_splits"), pyb::arg("dy_spec") = "mxfp8",
        pyb::arg("x_spec") = pyb::none(), pyb::arg("out_dtype") = "float32", pyb::arg("impl") = "fast",
        pyb::arg("main_grad") = pyb::none(),
        "dW[g][N, K] = dY_g^T . X_g per group, both quantized along M within the group; with main_grad "
        "(float32 [G, N, K]) the FP32 accumulator starts there (accumulate into main_grad).");
  m.def("gemm_class", [](const pyb::object& a, const pyb::object& b) {
    return std::string(emu::gemm_class_name(spec_arg(a), spec_arg(b)));
  }, pyb::arg("a"), pyb::arg("b"), "The contract's block-dot class of two operand specs (mx-exact, mx-f13, fp8-chunk128, bf16-f25, nvfp4-exact).");
}

}  // namespace mxsim::py
