// .safetensors reading and writing against bytes written by hand from the
// format description (huggingface/safetensors README: u64 LE header length,
// JSON header, raw little-endian C-order buffer).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "mxsim/io/safetensors.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace mxsim::io;
using mxsim::test::bytes_of;
using mxsim::test::TempDir;

namespace {

std::string st_file(const std::string& json, const std::string& data) {
  std::string f;
  uint64_t n = json.size();
  for (int k = 0; k < 8; ++k) f += char((n >> (8 * k)) & 0xFF);
  return f + json + data;
}

std::string error_of(const fs::path& f) {
  try {
    read_safetensors(f);
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(IoSafetensors, ReadsBf16F16F32AndMetadata) {
  TempDir d("io_st");
  // b: BF16 [2] = {1.0 (0x3F80), -0.5 (0xBF00)}; h: F16 [1,1] = {65504 (0x7BFF)};
  // w: F32 [1] = {0.1f (0x3DCCCCCD)}; ids: I64 [1] = {7}. Offsets deliberately not in key order.
  const std::string json =
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[6,10]},)"
      R"("__metadata__":{"format":"pt"},)"
      R"("b":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
      R"("h":{"dtype":"F16","shape":[1,1],"data_offsets":[4,6]},)"
      R"("ids":{"dtype":"I64","shape":[1],"data_offsets":[10,18]}}  )";
  const std::string data = bytes_of({0x80, 0x3f, 0x00, 0xbf, 0xff, 0x7b, 0xcd, 0xcc, 0xcc, 0x3d, 7, 0, 0, 0, 0, 0, 0, 0});
  const auto f = read_safetensors(d.put("m.safetensors", st_file(json, data)));
  ASSERT_EQ(f.tensors.size(), 4u);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(f.tensors[0].name, "b");  // in buffer order
  EXPECT_EQ(to_f32(*f.find("b")), (std::vector<float>{1.0f, -0.5f}));
  EXPECT_EQ(f.find("h")->shape, (std::vector<size_t>{1, 1}));
  EXPECT_EQ(to_f32(*f.find("h")), std::vector<float>{65504.0f});
  EXPECT_EQ(to_f32(*f.find("w")), std::vector<float>{0.1f});
  EXPECT_EQ(f.find("ids")->dtype, DType::I64);
  EXPECT_THROW(to_f32(*f.find("ids")), IoError);
}

TEST(IoSafetensors, WritesTheFormatBytes) {
  // Two tensors back to back; the JSON (keys in the order written) padded with
  // spaces to a multiple of 8.
  const uint8_t codes[3] = {0x21, 0x43, 0x65};
  const float s = 2.0f;
  const std::vector<RawTensor> ts = {from_u8("q.data", {1, 3}, codes), from_f32("q.scale_inv", {1, 1}, &s)};
  const auto got = encode_safetensors(ts, {{"k", "v"}});
  std::string json =
      R"({"__metadata__":{"k":"v"},"q.data":{"dtype":"U8","shape":[1,3],"data_offsets":[0,3]},)"
      R"("q.scale_inv":{"dtype":"F32","shape":[1,1],"data_offsets":[3,7]}})";
  while (json.size() % 8) json += ' ';
  const std::string expect = st_file(json, bytes_of({0x21, 0x43, 0x65, 0x00, 0x00, 0x00, 0x40}));
  EXPECT_EQ(std::string(got.begin(), got.end()), expect);
}

TEST(IoSafetensors, RoundTripThroughAFile) {
  TempDir d("io_st");
  const float v[4] = {1.0f, -2.0f, 0.0f, 1e-45f};
  RawTensor bf{"bf", DType::BF16, {2, 1}, {0x80, 0x3f, 0x00, 0xc0}};
  write_safetensors(d.p / "r.safetensors", {from_f32("x", {2, 2}, v), bf}, {{"a", "b"}});
  const auto f = read_safetensors(d.p / "r.safetensors");
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.metadata.at("a"), "b");
  EXPECT_EQ(std::memcmp(f.find("x")->bytes.data(), v, 16), 0);
  EXPECT_EQ(to_f32(*f.find("bf")), (std::vector<float>{1.0f, -2.0f}));
}

