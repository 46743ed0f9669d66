// `mxsim quantize --elem F`: a recipe's blocks and scales with another element format, here AMD's
// E4M3FNUZ (bias 8, max 240, no Inf, one NaN 0x80) per tensor and per row, against codes derived by
// hand from the format (docs/formats.md) and FP8 current scaling (docs/numerics.md §3.3).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "mxsim/io/npy.hpp"

using mxsim::test::CliSandbox;
using mxsim::test::npy_bytes;

namespace {
std::vector<uint8_t> u8(const std::filesystem::path& p) { return mxsim::io::read_npy(p).bytes; }
std::vector<float> f32(const std::filesystem::path& p) {
  const auto b = mxsim::io::read_npy(p).bytes;
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}
}  // namespace

// x = [[1, -3, 240, 0.001], [2, 4, 8, 16]]. E4M3FNUZ codes: 1 = 0.1000.000 (0x40), -3 = 1.1001.100
// (0xCC), 240 = 0.1111.111 (0x7F, the max), 0.001 -> the subnormal 1 * 2^-10 (0x01), 2 = 0x48,
// 4 = 0x50, 8 = 0x58, 16 = 0x60, 30 = 1.875 * 2^4 = 0x67, 60 = 0x6F, 120 = 0x77.
// fp8_tensor: scale = fl32(240 / 240) = 1. fp8_row: row 0 as before; row 1 scale fl32(240 / 16) = 15,
// so 2, 4, 8, 16 become 30, 60, 120, 240, and scale_inv = fl32(1 / 15).
TEST(CliQuantizeElem, Fp8TensorAndRowWithE4m3fnuzByHand) {
  CliSandbox s;
  const std::vector<float> x = {1, -3, 240, 0.001f, 2, 4, 8, 16};
  s.put("x.npy", npy_bytes("<f4", "(2, 4)", std::string(reinterpret_cast<const char*>(x.data()), 32)));
  auto r = s.mxsim("quantize --recipe fp8_tensor --elem e4m3fnuz x.npy -o t --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(u8(s.p / "t.data.npy"), (std::vector<uint8_t>{0x40, 0xCC, 0x7F, 0x01, 0x48, 0x50, 0x58, 0x60}));
  EXPECT_EQ(f32(s.p / "t.scale_inv.npy"), (std::vector<float>{1.0f}));
  EXPECT_NE(r.out.find("e4m3fnuz"), std::string::npos) << r.out;
  r = s.mxsim("quantize --recipe fp8_row --elem e4m3fnuz x.npy -o w");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(u8(s.p / "w.data.npy"), (std::vector<uint8_t>{0x40, 0xCC, 0x7F, 0x01, 0x67, 0x6F, 0x77, 0x7F}));
  EXPECT_EQ(f32(s.p / "w.scale_inv.npy"), (std::vector<float>{1.0f, 1.0f / 15.0f}));
  // Decoded back by the one dequantizer: x, except 0.001 -> 2^-10 and row 1 through 1/15.
  r = s.mxsim("dequantize w.meta.json -o d.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto d = f32(s.p / "d.npy");
  EXPECT_EQ(d[3], 0.0009765625f);
  EXPECT_EQ(d[4], 30.0f * (1.0f / 15.0f));
  // An element format the recipe's scales cannot take is a usage error.
  r = s.mxsim("quantize --recipe fp8_row --elem e2m1 x.npy -o z");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--elem e2m1: recipe fp8_row (fp32 scales) takes e4m3, e5m2, e4m3fnuz or e5m2fnuz"),
            std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(s.p / "z.data.npy"));
}
