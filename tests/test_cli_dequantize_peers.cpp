// `mxsim dequantize` and `mxsim gemm --a/--b` on the NVFP4, FP8 (Float8Tensor,
// Float8TrainingTensor) and FP8-blockwise layouts of torchao and
// TransformerEngine, written as safetensors files with
// the dtypes those libraries' tensors have: values worked out by hand from the
// layouts (mxsim/layouts.hpp) and docs/numerics.md §2.4, §5.2; padding bytes
// poisoned (0xFF, NaN). Then the misreads these files used to allow: scale
// tensors whose dtype is not the layout's scale kind, companion tensors no pair
// reads, element formats that contradict the dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "mxsim/io/npy.hpp"
#include "mxsim/io/safetensors.hpp"

using mxsim::io::DType;
using mxsim::io::RawTensor;
using mxsim::test::CliSandbox;
namespace fs = std::filesystem;

namespace {

constexpr float kE2M1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};

std::vector<uint8_t> f32b(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
std::vector<uint8_t> pack(const std::vector<uint8_t>& codes) {
  std::vector<uint8_t> p(codes.size() / 2);
  for (size_t i = 0; i < p.size(); ++i) p[i] = uint8_t(codes[2 * i] | codes[2 * i + 1] << 4);
  return p;
}
uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
std::vector<float> read_values(const fs::path& p) { return mxsim::io::to_f32(mxsim::io::read_npy(p)); }
void put_st(const CliSandbox& s, const std::string& name, const std::vector<RawTensor>& ts) {
  mxsim::io::write_safetensors(s.p / name, ts, {});
}
bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

/// Codes 0..15 cycling over [rows, K], with the E2M1 values they decode to.
std::vector<uint8_t> cycle_codes(size_t n) {
  std::vector<uint8_t> c(n);
  for (size_t i = 0; i < n; ++i) c[i] = uint8_t(i % 16);
  return c;
}

}  // namespace

// torchao NVFP4Tensor as its tensors are named (qdata U8 [2, 16], _scale_e4m3
// F8_E4M3 [2, 2], _per_tensor_scale F32 [1]): element = e2m1(code) * s * 0.5.
// Scales: row 0 1.0 (0x38), 2.0 (0x40); row 1 0.5 (0x30), 1.5 (0x3C). The
// activation scale beside it is reported, not used.
TEST(CliDequantizePeers, TorchaoNvfp4HandValues) {
  CliSandbox s;
  const auto codes = cycle_codes(2 * 32);
  put_st(s, "t.safetensors",
         {{"w.qdata", DType::U8, {2, 16}, pack(codes)},
          {"w._scale_e4m3", DType::F8_E4M3, {2, 2}, {0x38, 0x40, 0x30, 0x3C}},
          {"w._per_tensor_scale", DType::F32, {1}, f32b({0.5f})},
          {"w._act_per_tensor_scale", DType::F32, {1}, f32b({3.0f})}});
  const auto r = s.mxsim("dequantize t.safetensors -o w.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tensors"][0]["layout"], "torchao-nvfp4");
  EXPECT_TRUE(has(r.err, "w._act_per_tensor_scale") && has(r.err, "activation")) << r.err;
  const float sv[2][2] = {{1, 2}, {0.5f, 1.5f}};
  const auto v = read_values(s.p / "w.npy");
  ASSERT_EQ(v.size(), 64u);
  for (size_t i = 0; i < 64; ++i)
    EXPECT_EQ(bits(v[i]), bits(kE2M1[codes[i]] * sv[i / 32][(i % 32) / 16] * 0.5f)) << i;
}

