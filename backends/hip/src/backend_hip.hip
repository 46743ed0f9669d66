// mxsim::Backend on the GPU (include/mxsim/hip/backend_hip.hpp): memory,
// handles, host <-> device transfers, the factory.
#include "backend_hip_impl.hpp"

#include <algorithm>
#include <cstring>
#include <exception>

#include "mxsim/hip/backend_hip.hpp"

namespace mxsim::hip {

namespace {
std::string where(const char* op, const char* what) { return std::string(op) + ": " + what; }

// Names device buffers after their shape so an out-of-memory error says what was asked for.
std::string label(DType dtype, const Shape& shape) { return std::string(name_of(dtype)) + " tensor " + shape.str(); }

// out[j] = src[idx[j]], es bytes each (1, 4 or 8).
__global__ void gather_kernel(const std::byte* __restrict__ src, size_t es, const int64_t* __restrict__ idx, size_t n,
                              std::byte* __restrict__ out) {
  for (size_t j = size_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += size_t(gridDim.x) * blockDim.x)
    for (size_t b = 0; b < es; ++b) out[j * es + b] = src[size_t(idx[j]) * es + b];
}
}  // namespace

Tensor HipBackend::device_indices(std::span<const int64_t> idx) {
  Tensor t = alloc(DType::i64, {idx.size()});
  upload(t, idx.data(), idx.size_bytes());  // staged, no synchronisation
  return t;
}

HipBackend::HipBackend() {
  std::string why;
  if (!available(&why)) throw Error("mxsim::hip: no usable GPU: " + why);
  MXSIM_HIP_CHECK(hipStreamCreate(&stream_));
  const DeviceInfo d = device_info();
  device_ = d.name + " (" + platform() + " " + std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor) + ", " +
            std::to_string(d.multiprocessors) + (std::string(platform()) == "amd" ? " CUs)" : " SMs)");
}
HipBackend::~HipBackend() {
  if (stream_) {
    (void)hipStreamSynchronize(stream_);
    (void)hipStreamDestroy(stream_);
  }
  for (const PinnedChunk& c : pinned_) (void)hipHostFree(c.p);
}

void HipBackend::sync() {
  try {
    MXSIM_HIP_CHECK(hipStreamSynchronize(stream_));
    MXSIM_HIP_CHECK(hipGetLastError());
    staged_bytes_ = 0;  // every staged upload has landed
  } catch (...) {
    later_.clear();  // the device failed: nothing queued will be delivered
    if (draining_ == 0)
      for (PinnedChunk& c : pinned_) c.used = 0;
    throw;
  }
  drain();
}

std::byte* HipBackend::pinned_bytes(size_t bytes) {
  bytes = (bytes + 15) / 16 * 16;
  for (PinnedChunk& c : pinned_)
    if (c.size - c.used >= bytes) {
      std::byte* p = c.p + c.used;
      c.used += bytes;
      return p;
    }
  PinnedChunk c;
  c.size = std::max<size_t>(bytes, size_t(1) << 20);
  void* p = nullptr;
  MXSIM_HIP_CHECK(hipHostMalloc(&p, c.size, 0));
  c.p = static_cast<std::byte*>(p);
  c.used = bytes;
  pinned_.push_back(c);
  return c.p;
}

void HipBackend::fetch_later(const void* d_src, size_t bytes, std::function<void(const std::byte*)> done) {
  std::byte* h = pinned_bytes(bytes ? bytes : 1);
  if (bytes) MXSIM_HIP_CHECK(hipMemcpyAsync(h, d_src, bytes, hipMemcpyDeviceToHost, stream_));
  later_.push_back({h, std::move(done)});
}

