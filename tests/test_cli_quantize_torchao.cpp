// `mxsim quantize --scale-convention torchao | torchao_cuda | torchao_training`: torchao's FP8
// scale arithmetic (docs/numerics.md §3.4) written in torchao's layouts (Float8Tensor qdata +
// scale, Float8TrainingTensor _data + _scale; docs/cli.md "Output"), read back by
// `mxsim dequantize --layout torchao-float8 / torchao-float8-training`. Expected bytes derived by
// hand in tests/test_quantize_torchao.cpp (repeated in short here).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_test_util.hpp"
#include "mxsim/bits.hpp"
#include "mxsim/io/npy.hpp"
#include "mxsim/io/safetensors.hpp"

using mxsim::test::CliSandbox;
using mxsim::test::npy_bytes;

namespace {
namespace fs = std::filesystem;

std::vector<uint8_t> u8(const fs::path& p) { return mxsim::io::read_npy(p).bytes; }
std::vector<uint32_t> f32_bits(const fs::path& p) {
  const auto b = mxsim::io::read_npy(p).bytes;
  std::vector<uint32_t> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}
std::vector<size_t> shape(const fs::path& p) { return mxsim::io::read_npy(p).shape; }
std::string raw(const std::vector<uint32_t>& bits) {
  return std::string(reinterpret_cast<const char*>(bits.data()), bits.size() * 4);
}

// x [2, 4]: row 0 [1.5, X, -X, 0] with X = 0x3D392492, row 1 zeros (-0 last).
// fp8_row per convention (test_quantize_torchao.cpp derives each byte):
//   torchao      scale [0x3B5B6DB7, 0]           codes 7E 56 D6 00 | 7F 7F 7F 7F (0/0: NaN)
//   torchao_cuda scale [0x3B5B6DB8, 0]           codes 7E 55 D5 00 | 7F 7F 7F 7F
//   torchao_training _scale [0x43955555, 0x57CBBA10] codes 7E 55 D5 00 | 00 00 00 80
//   te           scale_inv [0x3B5B6DB7, 1]       codes 7E 55 D5 00 | 00 00 00 80
const std::vector<uint32_t> kX = {0x3FC00000, 0x3D392492, 0xBD392492, 0, 0, 0, 0, 0x80000000};

TEST(CliQuantizeTorchao, RowwiseConventionsInTorchaoLayouts) {
  CliSandbox s;
  s.put("x.npy", npy_bytes("<f4", "(2, 4)", raw(kX)));
  auto r = s.mxsim("quantize -r fp8_row --scale-convention torchao x.npy -o a");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(u8(s.p / "a.qdata.npy"), (std::vector<uint8_t>{0x7E, 0x56, 0xD6, 0x00, 0x7F, 0x7F, 0x7F, 0x7F}));
  EXPECT_EQ(f32_bits(s.p / "a.scale.npy"), (std::vector<uint32_t>{0x3B5B6DB7, 0}));
  EXPECT_EQ(shape(s.p / "a.scale.npy"), (std::vector<size_t>{2, 1}));  // PerRow: [M, 1]
  EXPECT_FALSE(fs::exists(s.p / "a.data.npy"));
  const std::string meta = s.slurp_text("a.meta.json");
  EXPECT_NE(meta.find("\"scale_convention\": \"torchao\""), std::string::npos) << meta;
  EXPECT_NE(meta.find("\"hp_dtype\": \"float32\""), std::string::npos) << meta;
  EXPECT_NE(r.out.find("scale-convention=torchao"), std::string::npos) << r.out;

  r = s.mxsim("quantize -r fp8_row --scale-convention torchao-cuda x.npy -o c");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(u8(s.p / "c.qdata.npy"), (std::vector<uint8_t>{0x7E, 0x55, 0xD5, 0x00, 0x7F, 0x7F, 0x7F, 0x7F}));
  EXPECT_EQ(f32_bits(s.p / "c.scale.npy"), (std::vector<uint32_t>{0x3B5B6DB8, 0}));

  r = s.mxsim("quantize -r fp8_row --scale-convention torchao_training x.npy -o t");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(u8(s.p / "t._data.npy"), (std::vector<uint8_t>{0x7E, 0x55, 0xD5, 0x00, 0x00, 0x00, 0x00, 0x80}));
  EXPECT_EQ(f32_bits(s.p / "t._scale.npy"), (std::vector<uint32_t>{0x43955555, 0x57CBBA10}));
  EXPECT_EQ(shape(s.p / "t._scale.npy"), (std::vector<size_t>{2, 1}));  // axiswise_dim -1: [M, 1]

  r = s.mxsim("quantize -r fp8_row x.npy -o e");  // te: unchanged names and bytes
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(u8(s.p / "e.data.npy"), (std::vector<uint8_t>{0x7E, 0x55, 0xD5, 0x00, 0x00, 0x00, 0x00, 0x80}));
  EXPECT_EQ(f32_bits(s.p / "e.scale_inv.npy"), (std::vector<uint32_t>{0x3B5B6DB7, 0x3F800000}));

  // Read back through torchao's layouts. Float8Tensor: code * scale: 448 * 0x3B5B6DB7 -> 1.5,
  // 14 * 0x3B5B6DB7 = 12582912.125 * 2^-28 -> 0.046875 (0x3D400000); the zero row NaN.
  // Float8TrainingTensor: code / _scale: 13 / 0x43955555 = 11684133.27 * 2^-28 -> 0x3D324925; 0 / s = 0.
  r = s.mxsim("dequantize --layout torchao-float8 --elem-dtype float8_e4m3fn a.qdata.npy a.scale.npy -o da.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto da = f32_bits(s.p / "da.npy");
  ASSERT_EQ(da.size(), 8u);
  EXPECT_EQ(da[0], 0x3FC00000u);
  EXPECT_EQ(da[1], 0x3D400000u);
  EXPECT_EQ(da[2], 0xBD400000u);
  EXPECT_EQ(da[3], 0u);
  for (size_t i = 4; i < 8; ++i) EXPECT_TRUE(mxsim::f32_from_bits(da[i]) != mxsim::f32_from_bits(da[i])) << i;
  r = s.mxsim("dequantize --layout torchao-float8-training t.meta.json -o dt.npy");  // elem from the metadata
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(f32_bits(s.p / "dt.npy"),
            (std::vector<uint32_t>{0x3FC00000, 0x3D324925, 0xBD324925, 0, 0, 0, 0, 0x80000000}));
  // The note names where the format came from: the elem_format of the .meta.json beside the codes.
  EXPECT_NE(r.err.find("read as E4M3 (the elem_format of t.meta.json;"), std::string::npos) << r.err;
  r = s.mxsim("dequantize c.qdata.npy -o dc.npy --json");  // auto: its scale beside it, Float8Tensor
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("\"layout\": \"torchao-float8\""), std::string::npos) << r.out;
}

// Per tensor, safetensors output: codes F8_E4M3, the training _scale 0-D (torchao's tensorwise
// scale), Float8Tensor's scale [1, 1]; the file reads back with auto layout detection.
TEST(CliQuantizeTorchao, PerTensorSafetensors) {
  CliSandbox s;
  s.put("x.npy", npy_bytes("<f4", "(2, 4)", raw(kX)));
  auto r = s.mxsim("quantize -r fp8_tensor --scale-convention torchao_training x.npy -o t.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto f = mxsim::io::read_safetensors(s.p / "t.safetensors");
  const auto* d = f.find("x._data");
  const auto* sc = f.find("x._scale");
  ASSERT_TRUE(d && sc);
  EXPECT_EQ(d->dtype, mxsim::io::DType::F8_E4M3);
  EXPECT_EQ(d->shape, (std::vector<size_t>{2, 4}));
  EXPECT_TRUE(sc->shape.empty());
  uint32_t v;
  std::memcpy(&v, sc->bytes.data(), 4);
  EXPECT_EQ(v, 0x43955555u);  // amax 1.5 over the tensor
  EXPECT_EQ(f.metadata.at("x.scale_convention"), "torchao_training");
  r = s.mxsim("dequantize t.safetensors -o d.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("torchao-float8-training"), std::string::npos) << r.out;
  EXPECT_EQ(f32_bits(s.p / "d.npy")[1], 0x3D324925u);

  r = s.mxsim("quantize -r fp8_tensor --scale-convention torchao x.npy -o a.safetensors");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto g = mxsim::io::read_safetensors(s.p / "a.safetensors");
  ASSERT_TRUE(g.find("x.qdata") && g.find("x.scale"));
  EXPECT_EQ(g.find("x.scale")->shape, (std::vector<size_t>{1, 1}));
  // The zero row is no block of its own now: 0 / 0x3B5B6DB7 = 0.
  const auto& q = g.find("x.qdata")->bytes;
  EXPECT_EQ(std::vector<uint8_t>(q.begin(), q.end()),
            (std::vector<uint8_t>{0x7E, 0x56, 0xD6, 0x00, 0x00, 0x00, 0x00, 0x80}));
}

// A BF16 source: torchao's Float8Tensor computes the scale in BF16 (hp_dtype set from the dtype).
// Row [1.5, 0x3C10 (9 * 2^-10)]: scale 0x3B5B6DB7 -> BF16 0x3B5B0000; 0x3C100000 / it = 576 / 219 =
// 2.63 -> 2.75 = 0x43 (an FP32 tensor of the same values: scale 0x3B5B6DB7, code 0x42).
TEST(CliQuantizeTorchao, Bf16SourceScaleInBf16) {
  CliSandbox s;
  const uint16_t b[2] = {0x3FC0, 0x3C10};
  s.put("x.npy", npy_bytes("<V2", "(1, 2)", std::string(reinterpret_cast<const char*>(b), 4)));
  s.put("y.npy", npy_bytes("<f4", "(1, 2)", raw({0x3FC00000, 0x3C100000})));
  auto r = s.mxsim("quantize -r fp8_tensor --scale-convention torchao x.npy -o a");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(u8(s.p / "a.qdata.npy"), (std::vector<uint8_t>{0x7E, 0x43}));
  EXPECT_EQ(f32_bits(s.p / "a.scale.npy"), (std::vector<uint32_t>{0x3B5B0000}));
  EXPECT_NE(s.slurp_text("a.meta.json").find("\"hp_dtype\": \"bfloat16\""), std::string::npos);
  r = s.mxsim("quantize -r fp8_tensor --scale-convention torchao y.npy -o b");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(u8(s.p / "b.qdata.npy"), (std::vector<uint8_t>{0x7E, 0x42}));
  EXPECT_EQ(f32_bits(s.p / "b.scale.npy"), (std::vector<uint32_t>{0x3B5B6DB7}));
}

// --axis rows (per column; torchao's axiswise_dim 0 / PerRow along dim 0): the codes are written in
// the logical layout and the scales [1, K]. Input: x^T [4, 2], whose columns are the rows of x.
TEST(CliQuantizeTorchao, ColumnwiseWrittenLogical) {
  CliSandbox s;
  std::vector<uint32_t> xt(8);
  for (size_t r = 0; r < 2; ++r)
    for (size_t c = 0; c < 4; ++c) xt[c * 2 + r] = kX[r * 4 + c];
  s.put("x.npy", npy_bytes("<f4", "(4, 2)", raw(xt)));
  auto r = s.mxsim("quantize -r fp8_row --axis rows --scale-convention torchao_training x.npy -o t --per-block b.csv");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(shape(s.p / "t._data.npy"), (std::vector<size_t>{4, 2}));
  EXPECT_EQ(u8(s.p / "t._data.npy"), (std::vector<uint8_t>{0x7E, 0x00, 0x55, 0x00, 0xD5, 0x00, 0x00, 0x80}));
  EXPECT_EQ(shape(s.p / "t._scale.npy"), (std::vector<size_t>{1, 2}));
  EXPECT_EQ(f32_bits(s.p / "t._scale.npy"), (std::vector<uint32_t>{0x43955555, 0x57CBBA10}));
  r = s.mxsim("dequantize t._data.npy -o d.npy");  // picks up t._scale.npy and the metadata
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(f32_bits(s.p / "d.npy"), (std::vector<uint32_t>{0x3FC00000, 0, 0x3D324925, 0, 0xBD324925, 0, 0, 0x80000000}));
  // --per-block keeps storage order (column 0's block, then column 1's) and the stored _scale:
  // 0x43955555 = 298.666656, 0x57CBBA10 = 4.47999986e14; scale_exp floor(log2(1 / _scale)): -9, -49.
  const std::string csv = s.slurp_text("b.csv");
  EXPECT_NE(csv.find("x,0,0,0,298.666656,-9,1.5,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("x,0,1,0,4.47999986e+14,-49,0,"), std::string::npos) << csv;

  r = s.mxsim("quantize -r fp8_row --axis rows --scale-convention torchao x.npy -o a");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(u8(s.p / "a.qdata.npy"), (std::vector<uint8_t>{0x7E, 0x7F, 0x56, 0x7F, 0xD6, 0x7F, 0x00, 0x7F}));
  EXPECT_EQ(shape(s.p / "a.scale.npy"), (std::vector<size_t>{1, 2}));
  EXPECT_EQ(f32_bits(s.p / "a.scale.npy"), (std::vector<uint32_t>{0x3B5B6DB7, 0}));
  const auto meta = nlohmann::json::parse(s.slurp_text("a.meta.json"));
  EXPECT_EQ(meta.at("block_size"), nlohmann::json::parse("[4, 1]")) << meta.dump();  // torchao's block_size
  EXPECT_EQ(meta.at("transposed"), false);
}

// Streamed in slices of a few rows (per tensor: an amax pass first) the bytes are the same.
TEST(CliQuantizeTorchao, StreamedSameBytes) {
  CliSandbox s;
  std::vector<uint32_t> v;
  for (int i = 0; i < 4; ++i) v.insert(v.end(), kX.begin(), kX.end());
  s.put("x.npy", npy_bytes("<f4", "(8, 4)", raw(v)));
  for (const char* c : {"torchao", "torchao_cuda", "torchao_training"}) {
    const std::string conv = c;
    auto r = s.mxsim("quantize -r fp8_tensor --scale-convention " + conv + " x.npy -o w" + conv);
    ASSERT_EQ(r.rc, 0) << r.err;
    mxsim::test::EnvVar small("MXSIM_QUANTIZE_CHUNK_BYTES", "32");
    r = s.mxsim("quantize -r fp8_tensor --scale-convention " + conv + " x.npy -o s" + conv);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("two passes"), std::string::npos) << r.err;
    const std::string d = conv == "torchao_training" ? "._data.npy" : ".qdata.npy";
    const std::string sc = conv == "torchao_training" ? "._scale.npy" : ".scale.npy";
    EXPECT_EQ(u8(s.p / ("w" + conv + d)), u8(s.p / ("s" + conv + d))) << conv;
    EXPECT_EQ(f32_bits(s.p / ("w" + conv + sc)), f32_bits(s.p / ("s" + conv + sc))) << conv;
  }
}

// Combinations torchao has no counterpart for: usage errors (exit 2) naming the option; a tensor the
// convention cannot take (a ragged block, F64): exit 1 naming the tensor.
TEST(CliQuantizeTorchao, Refusals) {
  CliSandbox s;
  s.put("x.npy", npy_bytes("<f4", "(2, 4)", raw(kX)));
  struct Case {
    const char* args;
    int rc;
    const char* msg;
  };
  const Case cases[] = {
      {"-r fp8_row --scale-convention ao", 2, "unknown scale convention 'ao' (known: te, torchao, torchao_cuda, torchao_training)"},
      {"-r mxfp8 --scale-convention torchao", 2, "--scale-convention applies to FP32-scaled specs"},
      {"-r fp8_row --scale-convention torchao --pow2-scale on", 2, "no power-of-two option"},
      {"-r fp8_row --scale-convention torchao_training --amax-epsilon 1e-4", 2, "EPS = 1e-12"},
      {"-r fp8_block --scale-convention torchao_training", 2, "tensorwise or axiswise"},
      {"-r fp8_row --scale-convention torchao --round rz", 2, "casts RNE"},
      {"-r fp8_row --scale-convention torchao --hadamard", 2, "no Hadamard transform"},
      {"-r fp8_block --scale-convention torchao", 1, "do not divide the stored extent 2x4"},
  };
  for (const Case& c : cases) {
    const auto r = s.mxsim(std::string("quantize ") + c.args + " x.npy -o z");
    EXPECT_EQ(r.rc, c.rc) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.msg), std::string::npos) << c.args << ": " << r.err;
    EXPECT_FALSE(fs::exists(s.p / "z.qdata.npy")) << c.args;
  }
  const double d[2] = {1.0, 2.0};
  s.put("d.npy", npy_bytes("<f8", "(1, 2)", std::string(reinterpret_cast<const char*>(d), 16)));
  const auto r = s.mxsim("quantize -r fp8_tensor --scale-convention torchao d.npy -o z");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("float64 tensor's amax and scale in float64"), std::string::npos) << r.err;
}

}  // namespace
