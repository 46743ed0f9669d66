#include <cstdio>

#include "commands.hpp"

namespace mxsim::cli {

int cmd_quantize(const Args& args) {
  (void)args;
  std::fprintf(stderr, "mxsim quantize: not built yet\n");
  return 1;
}

}  // namespace mxsim::cli
