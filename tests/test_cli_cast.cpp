// `mxsim cast`: single conversions against codes worked out by hand from the
// OCP FP8 / MX definitions, under each rounding mode and overflow policy.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cli_test_util.hpp"
#include "test_formats_oracle.hpp"

using mxsim::test::CliSandbox;

namespace {
nlohmann::json cast(const CliSandbox& s, const std::string& args) {
  const auto r = s.mxsim("cast --json " + args);
  EXPECT_EQ(r.rc, 0) << args << ": " << r.err;
  return nlohmann::json::parse(r.out)["values"];
}
}  // namespace

TEST(CliCast, HandComputedCodes) {
  CliSandbox s;
  // E4M3 (max 448 = 0x7E; no Inf, NaN 0x7F): 464 is halfway between 448 (mantissa 110) and
  // 480 (111): RNE keeps 448. 500 saturates to 0x7E, or is NaN under IEEE overflow.
  auto v = cast(s, "--to e4m3 448 464 500 -500");
  EXPECT_EQ(v[0]["code"], 0x7E);
  EXPECT_EQ(v[1]["code"], 0x7E);
  EXPECT_EQ(v[2]["code"], 0x7E);
  EXPECT_EQ(v[3]["code"], 0xFE);
  EXPECT_EQ(v[3]["code_bits"], "1.1111.110");
  EXPECT_EQ(v[0]["class"], "max");
  v = cast(s, "--to e4m3 --overflow ieee 500");
  EXPECT_EQ(v[0]["code"], 0x7F);
  EXPECT_EQ(v[0]["class"], "nan");
  // E5M2: 61440 = 1.875 * 2^15 is halfway between max 57344 (0x7B) and 2^16 (the Inf code):
  // RNE goes to the even 2^16, which overflows: Inf (0x7C) under IEEE, 0x7B saturated.
  EXPECT_EQ(cast(s, "--to e5m2 --overflow ieee 61440")[0]["code"], 0x7C);
  EXPECT_EQ(cast(s, "--to e5m2 61440")[0]["code"], 0x7B);
  // E2M1: 0.3 under RZ is 0; 0.25 lies halfway between 0 and 0.5: RNE -> 0 (even),
  // SR with the discarded fraction 1/2 (2^31 of 2^32): rand 2^31 - 1 rounds up, 2^31 does not.
  EXPECT_EQ(cast(s, "--to e2m1 --round rz 0.3")[0]["code"], 0);
  EXPECT_EQ(cast(s, "--to e2m1 0.25")[0]["code"], 0);
  EXPECT_EQ(cast(s, "--to e2m1 --round sr --rand 2147483647 0.25")[0]["code"], 1);
  EXPECT_EQ(cast(s, "--to e2m1 --round sr --rand 2147483648 0.25")[0]["code"], 0);
  // A block scale 2^-3: 0.75 * 2^3 = 6 -> 0x7, exact.
  v = cast(s, "--to e2m1 --scale-exp -3 0.75");
  EXPECT_EQ(v[0]["code"], 7);
  EXPECT_EQ(v[0]["exact"], true);
  // E8M0: 1.5 is a tie between 2^0 and 2^1: ties go up (PyTorch / ml_dtypes), byte 128.
  EXPECT_EQ(cast(s, "--to e8m0 1.5")[0]["code"], 128);
  // Decoding: --from gives a code; bf16 0x3FC0 is 1.5.
  v = cast(s, "--from bf16 --to fp32 0x3FC0");
  EXPECT_EQ(v[0]["fp32"], 1.5);
  EXPECT_EQ(v[0]["fp32_bits"], "0x3FC00000");
  // Negative numbers are values, not options.
  EXPECT_EQ(cast(s, "--to e2m1 -6 -0.75")[1]["code"], 0xA);
}

TEST(CliCast, CsvAndText) {
  CliSandbox s;
  auto r = s.mxsim("cast --csv --to e2m1 1.5");
  ASSERT_EQ(r.rc, 0);
  EXPECT_EQ(r.out, "input,fp32,fp32_bits,code,code_bits,decoded,exact,class,f64,f64_bits\n"
                   "1.5,1.5,0x3FC00000,0x3,0.01.1,1.5,true,normal,1.5,0x3FF8000000000000\n");
  r = s.mxsim("cast --to e2m1 1.5");
  EXPECT_NE(r.out.find("1.5 -> fp32 1.5 (0x3FC00000) -> 0x3 0.01.1 = 1.5 exact  [normal]"), std::string::npos) << r.out;
}

