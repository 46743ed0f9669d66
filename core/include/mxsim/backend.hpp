// The abstract Backend: owner of tensor memory and every operation a training
// step performs, so that the training simulator (core/src/sim_*.cpp) is
// written once and runs on the CPU emulator (emu) or a GPU backend
// (backends/hip).
//
// Memory (backend_tensor.hpp): the backend allocates and owns storage; the
// simulator holds handles and moves data only through upload / download.
// The element arithmetic of every op is docs/numerics.md (§2-§5 quantization
// and GEMM, §6 the training-step ops), shared with device code through the
// MXSIM_HD headers (hd/elementwise.hpp, rounding.hpp, ...). Every operation
// is deterministic: fixed reduction orders, results independent of the
// thread count.
//
// Value conventions: "BF16" tensors are f32 tensors holding values exactly
// representable in BF16 (rounded RNE through mxsim::round_bf16). Outputs are
// allocated by the caller with the shape given and overwritten unless stated.
// Ops that return a host value (amax, sums, counts, statistics) are
// synchronisation points: a GPU backend reduces on the device and copies the
// few bytes back.
//
// Error behaviour: a shape, dtype or size mismatch, or a handle of another
// backend, throws std::invalid_argument naming the op and the operand.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxsim/activation.hpp"
#include "mxsim/backend_tensor.hpp"
#include "mxsim/format.hpp"
#include "mxsim/gemm_options.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/quant_stats.hpp"
#include "mxsim/quantized_tensor.hpp"
#include "mxsim/tensor.hpp"

namespace mxsim {

class Backend {
 public:
  virtual ~Backend() = default;
  /// "emu", "hip".
  virtual std::string name() const = 0;
  /// What the ops run on, for the first line of a run's log: e.g. "NVIDIA
  /// H200 (sm_90, 132 SMs)" or "CPU, avx512 kernels".
  virtual std::string device() const { return name(); }
  /// Worker threads for ops that parallelise (results never depend on it).
  virtual void set_threads(int n) = 0;
  /// Returns once every op queued so far has finished (a GPU backend waits for
  /// its stream; the emulator's ops are synchronous). For timing (ProfilingBackend).
  virtual void synchronize() {}

  /// The operations below, for per-op capability queries (a GPU backend may
  /// offer some before all).
  enum class Op : uint8_t {
    Memory, Quantize, QuantizeGrouped, Dequantize, QuantStats, ScaleExpHistogram, Amax, RoundBf16,
    GemmQuantized, GemmBf16, AccumulateGroups,
    Softmax, Topk, Route, Permute, Combine, CombineBackward, AuxLoss, RouterBackward, EmbedGradSum,
    Activation, ActivationGrad, CrossEntropy, ArgmaxRows, CountCorrect, L2Norm, AdamW, DeOsc, OscMetrics,
    kCount
  };
  virtual bool supports(Op op) const = 0;
  /// Whether every op of a training step is implemented (`mxsim train
  /// --backend auto` takes the first backend for which this holds).
  bool supports_training() const;

  // ------------------------------------------------------------ memory
  /// A tensor of `shape` (rank 1-3) and `dtype`; contents unspecified.
  virtual Tensor alloc(DType dtype, Shape shape) = 0;
  /// Host -> backend: `bytes` must equal t.bytes().
  virtual void upload(Tensor& t, const void* src, size_t bytes) = 0;
  /// Backend -> host: `bytes` must equal t.bytes().
  virtual void download(const Tensor& t, void* dst, size_t bytes) = 0;
  /// dst = src element for element (same dtype and element count; shapes may differ).
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  /// Copy all of src into dst's elements [offset, offset + src.numel()) (same dtype).
  virtual void copy_into(const Tensor& src, Tensor& dst, size_t offset) = 0;
  /// dst elements [dst_offset, dst_offset + count) = src elements [src_offset, src_offset + count),
  /// flat row-major indices (same dtype; src and dst distinct tensors). The row moves of the
  /// expert-parallel dispatch and the flat shards of the distributed optimizer (sim/parallel.hpp).
  /// Throws std::invalid_argument when a range leaves its tensor or the dtypes differ. The default
  /// stages both tensors through the host (download, splice, upload); a backend overrides it with
  /// a device copy.
  virtual void copy_range(const Tensor& src, size_t src_offset, Tensor& dst, size_t dst_offset, size_t count);
  /// copy_range's argument check (every override calls it first): throws std::invalid_argument
  /// naming both tensors when a range leaves its tensor or the dtypes differ.
  static void check_copy_range(const Tensor& src, size_t src_offset, const Tensor& dst, size_t dst_offset,
                               size_t count);
  /// gather_deferred's / quant_elements_deferred's check: throws
  /// std::invalid_argument naming `op` and the first index outside [0, n).
  static void check_indices(std::span<const int64_t> idx, size_t n, const char* op, const char* what);
  /// Every element = 0 (+0.0 for f32).
  virtual void fill_zero(Tensor& t) = 0;
  /// The host form of a quantized tensor (files, tests) and back.
  virtual QuantizedTensor download(const QTensor& q) = 0;
  virtual QTensor upload(const QuantizedTensor& q) = 0;
  virtual std::vector<QuantizedTensor> download(const GroupedQTensor& q) = 0;

