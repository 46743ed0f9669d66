// Internal: AVX-512 kernels for the truncated fused-group classes
// (mx-f13, fp8-chunk128, bf16-f25; docs/numerics.md §5.2-5.3).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "gemm_internal.hpp"

namespace mxsim::emu::gemm {
/// Requires AVX-512 F/BW/DQ/VL (the avx512 CPU path). Computes every output of `kind` (not MxExact) it can prove exact with
/// machine arithmetic and appends the (i, j) it left unwritten to `bad`
/// (their outputs are untouched; the caller runs the scalar path on them).
void run_fused_avx512(GemmClass kind, const Panel& A, const Panel& B, Out out, bool accumulate, Format out_fmt,
                      std::vector<std::pair<uint32_t, uint32_t>>& bad);
}  // namespace mxsim::emu::gemm
