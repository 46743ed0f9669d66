// Tensor types: xtensor containers, row-major.
#pragma once
#include <cstdint>

#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

namespace mxsim {

using Tensor2f = xt::xtensor<float, 2>;   ///< [rows, cols] FP32
using Tensor3f = xt::xtensor<float, 3>;   ///< [groups, rows, cols] FP32
using Bytes3 = xt::xtensor<uint8_t, 3>;   ///< packed codes or scale bytes

}  // namespace mxsim
