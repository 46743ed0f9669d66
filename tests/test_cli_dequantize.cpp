// `mxsim dequantize`: codes written by `mxsim quantize` (safetensors and .npy +
// meta.json), a TransformerEngine Float8Tensor and a torchao MXTensor pair back
// to values computed by hand; BF16 output; errors that name the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli_test_util.hpp"
#include "mxsim/io/npy.hpp"
#include "mxsim/io/safetensors.hpp"
#include "test_formats_oracle.hpp"

using mxsim::test::CliSandbox;
using mxsim::test::npy_bytes;

namespace {
std::string f32s(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

// The MXFP4 row of test_cli_quantize (units of 2^-4) and what its codes decode to:
// E2M1 RNE of the units, times 2^-4 (6 3 1.5 0.5 -1 0 0 -6 4 2 -0 1, then zeros).
std::vector<float> row() {
  std::vector<float> u = {6, 3, 1.5f, 0.5f, -0.75f, 0.25f, 0, -6, 5, 2.5f, -0.25f, 1.25f};
  u.resize(32, 0.0f);
  for (float& v : u) v /= 16.0f;
  return u;
}
std::vector<float> decoded() {
  std::vector<float> u = {6, 3, 1.5f, 0.5f, -1, 0, 0, -6, 4, 2, -0.0f, 1};
  u.resize(32, 0.0f);
  for (float& v : u) v /= 16.0f;
  return u;
}
std::vector<float> values(const mxsim::io::RawTensor& t) { return mxsim::io::to_f32(t); }
}  // namespace

TEST(CliDequantize, MxsimSafetensorsAndNpyBackToHandValues) {
  CliSandbox s;
  s.put("x.npy", npy_bytes("<f4", "(1, 32)", f32s(row())));
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp4 x.npy -o q.safetensors").rc, 0);
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp4 x.npy -o p").rc, 0);  // p.data.npy, p.scale.npy, p.meta.json
  for (const char* in : {"q.safetensors", "p.meta.json", "p.data.npy"}) {
    const auto r = s.mxsim(std::string("dequantize ") + in + " -o d.npy");
    ASSERT_EQ(r.rc, 0) << in << ": " << r.err;
    const auto d = mxsim::io::read_npy(s.p / "d.npy");
    EXPECT_EQ(d.shape, (std::vector<size_t>{1, 32})) << in;
    const auto v = values(d);
    const auto want = decoded();
    for (size_t i = 0; i < 32; ++i) EXPECT_EQ(std::signbit(v[i]), std::signbit(want[i])) << in << " " << i;
    EXPECT_EQ(v, want) << in;
  }
  // BF16 output: every decoded value is a BF16 value, so its bits are the FP32 top halves.
  ASSERT_EQ(s.mxsim("dequantize --dtype bf16 q.safetensors -o d.safetensors").rc, 0);
  const auto f = mxsim::io::read_safetensors(s.p / "d.safetensors");
  const auto* t = f.find("x");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, mxsim::io::DType::BF16);
  const auto want = decoded();
  for (size_t i = 0; i < 32; ++i) {
    uint32_t b;
    std::memcpy(&b, &want[i], 4);
    EXPECT_EQ(uint32_t(t->bytes[2 * i]) | uint32_t(t->bytes[2 * i + 1]) << 8, b >> 16) << i;
  }
}

