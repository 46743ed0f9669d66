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

bool Backend::supports_training() const {
  for (int i = 0; i < int(Op::kCount); ++i)
    if (!supports(Op(i))) return false;
  return true;
}

void Backend::check_copy_range(const Tensor& src, size_t so, const Tensor& dst, size_t d_o, size_t count) {
  if (src.dtype() != dst.dtype() || so > src.numel() || count > src.numel() - so || d_o > dst.numel() ||
      count > dst.numel() - d_o)
    throw std::invalid_argument("copy_range: " + std::to_string(count) + " elements from " + name_of(src.dtype()) +
                                " " + src.shape().str() + " at " + std::to_string(so) + " to " + name_of(dst.dtype()) +
                                " " + dst.shape().str() + " at " + std::to_string(d_o) + " do not fit");
}

void Backend::copy_range(const Tensor& src, size_t so, Tensor& dst, size_t d_o, size_t count) {
  check_copy_range(src, so, dst, d_o, count);
  if (count == 0) return;
  const size_t es = dtype_size(src.dtype());
  std::vector<std::byte> s(src.bytes()), d(dst.bytes());
  download(src, s.data(), s.size());
  download(dst, d.data(), d.size());
  std::copy_n(s.data() + so * es, count * es, d.data() + d_o * es);
  upload(dst, d.data(), d.size());
}

void Backend::check_indices(std::span<const int64_t> idx, size_t n, const char* op, const char* what) {
  for (int64_t i : idx)
    if (i < 0 || uint64_t(i) >= n)
      throw std::invalid_argument(std::string(op) + ": index " + std::to_string(i) + " lies outside " + what + " of " +
                                  std::to_string(n) + " elements");
}

void Backend::gather_deferred(const Tensor& t, std::span<const int64_t> idx, void* dst) {
  check_indices(idx, t.numel(), "gather", "the tensor");
  const size_t es = dtype_size(t.dtype());
  std::vector<std::byte> h(t.bytes());
  download(t, h.data(), h.size());
  for (size_t j = 0; j < idx.size(); ++j) std::memcpy(static_cast<std::byte*>(dst) + j * es, &h[size_t(idx[j]) * es], es);
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

void Backend::quant_elements_deferred(const QTensor& qh, std::span<const int64_t> idx, QuantElements* dst) {
  *dst = quant_elements_of(download(qh), idx);
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

void check_routing_shapes(const char* op, size_t T, size_t k, const Tensor* top, const Tensor* row_of,
                          const Tensor* p, const Tensor* dgate, const Tensor* f) {
  auto need = [&](const Tensor* t, const char* what, size_t n) {
    if (t && t->numel() != n)
      throw std::invalid_argument(std::string(op) + ": " + what + " has " + std::to_string(t->numel()) +
                                  " elements, expected " + std::to_string(n) + " (" + std::to_string(T) + " tokens x k = " +
                                  std::to_string(k) + ")");
  };
  need(top, "top", T * k);
  need(row_of, "row_of", T * k);
  need(dgate, "dgate", T * k);
  if (p && (p->rank() != 2 || p->dim(0) != T))
    throw std::invalid_argument(std::string(op) + ": p has shape " + p->shape().str() + ", expected " +
                                std::to_string(T) + " rows");
  if (f && p) need(f, "f", p->dim(1));
}

}  // namespace mxsim
