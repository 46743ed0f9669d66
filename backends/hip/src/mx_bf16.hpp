// MX quantization of BF16 sources (mx_bf16.hip), the part codec.hip calls.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mxsim/quant_spec.hpp"

namespace mxsim::hip::detail {

/// Rowwise MX quantization of BF16 x [rows, cols] with two elements per
/// instruction (RNE), as mx_quantize_rowwise_bf16_device specifies it.
/// Launches and returns true where it applies (a GPU with packed BF16 FMA,
/// cols % 32 == 0, x and data 16-byte aligned, an element format with -0);
/// returns false, launching nothing, otherwise.
bool mx_rowwise_bf16_packed(const uint16_t* d_x, size_t rows, size_t cols, const QuantSpec& spec, uint8_t* d_data,
                            uint8_t* d_scales, void* stream);

}  // namespace mxsim::hip::detail
