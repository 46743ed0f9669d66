// The `mxsim._core` extension module: the emulator's formats, quantization,
// grouped GEMM and trace reader for Python (docs/python.md).
#include "common.hpp"
#include "mxsim/build_info.hpp"

PYBIND11_MODULE(_core, m) {
  m.doc() = "mxsim: bit-exact MXFP4 / MXFP8 / FP8 numerics (the C++ library, not a re-implementation)";
  m.attr("__version__") = mxsim::version();
  m.attr("build_commit") = mxsim::build_commit();
  mxsim::py::init_codecs(m);
  mxsim::py::init_quantize(m);
  mxsim::py::init_gemm(m);
  mxsim::py::init_trace(m);
}
