// Running the built `mxsim` binary from a test: a fresh folder, the command's
// exit status, stdout and stderr (header only, shared by the test_cli_* suites).
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "test_util.hpp"

namespace mxsim::test {

struct CliRun {
  int rc;
  std::string out, err;
};

/// A temporary folder in which `mxsim ARGS` runs (ARGS is shell text).
struct CliSandbox : TempDir {
  CliSandbox() : TempDir("cli") {}
  std::string slurp_text(const std::string& name) const { return read_bytes(p / name); }
  CliRun mxsim(const std::string& args) const {
    const std::string bin = std::string(MXSIM_BINARY_DIR) + "/cli/mxsim";
    const std::string cmd = "cd '" + p.string() + "' && '" + bin + "' " + args + " >.stdout 2>.stderr";
    const int st = std::system(cmd.c_str());
    CliRun r{WIFEXITED(st) ? WEXITSTATUS(st) : -1, read_bytes(p / ".stdout"), read_bytes(p / ".stderr")};
    std::filesystem::remove(p / ".stdout");
    std::filesystem::remove(p / ".stderr");
    return r;
  }
};

/// A version-1.0 .npy file's bytes (numpy.lib.format), header padded to 64.
/// Sets an environment variable for the commands a test runs, restoring
/// (unsetting) it when the test's scope ends.
struct EnvVar {
  std::string name;
  EnvVar(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~EnvVar() { unsetenv(name.c_str()); }
};

inline std::string npy_bytes(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string f("\x93NUMPY\x01\x00", 8);
  f += char(h.size() & 0xFF);
  f += char(h.size() >> 8);
  return f + h + data;
}

}  // namespace mxsim::test