TEST(IoSafetensors, ErrorsNameTheFileAndTheProblem) {
  TempDir d("io_st");
  auto one = [](const std::string& entry) { return "{\"t\":" + entry + "}"; };
  const std::string f4 = bytes_of({0, 0, 0x80, 0x3f});
  struct Case {
    const char* file;
    std::string bytes;
    std::vector<std::string> problem;  // all must appear
  };
  std::string huge_len = st_file("{}", "");
  huge_len[0] = char(0xff);
  huge_len[1] = char(0xff);
  const Case cases[] = {
      {"short.safetensors", "abc", {"truncated"}},
      {"hdrlen.safetensors", huge_len, {"header length 65535 runs past the end"}},
      {"giant.safetensors", std::string("\xff\xff\xff\xff\xff\xff\x00\x00", 8) + "{}", {"exceeds the 100 MB limit"}},
      {"json.safetensors", st_file("{\"t\": {\"dtype\": ", ""), {"not valid JSON"}},
      {"array.safetensors", st_file("[1,2]", ""), {"not an object"}},
      {"dtype.safetensors", st_file(one(R"({"dtype":"F12","shape":[1],"data_offsets":[0,4]})"), f4),
       {"tensor 't'", "unknown dtype 'F12'"}},
      {"range.safetensors", st_file(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), f4),
       {"tensor 't'", "past the end of the 4-byte data buffer"}},
      {"span.safetensors", st_file(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})"), f4),
       {"tensor 't'", "needs 8 bytes", "span 4"}},
      {"order.safetensors", st_file(one(R"({"dtype":"F32","shape":[1],"data_offsets":[4,0]})"), f4),
       {"tensor 't'", "begin > end"}},
      {"negshape.safetensors", st_file(one(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})"), f4),
       {"tensor 't'", "non-negative integers"}},
      {"missing.safetensors", st_file(one(R"({"dtype":"F32","shape":[1]})"), f4), {"tensor 't'", "data_offsets"}},
      {"extrakey.safetensors", st_file(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1})"), f4),
       {"tensor 't'", "unexpected key 'x'"}},
      {"overlap.safetensors",
       st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", f4),
       {"overlap"}},
      {"gap.safetensors", st_file(one(R"({"dtype":"U8","shape":[2],"data_offsets":[2,4]})"), f4), {"belong to no tensor"}},
      {"tail.safetensors", st_file(one(R"({"dtype":"U8","shape":[2],"data_offsets":[0,2]})"), f4), {"belong to no tensor"}},
      {"meta.safetensors", st_file(R"({"__metadata__":{"a":1}})", ""), {"__metadata__", "not a string"}},
      {"meta2.safetensors", st_file(R"({"__metadata__":[]})", ""), {"__metadata__ is not an object"}},
      // The same tensor twice (same bytes): nlohmann would keep the last silently.
      {"dup.safetensors",
       st_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f4),
       {"key 't' twice"}},
      {"dupfield.safetensors", st_file(one(R"({"dtype":"F32","dtype":"U8","shape":[1],"data_offsets":[0,4]})"), f4),
       {"key 'dtype' twice"}},
      {"dupmeta.safetensors", st_file(R"({"__metadata__":{"a":"1","a":"2"}})", ""), {"key 'a' twice"}},
      {"dupmetakey.safetensors", st_file(R"({"__metadata__":{},"__metadata__":{}})", ""), {"key '__metadata__' twice"}},
      // 2^62 F32 elements: the count fits size_t, the byte count does not (the
      // message must not print a wrapped-around byte count).
      {"huge.safetensors", st_file(one(R"({"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,4]})"), f4),
       {"tensor 't'", "[4611686018427387904] F32 is too large"}},
      {"huge2.safetensors", st_file(one(R"({"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]})"), f4),
       {"tensor 't'", "is too large"}},
      {"hdr63.safetensors", std::string("\x00\x00\x00\x00\x00\x00\x00\x80", 8) + "{}", {"exceeds the 100 MB limit"}},
      {"bigoff.safetensors", st_file(one(R"({"dtype":"U8","shape":[4],"data_offsets":[18446744073709551611,18446744073709551615]})"), f4),
       {"tensor 't'", "past the end"}},
  };
  for (const auto& c : cases) {
    const auto f = d.put(c.file, c.bytes);
    const std::string e = error_of(f);
    EXPECT_NE(e.find(f.string()), std::string::npos) << c.file << ": " << e;
    for (const auto& p : c.problem) EXPECT_NE(e.find(p), std::string::npos) << c.file << ": " << e;
    EXPECT_EQ(e.find("needs 0 bytes"), std::string::npos) << c.file << ": " << e;
  }
}

TEST(IoSafetensors, WriterRejectsBadNames) {
  const uint8_t b = 0;
  EXPECT_THROW(encode_safetensors({from_u8("a", {1}, &b), from_u8("a", {1}, &b)}), IoError);
  EXPECT_THROW(encode_safetensors({from_u8("__metadata__", {1}, &b)}), IoError);
}
