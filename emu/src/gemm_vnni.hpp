// Internal: AVX-512 VNNI kernel for MX-exact blocks (E2M1/E2M3 pairs).
#pragma once
#include "gemm_internal.hpp"

namespace mxsim::emu::gemm {
/// True when the CPU has AVX-512 F/BW/VNNI (checked once at run time).
bool vnni_available();
/// Runs the contract for Kind::MxExact; returns false if it declines (then
/// the caller runs the portable path).
bool run_mx_exact_vnni(const Panel& A, const Panel& B, Out out, bool accumulate, Format out_fmt);
void finish(float& o, float acc, Format out_fmt);
/// RNE(acc + blk * 2^(sa + sb - 254 + extra)), exact for every scale (0xFF: NaN).
float mx_add(float acc, float blk, int sa, int sb, int extra);
}  // namespace mxsim::emu::gemm
