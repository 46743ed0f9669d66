// mxsim: headless command line for runs on GPU machines and CI.
#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "commands.hpp"
#include "common.hpp"

namespace {

struct Command {
  int (*fn)(const mxsim::cli::Args&);
  const char* help;
};

const std::map<std::string, Command>& commands() {
  static const std::map<std::string, Command> c = {
      {"cast", {mxsim::cli::cmd_cast, "convert values or a .npy tensor to any format (FP64 rounded once); amax to E8M0 scale bytes"}},
      {"compare", {mxsim::cli::cmd_compare, "compare two HDF5 traces: final metrics, config, first differing bits"}},
      {"dequantize", {mxsim::cli::cmd_dequantize, "codes + scales (mxsim, torchao or TE layout) back to FP32 / BF16"}},
      {"gemm", {mxsim::cli::cmd_gemm, "one GEMM on given operands (--a, --b), or a model's ULP histogram vs the contract"}},
      {"info", {mxsim::cli::cmd_info, "version, build options, backends present"}},
      {"launch", {mxsim::cli::cmd_launch, "start one process per GPU for a multi-process run (-n P -- train ...)"}},
      {"quantize", {mxsim::cli::cmd_quantize, "quantize .npy/.safetensors tensors or checkpoints, print error statistics"}},
      {"report", {mxsim::cli::cmd_report, "PNG plots of a trace (curves, per-layer SQNR, saturation, oscillations) without a display"}},
      {"train", {mxsim::cli::cmd_train, "train the MoE classifier on Fashion-MNIST, write an HDF5 trace"}},
      {"verify", {mxsim::cli::cmd_verify, "check a backend (the GPU) against the emulator op by op, bit for bit"}},
  };
  return c;
}

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: mxsim COMMAND [options]   (mxsim COMMAND --help for its options)\n"
               "       mxsim --version | --help\n\n"
               "Bit-exact emulation of MXFP4 / MXFP8 / FP8 block-scaled training numerics.\n\ncommands:\n");
  for (const auto& [name, c] : commands()) std::fprintf(to, "  %-11s %s\n", name.c_str(), c.help);
  std::fprintf(to,
               "\noptions:\n  -h [ --help ]     this help\n  --version         version and the commit it was built from\n"
               "\nexit status: 0 success, 1 runtime or data error, 2 usage error (docs/cli.md)\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return mxsim::cli::kExitUsage;
  }
  const std::string name = argv[1];
  if (name == "-h" || name == "--help" || name == "help") {
    usage(stdout);
    return mxsim::cli::kExitOk;
  }
  if (name == "--version" || name == "-V") {
    if (argc > 2) {
      std::fprintf(stderr, "mxsim: usage error: --version takes no arguments ('%s')\n", argv[2]);
      return mxsim::cli::kExitUsage;
    }
    std::printf("%s\n", mxsim::cli::version_line().c_str());
    return mxsim::cli::kExitOk;
  }
  const auto it = commands().find(name);
  if (it == commands().end()) {
    std::fprintf(stderr, "mxsim: usage error: unknown command '%s'\n", name.c_str());
    usage(stderr);
    return mxsim::cli::kExitUsage;
  }
  return mxsim::cli::guarded(name, [&] { return it->second.fn(mxsim::cli::Args(argv + 2, argv + argc)); });
}
