// The C++ side of tests/python/test_gemm.py: runs emu::grouped_fprop / dgrad /
// wgrad on operands read from .npy files and writes the result as .npy, so the
// Python module's results can be compared with the C++ library's, bit for bit.
//   gemm_oracle fprop|dgrad|wgrad A.npy B.npy M_SPLITS SPEC_A SPEC_B fp32|bf16 fast|reference OUT.npy [MAIN_GRAD.npy]
// A, B: fprop x [M, K], w [G, N, K]; dgrad dy [M, N], w [G, N, K]; wgrad dy [M, N], x [M, K].
// M_SPLITS: comma-separated; SPEC: a recipe name or bf16.
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/io/npy.hpp"
#include "mxsim/quant_spec.hpp"

using namespace mxsim;

namespace {
template <class T>
T load(const std::string& path) {
  const io::RawTensor r = io::read_npy(path);
  const std::vector<float> v = io::to_f32(r);
  std::vector<size_t> shape = r.shape;
  T t = T::from_shape(shape);
  std::copy(v.begin(), v.end(), t.begin());
  return t;
}
QuantSpec spec(const std::string& n) { return n == "bf16" ? emu::bf16_spec() : tensor_recipe(n); }
}  // namespace

int main(int argc, char** argv) {
  if (argc != 10 && argc != 11) {
    std::fprintf(stderr, "usage: gemm_oracle fprop|dgrad|wgrad A.npy B.npy M_SPLITS SPEC_A SPEC_B fp32|bf16 fast|reference OUT.npy [MAIN_GRAD.npy]\n");
    return 2;
  }
  try {
    const std::string op = argv[1];
    std::vector<int64_t> ms;
    std::stringstream ss(argv[4]);
    for (std::string t; std::getline(ss, t, ',');) ms.push_back(std::stoll(t));
    emu::GemmOptions o;
    o.out = std::string(argv[7]) == "bf16" ? Format::BF16 : Format::FP32;
    o.impl = std::string(argv[8]) == "reference" ? emu::GemmImpl::Reference : emu::GemmImpl::Fast;
    io::RawTensor out;
    if (op == "fprop" || op == "dgrad") {
      const Tensor2f a = load<Tensor2f>(argv[2]);
      const Tensor3f w = load<Tensor3f>(argv[3]);
      Tensor2f y;
      if (op == "fprop") emu::grouped_fprop(a, spec(argv[5]), w, spec(argv[6]), ms, y, o);
      else emu::grouped_dgrad(a, spec(argv[5]), w, spec(argv[6]), ms, y, o);
      out = io::from_f32("y", {y.shape()[0], y.shape()[1]}, y.data());
    } else {
      const Tensor2f dy = load<Tensor2f>(argv[2]);
      const Tensor2f x = load<Tensor2f>(argv[3]);
      Tensor3f dw;
      if (argc == 11) {
        dw = load<Tensor3f>(argv[10]);
        o.accumulate = true;
      }
      emu::grouped_wgrad(dy, spec(argv[5]), x, spec(argv[6]), ms, dw, o);
      out = io::from_f32("dw", {dw.shape()[0], dw.shape()[1], dw.shape()[2]}, dw.data());
    }
    io::write_npy(argv[9], out);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_oracle: %s\n", e.what());
    return 1;
  }
}
