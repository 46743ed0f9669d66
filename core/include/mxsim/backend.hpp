// The abstract Backend: every operation a training step performs on tensors,
// so that the training simulator (core/src/sim_*.cpp) is written once and runs
// on the CPU emulator (emu) or a GPU backend (backends/hip).
//
// Tensors cross this interface as host xtensor containers (Tensor2f, Tensor3f,
// QuantizedTensor). The emu backend computes on them directly. A GPU backend
// keeps device-resident mirrors keyed by the tensor objects; the simulator
// never reads a backend's internals. Every operation is deterministic: fixed
// reduction orders (docs/numerics.md), results independent of thread count.
//
// Value conventions: "BF16" tensors are FP32 containers holding values that
// are exactly representable in BF16 (rounded RNE through mxsim::encode).
// Error behaviour: shape mismatches throw std::invalid_argument naming the op.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mxsim/format.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/quantized_tensor.hpp"
#include "mxsim/tensor.hpp"

namespace mxsim {

/// Output of a GEMM: FP32, or BF16 (FP32 accumulator rounded once, RNE);
/// accumulate = the accumulator starts at the output's current value
/// (wgrad into FP32 main_grad, Megatron gradient-accumulation fusion).
struct GemmOut {
  Format out = Format::BF16;
  bool accumulate = false;
};

class Backend {
 public:
  virtual ~Backend() = default;
  /// "emu", "hip".
  virtual std::string name() const = 0;
  /// Whether this backend implements every op below (a GPU backend that only
  /// offers kernels returns false; `mxsim train --backend auto` skips it).
  virtual bool supports_training() const = 0;
  /// Worker threads for ops that parallelise (results never depend on it).
  virtual void set_threads(int n) = 0;

  // --- quantization (docs/numerics.md §2-§4) ---
  /// Quantize x [G, rows, cols] by spec, 1-D blocks along axis.
  virtual QuantizedTensor quantize(const Tensor3f& x, const QuantSpec& spec, Axis axis) = 0;
  /// Exact dequantization to the logical shape [G, rows, cols].
  virtual Tensor3f dequantize(const QuantizedTensor& q) = 0;
  /// Error statistics of q against its source x (per-layer trace statistics).
  struct QStats {
    double mse = 0, sqnr_db = 0;
    uint64_t count = 0, underflow = 0, saturated = 0, nonfinite = 0;
    std::vector<int> scale_exp;  ///< per block scale exponent (histogrammed by the caller)
  };
  virtual QStats quant_stats(const Tensor3f& x, const QuantizedTensor& q) = 0;
  /// Round every element to BF16 (RNE, IEEE overflow) in place.
  virtual void round_bf16(Tensor3f& x) = 0;
  virtual void round_bf16(Tensor2f& x) = 0;

  // --- grouped GEMM (docs/numerics.md §5). m_splits[g] consecutive rows per
  // group, empty groups legal; G = m_splits.size(); a plain GEMM is G = 1.
  // Each operand is given as its high-precision tensor plus, when the recipe
  // quantizes it, the QuantizedTensor (nullptr / empty span = BF16 operand:
  // the tensor already holds BF16 values). ---
  /// fprop  y[M, N] = x[M, K] . w[g][N, K]^T   (xq along K, wq rowwise/2-D)
  virtual void grouped_fprop(const Tensor2f& x, const QuantizedTensor* xq, const Tensor3f& w,
                             const QuantizedTensor* wq, std::span<const int64_t> m_splits, Tensor2f& y,
                             GemmOut o) = 0;
  /// dgrad  dx[M, K] = dy[M, N] . w[g][N, K]   (dyq along N, wq columnwise/2-D)
  virtual void grouped_dgrad(const Tensor2f& dy, const QuantizedTensor* dyq, const Tensor3f& w,
                             const QuantizedTensor* wq, std::span<const int64_t> m_splits, Tensor2f& dx,
                             GemmOut o) = 0;
  /// wgrad  dw[g][N, K] (+)= dy_g[M_g, N]^T . x_g[M_g, K]; operands quantized
  /// per group along M (quantize_grouped_colwise). With accumulate, groups
  /// with M_g = 0 leave dw[g] exactly unchanged.
  virtual void grouped_wgrad(const Tensor2f& dy, std::span<const QuantizedTensor> dyq, const Tensor2f& x,
                             std::span<const QuantizedTensor> xq, std::span<const int64_t> m_splits, Tensor3f& dw,
                             GemmOut o) = 0;
  /// Cut x [M, C] into the m_splits row slices and quantize each along M
  /// (Axis::Rows); blocks never cross a group boundary.
  virtual std::vector<QuantizedTensor> quantize_grouped_colwise(const Tensor2f& x, std::span<const int64_t> m_splits,
                                                                const QuantSpec& spec) = 0;

