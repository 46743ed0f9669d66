// Internal: MX-exact grouped GEMM straight from packed QuantizedTensor codes
// (AVX-512 VNNI + VBMI), one OpenMP region per grouped call.
#pragma once
#include <cstddef>
#include <vector>

#include "gemm_internal.hpp"

namespace mxsim::emu::gemm {

/// One group's operand as [R rows, K contraction] (the mapping of make_panel):
/// contraction along logical cols (rows r0..r0+R) or, with contract_rows,
/// along logical rows (R = logical cols).
struct MxOperand {
  const QuantizedTensor* q = nullptr;
  size_t g = 0;
  bool contract_rows = false;
  size_t r0 = 0, R = 0;
};
/// out[i * ld + j] (+)= A_i . B_j for one group.
struct MxGroup {
  MxOperand a, b;
  float* out = nullptr;
  size_t ld = 0;
};

/// True when the CPU has AVX-512 F/BW/VL/VNNI/VBMI.
bool mx_direct_available();
/// Runs every group (E2M1/E2M3 operands, already validated); returns false
/// without touching any output if it declines (CPU, element formats).
bool run_mx_exact_direct(const std::vector<MxGroup>& jobs, bool accumulate, Format out_fmt);

}  // namespace mxsim::emu::gemm
