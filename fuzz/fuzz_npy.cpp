// libFuzzer harness: the .npy parser (io/npy.hpp). Any exception but IoError, any sanitizer
// report, or a parsed tensor that does not survive encode -> parse unchanged, is a finding.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "mxsim/io/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace mxsim::io;
  RawTensor t;
  try {
    t = parse_npy(std::span<const uint8_t>(data, size), "fuzz.npy");
  } catch (const IoError&) {
    return 0;
  }
  if (t.bytes.size() != t.numel() * size_of(t.dtype)) std::abort();
  const auto again = parse_npy(encode_npy(t), "fuzz.npy");
  if (again.dtype != t.dtype || again.shape != t.shape || again.bytes != t.bytes) std::abort();
  return 0;
}