namespace {
// "0x1.0000000000abcp+0"-style hex float of FP64 bits: strtod reads it back exactly.
std::string hexf(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  char b[64];
  std::snprintf(b, sizeof b, "%a", d);
  return b;
}
constexpr uint64_t f64(int e, uint64_t frac) { return (uint64_t(e + 1023) << 52) | frac; }
constexpr uint64_t kBit(int i) { return uint64_t(1) << (52 - i); }
}  // namespace

TEST(CliCast, F64ValuesRoundOnce) {
  CliSandbox s;
  // E4M3 near 1 (grid 1 = 0x38, 1.125 = 0x39, 1.25 = 0x3A): 1.0625 + 2^-40 is above the tie ->
  // 0x39; 1.1875 - 2^-40 below the tie -> 0x39. Read as FP32 first both would be exact ties
  // (0x38, 0x3A).
  auto v = cast(s, "--to e4m3 " + hexf(f64(0, kBit(4) + kBit(40))) + " " + hexf(f64(0, kBit(4) + kBit(3) - kBit(40))));
  EXPECT_EQ(v[0]["code"], 0x39);
  EXPECT_EQ(v[1]["code"], 0x39);
  EXPECT_EQ(v[0]["f64_bits"], "0x3FF1000000001000");
  EXPECT_EQ(v[0]["fp32_bits"], "0x3F880000");  // the FP32 rounding, shown for reference
  EXPECT_EQ(v[0]["exact"], false);
  // E2M1 RZ: 2 - 2^-40 -> 1.5 (0x3); BF16 RZ: 1 + 2^-6 - 2^-40 -> 0x3F81; FP16 RNE:
  // 1 + 2^-11 + 2^-40 -> 0x3C01; FP32 RZ: 1 + 2^-23 - 2^-50 -> 0x3F800000.
  EXPECT_EQ(cast(s, "--to e2m1 --round rz " + hexf(f64(0, (uint64_t(1) << 52) - kBit(40))))[0]["code"], 0x3);
  EXPECT_EQ(cast(s, "--to bf16 --round rz " + hexf(f64(0, kBit(6) - kBit(40))))[0]["code"], 0x3F81);
  EXPECT_EQ(cast(s, "--to fp16 " + hexf(f64(0, kBit(11) + kBit(40))))[0]["code"], 0x3C01);
  EXPECT_EQ(cast(s, "--to fp32 --round rz " + hexf(f64(0, kBit(23) - kBit(50))))[0]["code"], 0x3F800000);
  // Decimal text is read as FP64: 0.1 -> FP32 0x3DCCCCCD after one rounding; 1e300 saturates
  // (FLT_MAX, 0x7F7FFFFF) or is Inf under --overflow ieee.
  EXPECT_EQ(cast(s, "--to fp32 0.1")[0]["code"], 0x3DCCCCCD);
  EXPECT_EQ(cast(s, "--to fp32 1e300")[0]["code"], 0x7F7FFFFF);
  EXPECT_EQ(cast(s, "--to fp32 --overflow ieee 1e300")[0]["code"], 0x7F800000);
  // Round up: E8M0 ceil 1.01 -> 2^1 (128), 2 -> 128 exactly; E4M3 -1.01 -> -1 (0xB8).
  v = cast(s, "--to e8m0 --round ru 1.01 2");
  EXPECT_EQ(v[0]["code"], 128);
  EXPECT_EQ(v[1]["code"], 128);
  EXPECT_EQ(cast(s, "--to e4m3 --round ru -1.01")[0]["code"], 0xB8);
  // The text line shows a value that is not an FP32 value as FP64.
  const auto r = s.mxsim("cast --to e4m3 0.1");
  EXPECT_NE(r.out.find("0.1 -> fp64 0.10000000000000001 (0x3FB999999999999A) -> 0x1D"), std::string::npos) << r.out;
}

