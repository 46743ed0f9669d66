// m_splits (TransformerEngine's name): the token rows of each group of a
// grouped GEMM, checked here once for every backend, so the emulator and the
// GPU refuse the same lists with the same words.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "mxsim/io/checked_size.hpp"

namespace mxsim {

/// Why m_splits cannot split a token operand of M rows, or "" when it can:
/// an entry is negative, the entries sum past INT64_MAX (summed with an
/// overflow check: a sum that wrapped could equal M and pass), or they sum to
/// something other than M.
inline std::string m_splits_error(std::span<const int64_t> m_splits, size_t M) {
  uint64_t sum = 0;
  for (size_t g = 0; g < m_splits.size(); ++g) {
    const std::string at = "m_splits[" + std::to_string(g) + "] = " + std::to_string(m_splits[g]);
    if (m_splits[g] < 0) return at + " is negative";
    if (!io::add_size(sum, uint64_t(m_splits[g]), sum, uint64_t(INT64_MAX)))
      return "m_splits sum to more than " + std::to_string(INT64_MAX) + " (at " + at + ")";
  }
  if (sum != M) return "m_splits sum to " + std::to_string(sum) + " but the token operand has M = " + std::to_string(M) + " rows";
  return {};
}

}  // namespace mxsim
