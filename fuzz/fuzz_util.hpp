// Shared by the libFuzzer harnesses (fuzz/README.md).
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

extern "C" std::size_t LLVMFuzzerMutate(uint8_t* data, std::size_t size, std::size_t max_size);

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

/// The bit-flip campaign of the HDF5 harnesses (their LLVMFuzzerCustomMutator): every other
/// mutation flips 1 to 3 bits of the input in place and nothing else, so the inputs stay whole
/// files written by mxsim (the seeds) with a few damaged bits, the way a disk or a copy damages
/// a checkpoint; libFuzzer's own mutations insert and erase bytes, which moves every HDF5 address
/// and is refused at the superblock. The other half are libFuzzer's mutations.
inline std::size_t flip_bits_or_mutate(uint8_t* data, std::size_t size, std::size_t max_size, unsigned seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&x] {
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;  // xorshift64*
    return x * 0x2545F4914F6CDD1Dull;
  };
  if (size == 0 || next() % 2 == 0) return LLVMFuzzerMutate(data, size, max_size);
  for (uint64_t k = 0, n = 1 + next() % 3; k < n; ++k) {
    const uint64_t r = next();
    data[(r >> 3) % size] ^= uint8_t(1u << (r & 7));
  }
  return size;
}

}  // namespace mxsim::fuzz
