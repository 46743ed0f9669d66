// `mxsim gemm --a --b`: one GEMM on operands given as files (torchao, TE, mxsim
// layouts and BF16 arrays), against products derived by hand from the
// contract (docs/numerics.md §5.2, §5.3), bit for bit; one random problem
// against the emulator API; errors that name the problem and write nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "mxsim/bits.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/io/npy.hpp"
#include "mxsim/io/safetensors.hpp"
#include "mxsim/quant_spec.hpp"

using mxsim::test::CliSandbox;
using mxsim::test::npy_bytes;
namespace fs = std::filesystem;

namespace {

std::string f32s(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }
std::string u8s(const std::vector<uint8_t>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size()); }
std::string shape2(size_t a, size_t b) { return "(" + std::to_string(a) + ", " + std::to_string(b) + ")"; }

/// E2M1 codes (one per element, row-major [rows, K]) packed as torchao's
/// float4_e2m1fn_x2: element 2i in the low nibble, 2i+1 in the high nibble.
std::vector<uint8_t> pack_e2m1(const std::vector<uint8_t>& codes) {
  std::vector<uint8_t> b(codes.size() / 2);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(codes[2 * i] | codes[2 * i + 1] << 4);
  return b;
}

/// The hand-derived mx-exact problem below (K = 96): A [2, 96] and B [3, 96]
/// as E2M1 codes, one per element, and their E8M0 scales [rows, 3].
struct Mxfp4ByHand {
  static constexpr size_t K = 96;
  std::vector<uint8_t> a = std::vector<uint8_t>(2 * K, 0), b = std::vector<uint8_t>(3 * K, 0);
  std::vector<uint8_t> a_scale{130, 125, 127, 127, 109, 109}, b_scale{127, 127, 127, 127, 130, 127, 127, 0xFF, 127};
  Mxfp4ByHand() {
    a[0] = 7, a[1] = 2, a[32] = 0xD;
    for (size_t k = 0; k < 32; ++k) a[K + k] = 2;
    a[K + 63] = 1, a[K + 95] = 1;
    for (size_t k = 0; k < K; ++k) b[k] = 2;
    b[K + 0] = 0xA, b[K + 33] = 7;
  }
};

std::vector<float> read_f32(const fs::path& p, std::vector<size_t>* shape = nullptr) {
  const auto t = mxsim::io::read_npy(p);
  EXPECT_EQ(t.dtype, mxsim::io::DType::F32);
  if (shape) *shape = t.shape;
  std::vector<float> v(t.bytes.size() / 4);
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}
uint32_t bits(float f) { return mxsim::f32_bits(f); }

}  // namespace

