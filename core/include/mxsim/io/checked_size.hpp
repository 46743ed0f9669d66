// Sums and products of sizes that come from a user or a file (an option's
// list, a file header's shape, a .meta.json, a config): computed here, with
// the compiler's overflow-checking builtins, so that a wrapped value never
// reaches an allocation, a loop bound or a comparison ("the splits sum to M")
// that a wrapped value could pass.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

namespace mxsim::io {

/// a + b into `out`; false (out unspecified) when it exceeds `limit`.
[[nodiscard]] inline bool add_size(uint64_t a, uint64_t b, uint64_t& out, uint64_t limit = SIZE_MAX) {
  return !__builtin_add_overflow(a, b, &out) && out <= limit;
}
/// a * b into `out`; false (out unspecified) when it exceeds `limit`.
[[nodiscard]] inline bool mul_size(uint64_t a, uint64_t b, uint64_t& out, uint64_t limit = SIZE_MAX) {
  return !__builtin_mul_overflow(a, b, &out) && out <= limit;
}

/// ceil(a / b) for b > 0, without the a + b - 1 that wraps for an extent near
/// SIZE_MAX (an empty tensor's other extents may be that large).
constexpr uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

/// The sum of `sizes`. Throws std::overflow_error "<what>: the sizes sum to more
/// than <limit>" when it exceeds `limit`.
inline uint64_t checked_sum(std::span<const uint64_t> sizes, const std::string& what, uint64_t limit = SIZE_MAX) {
  uint64_t s = 0;
  for (uint64_t v : sizes)
    if (!add_size(s, v, s, limit))
      throw std::overflow_error(what + ": the sizes sum to more than " + std::to_string(limit));
  return s;
}

/// The product of the non-zero `sizes` (1 for none), so that the product of
/// any subset of them (the rows of a shape, its last two axes) fits as well,
/// even where a zero extent makes the element count 0. Throws
/// std::overflow_error "<what>: the product of the sizes exceeds <limit>".
inline uint64_t checked_nonzero_product(std::span<const uint64_t> sizes, const std::string& what,
                                        uint64_t limit = SIZE_MAX) {
  uint64_t p = 1;
  for (uint64_t v : sizes)
    if (v != 0 && !mul_size(p, v, p, limit))
      throw std::overflow_error(what + ": the product of the sizes exceeds " + std::to_string(limit));
  return p;
}

}  // namespace mxsim::io
