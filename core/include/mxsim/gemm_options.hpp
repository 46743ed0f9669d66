// Options of a grouped GEMM call, shared by every backend (the emu API in
// emu/include/mxsim/emu/grouped_gemm.hpp and mxsim::Backend take this type).
#pragma once
#include <cstdint>

#include "mxsim/format.hpp"

namespace mxsim {

/// Which implementation computes the contract (docs/numerics.md §5). Both
/// give the same bits; Reference exists to check Fast against it.
enum class GemmImpl : uint8_t {
  Fast,       ///< the backend's fast kernels
  Reference,  ///< the literal contract with exact arithmetic (slow; an oracle)
};

struct GemmOptions {
  /// Output element type: FP32, or BF16 (FP32 accumulator rounded once, RNE;
  /// values are returned as FP32 holding BF16-representable numbers).
  Format out = Format::FP32;
  /// Add into the existing output (wgrad into FP32 main_grad, Megatron's
  /// gradient-accumulation fusion) instead of overwriting it: the FP32
  /// accumulator starts at the current value.
  bool accumulate = false;
  GemmImpl impl = GemmImpl::Fast;
};

}  // namespace mxsim
