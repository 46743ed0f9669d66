// `mxsim cast`: single conversions against codes worked out by hand from the
// OCP FP8 / MX definitions, under each rounding mode and overflow policy.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_test_util.hpp"

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
  EXPECT_EQ(r.out, "input,fp32,fp32_bits,code,code_bits,decoded,exact,class\n1.5,1.5,0x3FC00000,0x3,0.01.1,1.5,true,normal\n");
  r = s.mxsim("cast --to e2m1 1.5");
  EXPECT_NE(r.out.find("1.5 -> fp32 1.5 (0x3FC00000) -> 0x3 0.01.1 = 1.5 exact  [normal]"), std::string::npos) << r.out;
}