// mx-exact (§5.2 class 1) on torchao MXFP4 operands, K = 96 (three blocks of 32).
// E2M1 codes: 1 = 0.5, 2 = 1, 5 = 3, 7 = 6, 0xA = -1, 0xD = -3; E8M0 byte e is 2^(e - 127).
//   A row 0: a0 = 6, a1 = 1 (scale 2^3); a32 = -3 (scale 2^-2); block 2 zero.
//   A row 1: a0..a31 = 1 (scale 1); a63 = 0.5 and a95 = 0.5, both with scale 2^-18 (= 2^-19 each).
//   B row 0: all ones (scale 1). B row 1: b0 = -1 (scale 1), b33 = 6 (scale 2^3).
//   B row 2: zero codes; block 1 has scale 0xFF (NaN).
// Y[0][0] = (6 + 1) * 8 + (-3) * 2^-2 = 55.25; Y[0][1] = 6 * 8 * -1 = -48; Y[*][2] = NaN.
// Y[1][0]: block 0 gives 32; block 1 adds 2^-19, half an ulp of 32 (ulp 2^-18): a tie, RNE keeps 32;
// block 2 the same again, so 32, where one rounding of the exact sum would give 32 + 2^-18.
// Y[1][1] = 1 * -1 = -1.
TEST(CliGemmOperands, MxExactTorchaoMxfp4ByHand) {
  CliSandbox s;
  const Mxfp4ByHand op;
  const size_t K = op.K;
  s.put("x.qdata.npy", npy_bytes("|u1", shape2(2, K / 2), u8s(pack_e2m1(op.a))));
  s.put("x.scale.npy", npy_bytes("|u1", shape2(2, 3), u8s(op.a_scale)));
  s.put("w.qdata.npy", npy_bytes("|u1", shape2(3, K / 2), u8s(pack_e2m1(op.b))));
  s.put("w.scale.npy", npy_bytes("|u1", shape2(3, 3), u8s(op.b_scale)));
  const auto r = s.mxsim("gemm --elem-dtype float4_e2m1fn_x2 --a x.qdata.npy --a x.scale.npy --b w.qdata.npy "
                         "--b w.scale.npy -o y.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<size_t> shape;
  const auto y = read_f32(s.p / "y.npy", &shape);
  EXPECT_EQ(shape, (std::vector<size_t>{2, 3}));
  EXPECT_EQ(bits(y[0]), bits(55.25f));
  EXPECT_EQ(bits(y[1]), bits(-48.0f));
  EXPECT_EQ(bits(y[2]), 0x7FC00000u);  // canonical NaN (§5.4)
  EXPECT_EQ(bits(y[3]), bits(32.0f));
  EXPECT_EQ(bits(y[4]), bits(-1.0f));
  EXPECT_EQ(bits(y[5]), 0x7FC00000u);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["class"], "mx-exact");
  EXPECT_EQ(j["shape"], (nlohmann::json{2, 3}));
  EXPECT_EQ(j["k"], K);
  EXPECT_EQ(j["a"]["layout"], "torchao");
  EXPECT_EQ(j["nan"], 2);
}

