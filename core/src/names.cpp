// Near misses among names (mxsim/names.hpp).
#include "mxsim/names.hpp"

#include <algorithm>
#include <cctype>
#include <numeric>

namespace mxsim {

namespace {

size_t edit_distance(std::string_view a, std::string_view b) {
  const auto lower = [](char c) { return char(std::tolower(static_cast<unsigned char>(c))); };
  std::vector<size_t> row(b.size() + 1);  // row[j]: distance of a[0, i) to b[0, j)
  std::iota(row.begin(), row.end(), size_t(0));
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];  // distance of a[0, i-1) to b[0, j-1)
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string closest_name(std::string_view word, const std::vector<std::string>& known) {
  constexpr size_t kMaxEdits = 2;
  std::string best;
  size_t best_d = kMaxEdits + 1;
  for (const std::string& k : known) {
    const size_t d = edit_distance(word, k);
    if (d < best_d && 2 * d < word.size()) {
      best = k;
      best_d = d;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& known) {
  const std::string c = closest_name(word, known);
  return c.empty() ? "" : " (did you mean '" + c + "'?)";
}

}  // namespace mxsim
