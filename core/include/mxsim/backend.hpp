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
// representable in BF16 (rounded RNE through mxsim::round_bf16), or, as BF16
// GEMM operands, bf16 tensors of their bit patterns (DType::bf16). Outputs are
// allocated by the caller with the shape given and overwritten unless stated.
// Ops that return a host value (amax, sums, counts, statistics) are
// synchronisation points: a GPU backend reduces on the device and copies the
// few bytes back.
//
// Error behaviour: a shape, dtype or size mismatch, or a handle of another
// backend, throws std::invalid_argument naming the op and the operand. The
// op set is one list (backend_ops.hpp); each public op checks its operands
// once, here in core, before the backend computes.
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
#include "mxsim/backend_ops.hpp"
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

  /// The op families of backend_ops.hpp (verify checks one family at a time).
  enum class Op : uint8_t {
#define MXSIM_FAMILY(Family, name) Family,
    MXSIM_BACKEND_FAMILIES(MXSIM_FAMILY)
#undef MXSIM_FAMILY
    kCount
  };

  // Types of the ops' arguments and results.
  /// AdamW's hyperparameters and step t >= 1 (adamw below).
  struct AdamW {
    float lr, beta1, beta2, eps, weight_decay;
    int64_t t;
  };
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
  /// A quantized tensor in memory of the backend's own kind that the backend does not own (a
  /// caller's: torch tensors' storage), laid out as QuantizedTensor: hd::quant_layout of spec
  /// over the logical [groups, rows, cols], blocks along the columns (transposed: along the
  /// rows, codes stored transposed); codes, block scales (bytes, or FP32 scale_inv) and, for
  /// NVFP4, the FP32 tensor scale (else nullptr).
  struct NativeQuantized {
    QuantSpec spec;
    size_t groups = 1, rows = 0, cols = 0;
    bool transposed = false;
    bool divides_by_scale = false;  ///< FP32 scales that divide (torchao Float8TrainingTensor)
    const void* data = nullptr;
    const void* scales = nullptr;
    const void* tensor_scale_inv = nullptr;
  };
  /// What the trace's watched elements (trace.watch_elements) record of a
  /// quantized tensor, for elements idx (flat indices into q's logical
  /// [G, rows, cols]): [idx.size()] each.
  struct QuantElements {
    std::vector<uint8_t> code;         ///< stored element code (E2M1: the nibble)
    std::vector<uint8_t> scale_bytes;  ///< the block's E8M0 / UE4M3 scale byte (0 for FP32 scales)
    std::vector<float> scale_inv;      ///< the block's FP32 scale_inv (0 for byte scales)
    std::vector<float> value;          ///< exact dequantized value (hd::dequant_value)
  };

  // The operations, declared from the one list (backend_ops.hpp). Each is
  // non-virtual: it checks its operands' dtypes, ranks, shapes and sizes
  // once (core/src/backend_checks.cpp, std::invalid_argument naming the op
  // and the operand) and then calls the backend's protected <name>_impl,
  // which checks only what is its own (the handle belongs to it).
  //
  // ------------------------------------------------------------ memory
  // alloc(dtype, shape): a tensor of `shape` (rank 1-3) and `dtype`; contents unspecified.
  // upload(t, src, bytes): host -> backend; `bytes` must equal t.bytes().
  // download(t, dst, bytes): backend -> host; `bytes` must equal t.bytes().
  // copy(src, dst): dst = src element for element (same dtype and element count; shapes may differ).
  // copy_into(src, dst, offset): all of src into dst's elements [offset, offset + src.numel()) (same dtype).
  // copy_range(src, src_offset, dst, dst_offset, count): dst elements [dst_offset, dst_offset + count)
  //   = src elements [src_offset, src_offset + count), flat row-major indices (same dtype; src and dst
  //   distinct tensors). The row moves of the expert-parallel dispatch and the flat shards of the
  //   distributed optimizer (sim/parallel.hpp). Throws std::invalid_argument when a range leaves its
  //   tensor or the dtypes differ. The default stages both tensors through the host (download,
  //   splice, upload); a backend overrides it with a device copy.
  // upload_native(t, src, bytes, src_stream): t = `bytes` at src in memory of the backend's own kind
  //   that it does not own (a caller's: a torch tensor's storage), written by work queued on
  //   src_stream (a cudaStream_t / hipStream_t; NULL the legacy default stream): a GPU backend
  //   copies device to device after that stream's work, without a host round trip or a wait of
  //   the host. The default (host-memory backends) reads host memory: upload.
  // upload_native(q, src_stream): a backend QTensor holding a copy of the caller's quantized tensor q
  //   (NativeQuantized), read as upload_native reads: the statistics of a caller's quantization
  //   through the backend's own ops. The default reads host memory and uploads it.
  // download_native(t, dst, bytes, dst_stream): the reverse: t into memory of the backend's own
  //   kind at dst, ordered before the work the caller queues on dst_stream afterwards (a GPU
  //   backend: a device copy on its stream that dst_stream then waits for; the host never waits).
  //   The default: download.
  // borrow_native(dtype, shape, src, src_stream) / borrow_native(q, src_stream): a tensor over the
  //   caller's memory at src (of the backend's own kind, laid out as upload_native reads it) without
  //   a copy, read by later ops after the work queued on src_stream; ops must only read it. The
  //   caller keeps the memory alive and unchanged until release_native has ordered its later work
  //   after every op that reads it. The defaults copy (upload_native): a backend without views of
  //   foreign memory pays one copy and the same rules hold.
  // release_native(dst_stream): the caller's work queued on dst_stream from now on runs after every
  //   op queued so far (the borrowed memory may then be written or freed on that stream; the host
  //   never waits). The default does nothing (the defaults' ops have run by the time they return).
  // fill_zero(t): every element = 0 (+0.0 for f32).
  // download(q) / upload(q) / download(grouped q): the host form of a quantized tensor (files, tests) and back.
  //
  // ------------------------------------------------------------ quantization (numerics §2-§4)
  // quantize(x, spec, axis): x (f32, [rows, cols] as one group or [G, rows, cols]) by spec, 1-D blocks
  //   along axis. Throws std::invalid_argument for a spec the shape cannot take (emu::quantize).
  // quantize_grouped_colwise(x, m_splits, spec): cut x [M, C] into the m_splits row slices and quantize
  //   each along M (Axis::Rows); blocks never cross a group boundary; SR words follow the element's
  //   index in the whole tensor (emu::quantize_grouped_colwise).
  // dequantize(q, out): exact dequantization into `out` (f32, [G, rows, cols], or [rows, cols] when G = 1).
  // quant_stats(x, q): error statistics of q against its source x (numerics §4.6).
  // scale_exp_histogram(q): histogram of q's block scale exponents (quant_stats.hpp ScaleExpCounts).
  // amax(x): max |x| over an f32 tensor (hd::amax_step fold: the first NaN is the result).
  // round_bf16(x) / round_bf16(src, dst): every element to BF16 (RNE, IEEE overflow), in place or src -> dst;
  //   dst f32 (the values) or bf16 (their bit patterns: a BF16 GEMM operand read without a re-encode).
  //
  // ------------------------------------------------------------ grouped GEMM (numerics §5)
  // m_splits[g] consecutive rows per group (host metadata of the launch), empty groups legal;
  // G = m_splits.size(); a plain GEMM is G = 1. Quantized operands pair with quantized ones, BF16
  // with BF16: a BF16 operand is a bf16 tensor (its bit patterns, read as they are) or an f32 tensor
  // of BF16 values (a GPU re-encodes it for each GEMM; the same result).
  // grouped_fprop(x, w, m_splits, y, o): y[M, N] = x[M, K] . w[g][N, K]^T (xq along K, wq rowwise/2-D).
  // grouped_dgrad(dy, w, m_splits, dx, o): dx[M, K] = dy[M, N] . w[g][N, K] (dyq along N, wq columnwise/2-D).
  // grouped_wgrad(dy, x, m_splits, dw, o): dw[g][N, K] (+)= dy_g[M_g, N]^T . x_g[M_g, K]. With
  //   accumulate, groups with M_g = 0 leave dw[g] exactly unchanged; without, they are +0.
  // accumulate_groups(acc, x, m_splits): acc[g] = fl32(acc[g] + x[g]) elementwise for every group g
  //   with m_splits[g] > 0 (acc, x f32 [G, N, K]); other groups unchanged. The unfused main_grad
  //   bridge: main_grad += bf16(dW_mb).
  //
  // ------------------------------------------------------------ router, MoE dispatch (numerics §6)
  // softmax_rows(logits, p): p = row-wise softmax of logits [T, E] (FP32, hd::softmax_row).
  // topk_rows(p, k, top): top [T, k] i32: per row the expert indices by hd::topk_row (largest first,
  //   ties to the lower index, NaN below every number).
  // moe_route(top, E, pad, counts, row_of): MoE dispatch of top [T, k] over E experts: counts [E] i64
  //   = assignments per expert; row_of [T * k] i64 = the permuted row of (token t, slot s) at t * k + s,
  //   in stable (expert, token, slot) order with each expert's rows padded to a multiple of `pad`
  //   (hd::padded_rows). The host derives m_splits from the downloaded counts. An expert index outside
  //   [0, E) throws std::invalid_argument naming it; a GPU backend finds it on the device and throws at
  //   its next synchronisation (the download of counts), the same message.
  // permute_rows(src, row_of, k, dst): dst [M, d] = 0, then dst[row_of[t k + s]] = src[t] for every
  //   t, s. A row_of entry outside dst is skipped and reported as moe_route's errors are.
  // unpermute_combine(yp, h0, p, top, row_of, k, h1): h1 [T, d] = hd::combine of yp's rows with the
  //   gates p[t, top] and the residual h0.
  // combine_backward(dh1, yp, p, top, row_of, k, dyp, dgate): dyp [M, d] (zero rows for padding) and
  //   dgate [T * k] f32 by hd::combine_backward_slot.
  // aux_loss(p, counts, k, coeff, f): auxiliary load-balancing loss of one micro-batch (Switch
  //   Transformer eq. 4): f [E] f32 = hd::aux_share of counts over T k assignments; returns
  //   double(coeff) * double(E) * sum_e hd::aux_term(f_e, P_e, T) (e ascending, FP64), P_e = sum over
  //   t ascending of p[t, e] (FP32).
  // router_backward(p, top, dgate, f, aux_grad, k, dlogits): dlogits [T, E] by hd::router_backward_row
  //   (dp = aux_grad * f + dgate at top).
  // embed_grad_sum(dh1, dh0_router, dxp, row_of, k, dh0): dh0 [T, d] by hd::embed_grad:
  //   bf16(dh1 + dh0_router + sum_s dxp[row_of]).
  // activation(kind, u, a): a = bf16(act(u)); activation_grad(kind, u, da, du): du = bf16(da * act'(u))
  //   (hd::activation, hd::activation_grad).
  //
  // ------------------------------------------------------------ loss, metrics
  // cross_entropy(logits, labels, grad_scale, dlogits): cross-entropy of logits [T, C] against labels
  //   [T] u8 (hd::cross_entropy_row): writes dlogits [T, C] = (softmax - onehot) * grad_scale, returns
  //   the sum over rows of the FP32 row losses, in FP64 (hd::tree_sum, row order).
  // argmax_rows(logits, pred): pred [T] i32 = hd::argmax_row of each row of logits [T, C].
  // count_correct(logits, labels): number of rows whose hd::argmax_row equals the label (labels [T] u8).
  // l2_norm(x): sqrt of the FP64 sum of squares over all elements (hd::tree_sum of hd::sq_f64, flat
  //   index order).
  //
  // ------------------------------------------------------------ optimizer
  // adamw(master, m, v, grad, h, model_bf16): AdamW on an FP32 master (decoupled decay, bias
  //   correction with step t >= 1; torch.optim.AdamW's algorithm evaluated in FP32 in the order of
  //   hd::adamw, docs/simulator.md "Optimizer"); writes the BF16 model copy.
  //
  // ------------------------------------------------------------ de-oscillation, oscillation metrics
  // deosc_update(w, q, prev, prev_q, dist_w, dist_q, window_end, ratio, snaps): one de-oscillation
  //   observation of w (f32) against its quantized value q: hd::deosc_observe per element; at a window
  //   end then hd::deosc_window_end with `ratio` (w and prev snapped to q). Returns the snapped count
  //   (0 when !window_end). `snaps`: nullptr, or a u32 tensor of w's shape in which every element
  //   snapped at this window end is incremented by one (the per-element snap counts of the trace;
  //   wraps modulo 2^32).
  // osc_update(w, q, s, momentum, window_end): updates s from the FP32 master w and its quantized
  //   value q, then prev_w = w, prev_q = q; at a window end dist_w and dist_q restart at 0 (after the
  //   step's sums). EMA threshold for ema_frac_above: 0.01.
  //
  // ------------------------------------------------------------ deferred host values
  // The ops that return a host value, with the value delivered later (l2_norm_deferred,
  // amax_deferred (fp8_delayed's amax history), quant_stats_deferred, scale_exp_histogram_deferred, cross_entropy_deferred,
  // count_correct_deferred, aux_loss_deferred): *dst holds it once resolve_deferred() (or any call
  // that synchronises the backend, such as download) has returned, and must stay valid until then.
  // A GPU backend queues the device work and a copy of the few result bytes, so a training step
  // synchronises once for all its statistics instead of once per op. Values are the same bits as the
  // immediate ops'; an error the immediate op would throw (a label outside the classes) is thrown by
  // the call that resolves it. The defaults (the emulator's) compute at once.
  // gather_deferred(t, idx, dst): elements idx of t (flat row-major indices, any dtype) into dst:
  //   idx.size() elements of t's dtype, little-endian. Throws std::invalid_argument naming the first
  //   index outside t (before anything is queued). The default downloads t.
  // output_error_deferred(ref, test, dst): OutputError of test against ref (f32, same shape;
  //   quant_stats.hpp output_error, numerics.md §4.8): a GEMM's output against the same GEMM on
  //   BF16 operands (the simulator's shadow). The default downloads both tensors.
  // osc_update_deferred(w, q, s, momentum, window_end, dst): osc_update, its OscStep delivered to dst
  //   (the state tensors are updated in stream order as osc_update updates them).
  // quant_elements_deferred(q, idx, dst): QuantElements of elements idx of q; throws
  //   std::invalid_argument naming the first index outside q. The default downloads q.
  // resolve_deferred(): delivers every deferred value queued so far (a synchronisation point).
