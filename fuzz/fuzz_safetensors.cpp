// libFuzzer harness: the safetensors parser (io/safetensors.hpp). Any exception but IoError,
// any sanitizer report, or a parsed file that does not survive encode -> parse unchanged, is a
// finding.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "mxsim/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace mxsim::io;
  SafetensorsFile f;
  try {
    f = parse_safetensors(std::span<const uint8_t>(data, size), "fuzz.safetensors");
  } catch (const IoError&) {
    return 0;
  }
  std::vector<uint8_t> enc;
  try {
    enc = encode_safetensors(f.tensors, f.metadata);
  } catch (const IoError&) {
    return 0;  // a name the writer refuses (e.g. empty)
  }
  const auto again = parse_safetensors(enc, "fuzz.safetensors");
  if (again.tensors.size() != f.tensors.size() || again.metadata != f.metadata) std::abort();
  for (std::size_t i = 0; i < f.tensors.size(); ++i) {
    const auto* t = again.find(f.tensors[i].name);
    if (!t || t->dtype != f.tensors[i].dtype || t->shape != f.tensors[i].shape || t->bytes != f.tensors[i].bytes)
      std::abort();
  }
  return 0;
}
