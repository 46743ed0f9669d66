// Emulated grouped GEMM for Mixture-of-Experts layers: fprop, dgrad, wgrad.
// Numerics: docs/numerics.md §5 (the contract the GPU backend must also meet).
//
// Shapes (G experts; m_splits[g] consecutive token rows belong to expert g,
// sum(m_splits) = M; groups of size 0 are legal):
//   fprop  Y[M, N]      = X[M, K] . W[g][N, K]^T     X quantized along K (Axis::Cols),
//                                                    W [G, N, K] along K (rowwise or 2-D tiles)
//   dgrad  dX[M, K]     = dY[M, N] . W[g][N, K]      dY along N (Axis::Cols),
//                                                    W along N (Axis::Rows, or 2-D tiles)
//   wgrad  dW[g][N, K] (+)= dY_g[M_g, N]^T . X_g[M_g, K]   dY and X along M (Axis::Rows),
//                                                    blocks never crossing a group boundary
// STATUS: API being built for issue 3; see the .cpp for what is implemented.
#pragma once
#include <cstdint>
#include <span>

#include "mxsim/format.hpp"
#include "mxsim/quantized_tensor.hpp"
#include "mxsim/tensor.hpp"

namespace mxsim::emu {

struct GemmOptions {
  /// Output element type: FP32, or BF16 (FP32 accumulator rounded once, RNE;
  /// values are returned as FP32 holding BF16-representable numbers).
  Format out = Format::FP32;
  /// Add into the existing output (wgrad into FP32 main_grad) instead of
  /// overwriting it: the FP32 accumulator starts at the current value.
  bool accumulate = false;
};

}  // namespace mxsim::emu
