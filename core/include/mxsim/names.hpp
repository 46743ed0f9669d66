// Near misses among names (recipes, specs): the "did you mean" of an error message.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace mxsim {

/// The name of `known` closest to `word` by edit distance (Levenshtein: insertions, deletions,
/// substitutions; letters compared case-insensitively), when it is close enough to be a slip: at
/// most 2 edits and fewer than half of `word`'s length. "" when none is (or `word` is empty); the
/// first of equally close names. Never throws beyond std::bad_alloc.
std::string closest_name(std::string_view word, const std::vector<std::string>& known);

/// " (did you mean 'NAME'?)" for closest_name(word, known), "" when there is none.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& known);

}  // namespace mxsim
