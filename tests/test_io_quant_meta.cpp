// io::parse_meta_json / io::quant_meta (the .meta.json of the mxsim layout): what
// `mxsim quantize` writes is read back; malformed input is an IoError naming the key,
// including the classes a fuzzer looks for (deep nesting, sizes that overflow, a key
// given twice, shapes that disagree).
#include <gtest/gtest.h>

#include <string>

#include "mxsim/io/quant_meta.hpp"

using namespace mxsim;

namespace {
std::span<const uint8_t> bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }
std::string error_of(const std::string& text) {
  try {
    io::quant_meta(io::parse_meta_json(bytes(text), "m.meta.json"), "m.meta.json");
  } catch (const io::IoError& e) {
    return e.what();
  }
  return "no error";
}
const std::string kOk =
    R"({"elem_format": "e4m3", "scale_kind": "fp32", "shape": [2, 32], "logical_shape": [1, 2, 32], )"
    R"("transposed": true, "block": [1, 128], "hadamard": false})";
}  // namespace

TEST(IoQuantMeta, ReadsWhatQuantizeWrites) {
  const auto kv = io::parse_meta_json(bytes(kOk), "m");
  EXPECT_EQ(kv.at("shape"), "[2,32]");
  EXPECT_EQ(kv.at("transposed"), "true");
  const io::QuantMeta m = io::quant_meta(kv, "m");
  EXPECT_EQ(m.spec.elem, Format::E4M3);
  EXPECT_EQ(m.spec.scale_kind, ScaleKind::FP32);
  EXPECT_EQ(m.spec.block_cols, 128);
  EXPECT_EQ(m.rows, 2u);
  EXPECT_EQ(m.cols, 32u);
  EXPECT_TRUE(m.transposed);
  EXPECT_EQ(io::parse_dims("1x32", "b"), (std::vector<size_t>{1, 32}));
}

TEST(IoQuantMeta, MalformedInputNamesTheProblem) {
  EXPECT_NE(error_of("[1, 2]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of("{\"a\": ").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(std::string("{\"a\": ") + std::string(100000, '[')).find("nests deeper than 16"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"scale_kind": "e8m0", "scale_kind": "fp32"})").find("'scale_kind' given twice"),
            std::string::npos);
  std::string s = kOk;
  EXPECT_NE(error_of(s.replace(s.find("[1, 2, 32]"), 10, "[1, 2, 31]")).find("different element counts"),
            std::string::npos);
  s = kOk;
  EXPECT_NE(error_of(s.replace(s.find("[1, 128]"), 8, "[1, 4294967296]")).find("block"), std::string::npos);
  s = kOk;
  EXPECT_NE(error_of(s.replace(s.find("[2, 32]"), 7, "\"99999999999999999999x1\"")).find("not a list of sizes"),
            std::string::npos);
  s = kOk;
  EXPECT_NE(error_of(s.replace(s.find("\"fp32\""), 6, "\"e9m9\"")).find("unknown scale_kind 'e9m9'"), std::string::npos);
  EXPECT_NE(error_of(R"({"elem_format": "e4m3"})").find("no 'scale_kind'"), std::string::npos);
}

// Issue 34: a block size of 0 is named as such (it used to pass the reader and fail later in words
// that named neither the key nor the file).
TEST(IoQuantMeta, ZeroBlockSizeIsNamed) {
  for (const char* b : {"[0, 128]", "[1, 0]"}) {
    std::string s = kOk;
    const std::string e = error_of(s.replace(s.find("[1, 128]"), 8, b));
    EXPECT_NE(e.find("m.meta.json: block " + std::string(b) + " has a block size of 0"), std::string::npos) << e;
  }
}

// Issue 34: a logical_shape with a zero extent holds no element, but the product of its other
// extents (rows * cols, 2^96 here) must still fit: the reader refuses it instead of wrapping.
TEST(IoQuantMeta, LogicalShapeWhoseNonZeroExtentsOverflowIsRefused) {
  std::string s = kOk;
  s.replace(s.find("[2, 32]"), 7, "[0]");
  const std::string e = error_of(s.replace(s.find("[1, 2, 32]"), 10, "[0, 281474976710656, 281474976710656]"));
  EXPECT_NE(e.find("m.meta.json: logical_shape: [0, 281474976710656, 281474976710656] has too many elements"),
            std::string::npos)
      << e;
}
