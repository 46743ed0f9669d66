// core's reading of a spec's keyword arguments (mxsim/spec_args.hpp), shared
// by the Python module and the C interface: the text form gives the spec the
// named table and the documented defaults give, and refusals name the
// argument.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "mxsim/spec_args.hpp"

namespace mxsim {
namespace {

QuantSpec from_text(std::initializer_list<std::pair<const char*, const char*>> kv) {
  SpecArgs a;
  for (const auto& [k, v] : kv) set_spec_arg(a, k, v);
  return make_spec(a);
}

std::string refusal(std::initializer_list<std::pair<const char*, const char*>> kv) {
  try {
    from_text(kv);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SpecArgs, ARecipeAloneIsTheNamedSpec) {
  for (const std::string& n : named_spec_names()) EXPECT_EQ(from_text({{"recipe", n.c_str()}}), named_spec(n)) << n;
}

TEST(SpecArgs, NoArgumentsAreTorchaosToMxDefaults) {
  // torchao to_mx(data_hp, elem_dtype, block_size=32, scaling_mode=FLOOR), elem_dtype E4M3 here.
  const QuantSpec s = from_text({});
  EXPECT_EQ(s.elem, Format::E4M3);
  EXPECT_EQ(s.block_rows, 1);
  EXPECT_EQ(s.block_cols, 32);
  EXPECT_EQ(s.scale_kind, ScaleKind::E8M0);
  EXPECT_EQ(s.rule, ScaleRule::Floor);
}

TEST(SpecArgs, OverridesApplyInOrderFromText) {
  const QuantSpec s = from_text({{"elem_dtype", "torch.float4_e2m1fn_x2"},
                                 {"block_size", "32,32"},
                                 {"scaling_mode", "ScaleCalculationMode.RCEIL"},
                                 {"rounding", "sr"},
                                 {"seed", "18446744073709551615"},
                                 {"sr_stream", "7"},
                                 {"hadamard", "true"}});
  EXPECT_EQ(s.elem, Format::E2M1);
  EXPECT_EQ(s.block_rows, 32);
  EXPECT_EQ(s.block_cols, 32);
  EXPECT_EQ(s.rule, ScaleRule::Rceil);
  EXPECT_EQ(s.round, RoundMode::Stochastic);
  EXPECT_EQ(s.sr.seed, 18446744073709551615ull);
  EXPECT_EQ(s.sr.stream, 7u);
  EXPECT_TRUE(s.hadamard16);
  const QuantSpec f = from_text({{"recipe", "fp8_tensor"}, {"amax_epsilon", "1e-12"}, {"pow2_scale", "1"}});
  EXPECT_EQ(f.amax_epsilon, 1e-12f);
  EXPECT_TRUE(f.pow2_scale);
}

TEST(SpecArgs, RefusalsNameTheArgument) {
  EXPECT_EQ(refusal({{"block", "32"}}).rfind("unknown spec argument 'block'", 0), 0u);
  EXPECT_EQ(refusal({{"seed", "-1"}}), "spec argument seed = '-1' is not an unsigned 64-bit integer");
  EXPECT_EQ(refusal({{"block_size", "32,x"}}), "spec argument block_size = '32,x' is not an int or 'rows,cols'");
  EXPECT_EQ(refusal({{"hadamard", "yes"}}), "spec argument hadamard = 'yes' is not a boolean (0, 1, true, false)");
  EXPECT_EQ(refusal({{"seed", "3"}}), "seed applies to rounding='sr' only");
  EXPECT_EQ(refusal({{"recipe", "fp8_tensor"}, {"scaling_mode", "floor"}}),
            "scaling_mode applies to E8M0-scaled (MX) specs");
  EXPECT_EQ(refusal({{"elem_dtype", "float9"}}), "unknown format 'float9'");
}

}  // namespace
}  // namespace mxsim
