// `mxsim gemm --op dgrad|wgrad` on operands given as files, against outputs
// derived by hand from the contract (docs/numerics.md §5.1, §5.2, §5.4), bit
// for bit; the errors of the backward forms. The codes below are written byte
// by byte (E2M1: 1 = 0.5, 2 = 1, 7 = 6, 0xA = -1, 0xD = -3; E4M3: 0x30 = 0.5,
// 0x38 = 1, 0x4C = 6, 0xB8 = -1, 0xC4 = -3; E8M0 byte e is 2^(e - 127)).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "mxsim/bits.hpp"
#include "mxsim/io/npy.hpp"
#include "mxsim/io/safetensors.hpp"

using mxsim::test::CliSandbox;
using mxsim::test::npy_bytes;
namespace fs = std::filesystem;

namespace {

std::string f32s(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }
std::string u8s(const std::vector<uint8_t>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size()); }
std::string shape2(size_t a, size_t b) { return "(" + std::to_string(a) + ", " + std::to_string(b) + ")"; }
std::vector<uint8_t> pack_e2m1(const std::vector<uint8_t>& codes) {
  std::vector<uint8_t> b(codes.size() / 2);
  for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(codes[2 * i] | codes[2 * i + 1] << 4);
  return b;
}
std::vector<uint32_t> read_bits(const fs::path& p, std::vector<size_t>* shape = nullptr) {
  const auto t = mxsim::io::read_npy(p);
  EXPECT_EQ(t.dtype, mxsim::io::DType::F32);
  if (shape) *shape = t.shape;
  std::vector<uint32_t> v(t.bytes.size() / 4);
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}
uint32_t bits(float f) { return mxsim::f32_bits(f); }
constexpr uint32_t kNaN = 0x7FC00000u;

// dgrad operands, M = 2 tokens, N = 96 (three blocks of 32 along N, the contraction), K = 3.
//   dY row 0: n0..n31 = 1 (scale 1); n63 = 0.5 and n95 = 0.5, each with block scale 2^-18.
//   dY row 1: n0 = 6 (scale 2^3); n32 = -3 (scale 2^-2); block 2 zero (scale 1).
//   W[:, 0] = 1 for every n (scales 1); W[0, 1] = -1 (scale 1), W[33, 1] = 6 (scale 2^3);
//   W[:, 2] = 0 with block 1's scale 0xFF (NaN).
// dX[0][0]: block 0 gives 32; blocks 1 and 2 each add 2^-19, half an ulp of 32, a tie that RNE
// resolves to 32 each time (one rounding of the exact sum would give 32 + 2^-18).
// dX[0][1] = 1 * -1 = -1; dX[1][0] = 6 * 8 + (-3) / 4 = 47.25; dX[1][1] = 6 * 8 * -1 = -48;
// dX[*][2] = NaN (a NaN scale makes its block NaN, §5.4).
struct DgradCase {
  std::vector<uint8_t> dy, wt;  // codes: dY [2, 96], W^T [3, 96] (row k of W^T is column k of W)
  std::vector<uint8_t> dy_scale{127, 109, 109, 130, 125, 127};
  std::vector<uint8_t> wt_scale{127, 127, 127, 127, 130, 127, 127, 0xFF, 127};  // [3, 3]: W^T row k, block b
  DgradCase(uint8_t one, uint8_t half, uint8_t six, uint8_t m3, uint8_t m1) : dy(2 * 96, 0), wt(3 * 96, 0) {
    for (int n = 0; n < 32; ++n) dy[n] = one;
    dy[63] = half, dy[95] = half;
    dy[96 + 0] = six, dy[96 + 32] = m3;
    for (int n = 0; n < 96; ++n) wt[n] = one;
    wt[96 + 0] = m1, wt[96 + 33] = six;
  }
};
const std::vector<uint32_t> kDgradExpected = {bits(32.0f), bits(-1.0f), kNaN, bits(47.25f), bits(-48.0f), kNaN};

}  // namespace