void HipBackend::drain() {
  if (later_.empty()) {  // after a sync: the staging of uploads is free again too
    if (draining_ == 0 && staged_bytes_ == 0)
      for (PinnedChunk& c : pinned_) c.used = 0;
    return;
  }
  std::vector<Later> ready;
  ready.swap(later_);  // a callback that synchronises again drains only what it queued
  std::exception_ptr first;
  ++draining_;
  for (Later& l : ready) {
    try {
      l.done(l.host);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  --draining_;
  // The staging is free again once no callback of an outer drain still has
  // bytes to read in it, nothing new waits, and no callback staged an upload
  // that may still be in flight.
  if (draining_ == 0 && later_.empty() && staged_bytes_ == 0)
    for (PinnedChunk& c : pinned_) c.used = 0;
  if (first) std::rethrow_exception(first);
}

void HipBackend::fetch(void* dst, const void* d_src, size_t bytes) {
  if (bytes) MXSIM_HIP_CHECK(hipMemcpyAsync(dst, d_src, bytes, hipMemcpyDeviceToHost, stream_));
  sync();
}

Tensor HipBackend::alloc_impl(DType dtype, Shape shape) {
  auto b = std::make_shared<HipBuffer>(this, shape.numel() * dtype_size(dtype), label(dtype, shape));
  return Tensor(std::move(b), dtype, shape);
}

void* HipBackend::raw(const Tensor& t, const char* op, const char* what) const {
  if (t.empty()) throw std::invalid_argument(where(op, what) + " is an empty tensor handle");
  if (t.buffer()->owner() != this) throw std::invalid_argument(where(op, what) + " belongs to another backend");
  return static_cast<HipBuffer&>(*t.buffer()).get();
}
// The emulator's order of checks (dtype, rank, handle), so a bad operand gets its message.
float* HipBackend::mat(const Tensor& t, const char* op, const char* what) const {
  if (t.dtype() != DType::f32) dtype_error(t, DType::f32, op, what);
  if (t.rank() != 2) throw std::invalid_argument(where(op, what) + " must have rank 2, has shape " + t.shape().str());
  return static_cast<float*>(raw(t, op, what));
}
const DeviceQuantized& HipBackend::dev(const QTensor& q, const char* op, const char* what) const {
  if (q.empty()) throw std::invalid_argument(where(op, what) + " is an empty quantized tensor handle");
  if (q.buffer()->owner() != this) throw std::invalid_argument(where(op, what) + " belongs to another backend");
  return static_cast<HipQBuffer&>(*q.buffer()).q;
}
const std::vector<DeviceQuantized>& HipBackend::dev(const GroupedQTensor& q, const char* op, const char* what) const {
  if (q.empty()) throw std::invalid_argument(where(op, what) + " is an empty grouped quantized tensor handle");
  if (q.buffer()->owner() != this) throw std::invalid_argument(where(op, what) + " belongs to another backend");
  return static_cast<HipGroupedQBuffer&>(*q.buffer()).q;
}
void HipBackend::dtype_error(const Tensor& t, DType want, const char* op, const char* what) {
  throw std::invalid_argument(where(op, what) + " is " + name_of(t.dtype()) + ", expected " + name_of(want));
}

void HipBackend::upload_impl(Tensor& t, const void* src, size_t bytes) {
  void* d = raw(t, "upload", "tensor");
  if (!bytes) return;
  // The caller may reuse `src` as soon as this returns. Up to kStagedUpload
  // bytes are copied into page-locked staging and left in flight (the stream
  // orders the copy before later work; the staging is recycled at the next
  // sync), so a micro-batch's upload neither waits for the device nor takes
  // the pageable path (H200: 12.8 MB took 3.4 ms pageable). Larger ones (the
  // initial weights) copy synchronously rather than pin that much memory.
  // The staging in flight is bounded too: past kStagedUpload since the last
  // sync, one sync recycles it first.
  constexpr size_t kStagedUpload = size_t(64) << 20;
  if (bytes <= kStagedUpload) {
    if (staged_bytes_ + bytes > kStagedUpload) sync();
    std::byte* h = pinned_bytes(bytes);
    std::memcpy(h, src, bytes);
    MXSIM_HIP_CHECK(hipMemcpyAsync(d, h, bytes, hipMemcpyHostToDevice, stream_));
    staged_bytes_ += bytes;
    return;
  }
  MXSIM_HIP_CHECK(hipMemcpyAsync(d, src, bytes, hipMemcpyHostToDevice, stream_));
  sync();
}
void HipBackend::download_impl(const Tensor& t, void* dst, size_t bytes) {
  fetch(dst, raw(t, "download", "tensor"), bytes);
}
void HipBackend::copy_impl(const Tensor& src, Tensor& dst) {
  if (src.bytes())
    MXSIM_HIP_CHECK(hipMemcpyAsync(raw(dst, "copy", "dst"), raw(src, "copy", "src"), src.bytes(),
                                   hipMemcpyDeviceToDevice, stream_));
}
void HipBackend::copy_into_impl(const Tensor& src, Tensor& dst, size_t offset) {
  if (src.bytes())
    MXSIM_HIP_CHECK(hipMemcpyAsync(static_cast<std::byte*>(raw(dst, "copy_into", "dst")) + offset * dtype_size(dst.dtype()),
                                   raw(src, "copy_into", "src"), src.bytes(), hipMemcpyDeviceToDevice, stream_));
}
namespace {
/// `later` waits for the work queued on `first` so far (an event: the host never waits).
void order_after(hipStream_t first, hipStream_t later) {
  hipEvent_t ready = nullptr;
  MXSIM_HIP_CHECK(hipEventCreateWithFlags(&ready, hipEventDisableTiming));
  const hipError_t e1 = hipEventRecord(ready, first);
  const hipError_t e2 = e1 == hipSuccess ? hipStreamWaitEvent(later, ready, 0) : e1;
  (void)hipEventDestroy(ready);  // released once the wait is satisfied
  MXSIM_HIP_CHECK(e2);
}
}  // namespace

void HipBackend::upload_native_impl(Tensor& t, const void* src, size_t bytes, void* src_stream) {
  void* dst = raw(t, "upload_native", "tensor");
  if (bytes == 0) return;
  order_after(static_cast<hipStream_t>(src_stream), stream_);  // the caller's writes of src first
  MXSIM_HIP_CHECK(hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToDevice, stream_));
}

namespace {
/// The device kernels apply FP32 block values as scale_inv only (numerics.md §2.4).
void refuse_dividing_scales(const Backend::NativeQuantized& n, const char* op) {
  if (n.divides_by_scale)
    throw std::invalid_argument(std::string(op) + ": FP32 scales that divide (torchao Float8TrainingTensor) are not "
                                "supported on the GPU backend");
}
}  // namespace

QTensor HipBackend::upload_native_impl(const NativeQuantized& n, void* src_stream) {
  refuse_dividing_scales(n, "upload_native");
  DeviceQuantized d = alloc_quantized(n.spec, n.groups, n.rows, n.cols, n.transposed ? Axis::Rows : Axis::Cols,
                                      "a caller's quantized tensor");
  const hd::QuantLayout& L = d.t.layout;
  const bool fp32 = n.spec.scale_kind == ScaleKind::FP32;
  order_after(static_cast<hipStream_t>(src_stream), stream_);
  if (L.data_bytes()) MXSIM_HIP_CHECK(hipMemcpyAsync(d.t.data, n.data, L.data_bytes(), hipMemcpyDeviceToDevice, stream_));
  if (L.scale_count())
    MXSIM_HIP_CHECK(hipMemcpyAsync(fp32 ? static_cast<void*>(d.t.scale_inv) : static_cast<void*>(d.t.scale_bytes),
                                   n.scales, L.scale_count() * (fp32 ? sizeof(float) : 1), hipMemcpyDeviceToDevice,
                                   stream_));
  if (n.tensor_scale_inv)
    MXSIM_HIP_CHECK(hipMemcpyAsync(d.t.tensor_scale_inv, n.tensor_scale_inv, sizeof(float), hipMemcpyDeviceToDevice,
                                   stream_));
  else  // 1 for every kind but NVFP4
    MXSIM_HIP_CHECK(hipMemcpyAsync(d.t.tensor_scale_inv, unit_scale(), sizeof(float), hipMemcpyDeviceToDevice, stream_));
  return QTensor(std::make_shared<HipQBuffer>(this, std::move(d)), n.spec, n.groups, n.rows, n.cols, n.transposed);
}

// Borrowed memory: this stream reads it after the caller's queued writes; release_native orders
// the caller's later work (its writes, its allocator's reuse) after our reads.
Tensor HipBackend::borrow_native_impl(DType dtype, Shape shape, const void* src, void* src_stream) {
  order_after(static_cast<hipStream_t>(src_stream), stream_);
  return Tensor(std::make_shared<HipBuffer>(this, const_cast<void*>(src)), dtype, shape);
}

QTensor HipBackend::borrow_native_impl(const NativeQuantized& n, void* src_stream) {
  refuse_dividing_scales(n, "borrow_native");
  DeviceQuantized d;  // a view: no buffers of its own
  d.t.spec = n.spec;
  d.t.layout = hd::quant_layout(n.spec, n.groups, n.rows, n.cols, n.transposed ? Axis::Rows : Axis::Cols);
  d.t.data = static_cast<uint8_t*>(const_cast<void*>(n.data));
  if (n.spec.scale_kind == ScaleKind::FP32) d.t.scale_inv = static_cast<float*>(const_cast<void*>(n.scales));
  else d.t.scale_bytes = static_cast<uint8_t*>(const_cast<void*>(n.scales));
  d.t.tensor_scale_inv = n.tensor_scale_inv ? static_cast<float*>(const_cast<void*>(n.tensor_scale_inv)) : unit_scale();
  order_after(static_cast<hipStream_t>(src_stream), stream_);
  return QTensor(std::make_shared<HipQBuffer>(this, std::move(d)), n.spec, n.groups, n.rows, n.cols, n.transposed);
}

void HipBackend::release_native_impl(void* dst_stream) { order_after(stream_, static_cast<hipStream_t>(dst_stream)); }

float* HipBackend::unit_scale() {
  if (!unit_scale_.get()) {
    static const float one = 1.0f;
    DeviceBuffer b(sizeof one, "the unit tensor scale of borrowed quantized tensors");
    copy_to_device(b.get(), &one, sizeof one);
    unit_scale_ = std::move(b);
  }
  return unit_scale_.as<float>();
}

void HipBackend::download_native_impl(const Tensor& t, void* dst, size_t bytes, void* dst_stream) {
  const void* src = raw(t, "download_native", "tensor");
  if (bytes == 0) return;
  // The caller's earlier work on dst first, then the copy, then the caller's later work.
  order_after(static_cast<hipStream_t>(dst_stream), stream_);
  MXSIM_HIP_CHECK(hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToDevice, stream_));
  order_after(stream_, static_cast<hipStream_t>(dst_stream));
}

