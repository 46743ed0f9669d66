// Shared by the libFuzzer harnesses (fuzz/README.md).
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace mxsim::fuzz {

/// A file holding the input, for parsers that take a path (the IDX loader, the HDF5 readers).
/// One folder per process under $TMPDIR (or /tmp), reused by every input and removed at exit.
inline std::filesystem::path input_file(const std::string& name, const uint8_t* data, std::size_t size) {
  static const std::filesystem::path dir = [] {
    const char* t = std::getenv("TMPDIR");
    std::string d = std::string(t && *t ? t : "/tmp") + "/mxsim-fuzz-XXXXXX";
    if (!::mkdtemp(d.data())) std::abort();
    return std::filesystem::path(d);
  }();
  struct Cleanup {
    std::filesystem::path d;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  };
  static Cleanup cleanup{dir};
  const std::filesystem::path p = dir / name;
  std::FILE* f = std::fopen(p.c_str(), "wb");
  if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) std::abort();
  return p;
}

}  // namespace mxsim::fuzz
