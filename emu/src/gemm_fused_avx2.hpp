// Internal: AVX2 kernels for the truncated fused-group classes (mx-f13,
// fp8-chunk128, bf16-f25; docs/numerics.md §5.2-5.3), the 256-bit
// counterpart of gemm_fused_avx512.hpp on the same packed operands.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "gemm_internal.hpp"

namespace mxsim::emu::gemm {
/// Requires AVX2 + FMA (the avx2 CPU path). Same contract as run_fused_avx512:
/// computes every output of `kind` (not MxExact) it can prove exact with
/// machine arithmetic and appends the (i, j) it left unwritten to `bad`.
void run_fused_avx2(GemmClass kind, const Panel& A, const Panel& B, Out out, bool accumulate, Format out_fmt,
                    std::vector<std::pair<uint32_t, uint32_t>>& bad);
}  // namespace mxsim::emu::gemm
