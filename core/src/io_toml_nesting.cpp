// TOML nesting bound (see mxsim/io/toml_nesting.hpp). A scanner, not a parser: it tracks only
// what decides depth (key segments, brackets, braces) and skips strings and comments.
#include "mxsim/io/toml_nesting.hpp"

#include <algorithm>
#include <vector>

#include "mxsim/io/tensor_file.hpp"

namespace mxsim::io {

namespace {

struct Scanner {
  std::string_view s;
  std::size_t i = 0, line = 1, max_line = 1;
  int max_depth = 0;

  void note(int d) {
    if (d > max_depth) {
      max_depth = d;
      max_line = line;
    }
  }
  bool at(std::string_view t) const { return s.substr(i, t.size()) == t; }
  // Skips the string starting at i (one of ' " ''' """), counting newlines.
  void skip_string() {
    const char q = s[i];
    const bool multi = at(q == '"' ? "\"\"\"" : "'''");
    i += multi ? 3 : 1;
    while (i < s.size()) {
      const char c = s[i];
      if (c == '\\' && q == '"') {
        if (i + 1 < s.size() && s[i + 1] == '\n') ++line;
        i += 2;
        continue;
      }
      if (c == '\n') {
        ++line;
        if (!multi) return;  // unterminated single-line string: let the parser report it
      }
      if (c == q && (!multi || at(q == '"' ? "\"\"\"" : "'''"))) {
        i += multi ? 3 : 1;
        // A multi-line string may end with up to two more quotes ("""a"""" is 'a"').
        while (multi && i < s.size() && s[i] == q) ++i;
        return;
      }
      ++i;
    }
  }
  void skip_comment() {
    while (i < s.size() && s[i] != '\n') ++i;
  }
};

}  // namespace

int toml_nesting_depth(std::string_view text, std::size_t* line_out) {
  Scanner sc{text};
  // Containers open in value position: '[' array or '{' inline table, with their own depth.
  struct Open {
    char kind;
    int depth;
  };
  std::vector<Open> open;
  int table = 0;          // depth of the table the top-level keys go into (from the last header)
  bool key = true;        // scanning a key (top level at a line start, or in an inline table)
  bool line_start = true; // top level, nothing but blanks seen on this line yet
  int segments = 1;       // segments of the key being scanned
  const auto key_base = [&] { return open.empty() ? table : open.back().depth; };
  const std::string_view s = text;
  auto& i = sc.i;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '\n') {
      ++sc.line;
      ++i;
      if (open.empty()) {
        key = true;
        line_start = true;
        segments = 1;
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    if (c == '#') {
      sc.skip_comment();
      continue;
    }
    if (c == '"' || c == '\'') {
      sc.skip_string();
      line_start = false;
      continue;
    }
    if (key) {
      if (line_start && open.empty() && c == '[') {
        // Table header [a.b] or array-of-tables header [[a.b]]: depth = segments (+1).
        const bool aot = sc.at("[[");
        i += aot ? 2 : 1;
        int segs = 1;
        while (i < s.size() && s[i] != ']' && s[i] != '\n') {
          if (s[i] == '"' || s[i] == '\'') {
            sc.skip_string();
            continue;
          }
          if (s[i] == '.') ++segs;
          ++i;
        }
        while (i < s.size() && s[i] == ']') ++i;
        table = segs + (aot ? 1 : 0);
        sc.note(table);
        line_start = false;
        continue;
      }
      line_start = false;
      if (c == '.') {
        ++segments;
      } else if (c == '=') {
        key = false;
        sc.note(key_base() + segments);
      } else if (c == '}' && !open.empty() && open.back().kind == '{') {
        open.pop_back();  // empty inline table, or a trailing ',' before '}'
        key = false;      // what follows is the rest of the enclosing value
      }
      ++i;
      continue;
    }
    // Value position: the depth a container opened here gets.
    const int here = open.empty() || open.back().kind == '{' ? key_base() + segments : open.back().depth + 1;
    if (c == '[') {
      open.push_back({'[', here});
      sc.note(here + 1);  // its elements
    } else if (c == '{') {
      open.push_back({'{', here});
      sc.note(here);
      key = true;
      segments = 1;
    } else if ((c == ']' || c == '}') && !open.empty()) {
      open.pop_back();
    } else if (c == ',' && !open.empty() && open.back().kind == '{') {
      key = true;
      segments = 1;
    }
    ++i;
  }
  if (line_out) *line_out = sc.max_line;
  return sc.max_depth;
}

void check_toml_nesting(std::string_view text, const std::string& label, int max_depth) {
  std::size_t line = 0;
  const int d = toml_nesting_depth(text, &line);
  if (d > max_depth)
    throw IoError(label + ": line " + std::to_string(line) + ": TOML nesting deeper than " + std::to_string(max_depth) +
                  " levels (tables, dotted keys, arrays and inline tables counted)");
}

}  // namespace mxsim::io
