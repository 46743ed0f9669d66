// GPU codec of the HIP backend: the shared scalar codec (rounding.hpp's
// encode/decode, scale_rule.hpp's E8M0 rules, philox.hpp's random bits) run
// over device arrays, plus the rowwise MX block quantizer.
//
// The kernels include the same headers as the CPU emulator, so a GPU result
// is defined to be bit-identical to the CPU one (docs/architecture.md, "Shared op
// sources"); tests/test_gpu_codec.cpp checks that on every BF16 and
// FP16 input.
//
// This header is plain C++ (no vendor runtime types) so host code compiled by
// g++ can include it. Device pointers are passed as void* / typed pointers;
// `stream` is a hipStream_t (cudaStream_t on NVIDIA) cast to void*, nullptr
// for the default stream.
//
// Errors: a failed runtime call throws mxsim::hip::Error (device.hpp) whose
// message names the call, the file:line and the runtime's error name and
// string. Bad arguments (sizes that do not match, formats the kernel cannot
// take) throw std::invalid_argument naming the argument.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxsim/format.hpp"
#include "mxsim/hip/device.hpp"
#include "mxsim/philox.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::hip {

/// Bytes of one code in the arrays below: 1 for formats of <= 8 bits (E2M1
/// too: one code per byte, unpacked), 2 for BF16/FP16, 4 for FP32.
size_t code_bytes(Format f);

/// Parameters of one array conversion; the meaning of each is rounding.hpp's.
struct CodecParams {
  Format format = Format::E4M3;
  RoundMode round = RoundMode::RNE;
  Overflow overflow = Overflow::Saturate;
  int scale_exp = 0;       ///< element i encodes x[i] * 2^-scale_exp (exact)
  PhiloxStream sr{};       ///< RoundMode::Stochastic only
  uint64_t index_base = 0; ///< element i draws sr(index_base + i)
};

/// Encode n = x.size() FP32 values. codes: n * code_bytes(p.format) bytes,
/// little-endian codes of that width. Throws std::invalid_argument when the
/// sizes do not match.
void encode_array(std::span<const float> x, std::span<uint8_t> codes, const CodecParams& p);
std::vector<uint8_t> encode_array(std::span<const float> x, const CodecParams& p);

/// Decode n = out.size() codes of format f (codes: n * code_bytes(f) bytes)
/// to their exact FP32 values (decode() of rounding.hpp).
void decode_array(std::span<const uint8_t> codes, Format f, std::span<float> out);

/// Device-pointer forms (no copies, asynchronous on `stream`). d_x must be
/// 4-byte aligned; 16-byte aligned buffers take the vectorized path.
void encode_device(const float* d_x, void* d_codes, size_t n, const CodecParams& p, void* stream = nullptr);
void decode_device(const void* d_codes, Format f, float* d_out, size_t n, void* stream = nullptr);

/// Rowwise MX quantization of x [rows, cols] (row-major FP32): blocks of 32
/// consecutive elements of a row (Axis::Cols, "rowwise", fprop operands),
/// E8M0 scale by spec.rule, elements by spec.elem with spec.round (SR index =
/// r * cols + c, drawn from spec.sr). Output exactly as emu::quantize stores
/// it (quantized_tensor.hpp): data [rows, row_bytes] with row_bytes = cols,
/// or (cols + 1) / 2 for E2M1 packed two per byte (element 2i in the low
/// nibble); scales [rows, ceil(cols / 32)] E8M0 bytes. A ragged last block
/// counts its missing elements as zeros; a block holding NaN or Inf gets
/// scale 0xFF and codes 0. To quantize [groups, rows, cols], pass rows *
/// groups (blocks never cross a row).
/// Throws std::invalid_argument unless spec is 1 x 32, ScaleKind::E8M0, no
/// Hadamard transform, and spec.elem one of the <= 8-bit element formats
/// (E2M1, E2M3, E3M2, E4M3, E5M2, E4M3FNUZ, E5M2FNUZ).
void mx_quantize_rowwise(std::span<const float> x, size_t rows, size_t cols, const QuantSpec& spec,
                         std::vector<uint8_t>& data, std::vector<uint8_t>& scales);
void mx_quantize_rowwise_device(const float* d_x, size_t rows, size_t cols, const QuantSpec& spec,
                                uint8_t* d_data, uint8_t* d_scales, void* stream = nullptr);
/// mx_quantize_rowwise_device for a BF16 source: d_x holds BF16 bit patterns
/// (uint16 [rows, cols], row-major). Codes and scales are those of the FP32
/// widening of every value (exact), i.e. of mx_quantize_rowwise_device on the
/// widened tensor. Reads 2 bytes per element. Throws std::invalid_argument
/// for the specs mx_quantize_rowwise_device refuses, and unless cols % 8 == 0,
/// d_x is 16-byte aligned, d_data is aligned to 8 codes (4 bytes for E2M1,
/// 8 otherwise) and spec.sr_index_base % 4 == 0.
void mx_quantize_rowwise_bf16_device(const uint16_t* d_x, size_t rows, size_t cols, const QuantSpec& spec,
                                     uint8_t* d_data, uint8_t* d_scales, void* stream = nullptr);

/// Columnwise MX quantization of BF16 x [rows, cols] (uint16 bit patterns,
/// row-major): blocks of 32 consecutive elements of a column (Axis::Rows,
/// the wgrad operands' orientation), stored transposed exactly as
/// emu::quantize(widened x, spec, Axis::Rows) stores them: data [cols,
/// mx_row_bytes(elem, rows)], scales [cols, ceil(rows / 32)] E8M0 bytes; SR
/// index r * cols + c. A ragged last block counts its missing rows as zeros.
/// Throws std::invalid_argument for the specs mx_quantize_rowwise_device
/// refuses, and unless cols is even and d_x 4-byte aligned.
void mx_quantize_colwise_bf16_device(const uint16_t* d_x, size_t rows, size_t cols, const QuantSpec& spec,
                                     uint8_t* d_data, uint8_t* d_scales, void* stream = nullptr);
/// Both orientations of BF16 x [rows, cols] with one read of x: the outputs of
/// mx_quantize_rowwise_bf16_device (d_row_*) and of
/// mx_quantize_colwise_bf16_device (d_col_*), bit for bit. One kernel reads x
/// once where cols % 32 == 0, d_x and d_row_data are 16-byte aligned;
/// otherwise the two quantizers run one after the other (x read twice), with
/// their requirements (so cols % 8 == 0). Throws std::invalid_argument as they do.
void mx_quantize_both_bf16_device(const uint16_t* d_x, size_t rows, size_t cols, const QuantSpec& spec,
                                  uint8_t* d_row_data, uint8_t* d_row_scales, uint8_t* d_col_data,
                                  uint8_t* d_col_scales, void* stream = nullptr);

/// Self-check of the quantizers' one-add element encoder on this device: the
/// number of FP32 bit patterns x (all 2^32 but the NaNs) for which
/// encode_by_add(spec_of(f), x, scale_exp, mode) differs from
/// encode(spec_of(f), x, scale_exp, mode, Overflow::Saturate), both computed
/// on the device (rounding.hpp says why they agree: the device's FP32 add and
/// multiply must round to nearest even and keep subnormals). Synchronizes.
/// Throws std::invalid_argument where encode_by_add_applies() is false.
uint64_t encode_by_add_mismatches(Format f, RoundMode mode, int scale_exp);

/// Bytes of one storage row of data for `cols` elements of `elem`.
size_t mx_row_bytes(Format elem, size_t cols);

}  // namespace mxsim::hip
