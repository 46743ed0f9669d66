// `mxsim quantize` on real checkpoint layouts: several input files, a sharded
// checkpoint's index.json, a tensor name in two shards, an index that points
// at a shard without the tensor, per-block statistics with hand values, and
// notes for F64 and unknown dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "cli_test_util.hpp"
#include "mxsim/io/safetensors.hpp"

using mxsim::test::CliSandbox;
using mxsim::test::npy_bytes;

namespace {
std::string st(const std::string& json, const std::string& data) {
  std::string f;
  for (int k = 0; k < 8; ++k) f += char((uint64_t(json.size()) >> (8 * k)) & 0xFF);
  return f + json + data;
}
std::string f32s(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }
std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, size_t b, size_t e) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" + std::to_string(b) +
         "," + std::to_string(e) + "]}";
}
}  // namespace

TEST(CliCheckpoint, ShardedIndexAndSeveralFiles) {
  CliSandbox s;
  // Two shards: a, c in shard 1, b in shard 2; ones everywhere -> MXFP4 EVEN: byte 125, codes 0x66.
  const std::string ones = f32s(std::vector<float>(32, 1.0f));
  s.put("m-1.safetensors", st("{" + entry("a", "F32", "[1,32]", 0, 128) + "," + entry("c", "F32", "[1,32]", 128, 256) + "}", ones + ones));
  s.put("m-2.safetensors", st("{" + entry("b", "F32", "[1,32]", 0, 128) + "," + entry("extra", "F32", "[1,32]", 128, 256) + "}", ones + ones));
  s.put("m.safetensors.index.json",
        R"({"metadata":{"total_size":384},"weight_map":{"a":"m-1.safetensors","b":"m-2.safetensors","c":"m-1.safetensors"}})");
  auto r = s.mxsim("quantize --recipe mxfp4 --all-tensors m.safetensors.index.json -o q.safetensors --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["tensors"].size(), 3u);
  EXPECT_EQ(j["inputs"], nlohmann::json::array({"m-1.safetensors", "m-2.safetensors"}));
  EXPECT_NE(r.err.find("tensor 'extra' skipped: not in the index"), std::string::npos) << r.err;
  const auto f = mxsim::io::read_safetensors(s.p / "q.safetensors");
  for (const char* t : {"a", "b", "c"}) {
    ASSERT_NE(f.find(std::string(t) + ".scale"), nullptr) << t;
    EXPECT_EQ(f.find(std::string(t) + ".scale")->bytes, std::vector<uint8_t>{125}) << t;
    EXPECT_EQ(f.find(std::string(t) + ".data")->bytes, std::vector<uint8_t>(16, 0x66)) << t;
  }
  EXPECT_EQ(f.find("extra.data"), nullptr);
  // --tensor with an index reads only the shard that holds it (a broken other shard is never opened).
  s.put("m-2.safetensors", "broken");
  r = s.mxsim("quantize --recipe mxfp4 --tensor c m.safetensors.index.json -o c.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(mxsim::io::read_safetensors(s.p / "c.safetensors").find("c.data"), nullptr);
  s.put("m-2.safetensors", st("{" + entry("b", "F32", "[1,32]", 0, 128) + "}", ones));
  // Several plain files: one tensor name in two of them is an error naming both.
  s.put("x.safetensors", st("{" + entry("a", "F32", "[1,32]", 0, 128) + "}", ones));
  r = s.mxsim("quantize --recipe mxfp4 --all-tensors m-1.safetensors x.safetensors");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("tensor 'a' is in both m-1.safetensors and x.safetensors"), std::string::npos) << r.err;
  // An index placing a tensor in a shard that lacks it.
  s.put("bad.index.json", R"({"weight_map":{"zz":"m-1.safetensors"}})");
  r = s.mxsim("quantize --recipe mxfp4 --all-tensors bad.index.json");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("places tensor 'zz' in m-1.safetensors, which does not hold it"), std::string::npos) << r.err;
  // .npy files and a shard together; several floating tensors without a choice is a usage error.
  s.put("w.npy", npy_bytes("<f4", "(1, 32)", ones));
  r = s.mxsim("quantize --recipe mxfp4 w.npy m-1.safetensors");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("the inputs hold 3 floating tensors"), std::string::npos) << r.err;
  r = s.mxsim("quantize --recipe mxfp4 --tensor w --tensor c w.npy m-1.safetensors --csv");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::istringstream csv(r.out);
  std::string line;
  std::vector<std::string> rows;
  while (std::getline(csv, line)) rows.push_back(line);
  ASSERT_EQ(rows.size(), 3u) << r.out;
  EXPECT_EQ(rows[0], "tensor,file,shape,dtype,elements,mse,sqnr_db,max_abs_err,underflow,saturated,nan_out,nonfinite_in");
  EXPECT_EQ(rows[1].rfind("w,w.npy,1x32,F32,32,0,inf,0,0,0,0,0", 0), 0u) << rows[1];
}

