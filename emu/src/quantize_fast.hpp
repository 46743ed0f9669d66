// Internal: fast bit-exact CPU kernels for the hot MX quantization cases.
//
// Taken: E8M0 scales (any ScaleRule), RNE, no Hadamard, no fixed scale,
// element formats E2M1, E2M3, E3M2, E4M3, E5M2, blocks 1x32 along the storage
// row (Axis::Cols) or 32x32 tiles; 1x32 blocks along Axis::Rows and the
// Hadamard transform through a staged copy. Everything else goes to the reference
// quantizer in quantize.cpp. The result is bit-identical to the reference
// (tests/test_quantize_fast.cpp compares them).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

#include "mxsim/emu/quantize.hpp"

namespace mxsim::emu::fast {

/// True when the fast kernels take (spec, axis).
bool takes(const QuantSpec& spec, Axis axis);

/// Switch the fast path off (tests reach the reference quantizer this way) or
/// back on; process-wide, default on. Not meant to be flipped while another
/// thread quantizes.
void set_enabled(bool on);
bool enabled();

/// Raw kernels on row-major [groups, rows, cols] input, BF16 bit patterns or
/// FP32. Precondition: takes(spec, Axis::Cols). Writes
///   data   [groups, rows, row_bytes] (row_bytes = ceil(cols/2) for E2M1, else cols)
///   scales [groups, ceil(rows/br), ceil(cols/32)] E8M0 bytes
/// completely (no pre-zeroing needed).
void quantize_bf16_raw(const uint16_t* x, size_t groups, size_t rows, size_t cols, const QuantSpec& spec,
                       uint8_t* data, uint8_t* scales);
void quantize_f32_raw(const float* x, size_t groups, size_t rows, size_t cols, const QuantSpec& spec,
                      uint8_t* data, uint8_t* scales);

/// True when try_quantize takes (spec, axis) through a staged copy: 1x32
/// blocks along the logical rows (Axis::Rows, storage transposed) and/or the
/// Hadamard transform, otherwise as takes().
bool takes_staged(const QuantSpec& spec, Axis axis);

/// The dispatch hook of quantize(): the fast result, or nullopt when the fast
/// path does not take the spec (or is switched off).
std::optional<QuantizedTensor> try_quantize(const Tensor3f& x, const QuantSpec& spec, Axis axis);

}  // namespace mxsim::emu::fast
