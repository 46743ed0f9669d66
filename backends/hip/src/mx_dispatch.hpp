// Dispatch of runtime formats and rounding modes onto kernel template
// arguments (so a kernel's format table row is a compile-time constant), and
// the spec check of the MX quantizers. Shared by codec.hip and mx_bf16.hip.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "mxsim/format.hpp"
#include "mxsim/hd/quant_block.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::hip::detail {

/// True when p is a multiple of a bytes (the vector paths' precondition); host and device.
__host__ __device__ inline bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

template <Format F> using FormatTag = std::integral_constant<Format, F>;
template <RoundMode M> using ModeTag = std::integral_constant<RoundMode, M>;

template <typename Fn>
void with_format(Format f, Fn&& fn) {
  switch (f) {
    case Format::FP32: fn(FormatTag<Format::FP32>{}); break;
    case Format::BF16: fn(FormatTag<Format::BF16>{}); break;
    case Format::FP16: fn(FormatTag<Format::FP16>{}); break;
    case Format::E4M3: fn(FormatTag<Format::E4M3>{}); break;
    case Format::E5M2: fn(FormatTag<Format::E5M2>{}); break;
    case Format::E4M3FNUZ: fn(FormatTag<Format::E4M3FNUZ>{}); break;
    case Format::E5M2FNUZ: fn(FormatTag<Format::E5M2FNUZ>{}); break;
    case Format::E3M2: fn(FormatTag<Format::E3M2>{}); break;
    case Format::E2M3: fn(FormatTag<Format::E2M3>{}); break;
    case Format::E2M1: fn(FormatTag<Format::E2M1>{}); break;
    case Format::E8M0: fn(FormatTag<Format::E8M0>{}); break;
  }
}
template <typename Fn>
void with_mx_format(Format f, Fn&& fn) {
  switch (f) {
    case Format::E4M3: fn(FormatTag<Format::E4M3>{}); break;
    case Format::E5M2: fn(FormatTag<Format::E5M2>{}); break;
    case Format::E4M3FNUZ: fn(FormatTag<Format::E4M3FNUZ>{}); break;
    case Format::E5M2FNUZ: fn(FormatTag<Format::E5M2FNUZ>{}); break;
    case Format::E3M2: fn(FormatTag<Format::E3M2>{}); break;
    case Format::E2M3: fn(FormatTag<Format::E2M3>{}); break;
    case Format::E2M1: fn(FormatTag<Format::E2M1>{}); break;
    default:
      throw std::invalid_argument(std::string("mx_quantize_rowwise: ") + spec_of(f).name + " is not an MX element format");
  }
}
template <typename Fn>
void with_mode(RoundMode m, Fn&& fn) {
  switch (m) {
    case RoundMode::RNE: fn(ModeTag<RoundMode::RNE>{}); break;
    case RoundMode::RZ: fn(ModeTag<RoundMode::RZ>{}); break;
    case RoundMode::Stochastic: fn(ModeTag<RoundMode::Stochastic>{}); break;
    case RoundMode::RU: throw std::invalid_argument("round up (ru) is for single conversions, not quantization");
  }
}

// Throws std::invalid_argument, naming `who`, unless spec is an MX spec the
// kernels take: 1 x 32 blocks, E8M0 scales, no Hadamard transform, an
// element format of <= 8 bits.
inline void check_mx_spec(const QuantSpec& spec, const char* who = "mx_quantize_rowwise") {
  if (spec.block_rows != 1 || spec.block_cols != 32)
    throw std::invalid_argument(std::string(who) + ": needs 1x32 blocks, got " + std::to_string(spec.block_rows) +
                                "x" + std::to_string(spec.block_cols));
  if (spec.scale_kind != ScaleKind::E8M0)
    throw std::invalid_argument(std::string(who) + ": needs E8M0 scales, got " + name_of(spec.scale_kind));
  if (spec.hadamard16) throw std::invalid_argument(std::string(who) + ": the Hadamard transform is not supported");
  if (!hd::quant_elem(spec.elem))
    throw std::invalid_argument(std::string(who) + ": " + spec_of(spec.elem).name + " is not an MX element format");
}

}  // namespace mxsim::hip::detail
