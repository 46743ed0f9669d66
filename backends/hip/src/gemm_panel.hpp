// Internal: how the grouped-GEMM kernels of every block-dot class read their
// operands, and the one kernel skeleton they share (one thread per output
// element, 16 x 16 per thread block, K walked by the class's hd walk).
//
// An operand panel is one group's operand seen as [R rows, K contraction]:
// C[i][j] (+)= sum_k A[i][k] B[j][k] (numerics.md §5.1). Element (r, k) sits
// at storage (roff + r, k) when the contraction runs along storage columns,
// else at storage (k, roff + r); codes and scales are read straight from the
// QuantizedTensor storage (quantize.hpp) or from BF16 codes.
#pragma once
#include "check.hpp"

#include <cstddef>
#include <cstdint>

#include "mxsim/hd/gemm_block.hpp"

namespace mxsim::hip::gemm {

struct PanelView {
  Format elem = Format::E2M1;
  bool bf16 = false;
  bool along_scols = true;
  size_t roff = 0;
  const uint8_t* data = nullptr;     // this group's codes
  const uint8_t* sbytes = nullptr;   // this group's E8M0 scales
  const float* sinv = nullptr;       // this group's FP32 scale_inv
  const uint16_t* codes16 = nullptr; // this group's BF16 codes
  size_t rbytes = 0;                 // bytes per storage row (BF16: elements per row)
  size_t br = 1, bc = 1, nbc = 1;    // scale grid
};

/// Row r of a panel, as the hd walks read it.
struct Row {
  const PanelView& p;
  size_t r;
  MXSIM_HD void at(size_t k, size_t& sr, size_t& sc) const {
    if (p.along_scols) sr = p.roff + r, sc = k;
    else sr = k, sc = p.roff + r;
  }
  MXSIM_HD uint32_t code(size_t k) const {
    size_t sr, sc;
    at(k, sr, sc);
    if (p.bf16) return p.codes16[sr * p.rbytes + sc];
    if (p.elem == Format::E2M1) {
      const uint8_t b = p.data[sr * p.rbytes + sc / 2];
      return (sc & 1) ? uint32_t(b >> 4) : uint32_t(b & 0xFu);
    }
    return p.data[sr * p.rbytes + sc];
  }
  MXSIM_HD size_t scale_at(size_t k) const {
    size_t sr, sc;
    at(k, sr, sc);
    return (sr / p.br) * p.nbc + sc / p.bc;
  }
  MXSIM_HD uint8_t e8m0(size_t b) const { return p.sbytes[scale_at(b * 32)]; }
  MXSIM_HD float sinv(size_t c) const { return p.sinv[scale_at(c * 128)]; }
};

/// One group's launch: out[i * ld + j] for i < RA (rows of A), j < RB (rows of B).
struct Launch {
  PanelView A, B;
  size_t RA = 0, RB = 0, K = 0;
  float* out = nullptr;
  size_t ld = 0;
  bool accumulate = false, out_bf16 = false;
};

constexpr unsigned kTile = 16;

template <class Dot>
__global__ void gemm_kernel(Launch L, Dot dot) {
  const size_t i = size_t(blockIdx.x) * kTile + threadIdx.y, j = size_t(blockIdx.y) * kTile + threadIdx.x;
  if (i >= L.RA || j >= L.RB) return;
  float* o = L.out + i * L.ld + j;
  const float acc0 = L.accumulate ? *o : 0.0f;
  *o = hd::gemm_output(dot(acc0, Row{L.A, i}, Row{L.B, j}, L.K), L.out_bf16);
}

template <class Dot>
void launch(const Launch& L, Dot dot, hipStream_t s, const char* name) {
  if (L.RA == 0 || L.RB == 0) return;
  const size_t gy = (L.RB + kTile - 1) / kTile;
  if (gy > 65535)
    throw std::invalid_argument(std::string(name) + ": " + std::to_string(L.RB) + " output columns exceed the grid (" +
                                std::to_string(65535 * kTile) + ")");
  const dim3 grid(unsigned((L.RA + kTile - 1) / kTile), unsigned(gy)), block(kTile, kTile);
  gemm_kernel<Dot><<<grid, block, 0, s>>>(L, dot);
  const hipError_t e = hipGetLastError();
  if (e != hipSuccess) detail::fail(e, name, __FILE__, __LINE__);
}

// One entry point per block-dot class (gemm_<class>.hip).
void launch_mx_exact(const Launch& L, hipStream_t s);
void launch_mx_f13(const Launch& L, hipStream_t s);
void launch_fp8_chunk128(const Launch& L, hipStream_t s);
void launch_bf16_f25(const Launch& L, hipStream_t s);

}  // namespace mxsim::hip::gemm