// The same operands with torchao's scales in the swizzled layout of
// block-scaled GEMMs (--scale-layout blocked: [rows, blocks] padded to 128 x 4
// tiles, byte (r % 32) * 16 + (r % 128 / 32) * 4 + c % 4 of tile (r / 128,
// c / 4), the cuBLAS rule), every padding byte 0xFF (a NaN scale): the same
// products, so padding is never read.
TEST(CliGemmOperands, MxExactTorchaoBlockedScalesIgnorePoisonedPadding) {
  CliSandbox s;
  const Mxfp4ByHand op;
  const size_t K = op.K;
  const auto blocked = [](size_t rows, const std::vector<uint8_t>& plain) {  // plain [rows, 3]
    std::vector<uint8_t> t(512, 0xFF);
    for (size_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < 3; ++c) t[(r % 32) * 16 + (r % 128 / 32) * 4 + c] = plain[r * 3 + c];
    return t;
  };
  s.put("x.qdata.npy", npy_bytes("|u1", shape2(2, K / 2), u8s(pack_e2m1(op.a))));
  s.put("x.scale.npy", npy_bytes("|u1", "(512,)", u8s(blocked(2, op.a_scale))));
  s.put("w.qdata.npy", npy_bytes("|u1", shape2(3, K / 2), u8s(pack_e2m1(op.b))));
  s.put("w.scale.npy", npy_bytes("|u1", "(512,)", u8s(blocked(3, op.b_scale))));
  const auto r = s.mxsim("gemm --elem-dtype float4_e2m1fn_x2 --scale-layout blocked --a x.qdata.npy --a x.scale.npy "
                         "--b w.qdata.npy --b w.scale.npy -o y.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto y = read_f32(s.p / "y.npy");
  ASSERT_EQ(y.size(), 6u);
  EXPECT_EQ(bits(y[0]), bits(55.25f));
  EXPECT_EQ(bits(y[1]), bits(-48.0f));
  EXPECT_EQ(bits(y[2]), 0x7FC00000u);  // B row 2's own NaN scale, not padding
  EXPECT_EQ(bits(y[3]), bits(32.0f));
  EXPECT_EQ(bits(y[4]), bits(-1.0f));
  EXPECT_EQ(bits(y[5]), 0x7FC00000u);
  EXPECT_EQ(nlohmann::json::parse(r.out)["nan"], 2);
}

// mx-f13 (§5.2 class 2, §5.3 with F = 13): A from TransformerEngine (MXFP8Tensor rowwise, padded
// scale_inv [128, 4]), B from torchao, E4M3, one block of 32, all scales 2^0.
// E4M3 codes: 0x58 = 16, 0x24 = 0.1875, 0x28 = 0.25, 0x20 = 0.125.
//   a = [16, 0.1875, 0...]; b0 = [16, 0.25, 0...]; b1 = [16, 0.125, 0...].
// Products: 256 (e = 8) and 3 * 2^-6, resp. 3 * 2^-7. E = 8, every term truncated toward zero to
// a multiple of 2^(8 - 13) = 2^-5: 3 * 2^-6 -> 2^-5, 3 * 2^-7 -> 0. So Y = [256 + 2^-5, 256],
// where the exact dots 256.046875 and 256.0234375 are both FP32 values.
TEST(CliGemmOperands, MxF13FusedGroupTruncatesTeAgainstTorchao) {
  CliSandbox s;
  std::vector<uint8_t> a(32, 0), b(64, 0), a_scale(128 * 4, 127);
  a[0] = 0x58, a[1] = 0x24;
  b[0] = 0x58, b[1] = 0x28, b[32] = 0x58, b[33] = 0x20;
  s.put("x._rowwise_data.npy", npy_bytes("|u1", shape2(1, 32), u8s(a)));
  s.put("x._rowwise_scale_inv.npy", npy_bytes("|u1", shape2(128, 4), u8s(a_scale)));
  s.put("w.qdata.npy", npy_bytes("|u1", shape2(2, 32), u8s(b)));
  s.put("w.scale.npy", npy_bytes("|u1", shape2(2, 1), u8s({127, 127})));
  for (const char* impl : {"fast", "reference"}) {
    const auto r = s.mxsim(std::string("gemm --impl ") + impl + " --elem-dtype e4m3 --a x._rowwise_data.npy --a "
                           "x._rowwise_scale_inv.npy --b w.qdata.npy --b w.scale.npy -o y.npy --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto y = read_f32(s.p / "y.npy");
    ASSERT_EQ(y.size(), 2u);
    EXPECT_EQ(bits(y[0]), bits(256.03125f)) << impl << " " << y[0];
    EXPECT_EQ(bits(y[1]), bits(256.0f)) << impl << " " << y[1];
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["class"], "mx-f13");
    EXPECT_EQ(j["a"]["layout"], "te-rowwise");
  }
  // Both operands in one safetensors file (a TE state dump, F8_E4M3 data: no --elem-dtype),
  // picked by name; B as TE rowwise too (scale_inv padded to [128, 4]).
  using mxsim::io::DType;
  const mxsim::io::RawTensor ts[] = {
      {"inp._rowwise_data", DType::F8_E4M3, {1, 32}, a},
      {"inp._rowwise_scale_inv", DType::U8, {128, 4}, a_scale},
      {"weight._rowwise_data", DType::F8_E4M3, {2, 32}, b},
      {"weight._rowwise_scale_inv", DType::U8, {128, 4}, a_scale}};
  mxsim::io::write_safetensors(s.p / "te.safetensors", {std::begin(ts), std::end(ts)});
  auto r = s.mxsim("gemm --a te.safetensors --b te.safetensors -o y.npy");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("A: the files hold several quantized tensors (inp, weight); pick one with --a-tensor"),
            std::string::npos) << r.err;
  r = s.mxsim("gemm --a te.safetensors --a-tensor inp --b te.safetensors --b-tensor weight -o y2.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto y = read_f32(s.p / "y2.npy");
  ASSERT_EQ(y.size(), 2u);
  EXPECT_EQ(bits(y[0]), bits(256.03125f));
  EXPECT_EQ(bits(y[1]), bits(256.0f));
}

// fp8-chunk128 (§5.2 class 3) on TE Float8Tensors: a = b = [256, 1, 1, ...] (E4M3 0x78 = 256,
// 0x38 = 1), K = 256, scale_inv 0.5 and 0.25. Chunk 0: the first k32 group holds 65536 (e = 16),
// so its ones truncate to multiples of 2^3, i.e. 0; the chained groups keep C = 65536 and drop
// their ones the same way: Q0 = 65536. Chunk 1: 128 ones, exact: Q1 = 128 (the H200's
// 65536 + 128, matrix-units-and-gpu.md §2). acc = fmaf(Q, 0.125, acc): 8192 + 16 = 8208.
// With --accumulate C = 1: 8193, then 8209. BF16 output: RNE(8209) with ulp 64 at 2^13 = 8192.
TEST(CliGemmOperands, Fp8ChunkTeFloat8TensorAccumulateAndBf16Out) {
  CliSandbox s;
  std::vector<uint8_t> v(256, 0x38);
  v[0] = 0x78;
  s.put("x._data.npy", npy_bytes("|u1", shape2(1, 256), u8s(v)));
  s.put("x._scale_inv.npy", npy_bytes("<f4", "(1,)", f32s({0.5f})));
  s.put("w._data.npy", npy_bytes("|u1", shape2(1, 256), u8s(v)));
  s.put("w._scale_inv.npy", npy_bytes("<f4", "(1,)", f32s({0.25f})));
  s.put("c.npy", npy_bytes("<f4", shape2(1, 1), f32s({1.0f})));
  const std::string ops = "gemm --a x._data.npy --a x._scale_inv.npy --b w._data.npy --b w._scale_inv.npy";
  auto r = s.mxsim(ops + " -o y.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["class"], "fp8-chunk128");
  EXPECT_EQ(bits(read_f32(s.p / "y.npy").at(0)), bits(8208.0f));
  r = s.mxsim(ops + " --accumulate c.npy -o y.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(bits(read_f32(s.p / "y.npy").at(0)), bits(8209.0f));
  r = s.mxsim(ops + " --accumulate c.npy --out-dtype bf16 -o yb.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto t = mxsim::io::read_npy(s.p / "yb.npy");
  EXPECT_EQ(t.dtype, mxsim::io::DType::BF16);
  ASSERT_EQ(t.bytes.size(), 2u);
  EXPECT_EQ(uint32_t(t.bytes[0]) | uint32_t(t.bytes[1]) << 8, bits(8192.0f) >> 16);
  // The initial output must be FP32 [M, N]: a wrong shape is an error, nothing written.
  s.put("c2.npy", npy_bytes("<f4", shape2(1, 2), f32s({1.0f, 2.0f})));
  r = s.mxsim(ops + " --accumulate c2.npy -o z.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("shape [1, 2], but the output is [1, 1]"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(s.p / "z.npy"));
}

// bf16-f25 (§5.2 class 4): BF16 operands, groups of 16 along K, C = the running accumulator,
// F = 25, RZ to FP32. a = [1, 1.5 * 2^-11, 0 ..., (k = 16) 0.5, 0 ...], b = [1, 2^-13, 0 ...,
// (k = 16) 0.5, 0 ...] (A as FP32 values, B as BF16 '<V2'). Group 0: 1 + 3 * 2^-25, E = 0, the
// term is a multiple of 2^-25, S = 1 + 0.75 ulp -> RZ 1. Group 1: C = 1, + 0.25 = 1.25.
// (RNE of the exact 1.25 + 3 * 2^-25 would be 1.25 + 2^-23.)
TEST(CliGemmOperands, Bf16F25ByHandAndNonBf16ValuesRefused) {
  CliSandbox s;
  std::vector<float> a(32, 0.0f), b(32, 0.0f);
  a[0] = 1, a[1] = std::ldexp(1.5f, -11), a[16] = 0.5f;
  b[0] = 1, b[1] = std::ldexp(1.0f, -13), b[16] = 0.5f;
  std::string bb;
  for (float f : b) {
    const uint32_t c = bits(f) >> 16;
    bb += char(c & 0xFF);
    bb += char(c >> 8);
  }
  s.put("x.npy", npy_bytes("<f4", shape2(1, 32), f32s(a)));
  s.put("w.npy", npy_bytes("<V2", shape2(1, 32), bb));
  auto r = s.mxsim("gemm --a x.npy --b w.npy -o y.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["class"], "bf16-f25");
  EXPECT_EQ(bits(read_f32(s.p / "y.npy").at(0)), bits(1.25f));
  // A value that is not a BF16 value (1 + 2^-10) is refused, not rounded.
  a[5] = 1.0f + std::ldexp(1.0f, -10);
  s.put("x2.npy", npy_bytes("<f4", shape2(1, 32), f32s(a)));
  r = s.mxsim("gemm --a x2.npy --b w.npy -o z.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("A: tensor 'x2' (F32) element [0, 5] = 1.0009765625 is not a BF16 value"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(s.p / "z.npy"));
}

// Grouped fprop: torchao B [G = 3, N = 1, K = 32] MXFP4, m_splits 1,0,2. A row i: a0 = 1 with
// scale 2^i; B[g]: b0 = 2 with scale 2^g. Row 0 is group 0: 1 * 2 = 2; rows 1, 2 are group 2
// (group 1 is empty): 2 * 8 = 16, 4 * 8 = 32. With m_splits 1,1,1 row 1 is group 1: 2 * 4 = 8.
TEST(CliGemmOperands, GroupedMSplitsAndTheirErrors) {
  CliSandbox s;
  std::vector<uint8_t> a(3 * 32, 0), b(3 * 32, 0);
  for (int i = 0; i < 3; ++i) a[i * 32] = 2, b[i * 32] = 4;
  s.put("x.qdata.npy", npy_bytes("|u1", shape2(3, 16), u8s(pack_e2m1(a))));
  s.put("x.scale.npy", npy_bytes("|u1", shape2(3, 1), u8s({127, 128, 129})));
  s.put("w.qdata.npy", npy_bytes("|u1", "(3, 1, 16)", u8s(pack_e2m1(b))));
  s.put("w.scale.npy", npy_bytes("|u1", "(3, 1, 1)", u8s({127, 128, 129})));
  const std::string ops = "gemm --elem-dtype float4_e2m1fn_x2 --a x.qdata.npy --a x.scale.npy --b w.qdata.npy --b w.scale.npy";
  auto r = s.mxsim(ops + " --m-splits 1,0,2 -o y.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read_f32(s.p / "y.npy"), (std::vector<float>{2, 16, 32}));
  EXPECT_EQ(nlohmann::json::parse(r.out)["m_splits"], (nlohmann::json{1, 0, 2}));
  r = s.mxsim(ops + " --m-splits 1,1,1 -o y.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read_f32(s.p / "y.npy"), (std::vector<float>{2, 8, 32}));
  struct Bad {
    const char* args;
    int rc;
    const char* msg;
  };
  for (const Bad& c : {Bad{"", 1, "holds 3 groups [G, N, K]; give --m-splits"},
                       Bad{"--m-splits 1,2", 1, "--m-splits has 2 groups, but B"},
                       Bad{"--m-splits 1,1,2", 1, "--m-splits sum to 4, but A"},
                       Bad{"--m-splits 1,x,2", 2, "--m-splits item 1: 'x' is not an integer"},
                       Bad{"--m-splits 1,-1,3", 2, "--m-splits item 1: -1 is out of range"},
                       Bad{"--m-splits ''", 2, "--m-splits item 0: '' is not an integer"}}) {
    r = s.mxsim(ops + " " + c.args + " -o z.npy");
    EXPECT_EQ(r.rc, c.rc) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.msg), std::string::npos) << c.args << ": " << r.err;
    EXPECT_FALSE(fs::exists(s.p / "z.npy")) << c.args;
  }
}

// Issue 34: each --m-splits item was checked, their sum was not. Four items of 2^62 - 1 and a 7
// sum to 2^64 + 3, which wrapped to M = 3 and passed "the splits sum to M"; the wgrad then failed
// with a library's message (vector::_M_default_append). The sum is checked: a usage error naming
// the option, nothing written.
TEST(CliGemmOperands, MSplitsWhoseSumOverflowsAreAUsageError) {
  CliSandbox s;
  std::string ones;
  for (int i = 0; i < 3 * 32; ++i) ones += std::string("\x80\x3f", 2);  // BF16 1.0
  s.put("dy.npy", npy_bytes("<V2", shape2(3, 32), ones));
  s.put("x.npy", npy_bytes("<V2", shape2(3, 32), ones));
  const std::string big = "4611686018427387903";  // 2^62 - 1, within each item's range
  for (const std::string& ms : {big + "," + big + "," + big + "," + big + ",7",  // 2^64 + 3: wraps to M
                                std::string("9223372036854775807,1")}) {       // past int64
    const auto r = s.mxsim("gemm --op wgrad --a dy.npy --b x.npy --m-splits " + ms + " -o z.npy");
    EXPECT_EQ(r.rc, 2) << ms << ": " << r.err;
    EXPECT_NE(r.err.find("--m-splits: the sizes sum to more than 9223372036854775807"), std::string::npos)
        << ms << ": " << r.err;
    EXPECT_EQ(r.err.find("vector::"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(s.p / "z.npy")) << ms;
  }
  // The same operands with splits that sum to M: each of dW_g = dY_g^T X_g is a [32, 32] of
  // the group's row count (1 + 2 = 3 rows in all).
  const auto r = s.mxsim("gemm --op wgrad --a dy.npy --b x.npy --m-splits 1,2 -o z.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<size_t> shape;
  const std::vector<float> z = read_f32(s.p / "z.npy", &shape);
  EXPECT_EQ(shape, (std::vector<size_t>{2, 32, 32}));
  EXPECT_EQ(z.at(0), 1.0f);
  EXPECT_EQ(z.at(32 * 32), 2.0f);
}

// The file form (mxsim layout written by `mxsim quantize`) equals emu::grouped_fprop on the
// same operands quantized in process, on a random MXFP8 problem with a ragged K.
TEST(CliGemmOperands, MxsimLayoutFromQuantizeEqualsEmulatorApi) {
  CliSandbox s;
  const size_t M = 7, N = 5, K = 80;
  std::mt19937 g(3);
  std::normal_distribution<float> d(0, 1);
  auto X = mxsim::Tensor2f::from_shape({M, K});
  auto W = mxsim::Tensor2f::from_shape({N, K});
  for (auto& v : X) v = d(g);
  for (auto& v : W) v = d(g);
  s.put("x.npy", npy_bytes("<f4", shape2(M, K), std::string(reinterpret_cast<const char*>(X.data()), X.size() * 4)));
  s.put("w.npy", npy_bytes("<f4", shape2(N, K), std::string(reinterpret_cast<const char*>(W.data()), W.size() * 4)));
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp8 x.npy -o qx").rc, 0);
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp8 w.npy -o qw.safetensors").rc, 0);
  const auto r = s.mxsim("gemm --a qx.meta.json --b qw.safetensors -o y.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto spec = mxsim::tensor_recipe("mxfp8");
  const auto qx = mxsim::emu::quantize(X, spec, mxsim::Axis::Cols);
  const auto qw = mxsim::emu::quantize(W, spec, mxsim::Axis::Cols);
  mxsim::Tensor2f y;
  const std::vector<int64_t> ms{int64_t(M)};
  mxsim::emu::grouped_fprop(qx, qw, ms, y);
  const auto got = read_f32(s.p / "y.npy");
  ASSERT_EQ(got.size(), M * N);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(bits(got[i]), bits(y.data()[i])) << i;
}

// Errors: exit 1 for data (K, pairs, missing files), exit 2 for usage; nothing written.
TEST(CliGemmOperands, ErrorsNameTheProblemAndWriteNothing) {
  CliSandbox s;
  s.put("x.qdata.npy", npy_bytes("|u1", shape2(1, 32), std::string(32, '\x38')));
  s.put("x.scale.npy", npy_bytes("|u1", shape2(1, 1), std::string(1, '\x7F')));
  s.put("w.qdata.npy", npy_bytes("|u1", shape2(1, 64), std::string(64, '\x38')));
  s.put("w.scale.npy", npy_bytes("|u1", shape2(1, 2), std::string(2, '\x7F')));
  s.put("t._data.npy", npy_bytes("|u1", shape2(1, 32), std::string(32, '\x38')));
  s.put("t._scale_inv.npy", npy_bytes("<f4", "(1,)", f32s({1.0f})));
  s.put("h.npy", npy_bytes("<f4", shape2(1, 32), f32s(std::vector<float>(32, 1.0f))));
  // Quantized down the columns (--axis rows): blocks along M, not along the contraction K.
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp8 --axis rows h.npy -o hr").rc, 0);
  const std::string A = "--elem-dtype e4m3 --a x.qdata.npy --a x.scale.npy ";
  struct Bad {
    std::string args;
    int rc;
    const char* msg;
  };
  for (const Bad& c : {
           Bad{A + "--b w.qdata.npy --b w.scale.npy", 1, "K differs: A (X: 'x', torchao"},
           Bad{A + "--b h.npy", 1, "BF16 operands pair only with BF16 operands"},
           Bad{A + "--b t._data.npy --b t._scale_inv.npy", 1, "operand recipes do not form a pair the contract defines"},
           Bad{A + "--b missing.npy", 1, "B: missing.npy: cannot open"},
           Bad{A + "--b x.qdata.npy --b x.scale.npy --accumulate none.npy", 1, "--accumulate: none.npy: cannot open"},
           Bad{"--a hr.meta.json --b x.qdata.npy --b x.scale.npy --elem-dtype e4m3", 1,
               "token operand (e4m3 1x32 scale=e8m0/even round=rne) must have blocks of 32 along the contraction"},
           Bad{"--a t._data.npy --a t._scale_inv.npy --b h.npy --layout te", 1,
               "B: no codes + scales pair (te) among the tensors: h F32"},
           Bad{A, 2, "the operand mode needs both --a and --b"},
           Bad{A + "--b h.npy --m 4", 2, "--m belongs to the random-problem mode"},
           Bad{A + "--b h.npy --recipe-a mxfp4", 2, "--recipe-a belongs to the random-problem mode"},
           Bad{A + "--b h.npy --out-dtype fp16", 2, "--out-dtype must be fp32 or bf16"},
           Bad{"--m-splits 3", 2, "--m-splits belongs to the operand mode"},
       }) {
    const auto r = s.mxsim("gemm " + c.args + " -o z.npy");
    EXPECT_EQ(r.rc, c.rc) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.msg), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(r.err.find("what()"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(s.p / "z.npy")) << c.args;
  }
  auto r = s.mxsim("gemm " + A + "--b h.npy -o z.safetensors");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("-o z.safetensors: the output is one .npy file"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(s.p / "z.safetensors"));
  // The output may not replace an input.
  r = s.mxsim("gemm " + A + "--b x.qdata.npy --b x.scale.npy -o x.qdata.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("x.qdata.npy: is the --a input file x.qdata.npy"), std::string::npos) << r.err;
  EXPECT_EQ(mxsim::io::read_npy(s.p / "x.qdata.npy").bytes.size(), 32u);
}
