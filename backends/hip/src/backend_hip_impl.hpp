// Internal: the HIP backend's mxsim::Backend, its buffers and their accessors.
// One source file per op family (the layout of ggml's CUDA backend):
//   backend_hip.hip        memory, handles, the factory
//   backend_hip_quant.hip  quantize, per-group colwise, dequantize, statistics, amax, BF16 rounding
//   backend_hip_gemm.hip   grouped GEMMs (the contract kernels of gemm.hpp), the main_grad bridge add
//   backend_hip_moe.hip    router softmax / top-k, routing, permutation, combine and their backward, activations
//   backend_hip_train.hip  loss and metrics, l2 norm, AdamW, de-oscillation, oscillation metrics
// Reductions with a host result go through tree_reduce (tree_sum.hpp).
//
// Buffers are device memory (DeviceBuffer, cached by device.hip); dense
// tensors are flat row-major arrays of their dtype, quantized tensors the
// DeviceQuantized storage of quantize.hpp (byte for byte the emulator's
// QuantizedTensor). Everything runs in order on the backend's stream.
#pragma once
#include "check.hpp"

#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxsim/backend.hpp"
#include "mxsim/hip/quantize.hpp"

namespace mxsim::hip {

/// Storage of one dense tensor.
struct HipBuffer final : BackendBuffer {
  HipBuffer(const Backend* b, size_t bytes, std::string_view what) : BackendBuffer(b), mem(bytes, what) {}
  DeviceBuffer mem;
};
/// Storage of one quantized tensor.
struct HipQBuffer final : BackendBuffer {
  HipQBuffer(const Backend* b, DeviceQuantized q) : BackendBuffer(b), q(std::move(q)) {}
  DeviceQuantized q;
};
/// Storage of a per-group quantized wgrad operand (one DeviceQuantized per group).
struct HipGroupedQBuffer final : BackendBuffer {
  HipGroupedQBuffer(const Backend* b, std::vector<DeviceQuantized> q) : BackendBuffer(b), q(std::move(q)) {}
  std::vector<DeviceQuantized> q;
};

class HipBackend final : public Backend {
 public:
  HipBackend();
  ~HipBackend() override;
  HipBackend(const HipBackend&) = delete;
  HipBackend& operator=(const HipBackend&) = delete;

  std::string name() const override { return "hip"; }
  std::string device() const override { return device_; }
  void set_threads(int) override {}  // the device decides its parallelism; results never depend on it
  void synchronize() override { sync(); }
  bool supports(Op) const override { return true; }

  Tensor alloc(DType dtype, Shape shape) override;
  using Backend::download;
  using Backend::upload;
  void upload(Tensor& t, const void* src, size_t bytes) override;
  void download(const Tensor& t, void* dst, size_t bytes) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void copy_into(const Tensor& src, Tensor& dst, size_t offset) override;
  void copy_range(const Tensor& src, size_t src_offset, Tensor& dst, size_t dst_offset, size_t count) override;
  void fill_zero(Tensor& t) override;
  QuantizedTensor download(const QTensor& q) override;
  QTensor upload(const QuantizedTensor& q) override;
  std::vector<QuantizedTensor> download(const GroupedQTensor& q) override;

  QTensor quantize(const Tensor& x, const QuantSpec& spec, Axis axis) override;
  GroupedQTensor quantize_grouped_colwise(const Tensor& x, std::span<const int64_t> m_splits,
                                          const QuantSpec& spec) override;
  void dequantize(const QTensor& q, Tensor& out) override;
  QuantStats quant_stats(const Tensor& x, const QTensor& q) override;
  ScaleExpCounts scale_exp_histogram(const QTensor& q) override;
  float amax(const Tensor& x) override;
  void round_bf16(Tensor& x) override;
  void round_bf16(const Tensor& src, Tensor& dst) override;

  void grouped_fprop(const QTensor& x, const QTensor& w, std::span<const int64_t> ms, Tensor& y,
                     const GemmOptions& o) override;
  void grouped_fprop(const Tensor& x, const Tensor& w, std::span<const int64_t> ms, Tensor& y,
                     const GemmOptions& o) override;
  void grouped_dgrad(const QTensor& dy, const QTensor& w, std::span<const int64_t> ms, Tensor& dx,
                     const GemmOptions& o) override;
  void grouped_dgrad(const Tensor& dy, const Tensor& w, std::span<const int64_t> ms, Tensor& dx,
                     const GemmOptions& o) override;
  void grouped_wgrad(const GroupedQTensor& dy, const GroupedQTensor& x, std::span<const int64_t> ms, Tensor& dw,
                     const GemmOptions& o) override;
  void grouped_wgrad(const Tensor& dy, const Tensor& x, std::span<const int64_t> ms, Tensor& dw,
                     const GemmOptions& o) override;
  void accumulate_groups(Tensor& acc, const Tensor& x, std::span<const int64_t> ms) override;

  void softmax_rows(const Tensor& logits, Tensor& p) override;
  void topk_rows(const Tensor& p, int k, Tensor& top) override;
  void moe_route(const Tensor& top, size_t E, int64_t pad, Tensor& counts, Tensor& row_of) override;
  void permute_rows(const Tensor& src, const Tensor& row_of, size_t k, Tensor& dst) override;
  void unpermute_combine(const Tensor& yp, const Tensor& h0, const Tensor& p, const Tensor& top, const Tensor& row_of,
                         size_t k, Tensor& h1) override;
  void combine_backward(const Tensor& dh1, const Tensor& yp, const Tensor& p, const Tensor& top,
                        const Tensor& row_of, size_t k, Tensor& dyp, Tensor& dgate) override;
  double aux_loss(const Tensor& p, const Tensor& counts, size_t k, float coeff, Tensor& f) override;
  void router_backward(const Tensor& p, const Tensor& top, const Tensor& dgate, const Tensor& f, float aux_grad,
                       size_t k, Tensor& dlogits) override;
  void embed_grad_sum(const Tensor& dh1, const Tensor& dh0_router, const Tensor& dxp, const Tensor& row_of, size_t k,
                      Tensor& dh0) override;
  void activation(Activation kind, const Tensor& u, Tensor& a) override;
  void activation_grad(Activation kind, const Tensor& u, const Tensor& da, Tensor& du) override;

