// GPU grouped GEMM for Mixture-of-Experts layers: fprop, dgrad, wgrad, with
// the numerics of docs/numerics.md §5 bit for bit (the same contract as
// emu/include/mxsim/emu/grouped_gemm.hpp; tests/test_gpu_gemm.cpp compares
// every output element with the emulator's reference).
//
// Shapes (G experts; m_splits[g] consecutive token rows belong to expert g,
// sum(m_splits) = M; groups of size 0 are legal), all row-major FP32 outputs:
//   fprop  Y[M, N]      = X[M, K] . W[g][N, K]^T      X along K (Axis::Cols), W [G, N, K]
//                                                     along K (Axis::Cols or 2-D tiles)
//   dgrad  dX[M, K]     = dY[M, N] . W[g][N, K]       dY along N (Axis::Cols), W along N
//                                                     (Axis::Rows, or the same 2-D tiles)
//   wgrad  dW[g][N, K] (+)= dY_g^T . X_g              dY_g [M_g, N] and X_g [M_g, K], one
//                                                     operand per group, along M (Axis::Rows;
//                                                     hip::alloc_grouped_colwise)
// Operand pairs and their block-dot classes (hd::gemm_class_of):
//   E8M0 x E8M0, both E2M1/E2M3          mx-exact      (gemm_mx_exact.hip)
//   E8M0 x E8M0, any E4M3/E5M2/E3M2      mx-f13        (gemm_mx_f13.hip)
//   FP32 x FP32 scale_inv, E4M3/E5M2     fp8-chunk128  (gemm_fp8_chunk128.hip)
//   BF16 x BF16 (unscaled)               bf16-f25      (gemm_bf16_f25.hip)
//   NVFP4 x NVFP4 (UE4M3 + tensor scale)  nvfp4-exact   (gemm_nvfp4_exact.hip)
// Every output element walks K ascending in the contract's blocks (no
// split-K, no atomics), with the steps of core/include/mxsim/hd/gemm_block.hpp:
// tiled kernels stage each 128-slab of A and B in shared memory, decoded once
// per element, and one thread walks an output (large and small tiles), or the
// lanes of a warp share one output's fused groups, their order-free parts
// (maximum exponent, exact sum) combined by shuffles (GemmKernel). Groups of
// one call run side by side (up to 16 per kernel launch). The fast
// matrix-unit paths (IMMA / wgmma, MFMA) will sit behind these same entry
// points.
//
// Output: FP32 accumulator written as FP32, or rounded once to BF16 (RNE)
// and written as FP32 (GemmParams::out_bf16). With `accumulate` the
// accumulator starts at the existing output (wgrad into FP32 main_grad);
// otherwise the output is overwritten (no need to clear it). wgrad of an
// empty group writes +0 to dW[g], or leaves it unchanged when accumulating.
// Every NaN written is 0x7FC00000.
//
// Errors: std::invalid_argument naming the GEMM, the operand and the problem
// (m_splits that are negative or do not sum to M, group counts, contraction
// lengths, blocks not along the contraction, pairs the contract does not
// define: core's GemmPlan, in the emulator's words); nothing is launched then.
// Runtime failures throw mxsim::hip::Error.
// Calls are asynchronous on `stream` (hipStream_t cast to void*, nullptr =
// default); m_splits are host values.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>

#include "mxsim/gemm_plan.hpp"
#include "mxsim/hip/quantize.hpp"

namespace mxsim::hip {

/// One GEMM operand in device memory: a quantized tensor (layout of
/// quantize.hpp) or BF16 codes. Build it with from_quantized / from_bf16.
struct GemmOperand {
  QuantSpec spec;                 ///< spec.elem == BF16 for a BF16 operand
  hd::QuantLayout layout;         ///< logical [groups, rows, cols] and storage layout
  const uint8_t* data = nullptr;
  const uint8_t* scale_bytes = nullptr;  ///< E8M0
  const float* scale_inv = nullptr;      ///< FP32 scale kinds
  const uint16_t* bf16 = nullptr;        ///< BF16 codes [groups, rows, cols], row-major
  const float* tensor_scale_inv = nullptr;  ///< NVFP4: S_dec, one float in device memory (read there)

