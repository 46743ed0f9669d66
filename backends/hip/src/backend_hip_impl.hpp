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
#include "mxsim/hip/gemm.hpp"
#include "mxsim/hip/quantize.hpp"

namespace mxsim::hip {

/// Storage of one dense tensor: its own, or a caller's (borrow_native: not freed here).
struct HipBuffer final : BackendBuffer {
  HipBuffer(const Backend* b, size_t bytes, std::string_view what) : BackendBuffer(b), mem(bytes, what) {}
  HipBuffer(const Backend* b, void* borrowed) : BackendBuffer(b), borrowed(borrowed) {}
  void* get() const { return borrowed ? borrowed : mem.get(); }
  DeviceBuffer mem;
  void* borrowed = nullptr;
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
 protected:
  MXSIM_BACKEND_OPS(MXSIM_BACKEND_DECLARE_IMPL)
  // Deferred host values queued on the stream, device copies and in-place reads (Backend's
  // defaults compute at once or stage through the host).
  void copy_range_impl(const Tensor& src, size_t src_offset, Tensor& dst, size_t dst_offset, size_t count) override;
  void upload_native_impl(Tensor& t, const void* src, size_t bytes, void* src_stream) override;
  void download_native_impl(const Tensor& t, void* dst, size_t bytes, void* dst_stream) override;
  QTensor upload_native_impl(const NativeQuantized& q, void* src_stream) override;
  Tensor borrow_native_impl(DType dtype, Shape shape, const void* src, void* src_stream) override;
  QTensor borrow_native_impl(const NativeQuantized& q, void* src_stream) override;
  void release_native_impl(void* dst_stream) override;
  void osc_update_deferred_impl(const Tensor& w, const Tensor& q, OscState& s, float momentum, bool window_end,
                                OscStep* dst) override;
  void l2_norm_deferred_impl(const Tensor& x, double* dst) override;
  void output_error_deferred_impl(const Tensor& ref, const Tensor& test, OutputError* dst) override;
  void quant_stats_deferred_impl(const Tensor& x, const QTensor& q, QuantStats* dst) override;
  void scale_exp_histogram_deferred_impl(const QTensor& q, ScaleExpCounts* dst) override;
  void cross_entropy_deferred_impl(const Tensor& logits, const Tensor& labels, float grad_scale, Tensor& dlogits,
                                   double* dst) override;
  void count_correct_deferred_impl(const Tensor& logits, const Tensor& labels, int64_t* dst) override;
  void aux_loss_deferred_impl(const Tensor& p, const Tensor& counts, size_t k, float coeff, Tensor& f,
                              double* dst) override;
  void gather_deferred_impl(const Tensor& t, std::span<const int64_t> idx, void* dst) override;
  void amax_deferred_impl(const Tensor& x, float* dst) override;
  void quant_elements_deferred_impl(const QTensor& q, std::span<const int64_t> idx, QuantElements* dst) override;
  void resolve_deferred_impl() override { sync(); }

 public:
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
  [[noreturn]] static void dtype_error(const Tensor& t, DType want, const char* op, const char* what);
  /// Copies `bytes` of device memory to the host after the stream's work (synchronises).
  void fetch(void* dst, const void* d_src, size_t bytes);
  /// idx as a device i64 tensor, uploaded without a synchronisation (kept
  /// alive by the caller while its kernels are queued).
  Tensor device_indices(std::span<const int64_t> idx);
  /// The tensor-core GEMMs' operand images of this backend's stream (freed with the backend).
  StreamWorkspace& gemm_workspace() { return gemm_ws_; }

 private:
  /// A device float 1.0: the tensor scale of a caller's quantized tensor of every kind but NVFP4
  /// (borrowed: pointed at; uploaded: copied from here), written once, synchronously, at first use.
  float* unit_scale();
  DeviceBuffer unit_scale_;
  StreamWorkspace gemm_ws_;
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