void HipBackend::copy_range_impl(const Tensor& src, size_t so, Tensor& dst, size_t d_o, size_t count) {
  if (count == 0) return;
  const size_t es = dtype_size(src.dtype());
  MXSIM_HIP_CHECK(hipMemcpyAsync(static_cast<std::byte*>(raw(dst, "copy_range", "dst")) + d_o * es,
                                 static_cast<const std::byte*>(raw(src, "copy_range", "src")) + so * es, count * es,
                                 hipMemcpyDeviceToDevice, stream_));
}
// One gather launch into a small buffer and one copy of it to the host.
void HipBackend::gather_deferred_impl(const Tensor& t, std::span<const int64_t> idx, void* dst) {
  if (idx.empty()) return;
  const size_t es = dtype_size(t.dtype()), n = idx.size();
  const Tensor di = device_indices(idx);
  DeviceBuffer out(n * es, "gathered elements");
  gather_kernel<<<detail::grid_for(n, 256), 256, 0, stream_>>>(static_cast<const std::byte*>(raw(t, "gather", "t")), es,
                                                               data<int64_t>(di, "gather", "indices"), n,
                                                               out.as<std::byte>());
  MXSIM_HIP_CHECK_LAUNCH("gather_kernel");
  fetch_later(out.get(), n * es, [dst, bytes = n * es](const std::byte* h) { std::memcpy(dst, h, bytes); });
}
void HipBackend::fill_zero_impl(Tensor& t) {
  if (t.bytes()) MXSIM_HIP_CHECK(hipMemsetAsync(raw(t, "fill_zero", "tensor"), 0, t.bytes(), stream_));
}

