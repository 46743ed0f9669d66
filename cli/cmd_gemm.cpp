// mxsim gemm: run a random problem through the GEMM contract and a matrix-unit
// model, print the ULP-distance histogram of the model from the contract.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <random>

#include "commands.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/mma_model.hpp"
#include "mxsim/emu/quantize.hpp"

namespace po = boost::program_options;

namespace mxsim::cli {

int cmd_gemm(const Args& args) {
  po::options_description desc("mxsim gemm: ULP distance of a matrix-unit model from the GEMM contract (docs/numerics.md §5)");
  size_t m = 64, n = 64, k = 1024;
  int spread = 4;
  uint32_t seed = 1;
  std::string ra = "mxfp8", rb = "mxfp8", model = "hopper";
  desc.add_options()("help,h", "this help")("m", po::value(&m)->default_value(m), "rows of A")(
      "n", po::value(&n)->default_value(n), "rows of B")("k", po::value(&k)->default_value(k), "contraction length")(
      "recipe-a", po::value(&ra)->default_value(ra), "recipe of A (quantized along K)")(
      "recipe-b", po::value(&rb)->default_value(rb), "recipe of B (quantized along K)")(
      "model", po::value(&model)->default_value(model), "contract | hopper | blackwell")(
      "spread", po::value(&spread)->default_value(spread), "values are N(0,1) * 2^U[-spread, spread]")(
      "seed", po::value(&seed)->default_value(seed), "random seed");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mxsim gemm: %s\n", e.what());
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  try {
    const emu::MmaModel mm = emu::mma_model_from_name(model);
    std::mt19937 g(seed);
    std::normal_distribution<float> d(0, 1);
    std::uniform_int_distribution<int> e(-spread, spread);
    Tensor2f a = Tensor2f::from_shape({m, k}), b = Tensor2f::from_shape({n, k});
    for (auto& v : a) v = d(g) * std::ldexp(1.0f, e(g));
    for (auto& v : b) v = d(g) * std::ldexp(1.0f, e(g));
    const QuantizedTensor qa = emu::quantize(a, named_spec(ra), Axis::Cols);
    const QuantizedTensor qb = emu::quantize(b, named_spec(rb), Axis::Cols);
    const Tensor2f ref = emu::mma_model_gemm(qa, qb, emu::MmaModel::Contract);
    const Tensor2f got = emu::mma_model_gemm(qa, qb, mm);
    const emu::UlpReport r = emu::ulp_report(got, ref);
    std::printf("problem: A[%zu, %zu] %s, B[%zu, %zu] %s, class %s, model %s\n", m, k, ra.c_str(), n, k, rb.c_str(),
                emu::gemm_class_name(qa.spec, qb.spec), emu::name_of(mm));
    std::printf("ulp distance from the contract (%llu outputs, max %llu):\n", (unsigned long long)r.total,
                (unsigned long long)r.max_ulp);
    for (int i = 0; i < 33; ++i) {
      if (!r.buckets[i]) continue;
      if (i == 0) std::printf("  %-16s %10llu\n", "0", (unsigned long long)r.buckets[i]);
      else {
        char lab[40];
        std::snprintf(lab, sizeof lab, "[2^%d, 2^%d)", i - 1, i);
        std::printf("  %-16s %10llu\n", lab, (unsigned long long)r.buckets[i]);
      }
    }
    if (r.nan_mismatch) std::printf("  %-16s %10llu\n", "NaN on one side", (unsigned long long)r.nan_mismatch);
    return 0;
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "mxsim gemm: %s\n", ex.what());
    return 1;
  }
}

}  // namespace mxsim::cli
