// libFuzzer harness: the HDF5 trace reader and compare (trace/reader.hpp, trace/compare.hpp),
// as `mxsim compare` and the inspector use them: open, read every series and snapshot row,
// config and provenance, compare the file with itself. Any exception but TraceError, any
// sanitizer report (the HDF5 bounds shim included), or a hang (libFuzzer -timeout) is a finding.
#include <cstdint>
#include <cstdlib>

#include "fuzz_util.hpp"
#include "mxsim/trace/compare.hpp"
#include "mxsim/trace/reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace mxsim::trace;
  const auto f = mxsim::fuzz::input_file("trace.h5", data, size);
  try {
    Reader r(f);
    (void)r.config_toml();
    (void)r.provenance();
    for (const auto& in : r.datasets()) {
      if (in.snapshot) {
        for (int64_t s : in.snapshot_steps) {
          try {
            (void)r.read_snapshot_raw(in.name, in.dtype, s);
          } catch (const TraceError&) {
          }
        }
      } else {
        const auto rows = r.read_raw(in.name, in.dtype);
        if (rows.size() != r.steps_completed() * in.row_bytes()) std::abort();
      }
    }
    const auto c = compare(f, f);
    if (c.first_difference) std::abort();  // a file is bit-identical to itself
  } catch (const TraceError&) {
  }
  return 0;
}

// Half the mutations flip bits of a whole file (fuzz_util.hpp): the bit-flip campaign.
extern "C" std::size_t LLVMFuzzerCustomMutator(uint8_t* data, std::size_t size, std::size_t max_size, unsigned seed) {
  return mxsim::fuzz::flip_bits_or_mutate(data, size, max_size, seed);
}
