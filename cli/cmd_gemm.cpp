// mxsim gemm: run a random problem through the GEMM contract and a matrix-unit
// model, print the ULP-distance histogram of the model from the contract; with
// --a / --b, one GEMM on given operands instead (cmd_gemm_operands.cpp).
#include <cmath>
#include <cstdio>
#include <random>

#include "commands.hpp"
#include "common.hpp"
#include "gemm_operands.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/mma_model.hpp"
#include "mxsim/emu/quantize.hpp"

namespace mxsim::cli {
namespace {

// Sizes: each of A [m, k], B [n, k] and the output [m, n] at most 2^26
// elements (256 MiB of FP32), each extent within the ranges below.
constexpr int64_t kMaxMN = 16384, kMaxK = 1 << 20, kMaxElems = int64_t(1) << 26;
// Spread: 2^120 * N(0,1) stays finite in FP32 (max ~2^128) for every draw below ~2^7.
constexpr int64_t kMaxSpread = 120;

std::string bucket_label(int i) {
  if (i == 0) return "0";
  return "[2^" + std::to_string(i - 1) + ", 2^" + std::to_string(i) + ")";
}

int run(const Args& args) {
  po::options_description opts("options");
  opts.add_options()("help,h", "this help")
      ("m", po::value<std::string>(), ("rows of A, 1 to " + std::to_string(kMaxMN) + " (default 64)").c_str())
      ("n", po::value<std::string>(), ("rows of B = output columns, 1 to " + std::to_string(kMaxMN) + " (default 64)").c_str())
      ("k", po::value<std::string>(), ("contraction length, 1 to " + std::to_string(kMaxK) + " (default 1024)").c_str())
      ("recipe-a", po::value<std::string>()->default_value("mxfp8"), "recipe of A (quantized along K)")
      ("recipe-b", po::value<std::string>()->default_value("mxfp8"), "recipe of B (quantized along K)")
      ("model", po::value<std::string>()->default_value("hopper"), "contract | hopper | blackwell")
      ("spread", po::value<std::string>(),
       ("values are N(0,1) * 2^U[-spread, spread], spread 0 to " + std::to_string(kMaxSpread) + " (default 4)").c_str())
      ("seed", po::value<std::string>(), "random seed, 0 to 4294967295 (default 1)");
  add_format_options(opts, true, "the result");
  add_operand_options(opts);
  const CommandHelp help{
      "gemm",
      "[--m M] [--n N] [--k K] [--recipe-a NAME] [--recipe-b NAME] [--model M] [--spread S] [--seed N] [--json|--csv]\n"
      "       mxsim gemm [--op fprop|dgrad|wgrad] --a FILE [--a FILE].. --b FILE [--b FILE].. [-o OUT.npy] [--m-splits LIST]\n"
      "                  [--accumulate C.npy] [--out-dtype fp32|bf16] [--json]",
      "Random-problem mode: ULP distance of a matrix-unit model from the GEMM contract (docs/numerics.md\n"
      "section 5) on a random problem A[m, k] . B[n, k]^T; it measures a model's deviation, it times nothing.\n"
      "Operand mode (--a, --b): one grouped GEMM on given operands, exactly as the contract defines it, written\n"
      "as .npy: --op fprop Y[M, N] = X[M, K] . W[g][N, K]^T (emu::grouped_fprop; X, W quantized along K),\n"
      "dgrad dX[M, K] = dY[M, N] . W[g][N, K] (emu::grouped_dgrad; dY and W quantized along N), wgrad\n"
      "dW[g][N, K] (+)= dY_g^T . X_g (emu::grouped_wgrad; dY, X quantized along the tokens M per group).\n"
      "Operand files are read as `mxsim dequantize` reads them (--layout mxsim | torchao | te), or one float\n"
      "array taken as BF16 (every value must be a BF16 value; nothing is rounded). torchao operands of dgrad\n"
      "(W) and wgrad are torchao's backward copies, the transposes with blocks along their last axis.",
      "CSV: one row per non-empty bucket (bucket, lo_ulp, hi_ulp, count).\n"
      "Random mode: each of A, B and the output may hold at most 2^26 elements.\n"
      "Operand mode: B [G, N, K] needs --m-splits with G sizes summing to M (wgrad: --m-splits gives G and the\n"
      "output [G, N, K]; whole-tensor operands are cut at group starts on block boundaries, or give one\n"
      "tensor per non-empty group with repeated --a-tensor / --b-tensor); the operand pair picks the class\n"
      "(mx-exact, mx-f13, fp8-chunk128, bf16-f25, nvfp4-exact), pairs the contract does not define are errors.",
      ""};
  const Parsed p = parse(args, opts);
  if (p.has("help")) {
    print_help(stdout, help, opts);
    return kExitOk;
  }
  if (operand_mode(p)) return run_gemm_operands(p);
  for (const char* o : {"layout", "out-dtype", "impl", "op", "scale-layout"})
    if (!p.vm[o].defaulted()) throw UsageError(std::string("--") + o + " belongs to the operand mode (--a FILE --b FILE)");
  for (const char* o : {"a-tensor", "b-tensor", "elem-dtype", "a-elem-dtype", "b-elem-dtype", "block-size", "m-splits",
                        "accumulate", "output"})
    if (p.has(o)) throw UsageError(std::string("--") + o + " belongs to the operand mode (--a FILE --b FILE)");
  const OutputFormat out = output_format(p, true);
  const int64_t m = int_option(p, "m", 1, kMaxMN, 64), n = int_option(p, "n", 1, kMaxMN, 64);
  const int64_t k = int_option(p, "k", 1, kMaxK, 1024);
  const int spread = int(int_option(p, "spread", 0, kMaxSpread, 4));
  const uint32_t seed = uint32_t(uint_option(p, "seed", 0, UINT32_MAX, 1));
  for (const auto& [what, e] : {std::pair{"A = m x k", m * k}, std::pair{"B = n x k", n * k}, std::pair{"the output m x n", m * n}})
    if (e > kMaxElems)
      throw UsageError(std::string(what) + " = " + std::to_string(e) + " elements exceeds the limit of 2^26 = " +
                       std::to_string(kMaxElems));
  const std::string ra = p.str("recipe-a"), rb = p.str("recipe-b");
  QuantSpec sa, sb;
  emu::MmaModel mm;
  try {
    sa = spec_option("--recipe-a", ra);
    sb = spec_option("--recipe-b", rb);
    mm = emu::mma_model_from_name(p.str("model"));
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }

  std::mt19937 g(seed);
  std::normal_distribution<float> d(0, 1);
  std::uniform_int_distribution<int> ex(-spread, spread);
  Tensor2f a = Tensor2f::from_shape({size_t(m), size_t(k)}), b = Tensor2f::from_shape({size_t(n), size_t(k)});
  for (auto& v : a) v = d(g) * std::ldexp(1.0f, ex(g));
  for (auto& v : b) v = d(g) * std::ldexp(1.0f, ex(g));
  const QuantizedTensor qa = emu::quantize(a, sa, Axis::Cols);
  const QuantizedTensor qb = emu::quantize(b, sb, Axis::Cols);
  const char* cls = emu::gemm_class_name(qa.spec, qb.spec);
  const Tensor2f ref = emu::mma_model_gemm(qa, qb, emu::MmaModel::Contract);
  const Tensor2f got = emu::mma_model_gemm(qa, qb, mm);
  const emu::UlpReport r = emu::ulp_report(got, ref);

  if (out == OutputFormat::Json) {
    nlohmann::ordered_json j;
    j["command"] = "gemm";
    j["m"] = m;
    j["n"] = n;
    j["k"] = k;
    j["recipe_a"] = ra;
    j["recipe_b"] = rb;
    j["class"] = cls;
    j["model"] = emu::name_of(mm);
    j["spread"] = spread;
    j["seed"] = seed;
    j["outputs"] = r.total;
    j["max_ulp"] = r.max_ulp;
    j["nan_mismatch"] = r.nan_mismatch;
    j["buckets"] = nlohmann::ordered_json::array();
    for (int i = 0; i < 33; ++i)
      if (r.buckets[i])
        j["buckets"].push_back({{"lo_ulp", i == 0 ? 0 : uint64_t(1) << (i - 1)},
                                {"hi_ulp", i == 0 ? 0 : (uint64_t(1) << i) - 1},
                                {"count", r.buckets[i]}});
    print_json(j);
  } else if (out == OutputFormat::Csv) {
    std::printf("%s", csv_row({"bucket", "lo_ulp", "hi_ulp", "count"}).c_str());
    for (int i = 0; i < 33; ++i)
      if (r.buckets[i])
        std::printf("%s", csv_row({bucket_label(i), std::to_string(i == 0 ? 0 : uint64_t(1) << (i - 1)),
                                   std::to_string(i == 0 ? 0 : (uint64_t(1) << i) - 1), std::to_string(r.buckets[i])})
                              .c_str());
    if (r.nan_mismatch) std::printf("%s", csv_row({"nan_mismatch", "", "", std::to_string(r.nan_mismatch)}).c_str());
  } else {
    std::printf("problem: A[%lld, %lld] %s, B[%lld, %lld] %s, class %s, model %s\n", (long long)m, (long long)k,
                ra.c_str(), (long long)n, (long long)k, rb.c_str(), cls, emu::name_of(mm));
    std::printf("ulp distance from the contract (%llu outputs, max %llu):\n", (unsigned long long)r.total,
                (unsigned long long)r.max_ulp);
    for (int i = 0; i < 33; ++i)
      if (r.buckets[i]) std::printf("  %-16s %10llu\n", bucket_label(i).c_str(), (unsigned long long)r.buckets[i]);
    if (r.nan_mismatch) std::printf("  %-16s %10llu\n", "NaN on one side", (unsigned long long)r.nan_mismatch);
  }
  return kExitOk;
}

}  // namespace

int cmd_gemm(const Args& args) { return guarded("gemm", [&] { return run(args); }); }

}  // namespace mxsim::cli