  static GemmOperand from_quantized(const DeviceQTensor& q);
  /// BF16 operand: codes are the upper halves of FP32 values rounded RNE
  /// (round_bf16_code), [groups, rows, cols] row-major.
  static GemmOperand from_bf16(const uint16_t* codes, size_t groups, size_t rows, size_t cols);
  /// What core's GEMM plan checks (mxsim/gemm_plan.hpp).
  GemmOperandDesc desc() const { return {spec, layout, 1.0f}; }
};

/// Which kernel computes a group (gemm_panel.hpp). Every one gives the
/// contract's bits; Auto picks by the group's size (the large 32 x 32 tile,
/// the small 8 x 32 tile, or lanes sharing one output for long contractions
/// of few outputs). The others force one, for tests and benchmarks (Lanes
/// falls back to the small tile for mx-exact, which has no lane form).
/// Wgmma: the Hopper tensor-core kernels (gemm_sm90.hip; an sm_90 device
/// and a build with sm_90a code, checked once by a probe kernel) for the
/// pairs whose contract a tensor core meets: mx-exact E2M1 x E2M1 (an FP8
/// wgmma of E2M1 values is the exact block dot) and bf16-f25 (the class is
/// the Hopper BF16 group, edges as an H200 computes them:
/// hd::hopper_bf16_edges). Auto takes them for calls of at least 2^30 (bf16-f25: 2^20)
/// multiply-adds there. They build K-major operand images in a device
/// workspace (StreamWorkspace: the caller's, or the one kept per (device, stream))
/// grown on demand (growing waits for that stream; an allocation failure
/// throws OutOfMemory naming the workspace before any output is touched). WgmmaHardware also runs mx-f13
/// and fp8-chunk128 on the tensor cores' own FP8 arithmetic, which those
/// classes model (MMA-Sim) and which agreed with them on ordinary data but
/// not on all adversarial inputs on an H200 (docs/gpu.md): a probe of the
/// hardware against the contract, never chosen by Auto. Where the device,
/// build or pair does not qualify, either falls back to Auto's choice among
/// the tiled kernels.
enum class GemmKernel : uint8_t { Auto, LargeTile, SmallTile, Lanes, Wgmma, WgmmaHardware };

struct GemmParams {
  bool accumulate = false;  ///< add into the existing output
  bool out_bf16 = false;    ///< round the FP32 accumulator to BF16 (RNE) once
  GemmKernel kernel = GemmKernel::Auto;
  StreamWorkspace* workspace = nullptr;  ///< the tensor-core kernels' images (nullptr: the process's of
                                        ///< (device, stream), hip::stream_workspace)
};

/// fprop: x logical [1, M, K], w [G, N, K]; y [M, N].
void grouped_fprop(const GemmOperand& x, const GemmOperand& w, std::span<const int64_t> m_splits, float* d_y,
                   const GemmParams& p = {}, void* stream = nullptr);
/// dgrad: dy logical [1, M, N], w [G, N, K] quantized along N; dx [M, K].
void grouped_dgrad(const GemmOperand& dy, const GemmOperand& w, std::span<const int64_t> m_splits, float* d_dx,
                   const GemmParams& p = {}, void* stream = nullptr);
/// wgrad: dy[g] logical [1, M_g, N], x[g] [1, M_g, K], both along M; dw [G, N, K].
void grouped_wgrad(std::span<const GemmOperand> dy, std::span<const GemmOperand> x, std::span<const int64_t> m_splits,
                   float* d_dw, const GemmParams& p = {}, void* stream = nullptr);

// Test and probe knobs (launch counts, the persistent-CTA cap) are in
// mxsim/hip/gemm_testing.hpp: not part of the API a caller of the GEMMs needs.

/// Rounds n FP32 values to BF16 codes (round_bf16_code: RNE, IEEE overflow,
/// canonical quiet NaN with the input's sign) for from_bf16 operands.
void round_bf16_device(const float* d_x, uint16_t* d_codes, size_t n, void* stream = nullptr);

}  // namespace mxsim::hip