  // Typed conveniences over upload / download (dtype and size checked).
  template <class T>
  void upload(Tensor& t, std::span<const T> src);
  template <class T>
  std::vector<T> download(const Tensor& t);
  /// A new f32 tensor holding x ([rows, cols] / [G, rows, cols]).
  Tensor upload(const Tensor2f& x);
  Tensor upload(const Tensor3f& x);
  /// An f32 tensor of rank 2 / rank 3 as a host container.
  Tensor2f download2(const Tensor& t);
  Tensor3f download3(const Tensor& t);

  // ------------------------------------------------------------ quantization (numerics §2-§4)
  /// Quantize x (f32, [rows, cols] as one group or [G, rows, cols]) by spec,
  /// 1-D blocks along axis. Throws std::invalid_argument for a spec the shape
  /// cannot take (emu::quantize).
  virtual QTensor quantize(const Tensor& x, const QuantSpec& spec, Axis axis) = 0;
  /// Cut x [M, C] into the m_splits row slices and quantize each along M
  /// (Axis::Rows); blocks never cross a group boundary; SR words follow the
  /// element's index in the whole tensor (emu::quantize_grouped_colwise).
  virtual GroupedQTensor quantize_grouped_colwise(const Tensor& x, std::span<const int64_t> m_splits,
                                                  const QuantSpec& spec) = 0;
  /// Exact dequantization into `out` (f32, [G, rows, cols], or [rows, cols] when G = 1).
  virtual void dequantize(const QTensor& q, Tensor& out) = 0;
  /// Error statistics of q against its source x (numerics §4.6).
  virtual QuantStats quant_stats(const Tensor& x, const QTensor& q) = 0;
  /// Histogram of q's block scale exponents (quant_stats.hpp ScaleExpCounts).
  virtual ScaleExpCounts scale_exp_histogram(const QTensor& q) = 0;
  /// max |x| over an f32 tensor (hd::amax_step fold: the first NaN is the result).
  virtual float amax(const Tensor& x) = 0;
  /// Round every element to BF16 (RNE, IEEE overflow): in place, or src -> dst.
  virtual void round_bf16(Tensor& x) = 0;
  virtual void round_bf16(const Tensor& src, Tensor& dst) = 0;

  // ------------------------------------------------------------ grouped GEMM (numerics §5)
  // m_splits[g] consecutive rows per group (host metadata of the launch),
  // empty groups legal; G = m_splits.size(); a plain GEMM is G = 1. Quantized
  // operands pair with quantized ones, BF16 (f32 tensors of BF16 values) with BF16.
  /// fprop  y[M, N] = x[M, K] . w[g][N, K]^T   (xq along K, wq rowwise/2-D)
  virtual void grouped_fprop(const QTensor& x, const QTensor& w, std::span<const int64_t> m_splits, Tensor& y,
                             const GemmOptions& o) = 0;
  virtual void grouped_fprop(const Tensor& x, const Tensor& w, std::span<const int64_t> m_splits, Tensor& y,
                             const GemmOptions& o) = 0;
  /// dgrad  dx[M, K] = dy[M, N] . w[g][N, K]   (dyq along N, wq columnwise/2-D)
  virtual void grouped_dgrad(const QTensor& dy, const QTensor& w, std::span<const int64_t> m_splits, Tensor& dx,
                             const GemmOptions& o) = 0;
  virtual void grouped_dgrad(const Tensor& dy, const Tensor& w, std::span<const int64_t> m_splits, Tensor& dx,
                             const GemmOptions& o) = 0;
  /// wgrad  dw[g][N, K] (+)= dy_g[M_g, N]^T . x_g[M_g, K]. With accumulate,
  /// groups with M_g = 0 leave dw[g] exactly unchanged; without, they are +0.
  virtual void grouped_wgrad(const GroupedQTensor& dy, const GroupedQTensor& x, std::span<const int64_t> m_splits,
                             Tensor& dw, const GemmOptions& o) = 0;
  virtual void grouped_wgrad(const Tensor& dy, const Tensor& x, std::span<const int64_t> m_splits, Tensor& dw,
                             const GemmOptions& o) = 0;
  /// acc[g] = fl32(acc[g] + x[g]) elementwise for every group g with
  /// m_splits[g] > 0 (acc, x f32 [G, N, K]); other groups unchanged. The
  /// unfused main_grad bridge: main_grad += bf16(dW_mb).
  virtual void accumulate_groups(Tensor& acc, const Tensor& x, std::span<const int64_t> m_splits) = 0;

