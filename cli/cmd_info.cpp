// mxsim info: version, build options, backends present, formats, specs and recipes.
#include <cstdio>
#include <string>

#include "commands.hpp"
#include "mxsim/format.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/sim/recipe.hpp"

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

}  // namespace

int cmd_info(const Args& args) {
  for (const auto& a : args) {
    if (a == "-h" || a == "--help") {
      std::printf("usage: mxsim info\n  version, build options, backends present, formats, specs and recipes\n");
      return 0;
    }
    std::fprintf(stderr, "mxsim info: usage error: unexpected argument '%s' (mxsim info takes none)\n", a.c_str());
    return 2;
  }
  std::printf("mxsim %s\n", MXSIM_VERSION);
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
  std::printf("\nformats:");
  for (int i = 0; i < kNumFormats; ++i) std::printf(" %s", short_name(Format(i)));
  std::printf("\nspecs (how one tensor is quantized; mxsim quantize --spec):\n");
  for (const auto& n : named_spec_names()) std::printf("  %-16s %s\n", n.c_str(), named_spec(n).describe().c_str());
  std::printf("recipes (per linear, the specs of its GEMM operands; mxsim train recipe.<layer>):\n ");
  for (const char* r : sim::kRecipeNames) std::printf(" %s", r);
  std::printf("\n");
  return 0;
}

}  // namespace mxsim::cli
