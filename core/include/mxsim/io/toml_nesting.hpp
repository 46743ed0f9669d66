// A bound on the nesting of a TOML document, checked on its text before it is parsed.
//
// toml++ (3.3) limits nested arrays and inline tables to 256 levels, but not tables made by
// dotted keys or headers: `a.a.a. ... = 1` with 100000 segments parses, and its tables are then
// destroyed (and walked by whoever reads them) recursively, exhausting the stack. Every TOML
// text mxsim parses -- `--config` files, `--set` overrides, the config stored in a trace that
// `mxsim compare` flattens -- goes through check_toml_nesting first.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace mxsim::io {

/// The deepest nesting any mxsim config needs is 3 ([recipe.fc1] plus a key); 64 leaves room.
inline constexpr int kMaxTomlDepth = 64;

/// Upper bound on the nesting depth of the tables and arrays a TOML parser builds from `text`,
/// counted as the length of the longest path of keys and array indices from the root to a
/// value: `a = 1` is 1, `a.b.c = 1` is 3, `a = [[1]]` is 3, `[x.y]` then `k = 1` is 3, and
/// `[[x.y]]` then `k = 1` is 4 (x, y, the array element, k). Strings (all four kinds) and
/// comments are skipped. For text that is not TOML the bound may exceed what a parser would
/// build (it never falls short on text the parser accepts). *line receives the 1-based line
/// where the maximum is first reached (when line is not null).
int toml_nesting_depth(std::string_view text, std::size_t* line = nullptr);

/// Throws IoError "<label>: line N: TOML nesting deeper than <max_depth> levels (tables, dotted
/// keys, arrays and inline tables counted)" when toml_nesting_depth(text) > max_depth.
void check_toml_nesting(std::string_view text, const std::string& label, int max_depth = kMaxTomlDepth);

}  // namespace mxsim::io
