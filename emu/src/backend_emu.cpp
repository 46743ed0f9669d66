// mxsim::Backend on the CPU emulator: memory, handles, factory.
#include "mxsim/emu/backend_emu.hpp"

#include <omp.h>

#include <algorithm>

#include "backend_emu_impl.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/emu/cpu_path.hpp"

namespace mxsim::emu {

namespace {
std::string where(const char* op, const char* what) { return std::string(op) + ": " + what; }
}  // namespace

std::string EmuBackend::device() const {
  try {
    return std::string("CPU, ") + cpu_path_name(cpu_path()) + " kernels";
  } catch (const std::invalid_argument&) {  // a bad MXSIM_CPU_PATH: the first kernel call reports it
    return "CPU";
  }
}

void EmuBackend::set_threads(int n) { omp_set_num_threads(std::max(1, n)); }

Tensor EmuBackend::alloc_impl(DType dtype, Shape shape) {
  auto b = std::make_shared<EmuBuffer>(this);
  if (dtype == DType::f32) {
    if (shape.rank == 3) b->f3 = Tensor3f::from_shape({shape[0], shape[1], shape[2]});
    else if (shape.rank == 2) b->f2 = Tensor2f::from_shape({shape[0], shape[1]});
    else b->f2 = Tensor2f::from_shape({1, shape[0]});
  } else {
    b->raw.reset(new std::byte[std::max<size_t>(1, shape.numel() * dtype_size(dtype))]);
  }
  return Tensor(std::move(b), dtype, shape);
}

EmuBuffer& EmuBackend::buf(const Tensor& t, const char* op, const char* what) const {
  if (t.empty()) throw std::invalid_argument(where(op, what) + " is an empty tensor handle");
  if (t.buffer()->owner() != this) throw std::invalid_argument(where(op, what) + " belongs to another backend");
  return static_cast<EmuBuffer&>(*t.buffer());
}
const QuantizedTensor& EmuBackend::host(const QTensor& q, const char* op, const char* what) const {
  if (q.empty()) throw std::invalid_argument(where(op, what) + " is an empty quantized tensor handle");
  if (q.buffer()->owner() != this) throw std::invalid_argument(where(op, what) + " belongs to another backend");
  return static_cast<EmuQBuffer&>(*q.buffer()).q;
}
const std::vector<QuantizedTensor>& EmuBackend::host(const GroupedQTensor& q, const char* op, const char* what) const {
  if (q.empty()) throw std::invalid_argument(where(op, what) + " is an empty grouped quantized tensor handle");
  if (q.buffer()->owner() != this) throw std::invalid_argument(where(op, what) + " belongs to another backend");
  return static_cast<EmuGroupedQBuffer&>(*q.buffer()).q;
}
float* EmuBackend::f32(const Tensor& t, const char* op, const char* what) const {
  if (t.dtype() != DType::f32) dtype_error(t, DType::f32, op, what);
  EmuBuffer& b = buf(t, op, what);
  return t.rank() == 3 ? b.f3.data() : b.f2.data();
}
Tensor2f& EmuBackend::mat(const Tensor& t, const char* op, const char* what) const {
  if (t.dtype() != DType::f32) dtype_error(t, DType::f32, op, what);
  if (t.rank() != 2) throw std::invalid_argument(where(op, what) + " must have rank 2, has shape " + t.shape().str());
  return buf(t, op, what).f2;
}
Tensor3f& EmuBackend::ten3(const Tensor& t, const char* op, const char* what) const {
  if (t.dtype() != DType::f32) dtype_error(t, DType::f32, op, what);
  if (t.rank() != 3) throw std::invalid_argument(where(op, what) + " must have rank 3, has shape " + t.shape().str());
  return buf(t, op, what).f3;
}
uint16_t* EmuBackend::bf16(const Tensor& t, const char* op, const char* what) const {
  if (t.dtype() != DType::bf16) dtype_error(t, DType::bf16, op, what);
  return reinterpret_cast<uint16_t*>(buf(t, op, what).raw.get());
}
namespace {
void widen_bf16(const uint16_t* b, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = bf16_value(b[i]);
}
}  // namespace
const Tensor2f& EmuBackend::operand2(const Tensor& t, Tensor2f& widened, const char* op, const char* what) const {
  if (t.dtype() != DType::bf16) return mat(t, op, what);
  widened = Tensor2f::from_shape({t.dim(0), t.dim(1)});
  widen_bf16(bf16(t, op, what), widened.data(), t.numel());
  return widened;
}
const Tensor3f& EmuBackend::operand3(const Tensor& t, Tensor3f& widened, const char* op, const char* what) const {
  if (t.dtype() != DType::bf16) return ten3(t, op, what);
  widened = Tensor3f::from_shape({t.dim(0), t.dim(1), t.dim(2)});
  widen_bf16(bf16(t, op, what), widened.data(), t.numel());
  return widened;
}
void EmuBackend::dtype_error(const Tensor& t, DType want, const char* op, const char* what) {
  throw std::invalid_argument(where(op, what) + " is " + name_of(t.dtype()) + ", expected " + name_of(want));
}

namespace {
void* raw_data(EmuBackend& be, const Tensor& t, const char* op, const char* what) {
  EmuBuffer& b = be.buf(t, op, what);
  if (t.dtype() == DType::f32) return t.rank() == 3 ? static_cast<void*>(b.f3.data()) : static_cast<void*>(b.f2.data());
  return b.raw.get();
}
}  // namespace

void EmuBackend::upload_impl(Tensor& t, const void* src, size_t bytes) {
  if (bytes) std::memcpy(raw_data(*this, t, "upload", "tensor"), src, bytes);
}
void EmuBackend::download_impl(const Tensor& t, void* dst, size_t bytes) {
  if (bytes) std::memcpy(dst, raw_data(*this, t, "download", "tensor"), bytes);
}
void EmuBackend::copy_impl(const Tensor& src, Tensor& dst) {
  if (src.bytes()) std::memcpy(raw_data(*this, dst, "copy", "dst"), raw_data(*this, src, "copy", "src"), src.bytes());
}
void EmuBackend::copy_into_impl(const Tensor& src, Tensor& dst, size_t offset) {
  if (src.bytes())
    std::memcpy(static_cast<std::byte*>(raw_data(*this, dst, "copy_into", "dst")) + offset * dtype_size(dst.dtype()),
                raw_data(*this, src, "copy_into", "src"), src.bytes());
}
void EmuBackend::copy_range_impl(const Tensor& src, size_t so, Tensor& dst, size_t d_o, size_t count) {
  if (count == 0) return;
  const size_t es = dtype_size(src.dtype());
  std::memmove(static_cast<std::byte*>(raw_data(*this, dst, "copy_range", "dst")) + d_o * es,
               static_cast<const std::byte*>(raw_data(*this, src, "copy_range", "src")) + so * es, count * es);
}
void EmuBackend::gather_deferred_impl(const Tensor& t, std::span<const int64_t> idx, void* dst) {
  const size_t es = dtype_size(t.dtype());
  const auto* p = static_cast<const std::byte*>(raw_data(*this, t, "gather", "t"));
  for (size_t j = 0; j < idx.size(); ++j) std::memcpy(static_cast<std::byte*>(dst) + j * es, p + size_t(idx[j]) * es, es);
}
void EmuBackend::quant_elements_deferred_impl(const QTensor& q, std::span<const int64_t> idx, QuantElements* dst) {
  *dst = quant_elements_of(host(q, "quant_elements", "q"), idx);
}
void EmuBackend::fill_zero_impl(Tensor& t) {
  if (t.bytes()) std::memset(raw_data(*this, t, "fill_zero", "tensor"), 0, t.bytes());
}

QuantizedTensor EmuBackend::download_impl(const QTensor& q) { return host(q, "download", "quantized tensor"); }
QTensor EmuBackend::upload_impl(const QuantizedTensor& q) {
  return QTensor(std::make_shared<EmuQBuffer>(this, q), q.spec, q.groups, q.rows, q.cols, q.transposed);
}
std::vector<QuantizedTensor> EmuBackend::download_impl(const GroupedQTensor& q) {
  return host(q, "download", "grouped quantized tensor");
}

std::unique_ptr<Backend> make_emu_backend() { return std::make_unique<EmuBackend>(); }

}  // namespace mxsim::emu
