// `mxsim cast --input X.npy -o CODES.npy [--decoded Y.npy]`: a whole tensor through the one
// conversion, codes and values checked against hand-derived bytes; errors leave nothing behind.
// Also `mxsim quantize` of an F64 .npy: MX elements rounded once from FP64.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "test_formats_oracle.hpp"

using mxsim::test::CliSandbox;
using mxsim::test::npy_bytes;
using mxsim::test::read_bytes;
using mxsim::test::write_bytes;
namespace fs = std::filesystem;

namespace {
template <class T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}
constexpr uint64_t f64(int e, uint64_t frac) { return (uint64_t(e + 1023) << 52) | frac; }
constexpr uint64_t kBit(int i) { return uint64_t(1) << (52 - i); }
double d_of(uint64_t b) {
  double d;
  std::memcpy(&d, &b, 8);
  return d;
}
/// The data bytes of a .npy file this project wrote (header length from the file).
std::string npy_data(const std::string& file) {
  const std::string b = read_bytes(file);
  EXPECT_GE(b.size(), 10u);
  const size_t hl = size_t(uint8_t(b[8])) | size_t(uint8_t(b[9])) << 8;
  return b.substr(10 + hl);
}
std::string npy_header(const std::string& file) {
  const std::string b = read_bytes(file);
  const size_t hl = size_t(uint8_t(b[8])) | size_t(uint8_t(b[9])) << 8;
  return b.substr(10, hl);
}
}  // namespace

TEST(CliCastTensor, F64ToE4m3CodesAndDecoded) {
  CliSandbox s;
  // [2, 3] F64: 1.0625 + 2^-40 (-> 0x39, above the tie), 1.1875 - 2^-40 (-> 0x39), 448 (0x7E),
  // 500 (saturates, 0x7E), -0.0 (0x80), NaN (0x7F).
  const std::vector<double> x = {d_of(f64(0, kBit(4) + kBit(40))), d_of(f64(0, kBit(4) + kBit(3) - kBit(40))), 448.0,
                                 500.0, -0.0, d_of(0x7FF8000000000000ull)};
  write_bytes(s.p / "x.npy", npy_bytes("<f8", "(2, 3)", raw(x)));
  const auto r = s.mxsim("cast --json --to e4m3 --input x.npy -o codes.npy --decoded dec.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(npy_data((s.p / "codes.npy").string()), std::string("\x39\x39\x7E\x7E\x80\x7F", 6));
  EXPECT_NE(npy_header((s.p / "codes.npy").string()).find("'descr': '|u1'"), std::string::npos);
  EXPECT_NE(npy_header((s.p / "codes.npy").string()).find("'shape': (2, 3)"), std::string::npos);
  const std::string dec = npy_data((s.p / "dec.npy").string());
  ASSERT_EQ(dec.size(), 24u);
  std::vector<float> dv(6);
  std::memcpy(dv.data(), dec.data(), 24);
  EXPECT_EQ(dv[0], 1.125f);
  EXPECT_EQ(dv[1], 1.125f);
  EXPECT_EQ(dv[2], 448.0f);
  EXPECT_EQ(dv[3], 448.0f);
  EXPECT_TRUE(dv[4] == 0.0f && std::signbit(dv[4]));
  EXPECT_TRUE(std::isnan(dv[5]));
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["elements"], 6);
  EXPECT_EQ(j["exact"], 3);  // 448, -0 and NaN
  EXPECT_EQ(j["nan_in"], 1);
  EXPECT_EQ(j["classes"]["max"], 2);
  EXPECT_EQ(j["classes"]["normal"], 2);
}

