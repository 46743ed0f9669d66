// Reproducible random bits for stochastic rounding, identical on CPU and GPU.
//
// Generator: Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy
// as 1, 2, 3", SC'11), from the Random123 library.
//   key     = (seed & 0xFFFFFFFF, seed >> 32)
//   counter = (i/4 & 0xFFFFFFFF, i/4 >> 32, stream & 0xFFFFFFFF, stream >> 32)
// Element i of a stream uses 32-bit word (i % 4) of the Philox output for
// counter block i/4. Streams are 64-bit: make_stream(tensor_id, step) puts the
// tensor id in the high and the step in the low 32 bits (docs/numerics.md §2.5:
// keyed by (seed, tensor id, step) with the element index as counter).
#pragma once
#include <cstdint>

#include "mxsim/hd.hpp"  // first: sets Random123's device macros for HIP

#include <Random123/philox.h>

namespace mxsim {

MXSIM_HD constexpr uint64_t make_stream(uint32_t tensor_id, uint32_t step) {
  return (uint64_t(tensor_id) << 32) | step;
}

struct PhiloxStream {
  uint64_t seed = 0;
  uint64_t stream = 0;

  /// The 32-bit random word of element `index` (row-major element index of
  /// the tensor being rounded, in its logical layout).
  MXSIM_HD uint32_t operator()(uint64_t index) const { return block(index >> 2)[index & 3]; }

  /// The four words of counter block `b`: the words of elements 4b .. 4b+3
  /// (GPU kernels that handle four aligned elements call Philox once).
  MXSIM_HD r123::Philox4x32::ctr_type block(uint64_t b) const {
    r123::Philox4x32 gen;
    r123::Philox4x32::ctr_type ctr = {{uint32_t(b), uint32_t(b >> 32), uint32_t(stream), uint32_t(stream >> 32)}};
    r123::Philox4x32::key_type key = {{uint32_t(seed), uint32_t(seed >> 32)}};
    return gen(ctr, key);
  }
};

}  // namespace mxsim