  // --- router, loss, elementwise, optimizer ---
  /// Row-wise softmax of logits [T, E] (FP32; max-subtracted, ascending sums).
  virtual Tensor2f softmax_rows(const Tensor2f& logits) = 0;
  /// Top-k per row: indices [T, k] (largest first, ties to the lower index;
  /// NaN ranks below every number, -inf included, NaNs tie among themselves).
  virtual std::vector<int> topk_rows(const Tensor2f& probs, int k) = 0;
  /// Cross-entropy of logits [T, C] against labels; returns the per-row
  /// losses (FP32) and writes dlogits = (softmax - onehot) * grad_scale.
  virtual std::vector<float> cross_entropy(const Tensor2f& logits, std::span<const uint8_t> labels,
                                           float grad_scale, Tensor2f& dlogits) = 0;
  // --- MoE elementwise ops (all outputs BF16 values unless stated; FP32
  // arithmetic in the order given) ---
  /// a = bf16(act(u)), act = "relu" | "gelu" (erf form) | "silu".
  virtual void activation(const std::string& kind, const Tensor2f& u, Tensor2f& a) = 0;
  /// du = bf16(da * act'(u)).
  virtual void activation_grad(const std::string& kind, const Tensor2f& u, const Tensor2f& da, Tensor2f& du) = 0;
  /// Permute tokens to expert order: dst [M, d] zero-filled, then
  /// dst[row_of[t*k + s]] = src[t] for every token t and slot s.
  virtual void permute_rows(const Tensor2f& src, std::span<const int64_t> row_of, size_t k, size_t M,
                            Tensor2f& dst) = 0;
  /// Unpermute and combine with a residual: h1[t] = bf16(h0[t] + bf16(m)),
  /// m = sum over slots s (ascending) of fl32(p[t, top[t*k+s]] * yp[row_of[t*k+s]]).
  virtual void unpermute_combine(const Tensor2f& yp, const Tensor2f& h0, const Tensor2f& p, std::span<const int> top,
                                 std::span<const int64_t> row_of, size_t k, Tensor2f& h1) = 0;
  /// Backward of the combine: dyp[row] = bf16(gate * dh1[t]) (zero rows for
  /// padding), dgate[t*k+s] = sum_j dh1[t, j] * yp[row, j] (FP32, ascending j).
  virtual void combine_backward(const Tensor2f& dh1, const Tensor2f& yp, const Tensor2f& p, std::span<const int> top,
                                std::span<const int64_t> row_of, size_t k, Tensor2f& dyp, std::vector<float>& dgate) = 0;
  /// Router softmax backward with the auxiliary loss: dp[t, e] = aux_grad * f[e]
  /// (+ dgate of the chosen slots); dlogits[t, e] = bf16(p (dp - sum_e p dp)).
  virtual void router_backward(const Tensor2f& p, std::span<const int> top, std::span<const float> dgate,
                               std::span<const float> f, float aux_grad, size_t k, Tensor2f& dlogits) = 0;
  /// dh0[t] = bf16(dh1[t] + dh0_router[t] + sum over slots dxp[row_of[t*k+s]]).
  virtual void embed_grad_sum(const Tensor2f& dh1, const Tensor2f& dh0_router, const Tensor2f& dxp,
                              std::span<const int64_t> row_of, size_t k, Tensor2f& dh0) = 0;

  /// AdamW on an FP32 master (decoupled decay, bias correction with step
  /// t >= 1; the torch.optim.AdamW documentation's algorithm, evaluated in
  /// FP32 in the order docs/simulator.md "Optimizer" gives, not PyTorch's
  /// lerp_ kernel); writes the BF16 model copy.
  struct AdamW {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t t;
  };
  virtual void adamw(Tensor3f& master, Tensor3f& m, Tensor3f& v, const Tensor3f& grad, const AdamW& h,
                     Tensor3f& model_bf16) = 0;
};

}  // namespace mxsim
