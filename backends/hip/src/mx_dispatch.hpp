// Dispatch of runtime formats and rounding modes onto kernel template
// arguments (so a kernel's format table row is a compile-time constant), and
// the spec check of the MX quantizers. Shared by codec.hip and mx_bf16.hip.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "mxsim/format.hpp"
#include "mxsim/hd/quant_block.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::hip::detail {

/// True when p is a multiple of a bytes (the vector paths' precondition); host and device.
__host__ __device__ inline bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

template <Format F> using FormatTag = std::integral_constant<Format, F>;
template <RoundMode M> using ModeTag = std::integral_constant<RoundMode, M>;

// fn(FormatTag<F>{}) for the runtime format f: one case per row of the format
// table, generated from the enum (Format's values are 0 .. kNumFormats - 1).
static_assert(int(Format::E8M0) + 1 == kNumFormats, "Format's values are the table's rows, in order");
template <typename Fn, size_t... I>
void with_format_row(Format f, Fn& fn, std::index_sequence<I...>) {
  (void)((f == Format(I) ? (fn(FormatTag<Format(I)>{}), true) : false) || ...);
}
template <typename Fn>
void with_format(Format f, Fn&& fn) {
  with_format_row(f, fn, std::make_index_sequence<size_t(kNumFormats)>{});
}
/// with_format for the element formats of E8M0-scaled blocks (the table's kRoleMxElem):
/// fn is instantiated for those formats only.
template <typename Fn>
void with_mx_format(Format f, Fn&& fn) {
  if (!has_role(f, kRoleMxElem))
    throw std::invalid_argument(std::string("mx_quantize_rowwise: ") + spec_of(f).name + " is not an MX element format");
  with_format(f, [&](auto tag) {
    if constexpr (has_role(decltype(tag)::value, kRoleMxElem)) fn(tag);
  });
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
