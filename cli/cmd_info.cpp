#include <cstdio>

#include "commands.hpp"
#include "mxsim/format.hpp"
#include "mxsim/quant_spec.hpp"

#ifndef MXSIM_GPU_PLATFORM
#define MXSIM_GPU_PLATFORM "off"
#endif

namespace mxsim::cli {

int cmd_info(const Args& args) {
  (void)args;
  std::printf("mxsim %s\n", MXSIM_VERSION);
  std::printf("build: C++20, %s, -ffp-contract=off\n",
#ifdef NDEBUG
              "release"
#else
              "debug"
#endif
  );
  std::printf("backends: emu (CPU, bit-exact)");
#ifdef MXSIM_HAVE_GPU
  std::printf(", hip (%s)", MXSIM_GPU_PLATFORM);
#endif
  std::printf("\nGPU build: %s\n", MXSIM_GPU_PLATFORM);
  std::printf("formats:");
  for (int i = 0; i < kNumFormats; ++i) std::printf(" %s", short_name(Format(i)));
  std::printf("\nrecipes:");
  for (const auto& n : tensor_recipe_names()) std::printf(" %s", n.c_str());
  std::printf("\n");
  return 0;
}

}  // namespace mxsim::cli