// The audit's misread: a torchao pair whose `.scale` is F8_E4M3 (an NVFP4
// block scale) was decoded as E8M0 bytes (0x38 -> 2^-71). It is NVFP4 now;
// without a per-tensor scale, single-level scaling (said in a note).
TEST(CliDequantizePeers, TorchaoE4m3ScaleIsNvfp4NotE8m0) {
  CliSandbox s;
  std::vector<uint8_t> codes(16, 2);  // 1.0
  put_st(s, "t.safetensors",
         {{"w.qdata", DType::U8, {1, 8}, pack(codes)}, {"w.scale", DType::F8_E4M3, {1, 1}, {0x40}}});
  const auto r = s.mxsim("dequantize t.safetensors -o w.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tensors"][0]["layout"], "torchao-nvfp4");
  EXPECT_TRUE(has(r.err, "single-level")) << r.err;
  EXPECT_EQ(read_values(s.p / "w.npy"), std::vector<float>(16, 2.0f));
}

// TE NVFP4Tensor rowwise: _rowwise_data U8 [4, 16] (K = 32),
// _rowwise_scale_inv U8 [128, 4] (padding 0xFF), _amax_rowwise = 10752
// (S_dec = 4). Scales row r: 2^(r - 1) for block 0 (E4M3 (6 + r) << 3), 1.0
// for block 1. The columnwise copy beside it is reported as not decoded.
TEST(CliDequantizePeers, TeNvfp4RowwiseHandValuesAndColumnwiseNoted) {
  CliSandbox s;
  const size_t M = 4, K = 32;
  const auto codes = cycle_codes(M * K);
  std::vector<uint8_t> sc(128 * 4, 0xFF);
  for (size_t r = 0; r < M; ++r) sc[r * 4] = uint8_t((6 + r) << 3), sc[r * 4 + 1] = 0x38;
  put_st(s, "te.safetensors",
         {{"l.weight._rowwise_data", DType::U8, {M, K / 2}, pack(codes)},
          {"l.weight._rowwise_scale_inv", DType::U8, {128, 4}, sc},
          {"l.weight._amax_rowwise", DType::F32, {1}, f32b({10752.0f})},
          {"l.weight._columnwise_data", DType::U8, {K, M / 2}, std::vector<uint8_t>(K * M / 2, 0)},
          {"l.weight._columnwise_scale_inv", DType::U8, {128, 4}, std::vector<uint8_t>(512, 0x38)},
          {"l.weight._amax_columnwise", DType::F32, {1}, f32b({1.0f})}});
  const auto r = s.mxsim("dequantize te.safetensors -o w.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["tensors"].size(), 1u);
  EXPECT_EQ(j["tensors"][0]["layout"], "te-nvfp4-rowwise");
  EXPECT_EQ(j["tensors"][0]["shape"], nlohmann::json::array({4, 32}));
  for (const char* t : {"l.weight._columnwise_data", "l.weight._columnwise_scale_inv", "l.weight._amax_columnwise"})
    EXPECT_TRUE(has(r.err, std::string("'") + t + "'") && has(r.err, "columnwise copy")) << t << ": " << r.err;
  const auto v = read_values(s.p / "w.npy");
  ASSERT_EQ(v.size(), M * K);
  for (size_t i = 0; i < v.size(); ++i) {
    const size_t row = i / K, blk = (i % K) / 16;
    EXPECT_EQ(bits(v[i]), bits(kE2M1[codes[i]] * (blk ? 1.0f : std::ldexp(1.0f, int(row) - 1)) * 4.0f)) << i;
  }
  // The columnwise copy on request: codes 0 -> zeros of shape [M, K] = [4, 32].
  const auto c = s.mxsim("dequantize --layout te-nvfp4-columnwise te.safetensors -o c.npy");
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_EQ(mxsim::io::read_npy(s.p / "c.npy").shape, (std::vector<size_t>{4, 32}));
}

// TE NVFP4 without its amax cannot be decoded: refused, naming the tensor it needs.
// The same file shape was once read as MXFP8 E4M3 with E8M0 scales, rc 0.
TEST(CliDequantizePeers, TeNvfp4WithoutAmaxIsRefused) {
  CliSandbox s;
  put_st(s, "te.safetensors",
         {{"x._rowwise_data", DType::U8, {4, 16}, std::vector<uint8_t>(64, 0x22)},
          {"x._rowwise_scale_inv", DType::F8_E4M3, {128, 4}, std::vector<uint8_t>(512, 0x38)}});
  const auto r = s.mxsim("dequantize te.safetensors -o x.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(has(r.err, "x._amax_rowwise")) << r.err;
  EXPECT_FALSE(fs::exists(s.p / "x.npy"));
}

// TE Float8BlockwiseQTensor with F32 scale_inv: 1 x 128 rowwise, data [2, 256]
// U8 (E4M3 0x38 = 1.0, 0xB8 = -1 at odd positions), scale_inv [2, 4]
// (column m = row m's scales; columns 2, 3 NaN): row m block kb = 2^(m + kb).
// This file once failed with "TE MXFP8 scale_inv must hold one byte".
TEST(CliDequantizePeers, TeBlockwiseHandValuesNanPadding) {
  CliSandbox s;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint8_t> d(2 * 256);
  for (size_t i = 0; i < d.size(); ++i) d[i] = i % 2 ? 0xB8 : 0x38;
  put_st(s, "b.safetensors",
         {{"g._rowwise_data", DType::U8, {2, 256}, d},
          {"g._rowwise_scale_inv", DType::F32, {2, 4}, f32b({1, 2, nan, nan, 2, 4, nan, nan})}});
  auto r = s.mxsim("dequantize b.safetensors -o g.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tensors"][0]["layout"], "te-blockwise-rowwise");
  const auto v = read_values(s.p / "g.npy");
  ASSERT_EQ(v.size(), 512u);
  for (size_t i = 0; i < v.size(); ++i)
    EXPECT_EQ(v[i], (i % 2 ? -1.0f : 1.0f) * std::ldexp(1.0f, int(i / 256 + (i % 256) / 128))) << i;
  // Forcing 128 x 128 tiles on this shape: TE's shape for them is [1, 4], named.
  r = s.mxsim("dequantize --block-scaling-dim 2 b.safetensors");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(has(r.err, "[1, 4]")) << r.err;
  r = s.mxsim("dequantize --block-scaling-dim 3 b.safetensors");
  EXPECT_EQ(r.rc, 2);
}

// fp8-chunk128 (§5.2 class 3) on TE blockwise operands: A 1 x 128 [1, 256],
// scale_inv [2, 4] = (0.5; 2) in column 0, NaN elsewhere; B 128 x 128 [1, 256],
// scale_inv [1, 4] = 0.25, 4, NaN, NaN. All codes 1.0: each chunk's Q = 128,
// acc = fmaf(128, 0.5 * 0.25, 0) = 16, then fmaf(128, 2 * 4, 16) = 1040.
TEST(CliDequantizePeers, GemmOnTeBlockwiseOperands) {
  CliSandbox s;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  put_st(s, "a.safetensors",
         {{"x._rowwise_data", DType::U8, {1, 256}, std::vector<uint8_t>(256, 0x38)},
          {"x._rowwise_scale_inv", DType::F32, {2, 4}, f32b({0.5f, nan, nan, nan, 2, nan, nan, nan})}});
  put_st(s, "b.safetensors",
         {{"w._rowwise_data", DType::U8, {1, 256}, std::vector<uint8_t>(256, 0x38)},
          {"w._rowwise_scale_inv", DType::F32, {1, 4}, f32b({0.25f, 4, nan, nan})}});
  const auto r = s.mxsim("gemm --a a.safetensors --b b.safetensors -o y.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["class"], "fp8-chunk128");
  const auto y = read_values(s.p / "y.npy");
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(bits(y[0]), bits(1040.0f));
}

// Scale tensors whose dtype is not the layout's scale kind are refused, naming
// the tensor and what the layout needs; nothing is written.
TEST(CliDequantizePeers, ScaleDtypesMustMatchTheScaleKind) {
  CliSandbox s;
  struct Bad {
    std::vector<RawTensor> ts;
    std::string args, want;
  };
  const std::vector<uint8_t> q32(32, 0x38);
  const Bad cases[] = {
      // torchao MXTensor scale typed F8_E5M2: not E8M0 bytes (an F32 one is a Float8Tensor, tested below).
      {{{"a.qdata", DType::F8_E4M3, {1, 32}, q32}, {"a.scale", DType::F8_E5M2, {1, 1}, {127}}}, "",
       "tensor 'a.scale' is F8_E5M2: the torchao MXTensor layout needs E8M0 scale bytes"},
      // --layout torchao-float8 names the Float8Tensor's F32 scale it needs.
      {{{"f.qdata", DType::F8_E4M3, {1, 32}, q32}, {"f.scale", DType::U8, {1, 1}, {127}}}, "--layout torchao-float8",
       "tensor 'f.scale': torchao Float8Tensor scale must be F32, not U8"},
      // TE MXFP8 scale typed F8_E5M2.
      {{{"b._rowwise_data", DType::F8_E4M3, {1, 32}, q32}, {"b._rowwise_scale_inv", DType::F8_E5M2, {128, 4}, std::vector<uint8_t>(512, 127)}},
       "", "tensor 'b._rowwise_scale_inv' is F8_E5M2: the TE MXFP8Tensor layout needs E8M0"},
      // NVFP4 scales typed E8M0.
      {{{"c.qdata", DType::U8, {1, 8}, std::vector<uint8_t>(8, 0)}, {"c._scale_e4m3", DType::F8_E8M0, {1, 1}, {127}}}, "",
       "tensor 'c._scale_e4m3' is F8_E8M0: the torchao NVFP4Tensor layout needs UE4M3"},
      // Codes typed F8_E5M2 against --elem-dtype e4m3.
      {{{"d.qdata", DType::F8_E5M2, {1, 32}, q32}, {"d.scale", DType::U8, {1, 1}, {127}}}, "--elem-dtype e4m3",
       "tensor 'd.qdata' is F8_E5M2 (e5m2) but --elem-dtype says e4m3"},
      // NVFP4 codes must be packed E2M1.
      {{{"e.qdata", DType::F8_E4M3, {1, 16}, std::vector<uint8_t>(16, 0)}, {"e._scale_e4m3", DType::F8_E4M3, {1, 1}, {0x38}}},
       "", "holds packed E2M1 codes"},
  };
  int n = 0;
  for (const auto& c : cases) {
    const std::string f = "bad" + std::to_string(n++) + ".safetensors";
    put_st(s, f, c.ts);
    const auto r = s.mxsim("dequantize " + c.args + " " + f + " -o out.npy");
    EXPECT_EQ(r.rc, 1) << f << ": " << r.err;
    EXPECT_TRUE(has(r.err, c.want)) << f << ": " << r.err;
    EXPECT_FALSE(fs::exists(s.p / "out.npy")) << f;
  }
  // mxsim's own layout: the metadata says scale_kind e8m0, the scale is retyped F8_E4M3.
  s.put("x.npy", mxsim::test::npy_bytes("<f4", "(1, 32)", std::string(128, '\0')));
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp8 x.npy -o q.safetensors").rc, 0);
  auto f = mxsim::io::read_safetensors(s.p / "q.safetensors");
  for (auto& t : f.tensors)
    if (t.name == "x.scale") t.dtype = DType::F8_E4M3;
  mxsim::io::write_safetensors(s.p / "q2.safetensors", f.tensors, f.metadata);
  const auto r = s.mxsim("dequantize q2.safetensors -o out.npy");
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_TRUE(has(r.err, "tensor 'x.scale' is F8_E4M3: the mxsim (scale_kind e8m0) layout needs E8M0")) << r.err;
}

// Tensors no pair reads are named in a note (text and --json), never dropped
// silently; --scale-layout blocked on inputs that have no swizzled form is a
// usage error rather than a no-op.
TEST(CliDequantizePeers, UnusedTensorsAreNotedAndBlockedNeedsATakingLayout) {
  CliSandbox s;
  put_st(s, "m.safetensors",
         {{"w.qdata", DType::F8_E4M3, {1, 32}, std::vector<uint8_t>(32, 0x38)},
          {"w.scale", DType::U8, {1, 1}, {128}},
          {"bias", DType::F32, {2}, f32b({1, 2})}});
  auto r = s.mxsim("dequantize m.safetensors -o w.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  bool noted = false;
  for (const auto& n : j["notes"]) noted = noted || has(n.get<std::string>(), "'bias' (F32 [2]): not part of any");
  EXPECT_TRUE(noted) << r.out;
  EXPECT_EQ(read_values(s.p / "w.npy"), std::vector<float>(32, 2.0f));
  put_st(s, "te.safetensors",
         {{"x._rowwise_data", DType::F8_E4M3, {1, 32}, std::vector<uint8_t>(32, 0x38)},
          {"x._rowwise_scale_inv", DType::U8, {128, 4}, std::vector<uint8_t>(512, 127)}});
  r = s.mxsim("dequantize --scale-layout blocked te.safetensors");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(has(r.err, "te-rowwise")) << r.err;
}

// torchao Float8Tensor, per row, auto-detected by its F32 scale beside an F8
// qdata (torchao/quantization/quantize_/workflows/float8/float8_tensor.py):
// qdata F8_E4M3 [2, 4] codes 1 (0x38), 2 (0x40), 5 (0x4A), -3 (0xC4); 0.5
// (0x30), 2^-9 (0x01), 448 (0x7E), -0 (0x80); scale F32 [2, 1] = 2, 0.5:
// element = code * scale, exact (powers of two): 2, 4, 10, -6; 0.25, 2^-10, 224, -0.
// Such a file was once read as an MXTensor and refused ("the torchao MXTensor
// layout needs E8M0 scale bytes"); an E8M0 scale beside the same qdata is
// still an MXTensor.
TEST(CliDequantizePeers, TorchaoFloat8TensorPerRowNotMxTensor) {
  CliSandbox s;
  put_st(s, "f.safetensors",
         {{"w.qdata", DType::F8_E4M3, {2, 4}, {0x38, 0x40, 0x4A, 0xC4, 0x30, 0x01, 0x7E, 0x80}},
          {"w.scale", DType::F32, {2, 1}, f32b({2.0f, 0.5f})}});
  auto r = s.mxsim("dequantize f.safetensors -o w.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tensors"][0]["layout"], "torchao-float8");
  EXPECT_EQ(j["tensors"][0]["elem"], "e4m3");
  EXPECT_EQ(j["tensors"][0]["shape"], nlohmann::json::array({2, 4}));
  EXPECT_FALSE(has(r.err, "MXTensor")) << r.err;
  const auto v = read_values(s.p / "w.npy");
  const std::vector<float> want = {2, 4, 10, -6, 0.25f, std::ldexp(1.0f, -10), 224, -0.0f};
  ASSERT_EQ(v.size(), want.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(bits(v[i]), bits(want[i])) << i;
  // The same qdata with an E8M0 scale (127 = 2^0 per block of 4): the MXTensor layout.
  put_st(s, "m.safetensors",
         {{"w.qdata", DType::F8_E4M3, {2, 4}, {0x38, 0x40, 0x4A, 0xC4, 0x30, 0x01, 0x7E, 0x80}},
          {"w.scale", DType::F8_E8M0, {2, 1}, {127, 128}}});
  r = s.mxsim("dequantize --block-size 4 m.safetensors -o m.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tensors"][0]["layout"], "torchao");
  EXPECT_EQ(read_values(s.p / "m.npy")[4], 1.0f);  // 0.5 * 2^(128 - 127)
  // A scale shape that fits no granularity: exit 1 naming both shapes.
  put_st(s, "bad.safetensors",
         {{"w.qdata", DType::F8_E4M3, {4, 6}, std::vector<uint8_t>(24, 0x38)},
          {"w.scale", DType::F32, {3, 2}, f32b({1, 1, 1, 1, 1, 1})}});
  r = s.mxsim("dequantize bad.safetensors -o bad.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(has(r.err, "scale shape [3, 2] does not fit qdata shape [4, 6]")) << r.err;
  EXPECT_FALSE(fs::exists(s.p / "bad.npy"));
}

// Float8Tensor blockwise with E5M2 codes stored as U8 (the element format then
// needs --elem-dtype: usage error without it). qdata [2, 4] codes 1 (0x3C), 3
// (0x42), +Inf (0x7C), -1 (0xBC) in each row; scale [1, 2] = 0.25, 3 (blocks
// 2 x 2): 0.25, 0.75, +Inf, -3 per row.
TEST(CliDequantizePeers, TorchaoFloat8TensorBlockwiseE5m2) {
  CliSandbox s;
  const std::vector<uint8_t> q = {0x3C, 0x42, 0x7C, 0xBC, 0x3C, 0x42, 0x7C, 0xBC};
  put_st(s, "f.safetensors", {{"w.qdata", DType::U8, {2, 4}, q}, {"w.scale", DType::F32, {1, 2}, f32b({0.25f, 3})}});
  auto r = s.mxsim("dequantize f.safetensors -o w.npy");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(has(r.err, "--elem-dtype")) << r.err;
  r = s.mxsim("dequantize --elem-dtype float8_e5m2 f.safetensors -o w.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tensors"][0]["elem"], "e5m2");
  const std::vector<float> row = {0.25f, 0.75f, std::numeric_limits<float>::infinity(), -3};
  const auto v = read_values(s.p / "w.npy");
  ASSERT_EQ(v.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(bits(v[i]), bits(row[i % 4])) << i;
}

// torchao Float8TrainingTensor (torchao/float8/float8_training_tensor.py):
// _data F8_E4M3 [1, 3] codes 5 (0x4A), 1 (0x38), 3 (0x44), tensorwise _scale
// F32 0-D = 3; hp = _data / _scale, one RNE division:
//   5/3: 5 * 2^23 / 3 = 13981013.33 -> 13981013 * 2^-23 = 0x3FD55555
//     (5 * fl32(1/3) would be 0x3FD55556: fl32(1/3) = 11184811 * 2^-25 and
//     5 * 11184811 / 4 = 13981013.75 -> 13981014);
//   1/3: round(2^25 / 3) = 11184811 * 2^-25 = 0x3EAAAAAB; 3/3 = 1.
// A TE Float8Tensor beside it (._data + ._scale_inv) stays te-tensor, and
// --layout torchao-float8 picks neither (the layout names are exact).
TEST(CliDequantizePeers, TorchaoFloat8TrainingTensorDivides) {
  CliSandbox s;
  put_st(s, "t.safetensors",
         {{"x._data", DType::F8_E4M3, {1, 3}, {0x4A, 0x38, 0x44}},
          {"x._scale", DType::F32, {}, f32b({3.0f})},
          {"y._data", DType::F8_E4M3, {1, 1}, {0x4A}},
          {"y._scale_inv", DType::F32, {1}, f32b({3.0f})}});
  auto r = s.mxsim("dequantize t.safetensors -o out.safetensors --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["tensors"].size(), 2u);
  EXPECT_EQ(j["tensors"][0]["name"], "x");
  EXPECT_EQ(j["tensors"][0]["layout"], "torchao-float8-training");
  EXPECT_EQ(j["tensors"][1]["layout"], "te-tensor");
  const auto f = mxsim::io::read_safetensors(s.p / "out.safetensors");
  std::vector<float> x, y;
  for (const auto& t : f.tensors) (t.name == "x" ? x : y) = mxsim::io::to_f32(t);
  ASSERT_EQ(x.size(), 3u);
  EXPECT_EQ(bits(x[0]), 0x3FD55555u);
  EXPECT_EQ(bits(x[1]), 0x3EAAAAABu);
  EXPECT_EQ(bits(x[2]), 0x3F800000u);
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0], 15.0f);  // TE multiplies by scale_inv: 5 * 3
  r = s.mxsim("dequantize --layout torchao-float8-training t.safetensors --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tensors"].size(), 1u);
  r = s.mxsim("dequantize --layout torchao-float8 t.safetensors");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(has(r.err, "no codes + scales pair found (torchao-float8)")) << r.err;
  // Axiswise with a shape that is not: a block divisor is refused, naming both shapes.
  put_st(s, "b.safetensors",
         {{"z._data", DType::F8_E4M3, {2, 4}, std::vector<uint8_t>(8, 0x38)}, {"z._scale", DType::F32, {1, 2}, f32b({1, 2})}});
  r = s.mxsim("dequantize b.safetensors");
  EXPECT_EQ(r.rc, 1);
  EXPECT_TRUE(has(r.err, "_scale shape [1, 2] does not fit _data shape [2, 4]")) << r.err;
}

// mxsim gemm on torchao FP8 operands (fp8-chunk128, numerics.md §5.2). A: a
// Float8TrainingTensor X [1, 1] = 5 (0x4A) over _scale 3; B: a Float8Tensor W
// [1, 1] = 1 (0x38) with scale 1. torchao's matmul passes _scale.reciprocal():
// scale_inv = fl32(1/3), so y = fmaf(5, fl32(fl32(1/3) * 1), 0) = fl32(5 *
// fl32(1/3)) = 0x3FD55556 (derived above), which the note says. Per-row
// Float8Tensor operands: X [2, 2] codes 1 with scales [2, 1] = 2, 3; W [1, 2]
// codes 1, 2 with scale [1, 1] = 0.5: each row's Q = 3; y = 3 * 1, 3 * 1.5.
TEST(CliDequantizePeers, GemmOnTorchaoFloat8Operands) {
  CliSandbox s;
  put_st(s, "a.safetensors", {{"x._data", DType::F8_E4M3, {1, 1}, {0x4A}}, {"x._scale", DType::F32, {}, f32b({3})}});
  put_st(s, "b.safetensors", {{"w.qdata", DType::F8_E4M3, {1, 1}, {0x38}}, {"w.scale", DType::F32, {1, 1}, f32b({1})}});
  auto r = s.mxsim("gemm --a a.safetensors --b b.safetensors -o y.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["class"], "fp8-chunk128");
  EXPECT_EQ(j["a"]["layout"], "torchao-float8-training");
  EXPECT_EQ(j["b"]["layout"], "torchao-float8");
  bool noted = false;
  for (const auto& n : j["notes"]) noted = noted || has(n.get<std::string>(), "scale_inv = fl32(1 / s)");
  EXPECT_TRUE(noted) << r.out;
  auto y = read_values(s.p / "y.npy");
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(bits(y[0]), 0x3FD55556u);

  put_st(s, "c.safetensors",
         {{"x.qdata", DType::F8_E4M3, {2, 2}, std::vector<uint8_t>(4, 0x38)}, {"x.scale", DType::F32, {2, 1}, f32b({2, 3})}});
  put_st(s, "d.safetensors", {{"w.qdata", DType::F8_E4M3, {1, 2}, {0x38, 0x40}}, {"w.scale", DType::F32, {1, 1}, f32b({0.5f})}});
  r = s.mxsim("gemm --a c.safetensors --b d.safetensors -o y2.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  y = read_values(s.p / "y2.npy");
  ASSERT_EQ(y.size(), 2u);
  EXPECT_EQ(bits(y[0]), bits(3.0f));
  EXPECT_EQ(bits(y[1]), bits(4.5f));
}
