// The plan of a grouped GEMM (docs/numerics.md §5): every check a grouped
// fprop, dgrad or wgrad makes of its operands, made once, here, for every
// backend. The emulator (emu/src/gemm_api.cpp), the GPU (backends/hip/src/
// gemm.hip) and the C layer describe their operands the same way (a spec and
// an hd::QuantLayout), ask for a plan, and compute what it lists; none of
// them re-checks shapes, m_splits, axes or recipe pairs.
//
// A plan names each non-empty group's two panels. A panel is one group's
// operand seen as [R rows, K contraction] (numerics §5.1: C[i][j] (+)=
// sum_k A[i][k] B[j][k]): which operand and group it reads, its first
// logical row, and whether the contraction runs along the operand's logical
// rows (dgrad's W, wgrad's operands) or its logical cols.
//
// Errors: std::invalid_argument "grouped <form>: <what>", naming the operand
// (m_splits that are negative or do not sum to M, group counts, contraction
// lengths, blocks not along the contraction, pairs the contract does not
// define, an output format other than FP32 / BF16). Nothing is computed then.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mxsim/gemm_options.hpp"
#include "mxsim/hd/gemm_block.hpp"
#include "mxsim/hd/quant_block.hpp"
#include "mxsim/quant_spec.hpp"

namespace mxsim {

struct QuantizedTensor;

/// The spec of an unscaled BF16 operand (elem BF16, one FP32 "block" of the
/// whole tensor): what a grouped GEMM's BF16 operands carry (class bf16-f25).
QuantSpec bf16_spec();

/// A grouped GEMM's operand as every backend describes it.
struct GemmOperandDesc {
  QuantSpec spec;                 ///< bf16_spec() for an unscaled BF16 operand
  hd::QuantLayout layout;         ///< logical [groups, rows, cols], storage extents, scale grid
  float tensor_scale_inv = 1.0f;  ///< NVFP4's tensor scale (1 for every other recipe)
  bool bf16() const { return spec.elem == Format::BF16; }
  /// A host quantized tensor's description.
  static GemmOperandDesc of(const QuantizedTensor& q);
  /// A BF16 operand of logical [groups, rows, cols], row-major.
  static GemmOperandDesc of_bf16(size_t groups, size_t rows, size_t cols);
};

/// fprop: Y[M, N] = X[M, K] . W[g][N, K]^T; dgrad: dX[M, K] = dY[M, N] . W[g][N, K];
/// wgrad: dW[g][N, K] (+)= dY_g^T . X_g.
enum class GemmForm : uint8_t { Fprop, Dgrad, Wgrad };
const char* name_of(GemmForm f);

/// One group's operand as a panel [R, K].
struct GemmPanel {
  size_t operand = 0;          ///< index into the operand list (wgrad: the group; else 0)
  size_t group = 0;            ///< group of that operand
  size_t r0 = 0;               ///< first logical row (the token operand's rows of this group)
  size_t R = 0, K = 0;         ///< panel rows, contraction length
  bool contract_rows = false;  ///< contraction along the operand's logical rows
  bool along_scols = true;     ///< ... which are storage columns (contract_rows == transposed)
};

struct GemmPlan {
  GemmForm form = GemmForm::Fprop;
  std::vector<int64_t> m_splits;
  /// Output: token forms [M, J] (rows = M, cols = J); wgrad [G, N, K] (rows = N, cols = K).
  size_t groups = 0, rows = 0, cols = 0;
  GemmOptions opt;
  struct Group {
    size_t g = 0;               ///< the group (expert)
    hd::GemmClass cls{};        ///< its pair's block-dot class (hd::gemm_class_of)
    GemmPanel a, b;             ///< out[i][j] over a's rows i and b's rows j
    size_t out_offset = 0;      ///< first output element: token forms m0 * J, wgrad g * N * K
  };
  /// The groups with at least one token, in order.
  std::vector<Group> runs;
  /// wgrad's groups without tokens: +0, or unchanged when accumulating.
  std::vector<size_t> empty;

  /// Row stride of the output (J, or K for wgrad).
  size_t ld() const { return cols; }
  /// Elements of the whole output.
  size_t out_elems() const { return (form == GemmForm::Wgrad ? groups : 1) * rows * cols; }
  /// The output's extents: {M, J} or {G, N, K}.
  std::vector<size_t> out_extents() const;
  /// Throws unless `extents` are the output's (an accumulate target must be).
  void check_out(std::span<const size_t> extents) const;
  /// Every run is `cls` (the emulator's direct MX paths take whole calls of one class).
  bool all_runs(hd::GemmClass cls) const;
};

/// fprop (W contracted along its cols) or dgrad (along its rows): a is the token operand
/// (groups 1, [M, Kc]), w the weights ([G, ., .]).
GemmPlan plan_token_gemm(GemmForm form, const GemmOperandDesc& a, const GemmOperandDesc& w,
                         std::span<const int64_t> m_splits, const GemmOptions& opt);
/// wgrad: dy[g] [1, M_g, N] and x[g] [1, M_g, K], both contracted along M_g.
GemmPlan plan_wgrad(std::span<const GemmOperandDesc> dy, std::span<const GemmOperandDesc> x,
                    std::span<const int64_t> m_splits, const GemmOptions& opt);

/// The block-dot class of a pair (hd::gemm_class_of), refused naming both specs; `gemm` is the
/// message's prefix ("grouped fprop", "gemm").
hd::GemmClass gemm_pair_class(const QuantSpec& a, const QuantSpec& b, const std::string& gemm);

}  // namespace mxsim
