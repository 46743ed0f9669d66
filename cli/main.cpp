// mxsim: headless command line for runs on GPU machines and CI.
#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "commands.hpp"

namespace {

struct Command {
  int (*fn)(const mxsim::cli::Args&);
  const char* help;
};

const std::map<std::string, Command>& commands() {
  static const std::map<std::string, Command> c = {
      {"gemm", {mxsim::cli::cmd_gemm, "ULP histogram of a matrix-unit model vs the GEMM contract"}},
      {"info", {mxsim::cli::cmd_info, "version, build options, backends present"}},
      {"compare", {mxsim::cli::cmd_compare, "compare two HDF5 traces: final metrics, config, first differing bits"}},
      {"train", {mxsim::cli::cmd_train, "train the MoE classifier on Fashion-MNIST, write an HDF5 trace"}},
      {"quantize", {mxsim::cli::cmd_quantize, "quantize a .npy/.safetensors tensor, print error statistics"}},
  };
  return c;
}

void usage(std::FILE* to) {
  std::fprintf(to, "usage: mxsim <command> [options]   (mxsim <command> --help for its options)\n\ncommands:\n");
  for (const auto& [name, c] : commands()) std::fprintf(to, "  %-10s %s\n", name.c_str(), c.help);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    usage(stdout);
    return 0;
  }
  const auto it = commands().find(name);
  if (it == commands().end()) {
    std::fprintf(stderr, "mxsim: unknown command '%s'\n", name.c_str());
    usage(stderr);
    return 2;
  }
  try {
    return it->second.fn(mxsim::cli::Args(argv + 2, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mxsim %s: error: %s\n", name.c_str(), e.what());
    return 1;
  }
}
