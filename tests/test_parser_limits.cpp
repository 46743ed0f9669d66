// Parsers bound what they recurse over and what they print: a deeply nested safetensors
// header (its error message used to format the nested shape recursively, exhausting the stack)
// and a huge shape list in a message (quoted at most 80 characters).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mxsim/io/safetensors.hpp"

using mxsim::io::IoError;
using mxsim::io::parse_safetensors;

namespace {
std::vector<uint8_t> with_header(const std::string& json) {
  std::vector<uint8_t> b(8 + json.size());
  for (std::size_t k = 0; k < 8; ++k) b[k] = uint8_t(uint64_t(json.size()) >> (8 * k));
  for (std::size_t i = 0; i < json.size(); ++i) b[8 + i] = uint8_t(json[i]);
  return b;
}
std::string error_of(const std::vector<uint8_t>& b) {
  try {
    parse_safetensors(b, "x.safetensors");
  } catch (const IoError& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(ParserLimits, SafetensorsDeeplyNestedShapeIsRefusedWhileParsing) {
  const int n = 200000;
  const std::string json = "{\"t\":{\"dtype\":\"F32\",\"shape\":" + std::string(n, '[') + std::string(n, ']') +
                           ",\"data_offsets\":[0,0]}}";
  EXPECT_EQ(error_of(with_header(json)), "x.safetensors: header nests JSON deeper than 16 levels (a header has 3)");
  // 16 levels are parsed (and reported as a bad shape, quoted in full).
  const std::string ok = "{\"t\":{\"dtype\":\"F32\",\"shape\":" + std::string(14, '[') + std::string(14, ']') +
                         ",\"data_offsets\":[0,0]}}";
  EXPECT_EQ(error_of(with_header(ok)), "x.safetensors: tensor 't': shape [[[[[[[[[[[[[[]]]]]]]]]]]]]] is not a list of "
                                       "non-negative integers");
}

TEST(ParserLimits, SafetensorsMessageQuotesAtMost80Characters) {
  std::string shape = "[";
  for (int i = 0; i < 100000; ++i) shape += i ? ",-1" : "-1";
  shape += "]";
  const std::string json = "{\"t\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[0,0]}}";
  std::string quoted = "[-1";
  for (int i = 0; i < 25; ++i) quoted += ",-1";
  // dump() of the list: "[-1,-1,...": the first 77 characters, then "...".
  EXPECT_EQ(error_of(with_header(json)),
            "x.safetensors: tensor 't': shape " + quoted.substr(0, 77) + "... is not a list of non-negative integers");
}

// A header that is a number too large for a double (nlohmann throws out_of_range, not
// parse_error) is "not valid JSON" like any other, not an exception escaping the parser.
TEST(ParserLimits, SafetensorsHeaderNumberOverflowIsAnIoError) {
  const std::string m = error_of(with_header("2222222222222e77777039908014829395713122"));
  EXPECT_EQ(m.rfind("x.safetensors: header is not valid JSON: ", 0), 0u) << m;
  EXPECT_NE(m.find("number overflow"), std::string::npos) << m;
  const std::string n = error_of(with_header("{\"t\": {\"dtype\": \"F32\", \"shape\": [1e999], \"data_offsets\": [0, 4]}}"));
  EXPECT_EQ(n.rfind("x.safetensors: header is not valid JSON: ", 0), 0u) << n;
}
