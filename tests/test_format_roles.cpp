// The roles of the format table (format.hpp FormatRole) against the published
// lists they stand for, written out here by hand:
//   OCP Microscaling Formats (MX) v1.0 §5.2 Table 1: the MX element formats FP8 E4M3 and
//     E5M2, FP6 E3M2 and E2M3, FP4 E2M1 (INT8 is not a format of this table);
//   the AMD FNUZ FP8s (arXiv:2206.02915), which mxsim also quantizes in E8M0 blocks and
//     with FP32 scales, but which the GEMM contract does not define (numerics.md §5.2);
//   mx-exact (numerics.md §5.2): E2M1 and E2M3, whose values times 2 resp. 8 are integers
//     (that property is checked below from the decoded values themselves);
//   exact in an FP8 tensor-core group (backends/hip/src/gemm_sm90.hip, MMA-Sim's Hopper FP8
//     model: a k32 group result with 13 fraction bits): E2M1 only (checked below likewise).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/format.hpp"
#include "mxsim/hd/gemm_block.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim {
namespace {

const Format kAll[] = {Format::FP32, Format::BF16, Format::FP16, Format::E4M3, Format::E5M2, Format::E4M3FNUZ,
                       Format::E5M2FNUZ, Format::E3M2, Format::E2M3, Format::E2M1, Format::E8M0};

TEST(FormatRoles, EachRoleHoldsExactlyItsPublishedFormats) {
  static_assert(sizeof(kAll) / sizeof(kAll[0]) == kNumFormats, "every format of the table");
  const std::set<Format> ocp_mx = {Format::E4M3, Format::E5M2, Format::E3M2, Format::E2M3, Format::E2M1};
  const std::set<Format> fp8 = {Format::E4M3, Format::E5M2, Format::E4M3FNUZ, Format::E5M2FNUZ};
  std::set<Format> mx_elem = ocp_mx;
  mx_elem.insert({Format::E4M3FNUZ, Format::E5M2FNUZ});
  const std::set<Format> mx_exact = {Format::E2M1, Format::E2M3};
  const std::set<Format> fp8_group_exact = {Format::E2M1};
  for (Format f : kAll) {
    const char* n = spec_of(f).name;
    EXPECT_EQ(has_role(f, kRoleOcpMx), ocp_mx.count(f) == 1) << n;
    EXPECT_EQ(has_role(f, kRoleFp8), fp8.count(f) == 1) << n;
    EXPECT_EQ(has_role(f, kRoleMxElem), mx_elem.count(f) == 1) << n;
    EXPECT_EQ(has_role(f, kRoleMxExact), mx_exact.count(f) == 1) << n;
    EXPECT_EQ(has_role(f, kRoleFp8GroupExact), fp8_group_exact.count(f) == 1) << n;
  }
}

// What the tensor-core mx-exact kernel relies on, from the decoded values: every partial sum of
// 32 products of two elements is a multiple of the products' finest power of two g and below 32
// times the largest product, so it needs at most log2(32 max / g) significant bits; the FP8 MMA
// group keeps 14 (an implicit bit and 13 fraction bits). The role holds where that fits.
TEST(FormatRoles, Fp8GroupExactIsWhereABlockDotFitsTheGroupsBits) {
  for (Format f : kAll) {
    if (!has_role(f, kRoleMxExact)) continue;  // the role refines mx-exact
    const FormatSpec s = spec_of(f);
    int finest = 1000;
    double pmax = 0;
    for (uint32_t a = 0; a < (1u << s.bits); ++a)
      for (uint32_t b = 0; b < (1u << s.bits); ++b) {
        const double p = std::fabs(double(decode(s, a)) * double(decode(s, b)));
        if (p == 0) continue;
        int e = 0;
        std::frexp(p, &e);
        int low = e - 53;  // the lowest set bit of p
        while (std::ldexp(std::floor(std::ldexp(p, -low - 1)), low + 1) == p) ++low;
        finest = std::min(finest, low);
        pmax = std::max(pmax, p);
      }
    const int top = int(std::ceil(std::log2(32.0 * pmax)));  // sums lie below 2^top
    const bool fits = top - finest <= 14;
    EXPECT_EQ(has_role(f, kRoleFp8GroupExact), fits) << s.name << ": products down to 2^" << finest
                                                     << ", sums below 2^" << top;
  }
}

// What the mx-exact kernels rely on, from the decoded values: every finite value of an
// mx-exact element times 2^int_shift is an integer (hd::mx_int_value), small enough that a
// 32-element block dot of two of them is an exact integer sum in FP32 (below 2^24).
TEST(FormatRoles, MxExactValuesAreSmallIntegersAfterTheShift) {
  for (Format f : kAll) {
    if (!has_role(f, kRoleMxExact)) continue;
    const FormatSpec s = spec_of(f);
    const int k = hd::int_shift(f);
    double vmax = 0;
    for (uint32_t c = 0; c < (1u << s.bits); ++c) {
      const double v = std::ldexp(double(decode(s, c)), k);
      ASSERT_EQ(v, std::floor(v)) << s.name << " code " << c;
      vmax = std::max(vmax, std::fabs(v));
    }
    EXPECT_LT(32.0 * vmax * vmax, 16777216.0) << s.name;
  }
}

// The GEMM classes read the roles: OCP MX pairs are mx-exact or mx-f13, FNUZ pairs are refused.
TEST(FormatRoles, GemmClassesFollowTheRoles) {
  QuantSpec a = tensor_recipe("mxfp4"), b = tensor_recipe("mxfp4");
  hd::GemmClass c{};
  ASSERT_TRUE(hd::gemm_class_of(a, b, c));
  EXPECT_EQ(c, hd::GemmClass::MxExact);
  b.elem = Format::E4M3;
  ASSERT_TRUE(hd::gemm_class_of(a, b, c));
  EXPECT_EQ(c, hd::GemmClass::MxF13);
  b.elem = Format::E4M3FNUZ;
  std::string why;
  EXPECT_FALSE(hd::gemm_class_of(a, b, c, &why));
  EXPECT_NE(why.find("E2M1, E2M3, E3M2, E4M3 or E5M2"), std::string::npos) << why;
}

// The emulator's GEMM and its gemm_class_name ask the same classifier: an FP32-scaled FNUZ pair,
// which the contract does not define, is refused with its words (the emulator's own classifier
// named it fp8-chunk128, while its panels and the GPU refused it).
TEST(FormatRoles, TheEmulatorsGemmRefusesPairsTheContractDoesNotDefine) {
  QuantSpec s = tensor_recipe("fp8_tensor");
  s.elem = Format::E4M3FNUZ;
  Tensor2f x = Tensor2f::from_shape({4, 8}), w2 = Tensor2f::from_shape({2, 8});
  for (size_t i = 0; i < x.size(); ++i) x.data()[i] = 0.25f * float(i % 7);
  for (size_t i = 0; i < w2.size(); ++i) w2.data()[i] = 0.5f - 0.125f * float(i % 5);
  const QuantizedTensor qx = emu::quantize(x, s, Axis::Cols), qw = emu::quantize(w2, s, Axis::Cols);
  Tensor2f y;
  const std::vector<int64_t> ms = {4};
  try {
    emu::grouped_fprop(qx, qw, ms, y, GemmOptions{});
    ADD_FAILURE() << "an FP32-scaled E4M3FNUZ pair was multiplied";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("FP32-scaled operands must be E4M3 or E5M2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(emu::gemm_class_name(qx.spec, qw.spec), std::invalid_argument);
  s.elem = Format::E4M3;
  EXPECT_STREQ(emu::gemm_class_name(s, s), "fp8-chunk128");
}

}  // namespace
}  // namespace mxsim
