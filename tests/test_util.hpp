// Helpers shared by the test programs (header only; not a test itself: the
// tests/CMakeLists.txt glob takes test_*.cpp only).
//
//   mxsim::test::TempDir d("io_npy");          // fresh folder, removed with d
//   auto f = d.put("x.npy", bytes);             // write a file in it, get its path
//   auto p = mxsim::test::make_temp_dir("ckpt") // fresh folder the test removes itself
//   std::string b = mxsim::test::read_bytes(f); mxsim::test::write_bytes(f, b);
//
// Every helper throws std::runtime_error naming the path when the file system
// refuses, so a test fails at the cause instead of on a later, puzzling read.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace mxsim::test {

/// A new, empty folder "<tmp>/mxsim-<tag>-XXXXXX" (mkdtemp: unique per call,
/// so tests running in parallel never share one).
inline std::filesystem::path make_temp_dir(const std::string& tag) {
  std::string t = (std::filesystem::temp_directory_path() / ("mxsim-" + tag + "-XXXXXX")).string();
  if (!::mkdtemp(t.data())) throw std::runtime_error(t + ": mkdtemp failed");
  return t;
}

/// Whole file as bytes (in a std::string).
inline std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream i(p, std::ios::binary);
  if (!i) throw std::runtime_error(p.string() + ": cannot open for reading");
  return std::string(std::istreambuf_iterator<char>(i), {});
}

/// Create or truncate `p` with exactly `bytes`.
inline void write_bytes(const std::filesystem::path& p, std::string_view bytes) {
  std::ofstream o(p, std::ios::binary | std::ios::trunc);
  o.write(bytes.data(), std::streamsize(bytes.size()));
  o.close();
  if (!o) throw std::runtime_error(p.string() + ": cannot write");
}
inline void write_bytes(const std::filesystem::path& p, const std::vector<uint8_t>& bytes) {
  write_bytes(p, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

/// Bytes given as numbers: bytes_of({0x93, 'N', ...}).
inline std::string bytes_of(std::initializer_list<unsigned> v) {
  std::string s;
  for (unsigned b : v) s += char(b);
  return s;
}

/// A fresh folder (make_temp_dir) removed, with its contents, on destruction.
struct TempDir {
  std::filesystem::path p;
  explicit TempDir(const std::string& tag) : p(make_temp_dir(tag)) {}
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(p, ec);
  }
  /// Write `bytes` to p / name; returns that path.
  std::filesystem::path put(const std::string& name, std::string_view bytes) const {
    write_bytes(p / name, bytes);
    return p / name;
  }
};

}  // namespace mxsim::test