#define MXSIM_X(Family, id, name, label, Ret, params, args) Ret name params;
  MXSIM_BACKEND_OPS(MXSIM_X)
  MXSIM_BACKEND_DEFAULTED_OPS(MXSIM_X)
#undef MXSIM_X

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

  /// quant_elements_deferred's read from a host QuantizedTensor (the default's and the emulator's).
  static QuantElements quant_elements_of(const QuantizedTensor& q, std::span<const int64_t> idx);

 protected:
  // What each backend computes, called after the public op's checks (backend_ops.hpp).
#define MXSIM_X(Family, id, name, label, Ret, params, args) virtual Ret name##_impl params = 0;
  MXSIM_BACKEND_OPS(MXSIM_X)
#undef MXSIM_X
  // The defaults of the second list (core/src/backend.cpp).
#define MXSIM_X(Family, id, name, label, Ret, params, args) virtual Ret name##_impl params;
  MXSIM_BACKEND_DEFAULTED_OPS(MXSIM_X)
#undef MXSIM_X

 private:
  // One check per row (core/src/backend_checks.cpp): throws std::invalid_argument naming the op
  // and the operand.
#define MXSIM_X(Family, id, name, label, Ret, params, args) static void check_##id params;
  MXSIM_BACKEND_OPS(MXSIM_X)
  MXSIM_BACKEND_DEFAULTED_OPS(MXSIM_X)
#undef MXSIM_X
  /// Throws std::invalid_argument naming `op` and the first index outside [0, n) (gather's and
  /// quant_elements' check, shared by the door and quant_elements_of).
  static void check_indices(std::span<const int64_t> idx, size_t n, const char* op, const char* what);
  // The profiler forwards to another backend's <name>_impl after its own front door has checked.
  friend class ProfilingBackend;
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
