// mxsim info: version, build options, backends present, CPU kernels, formats and recipes.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "commands.hpp"
#include "mxsim/emu/cpu_path.hpp"
#include "common.hpp"
#include "mxsim/build_info.hpp"
#include "mxsim/format.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/sim/recipe.hpp"
#include "mxsim/rounding.hpp"

#if defined(MXSIM_HAVE_GPU) && __has_include("mxsim/hip/codec.hpp")
#include "mxsim/hip/codec.hpp"
#define MXSIM_INFO_HIP 1
#endif

#ifndef MXSIM_GPU_PLATFORM
#define MXSIM_GPU_PLATFORM "off"
#endif
#ifndef MXSIM_BUILD_TYPE
#define MXSIM_BUILD_TYPE ""
#endif

namespace mxsim::cli {
namespace {

std::string compiler() {
#if defined(__clang__)
  return std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("g++ ") + __VERSION__;
#else
  return "unknown";
#endif
}

std::string build_type() {
  std::string t = MXSIM_BUILD_TYPE;
  if (t.empty()) t = "(none)";
#ifdef NDEBUG
  t += ", NDEBUG";
#else
  t += ", assertions on";
#endif
  return t;
}

/// `mxsim info --json`: the same facts as the text, as one object.
/// The other names of spec `n` (kSpecAliases), as a JSON array.
nlohmann::ordered_json spec_aliases(const std::string& n) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const SpecAlias& x : kSpecAliases)
    if (n == x.spec) a.push_back(x.alias);
  return a;
}

int print_info_json() {
  nlohmann::ordered_json j;
  j["command"] = "info";
  j["version"] = mxsim::version();
  j["commit"] = mxsim::build_commit();
  j["compiler"] = compiler();
  j["cxx_standard"] = long(__cplusplus / 100 % 100);
  j["build_type"] = MXSIM_BUILD_TYPE;
#ifdef NDEBUG
  j["assertions"] = false;
#else
  j["assertions"] = true;
#endif
  j["fp_contract"] = "off";
  j["gpu_platform"] = MXSIM_GPU_PLATFORM;
  {
    namespace e = mxsim::emu;
    const e::CpuPath p = e::cpu_path();
    j["cpu_path"] = e::cpu_path_name(p);
    auto& sup = j["cpu_paths"] = nlohmann::ordered_json::object();
    for (e::CpuPath q : {e::CpuPath::Avx512, e::CpuPath::Avx2, e::CpuPath::Scalar}) sup[e::cpu_path_name(q)] = e::cpu_supports(q, nullptr);
    auto& k = j["cpu_kernels"] = nlohmann::ordered_json::object();
    for (int s = 0; s < e::kNumKernelSlots; ++s) k[e::kernel_slot_name(e::KernelSlot(s))] = e::kernel_name(e::KernelSlot(s), p);
  }
  auto& be = j["backends"] = nlohmann::ordered_json::array();
  be.push_back({{"name", "emu"}, {"available", true}, {"detail", "CPU, bit-exact reference"}});
#ifdef MXSIM_INFO_HIP
  {
    std::string reason;
    const bool ok = mxsim::hip::available(&reason);
    be.push_back({{"name", "hip"}, {"available", ok}, {"detail", std::string(mxsim::hip::platform()) + (ok ? "" : ": " + reason)}});
  }
#elif defined(MXSIM_HAVE_GPU)
  be.push_back({{"name", "hip"}, {"available", false}, {"detail", MXSIM_GPU_PLATFORM}});
#endif
  auto& fm = j["formats"] = nlohmann::ordered_json::array();
  for (int i = 0; i < kNumFormats; ++i) {
    const FormatSpec f = spec_of(Format(i));
    fm.push_back({{"name", short_name(Format(i))}, {"long_name", f.name}, {"bits", f.bits}, {"exp_bits", f.exp_bits},
                  {"man_bits", f.man_bits}, {"bias", f.bias}, {"signed", f.has_sign}, {"inf", f.has_inf},
                  {"nan", f.nan != NanKind::None}, {"subnormals", f.has_subnormals},
                  {"max", f.max_value()}});
  }
  auto& rc = j["recipes"] = nlohmann::ordered_json::array();
  for (const auto& n : tensor_recipe_names()) {
    const QuantSpec q = tensor_recipe(n);
    nlohmann::ordered_json r{{"name", n}, {"spec", q.describe()}, {"elem", short_name(q.elem)},
                             {"block_rows", q.block_rows}, {"block_cols", q.block_cols},
                             {"scale_kind", name_of(q.scale_kind)}};
    if (q.scale_kind == ScaleKind::E8M0) r["scale_rule"] = name_of(q.rule);
    r["pow2_scale"] = q.pow2_scale;
    r["aliases"] = spec_aliases(n);
    rc.push_back(r);
  }
  // The per-linear recipes of `mxsim train`, each with the spec of every GEMM operand under the
  // default config's recipe options (the Hadamard wgrad of mxfp4 on, no stochastic rounding).
  auto& tr = j["training_recipes"] = nlohmann::ordered_json::array();
  for (const char* n : sim::kRecipeNames) {
    const sim::Recipe rec = sim::make_recipe(n, sim::RecipeConfig{});
    nlohmann::ordered_json aliases = nlohmann::ordered_json::array();
    for (const sim::RecipeAlias& a : sim::kRecipeAliases)
      if (std::string(a.recipe) == n) aliases.push_back(a.alias);
    nlohmann::ordered_json specs;  // null: bf16 quantizes nothing
    if (sim::is_quantized(rec)) {
      const sim::OperandSpecs& o = sim::operand_specs(rec);
      specs = {{"x_fprop", o.x_fprop.describe()}, {"w", o.w.describe()}, {"dy_dgrad", o.dy_dgrad.describe()},
               {"dy_wgrad", o.dy_wgrad.describe()}, {"x_wgrad", o.x_wgrad.describe()}};
    }
    tr.push_back({{"name", n},
                  {"aliases", aliases},
                  {"quantized", sim::is_quantized(rec)},
                  {"fused_wgrad_accum", sim::fused_wgrad_accum(rec)},
                  {"deosc_eligible", sim::deosc_eligible(rec)},
                  {"specs", specs}});
  }
  print_json(j);
  return 0;
}

}  // namespace