TEST(CliCheckpoint, PerBlockStatisticsHandValues) {
  CliSandbox s;
  // Two blocks of 32 (MXFP4, FLOOR): block 0 holds 6.5 and zeros: amax 6.5 = 1.625 * 2^2 -> s = 0
  // (byte 127); 6.5 saturates to 6: error 0.5, MSE 0.25 / 32, SQNR 10 log10(42.25 / 0.25).
  // Block 1 all 2.0: s = 1 - 2 = -1 (byte 126), exact: SQNR inf, MSE 0.
  std::vector<float> v(64, 0.0f);
  v[0] = 6.5f;
  for (int i = 32; i < 64; ++i) v[size_t(i)] = 2.0f;
  s.put("x.npy", npy_bytes("<f4", "(1, 64)", f32s(v)));
  auto r = s.mxsim("quantize --recipe mxfp4_ocp x.npy --per-block b.csv");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::istringstream in(s.slurp_text("b.csv"));
  std::string line;
  std::vector<std::string> rows;
  while (std::getline(in, line)) rows.push_back(line);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0], "tensor,group,block_row,block_col,scale,scale_exp,amax,count,mse,sqnr_db,saturated,underflow");
  char want[200];
  std::snprintf(want, sizeof want, "x,0,0,0,127,0,6.5,32,%.9g,%.9g,1,0", 0.25 / 32, 10 * std::log10(42.25 / 0.25));
  EXPECT_EQ(rows[1], want);
  EXPECT_EQ(rows[2], "x,0,0,1,126,-1,2,32,0,inf,0,0");
  r = s.mxsim("quantize --recipe mxfp4_ocp x.npy --per-block b.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string npy = s.slurp_text("b.npy");
  EXPECT_NE(npy.find("'descr': '<f8'"), std::string::npos);
  EXPECT_NE(npy.find("'shape': (2, 11)"), std::string::npos);
}

TEST(CliCheckpoint, NotesForF64AndUnknownDtypes) {
  CliSandbox s;
  std::vector<double> d(32, 0.1);  // 0.1 is not an FP32 value: every element rounds
  s.put("d.npy", npy_bytes("<f8", "(1, 32)", std::string(reinterpret_cast<const char*>(d.data()), 256)));
  auto r = s.mxsim("quantize --recipe mxfp8 d.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("tensor 'd' is F64: elements rounded once from FP64 to e4m3, amax and scales from the values "
                       "rounded to FP32 (RNE); 32 of 32 values are not FP32 values"),
            std::string::npos) << r.err;
  const std::string ones = f32s(std::vector<float>(32, 1.0f));
  s.put("u.safetensors", st("{" + entry("a", "F32", "[1,32]", 0, 128) + "," + entry("q", "F2_E1M0", "[8]", 128, 130) + "}",
                            ones + "zz"));
  r = s.mxsim("quantize --recipe mxfp4 --all-tensors u.safetensors --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["notes"][0], "u.safetensors: tensor 'q' skipped: unknown dtype 'F2_E1M0'");
  EXPECT_EQ(j["tensors"].size(), 1u);
}