// E8M0 scale bytes by rule (docs/numerics.md §3.1-3.2), worked out by hand. E4M3: emax 8, max
// 448; E2M1: emax 2, max 6. Byte = s + 127.
TEST(CliCast, ScaleRuleBytes) {
  CliSandbox s;
  auto bytes = [&](const std::string& args) {
    std::vector<int> out;
    for (const auto& e : cast(s, "--to e8m0 " + args)) out.push_back(e["code"].get<int>());
    return out;
  };
  // FLOOR s = floor(log2 amax) - emax. 256 = 2^8 -> 0; 0x437FFFFF (just below 256) -> -1;
  // 0x43800001 (just above) -> 0; 448 -> 0. 2^-118 -> -126 (byte 1); 2^-119 -> -127 (byte 0).
  EXPECT_EQ(bytes("--scale-rule floor --elem e4m3 256 0x1.fffffep+7 0x1.000002p+8 448 0x1p-118 0x1p-119"),
            (std::vector<int>{127, 126, 127, 127, 1, 0}));
  // CEIL s = ceil(log2 amax) - emax: 256 -> 0, just below 256 -> 0, just above -> 1.
  EXPECT_EQ(bytes("--scale-rule ceil --elem e4m3 256 0x1.fffffep+7 0x1.000002p+8"), (std::vector<int>{127, 127, 128}));
  // RCEIL d = fl32(amax * fl32(1/448)), s = ceil(log2 d). fl32(1/448) = (1/448)(1 + 3/8 2^-23)
  // (1/7 = 0.(001) in binary, the 24th bit and a tail of 4/7 ulp round up). 448 -> d = 1 -> 0;
  // 448 + ulp (0x43E00001) -> d = 1 + 2^-23 -> 1; 224 -> d = 0.5 (the error 3/8 ulp rounds away)
  // -> -1; 449 -> 1.
  EXPECT_EQ(bytes("--scale-rule rceil --elem e4m3 448 0x1.c00002p+8 224 449"), (std::vector<int>{127, 128, 126, 128}));
  // EVEN (E2M1): s = E - 2 + [m >= 1.75]: 6 = 1.5 * 2^2 -> 0; 7 = 1.75 * 2^2 -> 1;
  // 0x40DFFFFF (m just below 1.75) -> 0. FLOOR of the same: 7 -> 0 (it clips to 6).
  EXPECT_EQ(bytes("--scale-rule even --elem e2m1 6 7 0x1.bffffep+2"), (std::vector<int>{127, 128, 127}));
  EXPECT_EQ(bytes("--scale-rule floor --elem e2m1 7"), (std::vector<int>{127}));
  // Specials, every rule: amax 0 (and -0) -> 0x00 (s = -127, the smallest scale; torchao, TE);
  // an FP32-subnormal amax -> 0x00 (s clamps at -127); NaN, Inf -> 0xFF, the NaN scale that makes
  // the block NaN (OCP MX v1.0 §5.4.1 reserves 0xFF for NaN; torchao maps non-finite to 0xFF).
  for (const char* rule : {"floor", "rceil", "even", "ceil"})
    EXPECT_EQ(bytes(std::string("--scale-rule ") + rule + " --elem e4m3 0 -0 0x1p-140 1e-45 nan inf -inf"),
              (std::vector<int>{0, 0, 0, 0, 0xFF, 0xFF, 0xFF}))
        << rule;
  // FP64 amax is rounded once to FP32 first (the FP32 amax the rules are defined on):
  // 256 * (1 + 2^-28) -> 256 -> CEIL 0 (127), not 1; 1e39 -> Inf -> 0xFF.
  EXPECT_EQ(bytes("--scale-rule ceil --elem e4m3 0x1.00000010p+8 1e39"), (std::vector<int>{127, 0xFF}));
  // scale_exp is reported; null for the NaN scale.
  auto v = cast(s, "--to e8m0 --scale-rule floor --elem e2m1 6 nan");
  EXPECT_EQ(v[0]["scale_exp"], 0);
  EXPECT_TRUE(v[1]["scale_exp"].is_null());
  // Usage errors.
  for (const char* bad : {"--to e4m3 --scale-rule floor --elem e4m3 1", "--to e8m0 --scale-rule floor 1",
                          "--to e8m0 --scale-rule nearest --elem e4m3 1", "--to e8m0 --scale-rule floor --elem bf16 1",
                          "--to e8m0 --scale-rule floor --elem e4m3 --round rz 1", "--to e8m0 --elem e4m3 1"}) {
    const auto r = s.mxsim(std::string("cast ") + bad);
    EXPECT_EQ(r.rc, 2) << bad << ": " << r.err;
  }
}

namespace {
const oracle::Fmt& oracle_fmt(const std::string& name) {
  static const std::vector<oracle::Fmt> all = oracle::all_formats();
  for (const auto& f : all)
    if (f.name == name) return f;
  throw std::logic_error("no oracle format " + name);
}
/// What `--from f --to to` must give for every code of f (oracle::widened_code; FP32: the exact
/// FP32 bits, NaN canonical); false when `to` does not hold every value of f (a narrowing).
bool widened_codes(const oracle::Fmt& f, const std::string& to, std::vector<uint32_t>& want) {
  want.assign(size_t(1) << f.bits, 0);
  if (to == "fp32") {
    for (uint32_t c = 0; c < want.size(); ++c) want[c] = oracle::decoded_f32_bits(f, c);
    return true;
  }
  const oracle::Table t(oracle_fmt(to));
  for (uint32_t c = 0; c < want.size(); ++c)
    if (!oracle::widened_code(f, c, t, want[c])) return false;
  return true;
}
}  // namespace