  // ------------------------------------------------------------ router, MoE dispatch (numerics §6)
  /// p = row-wise softmax of logits [T, E] (FP32, hd::softmax_row).
  virtual void softmax_rows(const Tensor& logits, Tensor& p) = 0;
  /// top [T, k] i32: per row the expert indices by hd::topk_row (largest
  /// first, ties to the lower index, NaN below every number).
  virtual void topk_rows(const Tensor& p, int k, Tensor& top) = 0;
  /// MoE dispatch of top [T, k] over E experts: counts [E] i64 = assignments
  /// per expert; row_of [T * k] i64 = the permuted row of (token t, slot s)
  /// at t * k + s, in stable (expert, token, slot) order with each expert's
  /// rows padded to a multiple of `pad` (hd::padded_rows). The host derives
  /// m_splits from the downloaded counts.
  /// An expert index outside [0, E) throws std::invalid_argument naming it;
  /// a GPU backend finds it on the device and throws at its next
  /// synchronisation (the download of counts), the same message.
  virtual void moe_route(const Tensor& top, size_t E, int64_t pad, Tensor& counts, Tensor& row_of) = 0;
  /// dst [M, d] = 0, then dst[row_of[t k + s]] = src[t] for every t, s.
  /// A row_of entry outside dst is skipped and reported as moe_route's errors are.
  virtual void permute_rows(const Tensor& src, const Tensor& row_of, size_t k, Tensor& dst) = 0;
  /// h1 [T, d] = hd::combine of yp's rows with the gates p[t, top] and the residual h0.
  virtual void unpermute_combine(const Tensor& yp, const Tensor& h0, const Tensor& p, const Tensor& top,
                                 const Tensor& row_of, size_t k, Tensor& h1) = 0;
  /// dyp [M, d] (zero rows for padding) and dgate [T * k] f32 by hd::combine_backward_slot.
  virtual void combine_backward(const Tensor& dh1, const Tensor& yp, const Tensor& p, const Tensor& top,
                                const Tensor& row_of, size_t k, Tensor& dyp, Tensor& dgate) = 0;
  /// Auxiliary load-balancing loss of one micro-batch (Switch Transformer eq.
  /// 4): f [E] f32 = hd::aux_share of counts over T k assignments; returns
  /// double(coeff) * double(E) * sum_e hd::aux_term(f_e, P_e, T) (e ascending,
  /// FP64), P_e = sum over t ascending of p[t, e] (FP32).
  virtual double aux_loss(const Tensor& p, const Tensor& counts, size_t k, float coeff, Tensor& f) = 0;
  /// dlogits [T, E] by hd::router_backward_row (dp = aux_grad * f + dgate at top).
  virtual void router_backward(const Tensor& p, const Tensor& top, const Tensor& dgate, const Tensor& f,
                               float aux_grad, size_t k, Tensor& dlogits) = 0;
  /// dh0 [T, d] by hd::embed_grad: bf16(dh1 + dh0_router + sum_s dxp[row_of]).
  virtual void embed_grad_sum(const Tensor& dh1, const Tensor& dh0_router, const Tensor& dxp, const Tensor& row_of,
                              size_t k, Tensor& dh0) = 0;
  /// a = bf16(act(u)); du = bf16(da * act'(u)) (hd::activation, hd::activation_grad).
  virtual void activation(Activation kind, const Tensor& u, Tensor& a) = 0;
  virtual void activation_grad(Activation kind, const Tensor& u, const Tensor& da, Tensor& du) = 0;