// ---- quantized handles: the host QuantizedTensor <-> its device storage, byte for byte

namespace {

Axis axis_of(const QuantizedTensor& q) { return q.transposed ? Axis::Rows : Axis::Cols; }

QuantizedTensor to_host(HipBackend& be, const DeviceQuantized& d) {
  const hd::QuantLayout& L = d.t.layout;
  QuantizedTensor q = allocate_quantized(d.t.spec, L);
  be.fetch(q.data.data(), d.t.data, L.data_bytes());
  if (d.t.spec.scale_kind == ScaleKind::FP32) be.fetch(q.scale_inv.data(), d.t.scale_inv, L.scale_count() * sizeof(float));
  else be.fetch(q.scale_bytes.data(), d.t.scale_bytes, L.scale_count());
  be.fetch(&q.tensor_scale_inv, d.t.tensor_scale_inv, sizeof(float));
  return q;
}

}  // namespace

QuantizedTensor HipBackend::download_impl(const QTensor& q) { return to_host(*this, dev(q, "download", "quantized tensor")); }

QTensor HipBackend::upload_impl(const QuantizedTensor& q) {
  // The device kernels apply FP32 values as scale_inv only (numerics.md §2.4).
  if (q.divides_by_scale())
    throw std::invalid_argument("upload: FP32 scales that divide (torchao Float8TrainingTensor) are not supported on the GPU backend");
  DeviceQuantized d = alloc_quantized(q.spec, q.groups, q.rows, q.cols, axis_of(q), "uploaded quantized tensor");
  const hd::QuantLayout& L = d.t.layout;
  copy_to_device(d.t.data, q.data.data(), L.data_bytes());
  if (q.spec.scale_kind == ScaleKind::FP32) {
    copy_to_device(d.t.scale_inv, q.scale_inv.data(), L.scale_count() * sizeof(float));
  } else {
    copy_to_device(d.t.scale_bytes, q.scale_bytes.data(), L.scale_count());
  }
  copy_to_device(d.t.tensor_scale_inv, &q.tensor_scale_inv, sizeof(float));
  const size_t G = q.groups, R = q.rows, C = q.cols;
  return QTensor(std::make_shared<HipQBuffer>(this, std::move(d)), q.spec, G, R, C, q.transposed);
}

std::vector<QuantizedTensor> HipBackend::download_impl(const GroupedQTensor& q) {
  std::vector<QuantizedTensor> out;
  for (const DeviceQuantized& d : dev(q, "download", "grouped quantized tensor")) out.push_back(to_host(*this, d));
  return out;
}

std::unique_ptr<Backend> make_backend() { return std::make_unique<HipBackend>(); }

}  // namespace mxsim::hip
