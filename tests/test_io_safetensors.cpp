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
      // 3 FP4 elements are 12 bits: not a whole number of bytes (safetensors rejects it too).
      {"f4odd.safetensors", st_file(one(R"({"dtype":"F4","shape":[3],"data_offsets":[0,2]})"), std::string(2, '\0')),
       {"tensor 't'", "not a whole number of bytes"}},
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

// Issue 34: keys are JSON (UTF-8) strings, and bytes that are not UTF-8 are written as U+FFFD, so
// names that differ only there became one key given twice, a file every reader refuses. Unique
// as written is checked, for tensor names and metadata keys, naming both with the bytes shown.
TEST(IoSafetensors, WriterRefusesNamesThatCollideAsWritten) {
  const uint8_t b = 0;
  auto error_of = [](auto&& f) {
    try {
      f();
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string e = error_of([&] { encode_safetensors({from_u8("w\xff", {1}, &b), from_u8("w\xfe", {1}, &b)}); });
  EXPECT_NE(e.find("tensors 'w\\xFF' and 'w\\xFE' are both written as \"w\xEF\xBF\xBD\""), std::string::npos) << e;
  e = error_of([&] { encode_safetensors({from_u8("t", {1}, &b)}, {{"k\x80", "1"}, {"k\x81", "2"}}); });
  EXPECT_NE(e.find("metadata keys 'k\\x80' and 'k\\x81' are both written as"), std::string::npos) << e;
  // write_safetensors names the file
  mxsim::test::TempDir d("st_keys");
  e = error_of([&] { write_safetensors(d.p / "o.safetensors", {from_u8("w\xff", {1}, &b), from_u8("w\xfe", {1}, &b)}); });
  EXPECT_EQ(e.rfind((d.p / "o.safetensors").string() + ": tensors 'w\\xFF'", 0), 0u) << e;
  // one name not UTF-8 alone is still written (as U+FFFD) and read back
  const auto back = parse_safetensors(encode_safetensors({from_u8("w\xff", {1}, &b)}), "back");
  ASSERT_EQ(back.tensors.size(), 1u);
  EXPECT_EQ(back.tensors[0].name, "w\xEF\xBF\xBD");
}

TEST(IoSafetensors, EveryFormatDtypeIsReadWithItsBitSize) {
  // The 22 dtypes of the safetensors reference implementation; sub-byte ones
  // take numel * bits / 8 bytes: F4 [2, 4] = 4 bytes, F6_E2M3 [4] = 3 bytes.
  TempDir d("io_st");
  struct D {
    const char* name;
    const char* shape;
    size_t bytes;
  };
  const D ds[] = {{"BOOL", "[2]", 2},        {"U8", "[1]", 1},          {"I8", "[1]", 1},
                  {"F8_E5M2", "[1]", 1},     {"F8_E4M3", "[1]", 1},     {"F8_E8M0", "[1]", 1},
                  {"F8_E4M3FNUZ", "[1]", 1}, {"F8_E5M2FNUZ", "[1]", 1}, {"I16", "[1]", 2},
                  {"U16", "[1]", 2},         {"F16", "[1]", 2},         {"BF16", "[1]", 2},
                  {"I32", "[1]", 4},         {"U32", "[1]", 4},         {"F32", "[1]", 4},
                  {"C64", "[1]", 8},         {"F64", "[1]", 8},         {"I64", "[1]", 8},
                  {"U64", "[1]", 8},         {"F4", "[2, 4]", 4},       {"F6_E2M3", "[4]", 3},
                  {"F6_E3M2", "[4]", 3}};
  std::string json = "{";
  size_t off = 0;
  for (const auto& x : ds) {
    json += std::string(off ? "," : "") + "\"t_" + x.name + "\":{\"dtype\":\"" + x.name + "\",\"shape\":" + x.shape +
            ",\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + x.bytes) + "]}";
    off += x.bytes;
  }
  json += "}";
  const auto f = read_safetensors(d.put("all.safetensors", st_file(json, std::string(off, '\x11'))));
  ASSERT_EQ(f.tensors.size(), std::size(ds));
  EXPECT_TRUE(f.unknown.empty());
  for (const auto& x : ds) {
    const auto* t = f.find(std::string("t_") + x.name);
    ASSERT_NE(t, nullptr) << x.name;
    EXPECT_STREQ(name_of(t->dtype), x.name);
    EXPECT_EQ(t->bytes.size(), x.bytes) << x.name;
  }
  // Written back: the same dtypes and shapes, byte for byte the same tensors.
  const auto back = parse_safetensors(encode_safetensors(f.tensors), "back");
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    EXPECT_EQ(back.tensors[i].dtype, f.tensors[i].dtype);
    EXPECT_EQ(back.tensors[i].shape, f.tensors[i].shape);
    EXPECT_EQ(back.tensors[i].bytes, f.tensors[i].bytes);
  }
}

