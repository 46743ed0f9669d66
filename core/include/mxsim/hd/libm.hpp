// The elementary functions the training-step ops call beyond IEEE + - * /
// sqrt, in one place: the project's own correctly rounded FP32 exp, log, erf
// and x^n (core/include/mxsim/hd/math.hpp, docs/numerics.md §6.1), never the
// host libm or a device intrinsic, so that the CPU emulator and a GPU kernel
// compute the same bits by construction.
#pragma once
#include <cstdint>

#include "mxsim/hd.hpp"
#include "mxsim/hd/math.hpp"

namespace mxsim::hd {

MXSIM_HD inline float exp_f32(float x) { return ::mxsim::exp_f32(x); }
MXSIM_HD inline float log_f32(float x) { return ::mxsim::log_f32(x); }
MXSIM_HD inline float erf_f32(float x) { return ::mxsim::erf_f32(x); }
/// beta^t for AdamW's bias corrections, t >= 1 the optimizer step (the
/// trainer's step count stays far below 2^32).
MXSIM_HD inline float pow_int_f32(float x, int64_t t) { return ::mxsim::pow_int_f32(x, uint32_t(t)); }

}  // namespace mxsim::hd
