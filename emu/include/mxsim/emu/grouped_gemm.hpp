// Emulated grouped GEMM for Mixture-of-Experts layers: fprop, dgrad, wgrad.
// Numerics: docs/numerics.md §5 (the contract the GPU backend must also meet).
//
// Shapes (G experts; m_splits[g] consecutive token rows belong to expert g,
// sum(m_splits) = M; groups of size 0 are legal):
//   fprop  Y[M, N]      = X[M, K] . W[g][N, K]^T     X quantized along K (Axis::Cols),
//                                                    W [G, N, K] along K (Axis::Cols or 2-D tiles)
//   dgrad  dX[M, K]     = dY[M, N] . W[g][N, K]      dY along N (Axis::Cols),
//                                                    W along N (Axis::Rows, or 2-D tiles)
//   wgrad  dW[g][N, K] (+)= dY_g[M_g, N]^T . X_g[M_g, K]   dY_g and X_g along M (Axis::Rows),
//                                                    one QuantizedTensor per group, so blocks
//                                                    never cross a group boundary
//                                                    (quantize_grouped_colwise builds them)
//
// Operand kinds (docs/numerics.md §5.2):
//   E8M0-scaled ("MX"): elements E2M1, E2M3, E3M2, E4M3, E5M2; blocks of 32 along
//     the contraction (1x32 or 32x32 tiles; the two operands may differ in the
//     other axis). E2M1/E2M3 pairs: exact block dots. Pairs involving E4M3,
//     E5M2 or E3M2: each 32-block is the Hopper wgmma k32 fused sum (F = 13,
//     RZ to e8m13). Either way one RNE per block into the FP32 accumulator.
//   FP32-scaled FP8 (per-tensor, per-row, 1x128, 128x128): 128-K chunks of four
//     chained k32 fused sums, promoted as acc = fmaf(chunk, fl32(sa*sb), acc).
//   BF16: unscaled; fused groups of 16 along K with the accumulator as C,
//     F = 25, RZ to FP32 (Hopper wgmma bf16).
//   NVFP4 (E2M1, UE4M3 scales per 16 along the contraction: 1x16 or 16x16 tiles,
//     and an FP32 tensor scale each): exact 16-element block dots times both
//     block scales, one RNE per block into an FP32 sum from +0, then
//     fmaf(sum, fl32(S_dec_a * S_dec_b), C) with C the existing output or +0.
//   AMD FNUZ formats are rejected (not in the contract yet).
//
// Errors: std::invalid_argument naming the GEMM, operand and problem (m_splits
// not summing to M, a negative size, shapes, recipes or block axes that
// disagree). On error the output is left untouched.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "mxsim/format.hpp"
#include "mxsim/gemm_options.hpp"
#include "mxsim/gemm_plan.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/quantized_tensor.hpp"
#include "mxsim/tensor.hpp"

namespace mxsim::emu {

/// The GEMM options type is core's (mxsim/gemm_options.hpp): one type for
/// every backend. Fast: integer block dots (AVX-512 VNNI when present), OpenMP
/// over output tiles; Reference: the literal contract with exact
/// Boost.Multiprecision arithmetic.
using GemmImpl = ::mxsim::GemmImpl;
using GemmOptions = ::mxsim::GemmOptions;

/// A BF16 operand given as FP32 values: QuantSpec{.elem = Format::BF16} in the
/// high-precision overloads rounds every value to BF16 (RNE) and uses no scale.
/// `bf16_spec()` returns that spec (core's, gemm_plan.hpp).
using ::mxsim::bf16_spec;

// ---------------------------------------------------------------------------
// Quantized operands.
//
// y / dx: [M, N] / [M, K] FP32. Without accumulate they are resized and
// overwritten (rows of empty groups: none exist; every row belongs to a group).
// With accumulate their shape must already match.
// dw: [G, N, K] FP32; without accumulate resized and overwritten, except that
// an empty group's dW[g] is set to +0 (the sum over no tokens); with accumulate
// an empty group's dW[g] is left exactly unchanged.

/// fprop: x logical [M, K] (groups 1, Axis::Cols), w logical [G, N, K].
void grouped_fprop(const QuantizedTensor& x, const QuantizedTensor& w, std::span<const int64_t> m_splits,
                   Tensor2f& y, const GemmOptions& opt = {});
/// dgrad: dy logical [M, N] (groups 1, Axis::Cols), w logical [G, N, K]
/// quantized along N (Axis::Rows, or 2-D tiles shared with fprop).
void grouped_dgrad(const QuantizedTensor& dy, const QuantizedTensor& w, std::span<const int64_t> m_splits,
                   Tensor2f& dx, const GemmOptions& opt = {});
/// wgrad: dy[g] logical [M_g, N], x[g] logical [M_g, K], each quantized along
/// M (Axis::Rows); sizes must equal m_splits.
void grouped_wgrad(std::span<const QuantizedTensor> dy, std::span<const QuantizedTensor> x,
                   std::span<const int64_t> m_splits, Tensor3f& dw, const GemmOptions& opt = {});

// ---------------------------------------------------------------------------
// High-precision operands quantized on the way in (emu::quantize with the
// axes above; wgrad operands through quantize_grouped_colwise). A spec with
// elem == BF16 rounds to BF16 instead. Both specs must form a pair the
// contract defines (see above).
void grouped_fprop(const Tensor2f& x, const QuantSpec& x_spec, const Tensor3f& w, const QuantSpec& w_spec,
                   std::span<const int64_t> m_splits, Tensor2f& y, const GemmOptions& opt = {});
void grouped_dgrad(const Tensor2f& dy, const QuantSpec& dy_spec, const Tensor3f& w, const QuantSpec& w_spec,
                   std::span<const int64_t> m_splits, Tensor2f& dx, const GemmOptions& opt = {});
void grouped_wgrad(const Tensor2f& dy, const QuantSpec& dy_spec, const Tensor2f& x, const QuantSpec& x_spec,
                   std::span<const int64_t> m_splits, Tensor3f& dw, const GemmOptions& opt = {});

/// Grouped column-wise quantization for wgrad operands: x [M, C] FP32 is cut
/// into the m_splits row slices; slice g [M_g, C] is quantized on its own with
/// Axis::Rows (storage [C, M_g], blocks of the spec along M starting at the
/// group's first token; a ragged last block is partial). So no block crosses a
/// group boundary and no padding rows exist. An empty group gives a tensor
/// with rows = 0. Under stochastic rounding slice g (rows m0 .. m0 + M_g) is
/// quantized with sr_index_base = spec.sr_index_base + m0 * C, so each element
/// draws the word of its index in the whole [M, C] tensor (docs/numerics.md
/// §2.5): groups never share random words. Throws std::invalid_argument for bad m_splits or a spec the
/// slice cannot take (e.g. hadamard16 with M_g not a multiple of 16).
std::vector<QuantizedTensor> quantize_grouped_colwise(const Tensor2f& x, std::span<const int64_t> m_splits,
                                                      const QuantSpec& spec);

/// Name of the block-dot class the contract uses for a pair of operand specs
/// ("mx-exact", "mx-f13", "fp8-chunk128", "bf16-f25", "nvfp4-exact"); throws
/// std::invalid_argument for pairs the contract does not define.
const char* gemm_class_name(const QuantSpec& a, const QuantSpec& b);

}  // namespace mxsim::emu