TEST(IoSafetensors, UnknownDtypeIsListedAndSkippedNotFatal) {
  TempDir d("io_st");
  const std::string json = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("z":{"dtype":"F3_E1M1","shape":[7],"data_offsets":[4,10]}})";
  const auto f = read_safetensors(d.put("u.safetensors", st_file(json, std::string(10, '\0'))));
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].name, "a");
  ASSERT_EQ(f.unknown.size(), 1u);
  EXPECT_EQ(f.unknown[0].name, "z");
  EXPECT_EQ(f.unknown[0].dtype, "F3_E1M1");
  EXPECT_EQ(f.unknown[0].shape, std::vector<size_t>{7});
  // Its bytes still count: a gap after it is an error as before.
  const std::string gap = R"({"z":{"dtype":"F3_E1M1","shape":[7],"data_offsets":[0,6]}})";
  EXPECT_NE(error_of(d.put("g.safetensors", st_file(gap, std::string(10, '\0')))).find("belong to no tensor"),
            std::string::npos);
}

TEST(IoSafetensors, HeaderOnlyReadMatchesFullReadWithoutData) {
  TempDir d("io_st");
  const std::string json = R"({"__metadata__":{"k":"v"},"a":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]}})";
  const auto p = d.put("h.safetensors", st_file(json, std::string(12, '\x01')));
  const auto h = read_safetensors_header(p);
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].shape, (std::vector<size_t>{2, 3}));
  EXPECT_TRUE(h.tensors[0].bytes.empty());
  EXPECT_EQ(h.metadata.at("k"), "v");
  // Validated against the file's real size: a truncated buffer is still an error.
  const auto t = d.put("t.safetensors", st_file(json, std::string(11, '\x01')));
  EXPECT_THROW(read_safetensors_header(t), IoError);
}

TEST(IoSafetensors, ShardedCheckpointIndex) {
  TempDir d("io_st");
  const auto ix = d.put("model.safetensors.index.json",
                        R"({"metadata":{"total_size":8},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
                        R"("b":"model-00002-of-00002.safetensors","c":"model-00001-of-00002.safetensors"}})");
  const SafetensorsIndex i = read_safetensors_index(ix);
  ASSERT_EQ(i.shards.size(), 2u);
  EXPECT_EQ(i.shards[0], d.p / "model-00001-of-00002.safetensors");
  EXPECT_EQ(i.tensors_in(i.shards[0]), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(i.shard_of("b"), d.p / "model-00002-of-00002.safetensors");
  EXPECT_TRUE(is_safetensors_index(ix));
  const std::pair<const char*, const char*> bad[] = {
      {R"({"weight_map":{"a":"../x.safetensors"}})", "relative path inside"},
      {R"({"weight_map":{"a":"/etc/x.safetensors"}})", "relative path inside"},
      {R"({"weight_map":{"a":"s.safetensors","a":"t.safetensors"}})", "names tensor 'a' twice"},
      {R"({"weight_map":{"a":1}})", "not a string"},
      {R"({"metadata":{}})", "no \"weight_map\""},
      {R"([1])", "not a JSON object"},
      {R"({"weight_map":)", "not valid JSON"}};
  for (const auto& [text, want] : bad) {
    const auto f = d.put("bad.index.json", text);
    try {
      read_safetensors_index(f);
      ADD_FAILURE() << text;
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(f.string()), std::string::npos) << e.what();
    }
  }
}