TEST(CliCastTensor, Bf16CodesAndScaleMode) {
  CliSandbox s;
  // F32 [3] -> BF16 RZ: 1 + 2^-7 + 2^-9 (0x3F810000 + bits) -> 0x3F81; -2 -> 0xC000; 3.0 -> 0x4040.
  const std::vector<float> x = {1.0f + 1.0f / 128 + 1.0f / 512, -2.0f, 3.0f};
  write_bytes(s.p / "x.npy", npy_bytes("<f4", "(3,)", raw(x)));
  auto r = s.mxsim("cast --to bf16 --round rz --input x.npy -o c.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(npy_header((s.p / "c.npy").string()).find("'descr': '<u2'"), std::string::npos);
  EXPECT_EQ(npy_data((s.p / "c.npy").string()), raw(std::vector<uint16_t>{0x3F81, 0xC000, 0x4040}));
  // Scale mode on a tensor of amax: E2M1 FLOOR: 6 -> 127, 8 -> 128, 0 -> 0, NaN -> 0xFF.
  const std::vector<float> a = {6.0f, 8.0f, 0.0f, NAN};
  write_bytes(s.p / "amax.npy", npy_bytes("<f4", "(4,)", raw(a)));
  r = s.mxsim("cast --to e8m0 --scale-rule floor --elem e2m1 --input amax.npy -o scales.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(npy_data((s.p / "scales.npy").string()), std::string("\x7F\x80\x00\xFF", 4));
}

TEST(CliCastTensor, StochasticWithRandFile) {
  CliSandbox s;
  // E2M1 0.25 is half way between 0 and 0.5: the discarded fraction is 2^31 / 2^32; a word
  // 2^31 - 1 rounds up (code 1), 2^31 does not (0).
  write_bytes(s.p / "x.npy", npy_bytes("<f4", "(2,)", raw(std::vector<float>{0.25f, 0.25f})));
  write_bytes(s.p / "r.npy", npy_bytes("<u4", "(2,)", raw(std::vector<uint32_t>{0x7FFFFFFFu, 0x80000000u})));
  const auto r = s.mxsim("cast --to e2m1 --round sr --rand-file r.npy --input x.npy -o c.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(npy_data((s.p / "c.npy").string()), std::string("\x01\x00", 2));
}

TEST(CliCastTensor, ErrorsLeaveNothing) {
  CliSandbox s;
  write_bytes(s.p / "x.npy", npy_bytes("<f4", "(2,)", raw(std::vector<float>{1.0f, NAN})));
  write_bytes(s.p / "i.npy", npy_bytes("<i4", "(2,)", raw(std::vector<int32_t>{1, 2})));
  write_bytes(s.p / "r3.npy", npy_bytes("<u4", "(3,)", raw(std::vector<uint32_t>{1, 2, 3})));
  write_bytes(s.p / "keep.npy", "old");
  struct Case {
    std::string args, msg;
    int rc;
  };
  const Case cases[] = {
      {"--to e2m1 --nan error --input x.npy -o keep.npy --decoded d.npy", "x.npy: 1 NaN value (first at [1])", 1},
      {"--to e4m3 --input missing.npy -o keep.npy", "missing.npy", 1},
      {"--to e4m3 --input i.npy -o keep.npy", "dtype I32 is not a floating dtype", 1},
      {"--to e4m3 --round sr --rand-file r3.npy --input x.npy -o keep.npy",
       "--rand-file shape [3] differs from the input's [2]", 1},
      {"--to e4m3 --input x.npy -o x.npy", "is the input file", 1},
      {"--to e4m3 --input x.npy -o keep.npy --decoded keep.npy", "keep.npy", 1},
      {"--to e4m3 --input x.npy -o nodir/c.npy --decoded d.npy", "nodir", 1},
      // the codes are complete when the second output fails: still nothing under c.npy
      {"--to e4m3 --input x.npy -o c.npy --decoded nodir/d.npy", "nodir", 1},
      {"--to e4m3 --input x.npy", "needs -o", 2},
      {"--to e4m3 --input x.npy -o c.npy 1.5", "VALUEs are not taken", 2},
      {"--to e4m3 --nan maybe --input x.npy -o c.npy", "--nan must be encode or error", 2},
      {"--to e4m3 --round sr --input x.npy -o c.npy", "needs --rand-file", 2},
      {"--to e4m3 -o c.npy 1.5", "--output applies to tensor mode", 2},
  };
  for (const auto& c : cases) {
    const auto r = s.mxsim("cast " + c.args);
    EXPECT_EQ(r.rc, c.rc) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.msg), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(r.err.find("what()"), std::string::npos) << r.err;
  }
  // Nothing written, the old file intact, no temporaries left.
  EXPECT_EQ(read_bytes(s.p / "keep.npy"), "old");
  for (const auto& e : fs::directory_iterator(s.p)) {
    const std::string n = e.path().filename().string();
    EXPECT_TRUE(n == "x.npy" || n == "i.npy" || n == "r3.npy" || n == "keep.npy") << "left behind: " << n;
  }
  // The NaN of a format without NaN: a note says it became +max.
  const auto r = s.mxsim("cast --to e2m1 --input x.npy -o c.npy");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("became +max (0x7)"), std::string::npos) << r.err;
  EXPECT_EQ(npy_data((s.p / "c.npy").string()), std::string("\x02\x07", 2));
}

// quantize of an F64 tensor with an MX recipe: amax from the FP32 rounding, elements rounded once
// from FP64. mxfp8 is E4M3 1x32 RCEIL: a block of 32 with amax 448 has s = 0 (byte 127), so the
// elements are the values themselves: 1.0625 + 2^-40 -> 0x39 (a rounding to FP32 first gives the
// tie 1.0625 -> 0x38), 1.1875 - 2^-40 -> 0x39 (via FP32: 0x3A), 448 -> 0x7E, the rest 0.
TEST(CliCastTensor, QuantizeF64RoundsElementsOnce) {
  CliSandbox s;
  std::vector<double> x(32, 0.0);
  x[0] = d_of(f64(0, kBit(4) + kBit(40)));
  x[1] = d_of(f64(0, kBit(4) + kBit(3) - kBit(40)));
  x[2] = 448.0;
  write_bytes(s.p / "w.npy", npy_bytes("<f8", "(1, 32)", raw(x)));
  const auto r = s.mxsim("quantize --recipe mxfp8 w.npy -o q");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::string want(32, '\0');
  want[0] = '\x39';
  want[1] = '\x39';
  want[2] = '\x7E';
  EXPECT_EQ(npy_data((s.p / "q.data.npy").string()), want);
  EXPECT_EQ(npy_data((s.p / "q.scale.npy").string()), std::string("\x7F", 1));
  EXPECT_NE(r.err.find("elements rounded once from FP64 to e4m3"), std::string::npos) << r.err;
  // An FP32-scaled recipe takes the FP32 rounding first (its x * scale is FP32 arithmetic), and says so.
  const auto r2 = s.mxsim("quantize --recipe fp8_tensor w.npy");
  ASSERT_EQ(r2.rc, 0) << r2.err;
  EXPECT_NE(r2.err.find("rounded once to FP32 (RNE) first"), std::string::npos) << r2.err;
}

// Every FP16 and every BF16 value as an .npy, cast into FP32 and into its own format (both
// widenings) under both overflow policies: the exact value (the oracle's, from the IEEE binary16
// and bfloat16 definitions), Inf staying Inf; a NaN input is a value, not a decoded code, so it
// gives the target's quiet NaN with its sign (the encoders' NaN rule, docs/numerics.md §2.3).
TEST(CliCastTensor, EveryF16AndBf16ValueWidensExactly) {
  CliSandbox s;
  for (const std::string src : {"fp16", "bf16"}) {
    oracle::Fmt f;
    for (const auto& g : oracle::all_formats())
      if (g.name == src) f = g;
    std::vector<uint16_t> all(65536);
    for (uint32_t h = 0; h < 65536; ++h) all[h] = uint16_t(h);
    s.put("x.npy", npy_bytes(src == "fp16" ? "<f2" : "<V2", "(65536,)", raw(all)));  // '<V2': ml_dtypes' bfloat16
    for (const std::string to : {std::string("fp32"), src})
      for (const std::string ov : {"saturate", "ieee"}) {
        const std::string args = "cast --input x.npy -o c.npy --to " + to + " --overflow " + ov;
        const auto r = s.mxsim(args);
        ASSERT_EQ(r.rc, 0) << args << ": " << r.err;
        EXPECT_NE(r.out.find("widening from " + src), std::string::npos) << r.out;
        const std::string d = npy_data((s.p / "c.npy").string());
        const size_t w = to == "fp32" ? 4 : 2;
        ASSERT_EQ(d.size(), 65536 * w) << args;
        int bad = 0;
        for (uint32_t h = 0; h < 65536; ++h) {
          uint32_t got = 0;
          std::memcpy(&got, d.data() + h * w, w);
          const bool neg = (h & 0x8000u) != 0;
          uint32_t want = 0;
          if (f.is_nan(h)) want = to == "fp32" ? (neg ? 0xFFC00000u : 0x7FC00000u) : f.nan(neg ? 1u : 0u);
          else want = to == "fp32" ? oracle::decoded_f32_bits(f, h) : h;
          if (got != want && ++bad <= 5) {
            ADD_FAILURE() << args << " " << src << " 0x" << std::hex << h << ": got 0x" << got << ", want 0x" << want;
          }
        }
        EXPECT_EQ(bad, 0) << args;
      }
  }
}