int cmd_info(const Args& args) {
  bool json = false;
  for (const auto& a : args) {
    if (a == "-h" || a == "--help") {
      std::printf("usage: mxsim info [--json]\n\nVersion, build options, backends present, formats and recipes.\n\n"
                  "options:\n  -h [ --help ]         this help\n  --json                print the facts as one JSON object\n"
                  "\nexit status: 0 success, 1 runtime or data error, 2 usage error\n");
      return 0;
    }
    if (a == "--json") {
      json = true;
      continue;
    }
    std::fprintf(stderr, "mxsim info: usage error: unexpected argument '%s' (mxsim info takes only --json)\n(mxsim info --help lists the options)\n", a.c_str());
    return 2;
  }
  try {
    (void)mxsim::emu::cpu_path();  // a bad MXSIM_CPU_PATH fails before anything is printed
  } catch (const std::invalid_argument& ex) {
    std::fprintf(stderr, "mxsim info: error: %s\n", ex.what());
    return 1;
  }
  if (json) return print_info_json();
  std::printf("mxsim %s\n", MXSIM_VERSION);
  std::printf("commit:        %s\n", mxsim::build_commit());
  std::printf("compiler:      %s, C++%ld\n", compiler().c_str(), long(__cplusplus / 100 % 100));
  std::printf("build type:    %s\n", build_type().c_str());
  std::printf("host FP:       -ffp-contract=off (no implicit FMA contraction)\n");
  std::printf("GPU platform:  %s\n", MXSIM_GPU_PLATFORM);
  std::printf("backends: emu (CPU, bit-exact reference)");
#ifdef MXSIM_INFO_HIP
  {
    std::string reason;
    const bool ok = mxsim::hip::available(&reason);
    std::printf(", hip (%s; %s)", mxsim::hip::platform(), ok ? "GPU available" : ("no GPU: " + reason).c_str());
  }
#elif defined(MXSIM_HAVE_GPU)
  std::printf(", hip (%s)", MXSIM_GPU_PLATFORM);
#endif
  std::printf("\n");
  {
    // The emulator's CPU dispatch (mxsim/emu/cpu_path.hpp): the path in use,
    // the paths this CPU can run, and the kernel of each GEMM class and the quantizer.
    namespace e = mxsim::emu;
    std::string paths;
    for (e::CpuPath p : {e::CpuPath::Avx512, e::CpuPath::Avx2, e::CpuPath::Scalar}) {
      std::string why;
      paths += std::string(paths.empty() ? "" : ", ") + e::cpu_path_name(p) +
               (e::cpu_supports(p, &why) ? "" : " (no: " + why + ")");
    }
    {
      const e::CpuPath p = e::cpu_path();
      const char* env = std::getenv("MXSIM_CPU_PATH");
      std::printf("cpu path:      %s (%s; MXSIM_CPU_PATH=avx512|avx2|scalar forces one)\n", e::cpu_path_name(p),
                  env && *env ? "forced by MXSIM_CPU_PATH" : "the best this CPU runs");
      std::printf("cpu paths:     %s\n", paths.c_str());
      std::printf("cpu kernels:\n");
      for (int s = 0; s < e::kNumKernelSlots; ++s)
        std::printf("  %-16s %s\n", e::kernel_slot_name(e::KernelSlot(s)), e::kernel_name(e::KernelSlot(s), p));
    }
  }
  std::printf("formats:");
  for (int i = 0; i < kNumFormats; ++i) std::printf(" %s", short_name(Format(i)));
  // Two words kept apart: a spec says how one tensor is quantized (the names
  // `quantize --recipe` takes); a training recipe, per linear, which spec each
  // GEMM operand gets (`train --set recipe.<layer>=NAME`).
  std::printf("\nrecipes (specs of one tensor, for quantize/gemm):\n");
  for (const auto& n : named_spec_names()) {
    std::string also;
    for (const auto& a : spec_aliases(n)) also += (also.empty() ? "  (also: " : ", ") + a.get<std::string>();
    std::printf("  %-16s %s%s\n", n.c_str(), named_spec(n).describe().c_str(), also.empty() ? "" : (also + ")").c_str());
  }
  std::printf("training recipes (per linear, for train recipe.<layer>):");
  for (const char* r : sim::kRecipeNames) std::printf(" %s", r);
  for (const sim::RecipeAlias& a : sim::kRecipeAliases) std::printf(" (%s = %s)", a.alias, a.recipe);
  std::printf("\n");
  return 0;
}

}  // namespace mxsim::cli