  // ------------------------------------------------------------ loss, metrics
  /// Cross-entropy of logits [T, C] against labels [T] u8 (hd::cross_entropy_row):
  /// writes dlogits [T, C] = (softmax - onehot) * grad_scale, returns the sum
  /// over rows of the FP32 row losses, in FP64 (hd::tree_sum, row order).
  virtual double cross_entropy(const Tensor& logits, const Tensor& labels, float grad_scale, Tensor& dlogits) = 0;
  /// pred [T] i32 = hd::argmax_row of each row of logits [T, C].
  virtual void argmax_rows(const Tensor& logits, Tensor& pred) = 0;
  /// Number of rows whose hd::argmax_row equals the label (labels [T] u8).
  virtual int64_t count_correct(const Tensor& logits, const Tensor& labels) = 0;
  /// sqrt of the FP64 sum of squares over all elements (hd::tree_sum of hd::sq_f64, flat index order).
  virtual double l2_norm(const Tensor& x) = 0;

  // ------------------------------------------------------------ optimizer
  /// AdamW on an FP32 master (decoupled decay, bias correction with step
  /// t >= 1; torch.optim.AdamW's algorithm evaluated in FP32 in the order of
  /// hd::adamw, docs/simulator.md "Optimizer"); writes the BF16 model copy.
  struct AdamW {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t t;
  };
  virtual void adamw(Tensor& master, Tensor& m, Tensor& v, const Tensor& grad, const AdamW& h, Tensor& model_bf16) = 0;

  // ------------------------------------------------------------ de-oscillation, oscillation metrics
  /// One de-oscillation observation of w (f32) against its quantized value q:
  /// hd::deosc_observe per element; at a window end then hd::deosc_window_end
  /// with `ratio` (w and prev snapped to q). Returns the snapped count (0 when
  /// !window_end). `snaps`: nullptr, or a u32 tensor of w's shape in which
  /// every element snapped at this window end is incremented by one (the
  /// per-element snap counts of the trace; wraps modulo 2^32).
  virtual int64_t deosc_update(Tensor& w, const Tensor& q, Tensor& prev, Tensor& prev_q, Tensor& dist_w,
                               Tensor& dist_q, bool window_end, float ratio, Tensor* snaps) = 0;
  /// Oscillation metrics state of one weight (all [G, N, K]; last_dir u8
  /// holding int8 directions, flips u32).
  struct OscState {
    Tensor prev_w, prev_q, dist_w, dist_q, ema, last_dir, flips;
  };
  /// One step's oscillation metrics of a weight (hd::osc_update per element,
  /// FP64 sums hd::tree_sum in flat index order, integer counts).
  struct OscStep {
    uint64_t flips = 0, flips_total = 0;
    double ema_mean = 0, ema_frac_above = 0, dist_ratio_mean = 0;
  };
  /// Updates s from the FP32 master w and its quantized value q, then
  /// prev_w = w, prev_q = q; at a window end dist_w and dist_q restart at 0
  /// (after the step's sums). EMA threshold for ema_frac_above: 0.01.
  virtual OscStep osc_update(const Tensor& w, const Tensor& q, OscState& s, float momentum, bool window_end) = 0;

