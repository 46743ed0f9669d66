// libFuzzer harness: the HDF5 checkpoint reader (trace/checkpoint.hpp): open, then every
// entry through every getter (all but the right one must refuse it). Any exception but
// TraceError, or any sanitizer report (the HDF5 bounds shim included), is a finding.
#include <cstdint>
#include <cstdlib>
#include <functional>

#include "fuzz_util.hpp"
#include "mxsim/trace/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace mxsim::trace;
  const auto f = mxsim::fuzz::input_file("c.ckpt", data, size);
  try {
    Checkpoint c(f);
    for (const auto& n : c.names()) {
      const std::function<void()> getters[] = {
          [&] { (void)c.get_f32(n); },        [&] { (void)c.get_u8(n); },  [&] { (void)c.get_u64_array(n); },
          [&] { (void)c.get_u64(n); },        [&] { (void)c.get_i64(n); }, [&] { (void)c.get_f64(n); },
          [&] { (void)c.get_f32_scalar(n); }, [&] { (void)c.get_string(n); }};
      for (const auto& g : getters) {
        try {
          g();
        } catch (const TraceError&) {
        }
      }
    }
  } catch (const TraceError&) {
  }
  return 0;
}

// Half the mutations flip bits of a whole file (fuzz_util.hpp): the bit-flip campaign.
extern "C" std::size_t LLVMFuzzerCustomMutator(uint8_t* data, std::size_t size, std::size_t max_size, unsigned seed) {
  return mxsim::fuzz::flip_bits_or_mutate(data, size, max_size, seed);
}
