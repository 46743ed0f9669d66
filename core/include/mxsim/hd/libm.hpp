// The elementary functions the training-step ops call beyond IEEE + - * /
// sqrt: today the host libm (glibc) through <cmath>. A device compiler would
// take its own expf / logf / erff / powf here, which do not match glibc bit
// for bit: device ops that call these are not yet part of the bit contract.
//
// This header is the one place where they plug in: the project's own FP32
// exp / log / erf (core/include/mxsim/hd/math.hpp, MXSIM_HD, tested against
// an exact oracle) replace these bodies, so that neither libm nor a device
// intrinsic decides a bit. That swap changes trace bits and lands on its own.
#pragma once
#include <cmath>

#include "mxsim/hd.hpp"

namespace mxsim::hd {

MXSIM_HD inline float exp_f32(float x) { return std::exp(x); }
MXSIM_HD inline float log_f32(float x) { return std::log(x); }
MXSIM_HD inline float erf_f32(float x) { return std::erf(x); }
/// powf (float overload of std::pow): the AdamW bias corrections.
MXSIM_HD inline float pow_f32(float x, float y) { return std::pow(x, y); }

}  // namespace mxsim::hd