// Every code of every format of at most 8 bits through `mxsim cast --from F` into FP32, BF16 and
// FP16 wherever those hold every value of F, under both overflow policies and every rounding mode
// but SR: the oracle's exact value (test_formats_oracle.hpp, from the published definitions),
// Inf staying Inf (a widening has nothing to saturate, docs/numerics.md §2.3), and every NaN code
// (FNUZ's 0x80 included) giving the target's positive canonical NaN, as `mxsim dequantize` does
// (§1 rule 6; test_cli_dequantize checks the same table there).
TEST(CliCast, FromEveryCodeWidensExactlyUnderEveryPolicy) {
  CliSandbox s;
  int pairs = 0;
  for (const auto& f : oracle::all_formats()) {
    if (f.bits > 8) continue;  // FP16 / BF16 sources: test_cli_cast_tensor converts all 65536 of each
    std::string codes;
    for (uint32_t c = 0; c < (1u << f.bits); ++c) codes += " " + std::to_string(c);
    for (const std::string to : {"fp32", "bf16", "fp16"}) {
      std::vector<uint32_t> want;
      if (!widened_codes(f, to, want)) {
        EXPECT_TRUE(f.name == "e8m0" && to == "fp16") << f.name << " -> " << to << " should widen";
        continue;
      }
      ++pairs;
      for (const std::string ov : {"saturate", "ieee"})
        for (const std::string mode : {"rne", "rz", "ru"}) {
          const std::string args = "--from " + f.name + " --to " + to + " --overflow " + ov + " --round " + mode;
          const auto r = s.mxsim("cast --json " + args + codes);
          ASSERT_EQ(r.rc, 0) << args << ": " << r.err;
          const auto j = nlohmann::json::parse(r.out);
          EXPECT_EQ(j["widening"], true) << args;
          const auto& v = j["values"];
          ASSERT_EQ(v.size(), want.size()) << args;
          int bad = 0;
          for (uint32_t c = 0; c < want.size(); ++c) {
            if (v[c]["code"].get<uint32_t>() != want[c] && ++bad <= 5) {
              ADD_FAILURE() << args << " code " << c << ": got " << v[c]["code_hex"] << ", want 0x" << std::hex
                            << want[c] << std::dec;
            }
            if (!f.is_nan(c)) EXPECT_EQ(v[c]["exact"], true) << args << " code " << c;
          }
        }
    }
  }
  EXPECT_EQ(pairs, 7 * 3 + 2);  // seven element formats into all three, E8M0 into FP32 and BF16
}

// The reported cases, and what stays a narrowing: E5M2 Inf (0x7C) into FP16 under the default
// --overflow saturate was 65504; FP32 bit patterns into FP32 are a widening too; E8M0 2^127 into
// FP16 and an FP64 infinity into FP32 narrow, so the policy applies.
TEST(CliCast, WideningIgnoresOverflowNarrowingKeepsIt) {
  CliSandbox s;
  auto v = cast(s, "--from e5m2 --to fp16 0x7C 0xFC 0x7B");
  EXPECT_EQ(v[0]["code"], 0x7C00);
  EXPECT_EQ(v[1]["code"], 0xFC00);
  EXPECT_EQ(v[2]["code"], 0x7B00);  // 57344
  EXPECT_EQ(cast(s, "--bits --to fp32 0x7F800000 0xFF800000")[1]["code"], 0xFF800000u);
  EXPECT_EQ(cast(s, "--from fp16 --to fp32 0x7C00")[0]["code"], 0x7F800000u);
  EXPECT_EQ(cast(s, "--from e8m0 --to fp16 0xFE")[0]["code"], 0x7BFF);              // saturated
  EXPECT_EQ(cast(s, "--from e8m0 --to fp16 --overflow ieee 0xFE")[0]["code"], 0x7C00);
  EXPECT_EQ(cast(s, "--to fp32 inf")[0]["code"], 0x7F7FFFFFu);                      // FP64 text narrows
  EXPECT_EQ(cast(s, "--from e5m2 --to fp16 --scale-exp 1 0x7C")[0]["code"], 0x7BFF);  // scaled: not a plain widening
  const auto r = s.mxsim("cast --from e4m3 --to bf16 0x7E");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("widening from e4m3: exact"), std::string::npos) << r.out;
}
