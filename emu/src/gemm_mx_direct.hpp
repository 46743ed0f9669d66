// Internal: MX-exact grouped GEMM straight from packed QuantizedTensor codes
// (AVX-512 VNNI + VBMI, or AVX2), one OpenMP region per grouped call.
#pragma once
#include <cstddef>
#include <vector>

#include "gemm_internal.hpp"
#include "mxsim/emu/cpu_path.hpp"

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

/// Instruction set of the direct path.
enum class MxDirectIsa : uint8_t { None, Vnni, Avx2 };
/// The direct path's instruction set for a CPU path (cpu_dispatch.hpp):
/// avx512 with VNNI + VBMI -> Vnni; avx2, or avx512 without VNNI -> Avx2;
/// otherwise None (avx512 with VNNI but no VBMI takes the VNNI panel path;
/// scalar the portable loop).
MxDirectIsa mx_direct_isa(CpuPath path);
/// Runs every group (E2M1/E2M3 operands, already validated) with `isa` and
/// records the kernel; returns false without touching any output if it
/// declines (element formats, isa None).
bool run_mx_exact_direct(const std::vector<MxGroup>& jobs, bool accumulate, Format out_fmt, MxDirectIsa isa);

}  // namespace mxsim::emu::gemm
