// Backend-independent parts of mxsim::Backend and its tensor handles.
#include "mxsim/backend.hpp"

#include "mxsim/hd/quant_block.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace mxsim {

const char* name_of(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::u32: return "u32";
    case DType::i64: return "i64";
    case DType::bf16: return "bf16";
  }
  return "?";
}

Shape::Shape(std::initializer_list<size_t> d) {
  if (d.size() < 1 || d.size() > 3) throw std::invalid_argument("Shape: rank must be 1 to 3, got " + std::to_string(d.size()));
  rank = int(d.size());
  std::copy(d.begin(), d.end(), dim.begin());
}
size_t Shape::numel() const {
  size_t n = rank ? 1 : 0;
  for (int i = 0; i < rank; ++i) n *= dim[size_t(i)];
  return n;
}
std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dim[size_t(i)]);
  return s + "]";
}

// The public ops: each checks once (backend_checks.cpp), then the backend computes.
#define MXSIM_X(Family, id, name, label, Ret, params, args) \
  auto Backend::name params -> Ret {                          \
    check_##id args;                                          \
    return name##_impl args;                                  \
  }
MXSIM_BACKEND_OPS(MXSIM_X)
MXSIM_BACKEND_DEFAULTED_OPS(MXSIM_X)
#undef MXSIM_X

// ------------------------------------------------------------ the defaults of the second list
void Backend::upload_native_impl(Tensor& t, const void* src, size_t bytes, void*) { upload(t, src, bytes); }
QTensor Backend::upload_native_impl(const NativeQuantized& n, void*) {
  QuantizedTensor q =
      allocate_quantized(n.spec, hd::quant_layout(n.spec, n.groups, n.rows, n.cols, n.transposed ? Axis::Rows : Axis::Cols));
  if (q.data.size()) std::memcpy(q.data.data(), n.data, q.data.size());
  if (n.spec.scale_kind == ScaleKind::FP32) {
    if (q.scale_inv.size()) std::memcpy(q.scale_inv.data(), n.scales, q.scale_inv.size() * sizeof(float));
    if (n.divides_by_scale) q.fp32_scale_use = Fp32ScaleUse::DivideByScale;
  } else if (q.scale_bytes.size()) {
    std::memcpy(q.scale_bytes.data(), n.scales, q.scale_bytes.size());
  }
  if (n.tensor_scale_inv) std::memcpy(&q.tensor_scale_inv, n.tensor_scale_inv, sizeof(float));
  return upload(q);
}
void Backend::download_native_impl(const Tensor& t, void* dst, size_t bytes, void*) { download(t, dst, bytes); }
Tensor Backend::borrow_native_impl(DType dtype, Shape shape, const void* src, void* src_stream) {
  Tensor t = alloc(dtype, shape);
  upload_native(t, src, t.bytes(), src_stream);
  return t;
}
QTensor Backend::borrow_native_impl(const NativeQuantized& q, void* src_stream) { return upload_native(q, src_stream); }
void Backend::release_native_impl(void*) {}
void Backend::osc_update_deferred_impl(const Tensor& w, const Tensor& q, OscState& s, float momentum, bool window_end,
                                       OscStep* dst) {
  *dst = osc_update_impl(w, q, s, momentum, window_end);
}

void Backend::copy_range_impl(const Tensor& src, size_t so, Tensor& dst, size_t d_o, size_t count) {
  if (count == 0) return;
  const size_t es = dtype_size(src.dtype());
  std::vector<std::byte> s(src.bytes()), d(dst.bytes());
  download(src, s.data(), s.size());
  download(dst, d.data(), d.size());
  std::copy_n(s.data() + so * es, count * es, d.data() + d_o * es);
  upload(dst, d.data(), d.size());
}

void Backend::gather_deferred_impl(const Tensor& t, std::span<const int64_t> idx, void* dst) {
  const size_t es = dtype_size(t.dtype());
  std::vector<std::byte> h(t.bytes());
  download(t, h.data(), h.size());
  for (size_t j = 0; j < idx.size(); ++j) std::memcpy(static_cast<std::byte*>(dst) + j * es, &h[size_t(idx[j]) * es], es);
}