  double cross_entropy(const Tensor& logits, const Tensor& labels, float grad_scale, Tensor& dlogits) override;
  void argmax_rows(const Tensor& logits, Tensor& pred) override;
  int64_t count_correct(const Tensor& logits, const Tensor& labels) override;
  double l2_norm(const Tensor& x) override;
  void adamw(Tensor& master, Tensor& m, Tensor& v, const Tensor& grad, const AdamW& h, Tensor& model_bf16) override;
  int64_t deosc_update(Tensor& w, const Tensor& q, Tensor& prev, Tensor& prev_q, Tensor& dist_w, Tensor& dist_q,
                       bool window_end, float ratio, Tensor* snaps) override;
  OscStep osc_update(const Tensor& w, const Tensor& q, OscState& s, float momentum, bool window_end) override;

  void l2_norm_deferred(const Tensor& x, double* dst) override;
  void quant_stats_deferred(const Tensor& x, const QTensor& q, QuantStats* dst) override;
  void scale_exp_histogram_deferred(const QTensor& q, ScaleExpCounts* dst) override;
  void cross_entropy_deferred(const Tensor& logits, const Tensor& labels, float grad_scale, Tensor& dlogits,
                              double* dst) override;
  void count_correct_deferred(const Tensor& logits, const Tensor& labels, int64_t* dst) override;
  void aux_loss_deferred(const Tensor& p, const Tensor& counts, size_t k, float coeff, Tensor& f, double* dst) override;
  void gather_deferred(const Tensor& t, std::span<const int64_t> idx, void* dst) override;
  void quant_elements_deferred(const QTensor& q, std::span<const int64_t> idx, QuantElements* dst) override;
  void resolve_deferred() override { sync(); }

  // ---- for the op files ------------------------------------------------
  hipStream_t stream() const { return stream_; }
  void* stream_ptr() const { return static_cast<void*>(stream_); }
  /// Waits for the stream; a failed kernel surfaces here (mxsim::hip::Error).
  /// Then runs the fetch_later callbacks queued so far, in order (an
  /// exception from one is rethrown once all have run).
  void sync();
  /// Queues a stream-ordered copy of `bytes` device bytes into page-locked
  /// staging memory, and done(host bytes) to run on them at the next sync()
  /// (any synchronising call): a host value without a synchronisation now.
  /// d_src may be freed (returned to the block cache) once this returns: the
  /// copy runs before any later work of the stream.
  void fetch_later(const void* d_src, size_t bytes, std::function<void(const std::byte*)> done);
  /// An op returning a host value, from its deferred form: queue(&v), then
  /// synchronise, which delivers v (and everything queued before it).
  template <class T, class Queue>
  T now(Queue&& queue) {
    T v{};
    queue(&v);
    sync();
    return v;
  }
  /// Device pointer of a dense tensor (checks the handle: not empty, ours).
  void* raw(const Tensor& t, const char* op, const char* what) const;
  /// Typed device pointer (checks the dtype too).
  template <class T>
  T* data(const Tensor& t, const char* op, const char* what) const {
    if (t.dtype() != dtype_of<T>()) dtype_error(t, dtype_of<T>(), op, what);
    return static_cast<T*>(raw(t, op, what));
  }
  float* f32(const Tensor& t, const char* op, const char* what) const { return data<float>(t, op, what); }
  /// f32 of rank 2 (the shape the op needs is then t.dim(0) x t.dim(1)).
  float* mat(const Tensor& t, const char* op, const char* what) const;
  const DeviceQuantized& dev(const QTensor& q, const char* op, const char* what) const;
  const std::vector<DeviceQuantized>& dev(const GroupedQTensor& q, const char* op, const char* what) const;
  /// Throws unless t has `shape`.
  static void expect_shape(const Tensor& t, const Shape& shape, const char* op, const char* what);
  [[noreturn]] static void dtype_error(const Tensor& t, DType want, const char* op, const char* what);
  /// Copies `bytes` of device memory to the host after the stream's work (synchronises).
  void fetch(void* dst, const void* d_src, size_t bytes);
  /// idx as a device i64 tensor, uploaded without a synchronisation (kept
  /// alive by the caller while its kernels are queued).
  Tensor device_indices(std::span<const int64_t> idx);

 private:
  hipStream_t stream_ = nullptr;
  std::string device_;
  // fetch_later and upload staging: page-locked chunks handed out in order,
  // reset after a sync once no callback waits.
  struct PinnedChunk {
    std::byte* p = nullptr;
    size_t size = 0, used = 0;
  };
  struct Later {
    const std::byte* host;
    std::function<void(const std::byte*)> done;
  };
  std::vector<PinnedChunk> pinned_;
  std::vector<Later> later_;
  int draining_ = 0;  // callbacks running (a callback may synchronise: drain nests)
  size_t staged_bytes_ = 0;  // upload staging in flight since the last sync
  std::byte* pinned_bytes(size_t bytes);
  void drain();
};

}  // namespace mxsim::hip
