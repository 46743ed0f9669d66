// Internal: operand packing shared by the fused-group kernels of every
// instruction set (gemm_fused_avx512.cpp, gemm_fused_avx2.cpp; classes
// mx-f13, fp8-chunk128, bf16-f25 of docs/numerics.md §5.2-5.3).
//
// Layout: A rows as FP32 values [I][Kp]; B as 16-column panels [NP][Kp][16]
// (a 512-bit vector, or two 256-bit ones, per k); element exponents in int8
// (FP8/FP6/FP4, 4 consecutive k per dword, sentinel kZero8 for zeros) or
// int16 (BF16, 2 k per dword, sentinel kZeroExp), A as [I][Kp/kpd] dwords and
// B as [NP][Kp/kpd][16 columns][kpd]; per row / column the exponent range of
// its non-zero finite elements and whether it holds a NaN/Inf element or an
// unsafe E8M0 scale; per block the scale factors (MX: 2^(s-127), 0 when
// unsafe; chunk: scale_inv).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "gemm_internal.hpp"

namespace mxsim::emu::gemm::fused {

inline constexpr int kZeroExp = -1000;  // sentinel exponent of a zero element
inline constexpr int kZero8 = -64;      // the same in int8 (FP8-class sums of real exponents lie in [-32, 30])

struct RowInfo {
  int32_t lo = 1000, hi = -1000;  // exponent range of non-zero finite elements
  int32_t sp = 0;                 // any NaN/Inf element (or, MX, an unsafe scale)
};

/// Packed operands of one fused-group GEMM (layout above).
struct Packed {
  size_t Kp = 0, KB = 0, KC = 0, NP = 0;
  // A: [I][Kp]; B: [NP][Kp][16]
  std::vector<float> av, bv;
  // Element exponents, BF16: int16 (sentinel kZeroExp), 2 k per dword;
  // FP8/FP6/FP4 (|e| <= 16): int8 (sentinel kZero8), 4 k per dword.
  std::vector<int32_t> ae;  // [I][Kp/kpd] dwords (k ascending from the low byte)
  std::vector<int8_t> be;   // [NP][Kp/kpd][16][kpd] int8 or int16
  std::vector<RowInfo> ai;
  std::vector<int32_t> blo, bhi, bsp;  // [NP][16]
  std::vector<float> as, bs;           // MX: 2^(s-127) [I][KB], [NP][KB][16]; chunk: sinv [I][KC], [NP][KC][16]
};

/// `v.data() + off` into a packed buffer that may be empty (K = 0: the loops read nothing
/// through the pointer). An empty vector's data() may be null, and a null pointer plus a
/// non-zero offset is undefined behaviour, so an empty buffer gives its data() unchanged.
template <class T>
T* at(std::vector<T>& v, size_t off) {
  return v.empty() ? v.data() : v.data() + off;
}
template <class T>
const T* at(const std::vector<T>& v, size_t off) {
  return v.empty() ? v.data() : v.data() + off;
}

/// Packs A and B for `kind` (not MxExact); L = 16 (BF16) or 32 elements per group.
Packed pack(GemmClass kind, const Panel& A, const Panel& B);

}  // namespace mxsim::emu::gemm::fused
