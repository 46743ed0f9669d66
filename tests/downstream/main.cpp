// Uses the installed headers and libraries: quantize a row with the MXFP4
// recipe, check the E8M0 byte and the packed codes against values worked out
// by hand (amax 6 * 2^-4 -> s = -4, byte 123; codes 6 -> 7, 3 -> 5 packed as
// 0x57), and write it as a .npy through mxsim::io.
#include <cstdio>

#include "mxsim/build_info.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/io/npy.hpp"
#include "mxsim/quant_spec.hpp"

int main(int argc, char** argv) {
  mxsim::Tensor2f x = mxsim::Tensor2f::from_shape({1, 32});
  x.fill(0.0f);
  x(0, 0) = 6.0f / 16;
  x(0, 1) = 3.0f / 16;
  const mxsim::QuantizedTensor q = mxsim::emu::quantize(x, mxsim::tensor_recipe("mxfp4"));
  const bool ok = q.scale_bytes(0, 0, 0) == 123 && q.data(0, 0, 0) == 0x57;
  if (argc > 1) mxsim::io::write_npy(argv[1], mxsim::io::from_u8("q", {1, 16}, q.data.data()));
  std::printf("mxsim %s: scale byte %u, first code byte 0x%02X: %s\n", mxsim::version(), q.scale_bytes(0, 0, 0),
              q.data(0, 0, 0), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
