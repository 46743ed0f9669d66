// libFuzzer harness: the IDX loader with gzip (data/fashion_mnist.hpp). Input: a 4-byte
// little-endian length n, then n bytes of the images file, then the labels file; each may be
// gzip or plain. Any exception but DataError, or any sanitizer report, is a finding.
#include <cstdint>
#include <cstdlib>

#include "fuzz_util.hpp"
#include "mxsim/data/fashion_mnist.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 4) return 0;
  std::size_t n = std::size_t(data[0]) | std::size_t(data[1]) << 8 | std::size_t(data[2]) << 16 |
                  std::size_t(data[3]) << 24;
  data += 4;
  size -= 4;
  if (n > size) n = size;
  const auto im = mxsim::fuzz::input_file("images", data, n);
  const auto lb = mxsim::fuzz::input_file("labels", data + n, size - n);
  try {
    const auto d = mxsim::data::load_idx(im, lb);
    if (d.images.size() != d.count * d.rows * d.cols || d.labels.size() != d.count) std::abort();
  } catch (const mxsim::data::DataError&) {
  }
  return 0;
}