  // ------------------------------------------------------------ deferred host values
  // The ops above that return a host value, with the value delivered later:
  // *dst holds it once resolve_deferred() (or any call that synchronises the
  // backend, such as download) has returned, and must stay valid until then.
  // A GPU backend queues the device work and a copy of the few result bytes,
  // so a training step synchronises once for all its statistics instead of
  // once per op. Values are the same bits as the immediate ops'; an error the
  // immediate op would throw (a label outside the classes) is thrown by the
  // call that resolves it. These defaults (the emulator's) compute at once.
  virtual void l2_norm_deferred(const Tensor& x, double* dst) { *dst = l2_norm(x); }
  virtual void quant_stats_deferred(const Tensor& x, const QTensor& q, QuantStats* dst) { *dst = quant_stats(x, q); }
  virtual void scale_exp_histogram_deferred(const QTensor& q, ScaleExpCounts* dst) { *dst = scale_exp_histogram(q); }
  virtual void cross_entropy_deferred(const Tensor& logits, const Tensor& labels, float grad_scale, Tensor& dlogits,
                                      double* dst) {
    *dst = cross_entropy(logits, labels, grad_scale, dlogits);
  }
  virtual void count_correct_deferred(const Tensor& logits, const Tensor& labels, int64_t* dst) {
    *dst = count_correct(logits, labels);
  }
  virtual void aux_loss_deferred(const Tensor& p, const Tensor& counts, size_t k, float coeff, Tensor& f, double* dst) {
    *dst = aux_loss(p, counts, k, coeff, f);
  }
  /// Elements idx of t (flat row-major indices, any dtype) into dst: idx.size()
  /// elements of t's dtype, little-endian. Throws std::invalid_argument naming
  /// the first index outside t (before anything is queued). The default
  /// downloads t.
  virtual void gather_deferred(const Tensor& t, std::span<const int64_t> idx, void* dst);
  /// What the trace's watched elements (trace.watch_elements) record of a
  /// quantized tensor, for elements idx (flat indices into q's logical
  /// [G, rows, cols]): [idx.size()] each.
  struct QuantElements {
    std::vector<uint8_t> code;         ///< stored element code (E2M1: the nibble)
    std::vector<uint8_t> scale_bytes;  ///< the block's E8M0 / UE4M3 scale byte (0 for FP32 scales)
    std::vector<float> scale_inv;      ///< the block's FP32 scale_inv (0 for byte scales)
    std::vector<float> value;          ///< exact dequantized value (hd::dequant_value)
  };
  /// Throws std::invalid_argument naming the first index outside q. The
  /// default downloads q.
  virtual void quant_elements_deferred(const QTensor& q, std::span<const int64_t> idx, QuantElements* dst);
  /// The same read from a host QuantizedTensor (the default's and the emulator's).
  static QuantElements quant_elements_of(const QuantizedTensor& q, std::span<const int64_t> idx);
  /// Delivers every deferred value queued so far (a synchronisation point).
  virtual void resolve_deferred() {}
};

/// Resolves a backend's deferred values if the scope it guards is left by an
/// exception, so that no value is delivered later into a destination that no
/// longer exists (errors while resolving are dropped: the first one is
/// already on its way). A scope left normally must call resolve_deferred()
/// itself before its destinations go (every return path of it), where an
/// error can still be thrown.
class DeferredScope {
 public:
  explicit DeferredScope(Backend& be) : be_(be), live_(std::uncaught_exceptions()) {}
  DeferredScope(const DeferredScope&) = delete;
  DeferredScope& operator=(const DeferredScope&) = delete;
  ~DeferredScope() {
    if (std::uncaught_exceptions() > live_) try {
        be_.resolve_deferred();
      } catch (...) {
      }
  }

 private:
  Backend& be_;
  int live_;
};

/// For the backends' combine, router and embedding ops: throws
/// std::invalid_argument naming `op` unless the routing operands of T tokens
/// with k slots each fit one another: top T x k elements, row_of and dgate
/// T k, p T rows, f as many elements as p has columns (a null pointer: not an
/// operand of the op). The kernels index with these, so a size that does not
/// fit would read or write past a buffer.
void check_routing_shapes(const char* op, size_t T, size_t k, const Tensor* top, const Tensor* row_of,
                          const Tensor* p, const Tensor* dgate, const Tensor* f);

template <class T>
void Backend::upload(Tensor& t, std::span<const T> src) {
  if (t.dtype() != dtype_of<T>() || src.size() != t.numel())
    throw std::invalid_argument("upload: host data (" + std::string(name_of(dtype_of<T>())) + " x " +
                                std::to_string(src.size()) + ") does not match the tensor (" + name_of(t.dtype()) +
                                " " + t.shape().str() + ")");
  upload(t, src.data(), src.size_bytes());
}
template <class T>
std::vector<T> Backend::download(const Tensor& t) {
  if (t.dtype() != dtype_of<T>())
    throw std::invalid_argument(std::string("download: tensor is ") + name_of(t.dtype()) + ", asked for " +
                                name_of(dtype_of<T>()));
  std::vector<T> out(t.numel());
  download(t, out.data(), out.size() * sizeof(T));
  return out;
}

}  // namespace mxsim
