// The table tests/python/test_codecs.py checks mxsim.decode against: for every
// format of the oracle (tests/test_formats_oracle.hpp, written from the OCP
// and FNUZ definitions, never from mxsim's decoder), the FP32 bits each code
// decodes to (every NaN code the canonical 0x7FC00000). The C++ suites check
// decode(), `mxsim cast --from` and `mxsim dequantize` against the same table.
// Output: one line per format, "<name> <bits of code 0> <bits of code 1> ...", decimal.
#include <cstdio>

#include "../test_formats_oracle.hpp"

int main() {
  for (const auto& f : oracle::all_formats()) {
    std::printf("%s", f.name.c_str());
    for (uint32_t c = 0; c < (1u << f.bits); ++c) std::printf(" %u", oracle::decoded_f32_bits(f, c));
    std::printf("\n");
  }
  return 0;
}
