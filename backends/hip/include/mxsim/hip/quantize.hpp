// GPU quantization: every recipe of docs/numerics.md §3-§4 on device memory,
// bit-identical to emu::quantize. The per-block step (amax, scale rule,
// element encoder, E2M1 packing, Philox word, Hadamard16) is the shared one of
// core/include/mxsim/hd/quant_block.hpp; tests/test_gpu_quantize.cpp compares
// codes and scales with the emulator bit for bit.
//
// Layouts: a DeviceQTensor holds exactly the storage of a QuantizedTensor
// (quantized_tensor.hpp) in device memory:
//   data        uint8 [groups, srows, rbytes]: one code per byte, E2M1 packed
//               two per byte (element 2i low nibble, an odd row's last high
//               nibble 0);
//   scale_bytes uint8 [groups, nbr, nbc] (E8M0 bytes; NVFP4 UE4M3 bytes), or
//   scale_inv   FP32  [groups, nbr, nbc] (FP32 scale kinds);
//   tensor_scale_inv  one FP32: NVFP4's S_dec, else 1.
// Storage is the logical layout, or its transpose per group for 1-D blocks
// along Axis::Rows (columnwise copies, as TE and Primus-Turbo store them).
// Source tensors are FP32, row-major [groups, rows, cols] (BF16 values are
// exact in FP32).
//
// Streams: `stream` is a hipStream_t (cudaStream_t) cast to void*, nullptr
// for the default stream. Launches are asynchronous except where noted.
// Errors: std::invalid_argument for specs or shapes the call cannot take
// (naming the call and the problem; nothing is written), mxsim::hip::Error
// for runtime failures (device.hpp), OutOfMemory naming the tensor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "mxsim/hd/quant_block.hpp"
#include "mxsim/hip/device.hpp"
#include "mxsim/quant_spec.hpp"

namespace mxsim::hip {

/// A quantized tensor in device memory (non-owning view; layout above).
struct DeviceQTensor {
  QuantSpec spec;
  hd::QuantLayout layout;
  uint8_t* data = nullptr;
  uint8_t* scale_bytes = nullptr;     ///< E8M0 / UE4M3 scales, else null
  float* scale_inv = nullptr;         ///< FP32 scales, else null
  float* tensor_scale_inv = nullptr;  ///< one FP32
  /// The quantizer's own words for the amax of a block that spans a whole group or tensor (the
  /// hd::amax_step fold of FP32 bits): one per group for a per-tensor FP32 spec, the first of
  /// them the whole tensor's under whole_tensor_scale; one for NVFP4's tensor scale. Written
  /// by its first pass and read by its second in stream order; null for other specs.
  uint32_t* amax = nullptr;
};

/// Owning storage of one DeviceQTensor (buffers named after the tensor).
struct DeviceQuantized {
  DeviceQTensor t;
  DeviceBuffer data, scales, tensor_scale, amax;
};

/// Allocates the storage of `spec` applied to a [groups, rows, cols] tensor
/// with 1-D blocks along `axis`. `name` labels the buffers in errors.
/// Throws std::invalid_argument for a spec the shape cannot take (as
/// emu::quantize: hd::validate_quant_spec), OutOfMemory naming `name`.
DeviceQuantized alloc_quantized(const QuantSpec& spec, size_t groups, size_t rows, size_t cols, Axis axis,
                                std::string_view name);

/// Per-group columnwise storage for wgrad operands (emu::quantize_grouped_colwise):
/// group g holds rows [m0, m0 + m_splits[g]) of an [M, C] tensor as its own
/// [1, M_g, C] tensor quantized along Axis::Rows, with spec.sr_index_base +=
/// m0 * C. Empty groups get rows = 0, no storage and the spec unchanged.
std::vector<DeviceQuantized> alloc_grouped_colwise(const QuantSpec& spec, size_t C, std::span<const int64_t> m_splits,
                                                   std::string_view name);

/// Quantizes d_x (device FP32, the logical [groups, rows, cols] of out.layout)
/// into `out` by out.spec: any element format of <= 8 bits (not E8M0), E8M0
/// scales by any rule, FP32 scales (current / delayed = fixed_scale, per
/// tensor, per row, 1xN, NxN, pow2_scale, amax_epsilon), NVFP4 (1x16 / 16x16
/// UE4M3 + tensor scale; S_enc over the whole tensor), RNE / RZ / stochastic
/// rounding (element words sr(sr_index_base + logical index)), hadamard16.
/// One thread block per quantization block, two passes over it (amax, then
/// codes). Per-tensor FP32 specs and NVFP4 first reduce their group or tensor
/// amax over the whole GPU into out.amax, and nothing waits for the device;
/// a view without amax words (out.amax null: the C interface's) takes them
/// from stream_workspace(stream), reused in stream order, and does not wait
/// either. Not for a stream under graph capture (the workspace may grow).
/// Throws std::invalid_argument for a spec the shape cannot take (as
/// emu::quantize), and for E2M1 blocks of odd width that do not span the
/// storage row (their codes would share bytes across blocks).
void quantize_device(const float* d_x, const DeviceQTensor& out, void* stream = nullptr);

/// Exact dequantization of q into d_out (device FP32, q's logical [groups,
/// rows, cols], row-major): hd::dequant_value of every element, NaN
/// canonical (numerics.md §2.4), as emu::dequantize.
void dequantize_device(const DeviceQTensor& q, float* d_out, void* stream = nullptr);

/// Grouped columnwise quantization of d_x [M, C] into out (one DeviceQTensor
/// per group as alloc_grouped_colwise gives them; m_splits sum to M).
void quantize_grouped_colwise_device(const float* d_x, size_t M, size_t C, std::span<const int64_t> m_splits,
                                     std::span<const DeviceQTensor> out, void* stream = nullptr);

/// Both orientations of d_x [M, C] from one read: `rowwise` ([1, M, C],
/// Axis::Cols, the fprop / dgrad operand) and per-group `colwise` (as
/// alloc_grouped_colwise gives them, the wgrad operands). Needs a 1-D spec
/// (1 x L along K, L in {16, 32, 64, 128}), E8M0 or FP32 scales, no
/// hadamard16, the same spec for every output (colwise[g] with the
/// sr_index_base shift of alloc_grouped_colwise). Each tile of L x L source
/// elements is read once into shared memory and yields its L rowwise blocks
/// and L columnwise blocks. Where the device's shared memory cannot hold a
/// tile the call falls back to quantize_device + quantize_grouped_colwise_device
/// (same bits, two reads). Throws std::invalid_argument for other specs.
void quantize_both_device(const float* d_x, size_t M, size_t C, std::span<const int64_t> m_splits,
                          const DeviceQTensor& rowwise, std::span<const DeviceQTensor> colwise, void* stream = nullptr);

}  // namespace mxsim::hip