// mx-exact dgrad on torchao MXFP4: dY as to_mx(dy) [M, N], W as torchao's backward copy
// to_mx(w.t().contiguous()) [K, N] (blocks along N), read as W [N, K] quantized along N.
TEST(CliGemmBackward, DgradMxExactTorchaoByHand) {
  CliSandbox s;
  const DgradCase c(2, 1, 7, 0xD, 0xA);
  s.put("dy.qdata.npy", npy_bytes("|u1", shape2(2, 48), u8s(pack_e2m1(c.dy))));
  s.put("dy.scale.npy", npy_bytes("|u1", shape2(2, 3), u8s(c.dy_scale)));
  s.put("wt.qdata.npy", npy_bytes("|u1", shape2(3, 48), u8s(pack_e2m1(c.wt))));
  s.put("wt.scale.npy", npy_bytes("|u1", shape2(3, 3), u8s(c.wt_scale)));
  const std::string ops = "gemm --op dgrad --elem-dtype float4_e2m1fn_x2 --a dy.qdata.npy --a dy.scale.npy "
                          "--b wt.qdata.npy --b wt.scale.npy";
  for (const char* impl : {"fast", "reference"}) {
    const auto r = s.mxsim(ops + " --impl " + impl + " -o dx.npy --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    std::vector<size_t> shape;
    EXPECT_EQ(read_bits(s.p / "dx.npy", &shape), kDgradExpected) << impl;
    EXPECT_EQ(shape, (std::vector<size_t>{2, 3}));
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["op"], "dgrad");
    EXPECT_EQ(j["class"], "mx-exact");
    EXPECT_EQ(j["m"], 2);
    EXPECT_EQ(j["n"], 96);
    EXPECT_EQ(j["k"], 3);
    EXPECT_EQ(j["b"]["shape"], (nlohmann::json{96, 3}));  // W [N, K], read from the stored [K, N]
    EXPECT_EQ(j["b"]["transposed_copy"], true);
  }
  // The same W^T read as fprop's W (blocks along its rows' last axis) is a different GEMM:
  // fprop of dY [2, 96] with B [3, 96] gives the same numbers, as dX = dY W = dY (W^T)^T.
  const auto r = s.mxsim("gemm --elem-dtype float4_e2m1fn_x2 --a dy.qdata.npy --a dy.scale.npy --b wt.qdata.npy "
                         "--b wt.scale.npy -o y.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read_bits(s.p / "y.npy"), kDgradExpected);
}

// mx-f13 dgrad: dY from torchao (E4M3), W from TransformerEngine's columnwise copy of W [N, K]
// (_columnwise_data [96, 3], blocks of 32 down the columns, scale_inv padded to [4, 128]).
// Each 32-block has one non-zero product or 32 equal ones, so the k32 fused group (F = 13) is
// exact and the per-block RNE decides as above: the same dX.
TEST(CliGemmBackward, DgradMxF13TeColumnwiseWeightByHand) {
  CliSandbox s;
  const DgradCase c(0x38, 0x30, 0x4C, 0xC4, 0xB8);
  std::vector<uint8_t> w(96 * 3), wsc(4 * 128, 127);
  for (size_t n = 0; n < 96; ++n)
    for (size_t k = 0; k < 3; ++k) w[n * 3 + k] = c.wt[k * 96 + n];
  for (size_t b = 0; b < 3; ++b)
    for (size_t k = 0; k < 3; ++k) wsc[b * 128 + k] = c.wt_scale[k * 3 + b];
  for (size_t k = 3; k < 128; ++k) wsc[k] = 0xFF;  // padding is never read
  s.put("dy.qdata.npy", npy_bytes("|u1", shape2(2, 96), u8s(c.dy)));
  s.put("dy.scale.npy", npy_bytes("|u1", shape2(2, 3), u8s(c.dy_scale)));
  s.put("w._columnwise_data.npy", npy_bytes("|u1", shape2(96, 3), u8s(w)));
  s.put("w._columnwise_scale_inv.npy", npy_bytes("|u1", shape2(4, 128), u8s(wsc)));
  const auto r = s.mxsim("gemm --op dgrad --elem-dtype e4m3 --a dy.qdata.npy --a dy.scale.npy --b "
                         "w._columnwise_data.npy --b w._columnwise_scale_inv.npy -o dx.npy --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read_bits(s.p / "dx.npy"), kDgradExpected);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["class"], "mx-f13");
  EXPECT_EQ(j["b"]["layout"], "te-columnwise");
}

// Grouped dgrad with mxsim files: W [G = 2, N = 32, K = 2] quantized down N (`quantize --axis rows`)
// from values E2M1 holds exactly (so the codes decode to them), dY [3, 32] rowwise, m_splits 1,2.
// Expected: the exact products of those values (small integers, every sum exact in FP32).
// A W quantized along K (the fprop copy) is refused naming the operand and the axis it needs.
TEST(CliGemmBackward, DgradGroupedMxsimFilesAndWrongAxis) {
  CliSandbox s;
  const size_t M = 3, N = 32, K = 2, G = 2;
  std::vector<float> dy(M * N, 0.0f), w(G * N * K, 0.0f);
  const float vals[] = {1, -2, 3, 0.5f, 6, -1, 4, 1.5f};
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = vals[(i * 5 + 1) % 8] * (i % 3 == 0);
  for (size_t i = 0; i < w.size(); ++i) w[i] = vals[(i * 3 + 2) % 8] * (i % 5 != 0);
  s.put("dy.npy", npy_bytes("<f4", shape2(M, N), f32s(dy)));
  s.put("w.npy", npy_bytes("<f4", "(2, 32, 2)", f32s(w)));
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp4 dy.npy -o qdy").rc, 0);
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp4 --axis rows w.npy -o qw").rc, 0);
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp4 w.npy -o qwk").rc, 0);
  auto r = s.mxsim("gemm --op dgrad --a qdy.meta.json --b qw.meta.json --m-splits 1,2 -o dx.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  const int64_t group_of[M] = {0, 1, 1};
  std::vector<uint32_t> want;
  for (size_t m = 0; m < M; ++m)
    for (size_t k = 0; k < K; ++k) {
      double acc = 0;  // exact: every product and partial sum is a small dyadic rational
      for (size_t n = 0; n < N; ++n) acc += double(dy[m * N + n]) * double(w[(group_of[m] * N + n) * K + k]);
      want.push_back(bits(float(acc)));
      ASSERT_EQ(double(float(acc)), acc);
    }
  EXPECT_EQ(read_bits(s.p / "dx.npy"), want);
  r = s.mxsim("gemm --op dgrad --a qdy.meta.json --b qwk.meta.json --m-splits 1,2 -o bad.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("B (W: 'w', mxsim"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("must have blocks of 32 along the contraction"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("dgrad reads W quantized along N"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(s.p / "bad.npy"));
}

namespace {
// wgrad operands, M = 96 tokens, m_splits 64,0,32, N = 2, K = 2, E2M1, blocks of 32 along M.
// Stored as torchao's backward copies dY^T [N, M] and X^T [K, M] (to_mx(t.t().contiguous())).
//   dY^T row 0: t0..t31 = 1; t63 = 0.5; t64 = 6. Scales per block [1, 2^-18, 2^3].
//   dY^T row 1: t0 = -1; t64..t95 = 0.5. Scales [1, 1, 2^-1].
//   X^T row 0: t0..t63 = 1; t64 = -3. Scales [1, 1, 2^-2].
//   X^T row 1: t5 = 6; t64..t95 = 1. Scales [2^-20, 1, 1].
// dW_0 (tokens 0..63, blocks 0 and 1): [0][0] = 32, then + 2^-19 (a tie: 32); [0][1] = 6 * 2^-20;
//   [1][0] = -1; [1][1] = +0. dW_1 (no tokens) = +0. dW_2 (tokens 64..95): [0][0] = 48 * -0.75 = -36;
//   [0][1] = 48; [1][0] = 0.25 * -0.75 = -0.1875; [1][1] = 32 * 0.25 = 8.
struct WgradCase {
  std::vector<uint8_t> dyt = std::vector<uint8_t>(2 * 96, 0), xt = std::vector<uint8_t>(2 * 96, 0);
  std::vector<uint8_t> dyt_scale{127, 109, 130, 127, 127, 126}, xt_scale{127, 127, 125, 107, 127, 127};
  WgradCase() {
    for (int t = 0; t < 32; ++t) dyt[t] = 2;
    dyt[63] = 1, dyt[64] = 7;
    dyt[96 + 0] = 0xA;
    for (int t = 64; t < 96; ++t) dyt[96 + t] = 1;
    for (int t = 0; t < 64; ++t) xt[t] = 2;
    xt[64] = 0xD;
    xt[96 + 5] = 7;
    for (int t = 64; t < 96; ++t) xt[96 + t] = 2;
  }
  /// Tokens [t0, t1) of a stored [2, 96] operand and its scales, for per-group files.
  static std::pair<std::vector<uint8_t>, std::vector<uint8_t>> cut(const std::vector<uint8_t>& codes,
                                                                    const std::vector<uint8_t>& sc, size_t t0, size_t t1) {
    std::vector<uint8_t> c, s;
    for (size_t r = 0; r < 2; ++r) {
      c.insert(c.end(), codes.begin() + r * 96 + t0, codes.begin() + r * 96 + t1);
      s.insert(s.end(), sc.begin() + r * 3 + t0 / 32, sc.begin() + r * 3 + (t1 + 31) / 32);
    }
    return {pack_e2m1(c), s};
  }
};
const std::vector<uint32_t> kWgradExpected = {bits(32.0f), bits(std::ldexp(6.0f, -20)), bits(-1.0f), 0u,  // dW_0
                                              0u, 0u, 0u, 0u,                                             // dW_1
                                              bits(-36.0f), bits(48.0f), bits(-0.1875f), bits(8.0f)};     // dW_2
}  // namespace

// wgrad from whole-tensor operands cut at m_splits (every group starts on a block boundary):
// per group dW_g = dY_g^T X_g; the empty group gets +0; with --accumulate main_grad the empty
// group's main_grad stays bit for bit (a -0 and a NaN with a payload included).
TEST(CliGemmBackward, WgradTorchaoWholeTensorsEmptyGroupAndMainGrad) {
  CliSandbox s;
  const WgradCase c;
  s.put("dyt.qdata.npy", npy_bytes("|u1", shape2(2, 48), u8s(pack_e2m1(c.dyt))));
  s.put("dyt.scale.npy", npy_bytes("|u1", shape2(2, 3), u8s(c.dyt_scale)));
  s.put("xt.qdata.npy", npy_bytes("|u1", shape2(2, 48), u8s(pack_e2m1(c.xt))));
  s.put("xt.scale.npy", npy_bytes("|u1", shape2(2, 3), u8s(c.xt_scale)));
  const std::string ops = "gemm --op wgrad --elem-dtype float4_e2m1fn_x2 --a dyt.qdata.npy --a dyt.scale.npy "
                          "--b xt.qdata.npy --b xt.scale.npy --m-splits 64,0,32";
  for (const char* impl : {"fast", "reference"}) {
    const auto r = s.mxsim(ops + " --impl " + impl + " -o dw.npy --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    std::vector<size_t> shape;
    EXPECT_EQ(read_bits(s.p / "dw.npy", &shape), kWgradExpected) << impl;
    EXPECT_EQ(shape, (std::vector<size_t>{3, 2, 2}));
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["op"], "wgrad");
    EXPECT_EQ(j["class"], "mx-exact");
    EXPECT_EQ(j["groups"], 3);
    EXPECT_EQ(j["a"]["shape"], (nlohmann::json{96, 2}));  // dY [M, N]
  }
  // main_grad: dW_0 starts from [2^-19, 1, 0.5, -0]: [0][0] = RNE(RNE(2^-19 + 32) + 2^-19) = 32
  // (the exact sum 32 + 2^-18 is an FP32 value: one block at a time decides); [0][1] = 1 + 6 * 2^-20
  // (exact); [1][0] = -0.5; [1][1]: -0 + (+0) = +0. dW_1 untouched. dW_2 starts from 0 except
  // [1][1] = 100: 108.
  const std::vector<uint32_t> mg = {bits(std::ldexp(1.0f, -19)), bits(1.0f), bits(0.5f), 0x80000000u,
                                    0x80000000u, 0x7FC00001u, bits(3.0f), bits(-7.5f),
                                    0u, 0u, 0u, bits(100.0f)};
  s.put("main_grad.npy", npy_bytes("<f4", "(3, 2, 2)", std::string(reinterpret_cast<const char*>(mg.data()), 48)));
  auto r = s.mxsim(ops + " --accumulate main_grad.npy -o mg_out.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read_bits(s.p / "mg_out.npy"),
            (std::vector<uint32_t>{bits(32.0f), bits(1.0f + std::ldexp(6.0f, -20)), bits(-0.5f), 0u,
                                   0x80000000u, 0x7FC00001u, bits(3.0f), bits(-7.5f),
                                   bits(-36.0f), bits(48.0f), bits(-0.1875f), bits(108.0f)}));
  // main_grad of another shape: exit 1, nothing written.
  s.put("mg2.npy", npy_bytes("<f4", "(2, 2)", f32s({0, 0, 0, 0})));
  r = s.mxsim(ops + " --accumulate mg2.npy -o z.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("shape [2, 2], but the output is [3, 2, 2] [G, N, K]"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(s.p / "z.npy"));
}

// The same wgrad from one tensor per non-empty group (TE's split_quantize per expert, dumped as
// separate tensors), named in group order with repeated --a-tensor / --b-tensor.
TEST(CliGemmBackward, WgradPerGroupTensorsEqualTheHandValues) {
  CliSandbox s;
  const WgradCase c;
  using mxsim::io::DType;
  std::vector<mxsim::io::RawTensor> ts;
  for (const auto& [name, codes, sc] : {std::tuple{"dy", &c.dyt, &c.dyt_scale}, std::tuple{"x", &c.xt, &c.xt_scale}})
    for (const auto& [g, t0, t1] : {std::tuple{0, 0, 64}, std::tuple{2, 64, 96}}) {
      const auto [q, qs] = WgradCase::cut(*codes, *sc, size_t(t0), size_t(t1));
      const std::string b = std::string(name) + "_" + std::to_string(g);
      ts.push_back({b + ".qdata", DType::U8, {2, size_t(t1 - t0) / 2}, q});
      ts.push_back({b + ".scale", DType::U8, {2, size_t(t1 - t0 + 31) / 32}, qs});
    }
  mxsim::io::write_safetensors(s.p / "grads.safetensors", ts);
  const std::string ops = "gemm --op wgrad --elem-dtype float4_e2m1fn_x2 --a grads.safetensors --a-tensor dy_0 "
                          "--a-tensor dy_2 --b grads.safetensors --b-tensor x_0 --b-tensor x_2";
  auto r = s.mxsim(ops + " --m-splits 64,0,32 -o dw.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(read_bits(s.p / "dw.npy"), kWgradExpected);
  // A tensor count that does not match the non-empty groups, and group sizes that disagree.
  r = s.mxsim(ops + " --m-splits 64,0,0,32 -o z.npy");
  EXPECT_EQ(r.rc, 0) << r.err;  // two empty groups are still two non-empty ones: fine
  r = s.mxsim(ops + " --m-splits 32,32,32 -o z2.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("2 per-group tensors for 3 non-empty groups"), std::string::npos) << r.err;
  r = s.mxsim(ops + " --m-splits 32,0,64 -o z2.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("A (dY), group 0: A (dY: 'dy_0', torchao"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("has 64 tokens, but --m-splits gives it 32"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(s.p / "z2.npy"));
  r = s.mxsim("gemm --a grads.safetensors --a-tensor dy_0 --a-tensor dy_2 --b grads.safetensors --b-tensor x_0 "
              "--elem-dtype float4_e2m1fn_x2 -o z2.npy");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--a-tensor is given more than once; only --op wgrad takes one tensor per group"),
            std::string::npos) << r.err;
}

// wgrad errors: a group starting inside a block of a whole-tensor operand, token counts that
// differ, m_splits that do not sum to M, an operand quantized along N instead of M, a bad --op.
// Each names the operand, exits non-zero and writes nothing.
TEST(CliGemmBackward, WgradErrorsNameTheOperand) {
  CliSandbox s;
  const WgradCase c;
  s.put("dyt.qdata.npy", npy_bytes("|u1", shape2(2, 48), u8s(pack_e2m1(c.dyt))));
  s.put("dyt.scale.npy", npy_bytes("|u1", shape2(2, 3), u8s(c.dyt_scale)));
  s.put("xt.qdata.npy", npy_bytes("|u1", shape2(2, 48), u8s(pack_e2m1(c.xt))));
  s.put("xt.scale.npy", npy_bytes("|u1", shape2(2, 3), u8s(c.xt_scale)));
  const auto cut = WgradCase::cut(c.xt, c.xt_scale, 0, 64);
  s.put("x64.qdata.npy", npy_bytes("|u1", shape2(2, 32), u8s(cut.first)));
  s.put("x64.scale.npy", npy_bytes("|u1", shape2(2, 2), u8s(cut.second)));
  s.put("h.npy", npy_bytes("<f4", shape2(96, 2), f32s(std::vector<float>(192, 1.0f))));
  ASSERT_EQ(s.mxsim("quantize --recipe mxfp4 h.npy -o hc").rc, 0);  // blocks along N, not M
  const std::string A = "gemm --op wgrad --elem-dtype float4_e2m1fn_x2 --a dyt.qdata.npy --a dyt.scale.npy ";
  struct Bad {
    std::string args;
    int rc;
    const char* msg;
  };
  for (const Bad& b : {
           Bad{A + "--b xt.qdata.npy --b xt.scale.npy --m-splits 40,56", 1,
               "A (dY), group 0 (tokens 0 to 40): A (dY: 'dyt', torchao"},
           Bad{A + "--b xt.qdata.npy --b xt.scale.npy --m-splits 40,56", 1, "do not consist of whole blocks"},
           Bad{A + "--b xt.qdata.npy --b xt.scale.npy --m-splits 64,64", 1, "--m-splits sum to 128, but A (dY"},
           Bad{A + "--b x64.qdata.npy --b x64.scale.npy", 1, "M differs: A (dY: 'dyt', torchao"},
           Bad{A + "--b hc.meta.json", 1, "wgrad reads dY and X quantized along the tokens M"},
           Bad{"gemm --op bwd --a dyt.qdata.npy --a dyt.scale.npy --b xt.qdata.npy --b xt.scale.npy", 2, "--op must be fprop, dgrad or wgrad, not 'bwd'"},
           Bad{"gemm --op wgrad --m 4", 2, "--op belongs to the operand mode"},
       }) {
    const auto r = s.mxsim(b.args + " -o z.npy");
    EXPECT_EQ(r.rc, b.rc) << b.args << ": " << r.err;
    EXPECT_NE(r.err.find(b.msg), std::string::npos) << b.args << ": " << r.err;
    EXPECT_EQ(r.err.find("what()"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(s.p / "z.npy")) << b.args;
  }
}
