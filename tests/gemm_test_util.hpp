// Shared by the grouped-GEMM test files (test_gemm_exact, test_gemm_nvfp4, test_gemm_fused_oracle).
#pragma once
#include "mxsim/gemm_options.hpp"

namespace gemmtest {

/// The options of one call: implementation, accumulate into the output, output format.
inline mxsim::GemmOptions opt(mxsim::GemmImpl impl, bool acc, mxsim::Format out) {
  mxsim::GemmOptions o;
  o.impl = impl;
  o.accumulate = acc;
  o.out = out;
  return o;
}

}  // namespace gemmtest