void Backend::quant_elements_deferred_impl(const QTensor& qh, std::span<const int64_t> idx, QuantElements* dst) {
  *dst = quant_elements_of(download(qh), idx);
}
void Backend::resolve_deferred_impl() {}
void Backend::output_error_deferred_impl(const Tensor& ref, const Tensor& test, OutputError* dst) {
  const std::vector<float> r = download<float>(ref), t = download<float>(test);
  *dst = output_error(r.data(), t.data(), r.size());
}
void Backend::l2_norm_deferred_impl(const Tensor& x, double* dst) { *dst = l2_norm_impl(x); }
void Backend::amax_deferred_impl(const Tensor& x, float* dst) { *dst = amax_impl(x); }
void Backend::quant_stats_deferred_impl(const Tensor& x, const QTensor& q, QuantStats* dst) {
  *dst = quant_stats_impl(x, q);
}
void Backend::scale_exp_histogram_deferred_impl(const QTensor& q, ScaleExpCounts* dst) {
  *dst = scale_exp_histogram_impl(q);
}
void Backend::cross_entropy_deferred_impl(const Tensor& logits, const Tensor& labels, float grad_scale, Tensor& dlogits,
                                          double* dst) {
  *dst = cross_entropy_impl(logits, labels, grad_scale, dlogits);
}
void Backend::count_correct_deferred_impl(const Tensor& logits, const Tensor& labels, int64_t* dst) {
  *dst = count_correct_impl(logits, labels);
}
void Backend::aux_loss_deferred_impl(const Tensor& p, const Tensor& counts, size_t k, float coeff, Tensor& f,
                                     double* dst) {
  *dst = aux_loss_impl(p, counts, k, coeff, f);
}

Backend::QuantElements Backend::quant_elements_of(const QuantizedTensor& q, std::span<const int64_t> idx) {
  check_indices(idx, q.groups * q.rows * q.cols, "quant_elements", "the quantized tensor");
  const FormatSpec ef = spec_of(q.spec.elem);
  const bool fp32 = q.spec.scale_kind == ScaleKind::FP32;
  QuantElements o;
  for (int64_t e : idx) {
    const size_t g = size_t(e) / (q.rows * q.cols), lr = (size_t(e) / q.cols) % q.rows, lc = size_t(e) % q.cols;
    const size_t r = q.transposed ? lc : lr, k = q.transposed ? lr : lc;  // storage coordinates
    const size_t bi = r / q.block_rows(), bj = k / q.block_cols();
    const uint32_t c = q.code(g, r, k);
    const uint8_t byte = fp32 ? 0 : q.scale_bytes(g, bi, bj);
    const float sinv = fp32 ? q.scale_inv(g, bi, bj) : 0.0f;
    o.code.push_back(uint8_t(c));
    o.scale_bytes.push_back(byte);
    o.scale_inv.push_back(sinv);
    o.value.push_back(hd::dequant_value(q.spec.scale_kind, decode(ef, c), byte, sinv, q.tensor_scale_inv));
  }
  return o;
}

Tensor Backend::upload(const Tensor2f& x) {
  Tensor t = alloc(DType::f32, {x.shape(0), x.shape(1)});
  upload(t, x.data(), x.size() * sizeof(float));
  return t;
}
Tensor Backend::upload(const Tensor3f& x) {
  Tensor t = alloc(DType::f32, {x.shape(0), x.shape(1), x.shape(2)});
  upload(t, x.data(), x.size() * sizeof(float));
  return t;
}
Tensor2f Backend::download2(const Tensor& t) {
  if (t.dtype() != DType::f32 || t.rank() != 2)
    throw std::invalid_argument("download2: expected an f32 tensor of rank 2, got " + std::string(name_of(t.dtype())) +
                                " " + t.shape().str());
  Tensor2f h = Tensor2f::from_shape({t.dim(0), t.dim(1)});
  download(t, h.data(), h.size() * sizeof(float));
  return h;
}
Tensor3f Backend::download3(const Tensor& t) {
  if (t.dtype() != DType::f32 || t.rank() != 3)
    throw std::invalid_argument("download3: expected an f32 tensor of rank 3, got " + std::string(name_of(t.dtype())) +
                                " " + t.shape().str());
  Tensor3f h = Tensor3f::from_shape({t.dim(0), t.dim(1), t.dim(2)});
  download(t, h.data(), h.size() * sizeof(float));
  return h;
}

}  // namespace mxsim