TEST(CliDequantize, TeFloat8TensorAndTorchaoPair) {
  CliSandbox s;
  // TE Float8Tensor: E4M3 codes 0x38 (1.0), 0xC0 (-2.0), 0x01 (2^-9), 0x7E (448); scale_inv 0.5.
  s.put("w._data.npy", npy_bytes("|u1", "(2, 2)", std::string("\x38\xC0\x01\x7E", 4)));
  s.put("w._scale_inv.npy", npy_bytes("<f4", "(1,)", f32s({0.5f})));
  auto r = s.mxsim("dequantize w._data.npy w._scale_inv.npy -o w.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(values(mxsim::io::read_npy(s.p / "w.npy")), (std::vector<float>{0.5f, -1.0f, 0.0009765625f, 224.0f}));
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tensors"][0]["layout"], "te-tensor");
  EXPECT_NE(r.err.find("read as E4M3"), std::string::npos) << r.err;  // U8 data: the default, said
  // torchao: E5M2 codes 0x3C (1.0) with E8M0 scale 2^3 for one block of 32.
  s.put("t.qdata.npy", npy_bytes("|u1", "(1, 32)", std::string(32, '\x3C')));
  s.put("t.scale.npy", npy_bytes("|u1", "(1, 1)", std::string(1, char(130))));
  r = s.mxsim("dequantize --elem-dtype float8_e5m2 t.qdata.npy t.scale.npy -o t.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(values(mxsim::io::read_npy(s.p / "t.npy")), std::vector<float>(32, 8.0f));
  // Without the element format of U8 codes: a usage error that says what to give.
  r = s.mxsim("dequantize t.qdata.npy t.scale.npy");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--elem-dtype"), std::string::npos) << r.err;
  // Scales that do not fit the codes: exit 1 naming the tensor and both shapes, nothing written.
  s.put("b.qdata.npy", npy_bytes("|u1", "(1, 64)", std::string(64, '\x3C')));
  s.put("b.scale.npy", npy_bytes("|u1", "(1, 1)", std::string(1, char(127))));
  r = s.mxsim("dequantize --elem-dtype e5m2 b.qdata.npy b.scale.npy -o b.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("tensor 'b' (torchao layout)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("need 2 scales per row"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(s.p / "b.npy"));
}

// torchao scales in the swizzled layout of block-scaled GEMMs
// (--scale-layout blocked): 130 rows x 2 blocks of E5M2 code 0x3C (1.0);
// scale (r, c) = 2^(r % 7 + c), stored in the 128 x 4 tiles by the cuBLAS rule
// (tile (r / 128, c / 4), byte (r % 32) * 16 + (r % 128 / 32) * 4 + c % 4),
// every padding byte 0xFF (a NaN scale): the output is 2^(r % 7 + c) in each
// block, no NaN.
TEST(CliDequantize, TorchaoBlockedScalesIgnorePoisonedPadding) {
  CliSandbox s;
  const size_t rows = 130, blocks = 2, K = 64;
  s.put("t.qdata.npy", npy_bytes("|u1", "(130, 64)", std::string(rows * K, '\x3C')));
  std::string blocked(2 * 128 * 4, char(0xFF));  // two row tiles of one column tile
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < blocks; ++c)
      blocked[(r / 128) * 512 + (r % 32) * 16 + (r % 128 / 32) * 4 + c] = char(127 + r % 7 + c);
  s.put("t.scale.npy", npy_bytes("|u1", "(1024,)", blocked));
  auto r = s.mxsim("dequantize --elem-dtype e5m2 --scale-layout blocked t.qdata.npy t.scale.npy -o t.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::vector<float> v = values(mxsim::io::read_npy(s.p / "t.npy"));
  ASSERT_EQ(v.size(), rows * K);
  for (size_t i = 0; i < v.size(); ++i) {
    const size_t row = i / K, c = (i % K) / 32;
    ASSERT_EQ(v[i], std::ldexp(1.0f, int(row % 7 + c))) << "row " << row << " block " << c;
  }
  // The byte count must be the padded one; a plain-shaped scale is refused with the sizes.
  s.put("u.qdata.npy", npy_bytes("|u1", "(130, 64)", std::string(rows * K, '\x3C')));
  s.put("u.scale.npy", npy_bytes("|u1", "(130, 2)", std::string(rows * blocks, char(127))));
  r = s.mxsim("dequantize --elem-dtype e5m2 --scale-layout blocked u.qdata.npy u.scale.npy -o u.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("padded to [256, 4] need 1024"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(s.p / "u.npy"));
  r = s.mxsim("dequantize --elem-dtype e5m2 --scale-layout swizzled u.qdata.npy u.scale.npy");
  EXPECT_EQ(r.rc, 2);
}

namespace {
/// The FP32 bits of an F32 .npy this project wrote.
std::vector<uint32_t> f32_bits_of(const mxsim::io::RawTensor& t) {
  EXPECT_EQ(t.dtype, mxsim::io::DType::F32);
  std::vector<uint32_t> b(t.bytes.size() / 4);
  std::memcpy(b.data(), t.bytes.data(), b.size() * 4);
  return b;
}
}  // namespace

// Every code of every element format (torchao MXTensor, E8M0 scale 2^0: the value is the code's)
// and every E8M0 byte (as the scale of E4M3 1.0 in blocks of one) through `mxsim dequantize`: the
// bits of the oracle's table (test_formats_oracle.hpp, from the OCP and FNUZ definitions), every
// NaN the canonical 0x7FC00000 -- the bits `mxsim cast --from F --to fp32` writes (test_cli_cast).
TEST(CliDequantize, EveryCodeOfEveryFormatIsTheOraclesValue) {
  CliSandbox s;
  for (const auto& f : oracle::all_formats()) {
    if (f.bits > 8 || f.name == "e8m0") continue;
    const uint32_t n = 1u << f.bits;
    std::string q;
    if (f.name == "e2m1") {  // packed two per byte, element 2i in the low nibble
      for (uint32_t c = 0; c < n; c += 2) q += char(c | (c + 1) << 4);
    } else {
      for (uint32_t c = 0; c < n; ++c) q += char(c);
    }
    s.put("t.qdata.npy", npy_bytes("|u1", "(1, " + std::to_string(q.size()) + ")", q));
    s.put("t.scale.npy", npy_bytes("|u1", "(1, " + std::to_string((n + 31) / 32) + ")", std::string((n + 31) / 32, char(127))));
    const auto r = s.mxsim("dequantize --elem-dtype " + f.name + " t.qdata.npy t.scale.npy -o t.npy");
    ASSERT_EQ(r.rc, 0) << f.name << ": " << r.err;
    const auto got = f32_bits_of(mxsim::io::read_npy(s.p / "t.npy"));
    ASSERT_EQ(got.size(), n) << f.name;
    for (uint32_t c = 0; c < n; ++c)
      EXPECT_EQ(got[c], oracle::decoded_f32_bits(f, c)) << f.name << " code " << c;
  }
  oracle::Fmt e8m0;
  for (const auto& f : oracle::all_formats())
    if (f.name == "e8m0") e8m0 = f;
  std::string scales;
  for (uint32_t b = 0; b < 256; ++b) scales += char(b);
  s.put("u.qdata.npy", npy_bytes("|u1", "(1, 256)", std::string(256, '\x38')));  // E4M3 1.0
  s.put("u.scale.npy", npy_bytes("|u1", "(1, 256)", scales));
  const auto r = s.mxsim("dequantize --elem-dtype e4m3 --block-size 1 u.qdata.npy u.scale.npy -o u.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto got = f32_bits_of(mxsim::io::read_npy(s.p / "u.npy"));
  ASSERT_EQ(got.size(), 256u);
  for (uint32_t b = 0; b < 256; ++b) EXPECT_EQ(got[b], oracle::decoded_f32_bits(e8m0, b)) << "E8M0 byte " << b;
}

// A declared element format wider than the one byte per code the data holds (fp32 over U8 codes
// decoded 0x38 as 7.8e-44) is refused with the option or file that named it, the format and the
// data's dtype; an existing output stays as it was.
TEST(CliDequantize, DeclaredFormatWiderThanTheCodesIsRefused) {
  CliSandbox s;
  s.put("t.qdata.npy", npy_bytes("|u1", "(1, 32)", std::string(32, '\x38')));
  s.put("t.scale.npy", npy_bytes("|u1", "(1, 1)", std::string(1, char(127))));
  s.put("w._data.npy", npy_bytes("|u1", "(1, 2)", std::string("\x38\x38", 2)));
  s.put("w._scale_inv.npy", npy_bytes("<f4", "(1,)", f32s({1.0f})));
  s.put("keep.npy", "earlier output");
  for (const char* fmt : {"fp32", "bf16", "fp16", "float32"})
    for (const char* in : {"t.qdata.npy t.scale.npy", "w._data.npy w._scale_inv.npy"}) {
      const auto r = s.mxsim(std::string("dequantize --elem-dtype ") + fmt + " " + in + " -o keep.npy");
      EXPECT_EQ(r.rc, 1) << fmt << " " << in;
      EXPECT_NE(r.err.find("--elem-dtype"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("-bit format"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("(U8)"), std::string::npos) << r.err;
      EXPECT_EQ(s.slurp_text("keep.npy"), "earlier output");
    }
  // The same through a .meta.json: mxsim's layout names the file.
  s.put("x.npy", npy_bytes("<f4", "(1, 32)", f32s(row())));
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp8 x.npy -o p").rc, 0);  // p.data.npy, p.scale.npy, p.meta.json
  nlohmann::json m = nlohmann::json::parse(s.slurp_text("p.meta.json"));
  ASSERT_TRUE(m.contains("elem_format")) << m.dump();
  m["elem_format"] = "fp32";
  s.put("p.meta.json", m.dump());
  const auto r = s.mxsim("dequantize p.meta.json -o keep.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("p.meta.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fp32 (float32) is a 32-bit format"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(U8)"), std::string::npos) << r.err;
  EXPECT_EQ(s.slurp_text("keep.npy"), "earlier output");
}

// --elem-dtype and the element format the input's metadata names (mxsim's .meta.json or
// safetensors __metadata__, the elem_format `mxsim quantize --scale-convention torchao` writes
// beside U8 codes) must agree: a different format is refused naming both and the metadata file
// (the metadata used to win, or the option, without a word); the same format in another spelling
// is accepted and decodes as without the option.
TEST(CliDequantize, ElemDtypeDisagreeingWithTheMetadataIsRefused) {
  CliSandbox s;
  s.put("x.npy", npy_bytes("<f4", "(1, 32)", f32s(row())));
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp8 x.npy -o p").rc, 0);  // E4M3 codes, p.meta.json
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp8 x.npy -o q.safetensors").rc, 0);
  ASSERT_EQ(s.mxsim("quantize --recipe fp8_tensor --scale-convention torchao x.npy -o f").rc, 0);
  s.put("keep.npy", "earlier output");
  const std::pair<const char*, const char*> cases[] = {
      {"p.meta.json", "p.meta.json"}, {"q.safetensors", "__metadata__ of"}, {"f.meta.json", "f.meta.json"}};
  for (const auto& [in, source] : cases) {
    const auto r = s.mxsim(std::string("dequantize --elem-dtype float8_e5m2 ") + in + " -o keep.npy");
    EXPECT_EQ(r.rc, 1) << in << ": " << r.err;
    EXPECT_NE(r.err.find("--elem-dtype e5m2 disagrees with elem_format e4m3"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(source), std::string::npos) << r.err;
    EXPECT_EQ(s.slurp_text("keep.npy"), "earlier output") << in;
    const auto plain = s.mxsim(std::string("dequantize ") + in + " -o a.npy");
    const auto same = s.mxsim(std::string("dequantize --elem-dtype float8_e4m3fn ") + in + " -o b.npy");
    ASSERT_EQ(plain.rc, 0) << in << ": " << plain.err;
    ASSERT_EQ(same.rc, 0) << in << ": " << same.err;
    EXPECT_EQ(s.slurp_text("a.npy"), s.slurp_text("b.npy")) << in;
  }
}

// A 6-bit code stored one per byte with bits set above its width (0xC5 as E2M3 or E3M2) is no
// code of the format: refused naming the tensor, its file, the first such index and byte and the
// format, in the torchao MXTensor layout (--elem-dtype) and mxsim's (elem_format in p.meta.json);
// the same code with the top bits clear (0x05) decodes. Packed E2M1 has no such bits: every
// byte is two codes (EveryCodeOfEveryFormatIsTheOraclesValue decodes them all).
TEST(CliDequantize, SixBitCodeByteWithBitsAboveTheWidthIsRefused) {
  CliSandbox s;
  std::string q(32, '\x01');
  q[7] = '\x05';
  s.put("t.scale.npy", npy_bytes("|u1", "(1, 1)", std::string(1, char(127))));
  s.put("keep.npy", "earlier output");
  for (const char* fmt : {"e2m3", "e3m2"}) {
    s.put("t.qdata.npy", npy_bytes("|u1", "(1, 32)", q));
    ASSERT_EQ(s.mxsim(std::string("dequantize --elem-dtype ") + fmt + " t.qdata.npy t.scale.npy -o ok.npy").rc, 0);
    std::string bad = q;
    bad[7] = '\xC5';
    bad[9] = '\x40';
    s.put("t.qdata.npy", npy_bytes("|u1", "(1, 32)", bad));
    const auto r = s.mxsim(std::string("dequantize --elem-dtype ") + fmt + " t.qdata.npy t.scale.npy -o keep.npy");
    EXPECT_EQ(r.rc, 1) << fmt;
    EXPECT_NE(r.err.find("tensor 't.qdata' (U8) of "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("t.qdata.npy: code 7 is the byte 0xC5, which is no " + std::string(fmt)), std::string::npos)
        << r.err;
    EXPECT_EQ(s.slurp_text("keep.npy"), "earlier output");
  }
  s.put("x.npy", npy_bytes("<f4", "(1, 32)", f32s(row())));
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp8 --elem e3m2 x.npy -o p").rc, 0);  // p.data.npy: one code per byte
  std::string npy = s.slurp_text("p.data.npy");
  ASSERT_GT(npy.size(), 32u);
  npy[npy.size() - 32 + 3] = char(npy[npy.size() - 32 + 3] | 0x80);  // code 3 of the 32 (the data ends the file)
  s.put("p.data.npy", npy);
  const auto r = s.mxsim("dequantize p.meta.json -o keep.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("p.data.npy: code 3 is the byte 0x"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no e3m2 (float6_e3m2fn) code"), std::string::npos) << r.err;
  EXPECT_EQ(s.slurp_text("keep.npy"), "earlier output");
}
