// The front door of mxsim::Backend: every public op (backend_ops.hpp) checks
// its operands here, once, for every backend, then calls the backend's
// <name>_impl. A backend checks only what is its own (that a handle belongs
// to it); the emulator and the GPU refuse the same calls with the same words.
//
// Messages name the op and the operand: "softmax_rows: p has shape [4, 8],
// expected [4, 16]".
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "mxsim/backend.hpp"
#include "mxsim/hd/quant_block.hpp"
#include "mxsim/m_splits.hpp"

namespace mxsim {

namespace {

[[noreturn]] void fail(const char* op, const std::string& what) {
  throw std::invalid_argument(std::string(op) + ": " + what);
}

void need_handle(const Tensor& t, const char* op, const char* what) {
  if (t.empty()) fail(op, std::string(what) + " is an empty tensor handle");
}
void need_handle(const QTensor& q, const char* op, const char* what) {
  if (q.empty()) fail(op, std::string(what) + " is an empty quantized tensor handle");
}
void need_handle(const GroupedQTensor& q, const char* op, const char* what) {
  if (q.empty()) fail(op, std::string(what) + " is an empty grouped quantized tensor handle");
}

void need_dtype(const Tensor& t, DType want, const char* op, const char* what) {
  need_handle(t, op, what);
  if (t.dtype() != want) fail(op, std::string(what) + " is " + name_of(t.dtype()) + ", expected " + name_of(want));
}
/// An f32 tensor of rank `rank` (0: any rank).
void need_f32(const Tensor& t, const char* op, const char* what, int rank = 0) {
  need_dtype(t, DType::f32, op, what);
  if (rank && t.rank() != rank)
    fail(op, std::string(what) + " must have rank " + std::to_string(rank) + ", has shape " + t.shape().str());
}
/// An operand of a BF16 GEMM: bf16, or f32 holding BF16 values, of rank `rank`.
void need_bf16_operand(const Tensor& t, const char* op, const char* what, int rank) {
  need_handle(t, op, what);
  if (t.dtype() != DType::f32 && t.dtype() != DType::bf16)
    fail(op, std::string(what) + " is " + name_of(t.dtype()) + ", expected f32 or bf16");
  if (t.rank() != rank)
    fail(op, std::string(what) + " must have rank " + std::to_string(rank) + ", has shape " + t.shape().str());
}
void need_shape(const Tensor& t, const Shape& shape, const char* op, const char* what) {
  need_handle(t, op, what);
  if (!(t.shape() == shape)) fail(op, std::string(what) + " has shape " + t.shape().str() + ", expected " + shape.str());
}
/// Rank 2 or 3 (the quantizer's one group or G groups).
void need_f32_2_or_3(const Tensor& t, const char* op, const char* what) {
  need_f32(t, op, what);
  if (t.rank() != 2 && t.rank() != 3)
    fail(op, std::string(what) + " must have rank 2 or 3, has shape " + t.shape().str());
}
/// The m_splits of a token operand of M rows (m_splits.hpp's rule).
void need_splits(std::span<const int64_t> ms, size_t M, const char* op) {
  if (std::string why = m_splits_error(ms, M); !why.empty()) fail(op, why);
}

/// The routing operands of T tokens with k slots each fit one another: top T x k elements, row_of
/// and dgate T k, p T rows, f as many elements as p has columns (a null pointer: not an operand of
/// the op). The kernels index with these, so a size that does not fit would read or write past a buffer.
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

}  // namespace

// ------------------------------------------------------------ memory
void Backend::check_alloc(DType, Shape shape) {
  if (shape.rank < 1 || shape.rank > 3) fail("alloc", "rank must be 1 to 3");
}
void Backend::check_upload(Tensor& t, const void*, size_t bytes) {
  need_handle(t, "upload", "tensor");
  if (bytes != t.bytes())
    fail("upload", std::to_string(bytes) + " bytes for a tensor of " + std::to_string(t.bytes()));
}
void Backend::check_upload_native(Tensor& t, const void* src, size_t bytes, void*) {
  need_handle(t, "upload_native", "tensor");
  if (bytes != t.bytes())
    fail("upload_native", std::to_string(bytes) + " bytes for a tensor of " + std::to_string(t.bytes()));
  if (!src && bytes) fail("upload_native", "src is NULL");
}
void Backend::check_upload_native_q(const NativeQuantized& q, void*) {
  const hd::QuantLayout L = hd::quant_layout(q.spec, q.groups, q.rows, q.cols, q.transposed ? Axis::Rows : Axis::Cols);
  if ((L.data_bytes() && !q.data) || (L.scale_count() && !q.scales))
    fail("upload_native", "a quantized tensor's codes or scales are NULL");
  if (has_tensor_scale(q.spec.scale_kind) && !q.tensor_scale_inv) fail("upload_native", "NVFP4's tensor scale is NULL");
}
void Backend::check_borrow_native(DType dtype, Shape shape, const void* src, void*) {
  if (shape.rank < 1 || shape.rank > 3)
    fail("borrow_native", "shape " + shape.str() + " must have rank 1 to 3");
  if (!src && shape.numel() != 0 && dtype_size(dtype) != 0) fail("borrow_native", "src is NULL");
}
void Backend::check_borrow_native_q(const NativeQuantized& q, void* stream) { check_upload_native_q(q, stream); }
void Backend::check_release_native(void*) {}
void Backend::check_download_native(const Tensor& t, void* dst, size_t bytes, void*) {
  need_handle(t, "download_native", "tensor");
  if (bytes != t.bytes())
    fail("download_native", std::to_string(bytes) + " bytes for a tensor of " + std::to_string(t.bytes()));
  if (!dst && bytes) fail("download_native", "dst is NULL");
}
void Backend::check_download(const Tensor& t, void*, size_t bytes) {
  need_handle(t, "download", "tensor");
  if (bytes != t.bytes())
    fail("download", std::to_string(bytes) + " bytes for a tensor of " + std::to_string(t.bytes()));
}
void Backend::check_copy(const Tensor& src, Tensor& dst) {
  need_handle(src, "copy", "src");
  need_handle(dst, "copy", "dst");
  if (src.dtype() != dst.dtype() || src.numel() != dst.numel())
    fail("copy", "source " + std::string(name_of(src.dtype())) + " " + src.shape().str() + " and destination " +
                     name_of(dst.dtype()) + " " + dst.shape().str() + " differ");
}
void Backend::check_copy_into(const Tensor& src, Tensor& dst, size_t offset) {
  need_handle(src, "copy_into", "src");
  need_handle(dst, "copy_into", "dst");
  if (src.dtype() != dst.dtype() || offset > dst.numel() || src.numel() > dst.numel() - offset)
    fail("copy_into", "source " + std::string(name_of(src.dtype())) + " " + src.shape().str() +
                          " does not fit destination " + name_of(dst.dtype()) + " " + dst.shape().str() +
                          " at element " + std::to_string(offset));
}
void Backend::check_fill_zero(Tensor& t) { need_handle(t, "fill_zero", "tensor"); }
void Backend::check_download_q(const QTensor& q) { need_handle(q, "download", "quantized tensor"); }
// The host form's storage against the layout its spec and shape give (hd::quant_layout, the
// layout both backends index by): a tensor read from a file or built by hand is refused here,
// not read past its buffers.
void Backend::check_upload_q(const QuantizedTensor& q) {
  const hd::QuantLayout L = hd::quant_layout(q.spec, q.groups, q.rows, q.cols, q.transposed ? Axis::Rows : Axis::Cols);
  if (q.data.size() != L.data_bytes() || L.transposed != q.transposed)
    fail("upload", "quantized tensor storage (" + std::to_string(q.data.size()) + " code bytes" +
                       (q.transposed ? ", transposed" : "") + ") does not match its spec and shape (" +
                       std::to_string(L.data_bytes()) + " code bytes" + (L.transposed ? ", transposed" : "") + ")");
  const bool fp32 = q.spec.scale_kind == ScaleKind::FP32;
  if ((fp32 ? q.scale_inv.size() : q.scale_bytes.size()) != L.scale_count())
    fail("upload", std::string(fp32 ? "scale_inv" : "scale bytes") + " do not match the spec (" +
                       std::to_string(fp32 ? q.scale_inv.size() : q.scale_bytes.size()) + " for " +
                       std::to_string(L.scale_count()) + " blocks)");
}
void Backend::check_download_grouped_q(const GroupedQTensor& q) {
  need_handle(q, "download", "grouped quantized tensor");
}
void Backend::check_copy_range(const Tensor& src, size_t so, Tensor& dst, size_t d_o, size_t count) {
  need_handle(src, "copy_range", "src");
  need_handle(dst, "copy_range", "dst");
  if (src.dtype() != dst.dtype() || so > src.numel() || count > src.numel() - so || d_o > dst.numel() ||
      count > dst.numel() - d_o)
    fail("copy_range", std::to_string(count) + " elements from " + name_of(src.dtype()) + " " + src.shape().str() +
                           " at " + std::to_string(so) + " to " + name_of(dst.dtype()) + " " + dst.shape().str() +
                           " at " + std::to_string(d_o) + " do not fit");
}
void Backend::check_indices(std::span<const int64_t> idx, size_t n, const char* op, const char* what) {
  for (int64_t i : idx)
    if (i < 0 || uint64_t(i) >= n)
      fail(op, "index " + std::to_string(i) + " lies outside " + what + " of " + std::to_string(n) + " elements");
}
void Backend::check_gather_deferred(const Tensor& t, std::span<const int64_t> idx, void*) {
  need_handle(t, "gather", "t");
  check_indices(idx, t.numel(), "gather", "the tensor");
}
void Backend::check_quant_elements_deferred(const QTensor& q, std::span<const int64_t> idx, QuantElements*) {
  need_handle(q, "quant_elements", "q");
  check_indices(idx, q.groups() * q.rows() * q.cols(), "quant_elements", "the quantized tensor");
}
void Backend::check_resolve_deferred() {}

// ------------------------------------------------------------ quantization
void Backend::check_quantize(const Tensor& x, const QuantSpec&, Axis) { need_f32_2_or_3(x, "quantize", "x"); }
void Backend::check_quantize_grouped_colwise(const Tensor& x, std::span<const int64_t> ms, const QuantSpec&) {
  need_f32(x, "quantize_grouped_colwise", "x", 2);
  need_splits(ms, x.dim(0), "quantize_grouped_colwise");
}
void Backend::check_dequantize(const QTensor& q, Tensor& out) {
  need_handle(q, "dequantize", "q");
  need_f32(out, "dequantize", "out");
  if (out.rank() == 3) need_shape(out, {q.groups(), q.rows(), q.cols()}, "dequantize", "out");
  else if (q.groups() != 1)
    fail("dequantize", "tensor has " + std::to_string(q.groups()) + " groups; out must have rank 3");
  else need_shape(out, {q.rows(), q.cols()}, "dequantize", "out");
}
void Backend::check_quant_stats(const Tensor& x, const QTensor& q) {
  need_handle(q, "quant_stats", "q");
  need_f32_2_or_3(x, "quant_stats", "x");
  const Shape want = x.rank() == 3 ? Shape{q.groups(), q.rows(), q.cols()} : Shape{q.rows(), q.cols()};
  if (!(x.shape() == want) || (x.rank() == 2 && q.groups() != 1))
    fail("quant_stats", "source x " + x.shape().str() + " and the quantized tensor (" + std::to_string(q.groups()) +
                            " x " + std::to_string(q.rows()) + " x " + std::to_string(q.cols()) + ") differ");
}
void Backend::check_quant_stats_deferred(const Tensor& x, const QTensor& q, QuantStats*) { check_quant_stats(x, q); }
void Backend::check_scale_exp_histogram(const QTensor& q) { need_handle(q, "scale_exp_histogram", "q"); }
void Backend::check_scale_exp_histogram_deferred(const QTensor& q, ScaleExpCounts*) { check_scale_exp_histogram(q); }
void Backend::check_amax(const Tensor& x) { need_f32(x, "amax", "x"); }
void Backend::check_round_bf16(Tensor& x) { need_f32(x, "round_bf16", "x"); }
void Backend::check_round_bf16_to(const Tensor& src, Tensor& dst) {
  need_f32(src, "round_bf16", "src");
  need_handle(dst, "round_bf16", "dst");
  if (dst.dtype() != DType::f32 && dst.dtype() != DType::bf16)
    fail("round_bf16", std::string("dst is ") + name_of(dst.dtype()) + ", expected f32 or bf16");
  if (src.numel() != dst.numel()) need_shape(dst, src.shape(), "round_bf16", "dst");
}

// ------------------------------------------------------------ grouped GEMM
// The operands' shapes and the output's; the inner dimensions, the specs'
// pairing and the per-group layouts are the GEMM's own checks (numerics §5).
namespace {
/// The output of a token GEMM (fprop, dgrad): f32 [M, n] over the M token rows that m_splits cut.
void need_token_out(const char* op, Tensor& out, const char* what, size_t M, size_t n, std::span<const int64_t> ms) {
  need_f32(out, op, what, 2);
  need_shape(out, {M, n}, op, what);
  need_splits(ms, M, op);
}
}  // namespace
void Backend::check_fprop_q(const QTensor& x, const QTensor& w, std::span<const int64_t> ms, Tensor& y,
                            const GemmOptions&) {
  need_handle(x, "grouped_fprop", "x");
  need_handle(w, "grouped_fprop", "w");
  need_token_out("grouped_fprop", y, "y", x.rows(), w.rows(), ms);
}
void Backend::check_fprop_bf16(const Tensor& x, const Tensor& w, std::span<const int64_t> ms, Tensor& y,
                               const GemmOptions&) {
  need_bf16_operand(x, "grouped_fprop", "x", 2);
  need_bf16_operand(w, "grouped_fprop", "w", 3);
  need_token_out("grouped_fprop", y, "y", x.dim(0), w.dim(1), ms);
}
void Backend::check_dgrad_q(const QTensor& dy, const QTensor& w, std::span<const int64_t> ms, Tensor& dx,
                            const GemmOptions&) {
  need_handle(dy, "grouped_dgrad", "dy");
  need_handle(w, "grouped_dgrad", "w");
  need_token_out("grouped_dgrad", dx, "dx", dy.rows(), w.cols(), ms);
}
void Backend::check_dgrad_bf16(const Tensor& dy, const Tensor& w, std::span<const int64_t> ms, Tensor& dx,
                               const GemmOptions&) {
  need_bf16_operand(dy, "grouped_dgrad", "dy", 2);
  need_bf16_operand(w, "grouped_dgrad", "w", 3);
  need_token_out("grouped_dgrad", dx, "dx", dy.dim(0), w.dim(2), ms);
}
void Backend::check_wgrad_q(const GroupedQTensor& dy, const GroupedQTensor& x, std::span<const int64_t> ms, Tensor& dw,
                            const GemmOptions&) {
  need_handle(dy, "grouped_wgrad", "dy");
  need_handle(x, "grouped_wgrad", "x");
  need_f32(dw, "grouped_wgrad", "dw", 3);
  need_shape(dw, {ms.size(), dy.cols(), x.cols()}, "grouped_wgrad", "dw");
}
void Backend::check_wgrad_bf16(const Tensor& dy, const Tensor& x, std::span<const int64_t> ms, Tensor& dw,
                               const GemmOptions&) {
  need_bf16_operand(dy, "grouped_wgrad", "dy", 2);
  need_bf16_operand(x, "grouped_wgrad", "x", 2);
  need_f32(dw, "grouped_wgrad", "dw", 3);
  need_shape(dw, {ms.size(), dy.dim(1), x.dim(1)}, "grouped_wgrad", "dw");
  need_splits(ms, dy.dim(0), "grouped_wgrad");
  if (x.dim(0) != dy.dim(0))
    fail("grouped_wgrad", "dy " + dy.shape().str() + " and x " + x.shape().str() + " differ in their token rows");
}
void Backend::check_accumulate_groups(Tensor& acc, const Tensor& x, std::span<const int64_t> ms) {
  need_f32(acc, "accumulate_groups", "acc");
  need_f32(x, "accumulate_groups", "x");
  need_shape(x, acc.shape(), "accumulate_groups", "x");
  if (acc.rank() != 3 || acc.dim(0) != ms.size())
    fail("accumulate_groups", "acc " + acc.shape().str() + " needs one group per m_splits entry (" +
                                  std::to_string(ms.size()) + ")");
}

// ------------------------------------------------------------ router, MoE dispatch
void Backend::check_softmax_rows(const Tensor& logits, Tensor& p) {
  need_f32(logits, "softmax_rows", "logits", 2);
  need_f32(p, "softmax_rows", "p");
  need_shape(p, logits.shape(), "softmax_rows", "p");
}
void Backend::check_topk_rows(const Tensor& p, int k, Tensor& top) {
  need_f32(p, "topk_rows", "p", 2);
  if (k < 1 || size_t(k) > p.dim(1))
    fail("topk_rows", "k = " + std::to_string(k) + " outside [1, " + std::to_string(p.dim(1)) + "]");
  need_dtype(top, DType::i32, "topk_rows", "top");
  need_shape(top, {p.dim(0), size_t(k)}, "topk_rows", "top");
}
void Backend::check_moe_route(const Tensor& top, size_t E, int64_t pad, Tensor& counts, Tensor& row_of) {
  if (pad < 1) fail("moe_route", "pad = " + std::to_string(pad) + " must be >= 1 (rows per expert are padded to a multiple of it)");
  need_dtype(top, DType::i32, "moe_route", "top");
  need_dtype(counts, DType::i64, "moe_route", "counts");
  need_dtype(row_of, DType::i64, "moe_route", "row_of");
  need_shape(counts, {E}, "moe_route", "counts");
  need_shape(row_of, {top.numel()}, "moe_route", "row_of");
}
void Backend::check_permute_rows(const Tensor& src, const Tensor& row_of, size_t k, Tensor& dst) {
  need_f32(src, "permute_rows", "src", 2);
  need_f32(dst, "permute_rows", "dst", 2);
  need_dtype(row_of, DType::i64, "permute_rows", "row_of");
  if (dst.dim(1) != src.dim(1) || row_of.numel() != src.dim(0) * k)
    fail("permute_rows", "src " + src.shape().str() + ", row_of " + row_of.shape().str() + " and dst " +
                             dst.shape().str() + " do not fit k = " + std::to_string(k));
}
void Backend::check_unpermute_combine(const Tensor& yp, const Tensor& h0, const Tensor& p, const Tensor& top,
                                      const Tensor& row_of, size_t k, Tensor& h1) {
  const char* op = "unpermute_combine";
  need_f32(yp, op, "yp", 2);
  need_f32(h0, op, "h0", 2);
  need_f32(p, op, "p", 2);
  need_f32(h1, op, "h1", 2);
  need_shape(h1, h0.shape(), op, "h1");
  need_dtype(top, DType::i32, op, "top");
  need_dtype(row_of, DType::i64, op, "row_of");
  if (yp.dim(1) != h0.dim(1))
    fail(op, "yp " + yp.shape().str() + " and h0 " + h0.shape().str() + " differ in width");
  check_routing_shapes(op, h0.dim(0), k, &top, &row_of, &p, nullptr, nullptr);
}
void Backend::check_combine_backward(const Tensor& dh1, const Tensor& yp, const Tensor& p, const Tensor& top,
                                     const Tensor& row_of, size_t k, Tensor& dyp, Tensor& dgate) {
  const char* op = "combine_backward";
  need_f32(dh1, op, "dh1", 2);
  need_f32(yp, op, "yp", 2);
  need_f32(p, op, "p", 2);
  need_f32(dyp, op, "dyp", 2);
  need_shape(dyp, yp.shape(), op, "dyp");
  need_dtype(top, DType::i32, op, "top");
  need_dtype(row_of, DType::i64, op, "row_of");
  need_f32(dgate, op, "dgate");
  if (yp.dim(1) != dh1.dim(1))
    fail(op, "yp " + yp.shape().str() + " and dh1 " + dh1.shape().str() + " differ in width");
  check_routing_shapes(op, dh1.dim(0), k, &top, &row_of, &p, &dgate, nullptr);
  need_shape(dgate, {dh1.dim(0) * k}, op, "dgate");
}
void Backend::check_aux_loss(const Tensor& p, const Tensor& counts, size_t, float, Tensor& f) {
  need_f32(p, "aux_loss", "p", 2);
  need_dtype(counts, DType::i64, "aux_loss", "counts");
  need_f32(f, "aux_loss", "f");
  need_shape(counts, {p.dim(1)}, "aux_loss", "counts");
  need_shape(f, {p.dim(1)}, "aux_loss", "f");
}
void Backend::check_aux_loss_deferred(const Tensor& p, const Tensor& counts, size_t k, float coeff, Tensor& f,
                                      double*) {
  check_aux_loss(p, counts, k, coeff, f);
}
void Backend::check_router_backward(const Tensor& p, const Tensor& top, const Tensor& dgate, const Tensor& f, float,
                                    size_t k, Tensor& dlogits) {
  const char* op = "router_backward";
  need_f32(p, op, "p", 2);
  need_f32(dlogits, op, "dlogits", 2);
  need_shape(dlogits, p.shape(), op, "dlogits");
  need_dtype(top, DType::i32, op, "top");
  need_f32(dgate, op, "dgate");
  need_f32(f, op, "f");
  check_routing_shapes(op, p.dim(0), k, &top, nullptr, &p, &dgate, &f);
}
void Backend::check_embed_grad_sum(const Tensor& dh1, const Tensor& dh0_router, const Tensor& dxp, const Tensor& row_of,
                                   size_t k, Tensor& dh0) {
  const char* op = "embed_grad_sum";
  need_f32(dh1, op, "dh1", 2);
  need_f32(dh0_router, op, "dh0_router", 2);
  need_shape(dh0_router, dh1.shape(), op, "dh0_router");
  need_f32(dxp, op, "dxp", 2);
  need_f32(dh0, op, "dh0", 2);
  need_shape(dh0, dh1.shape(), op, "dh0");
  need_dtype(row_of, DType::i64, op, "row_of");
  if (dxp.dim(1) != dh1.dim(1))
    fail(op, "dxp " + dxp.shape().str() + " and dh1 " + dh1.shape().str() + " differ in width");
  check_routing_shapes(op, dh1.dim(0), k, nullptr, &row_of, nullptr, nullptr, nullptr);
}
void Backend::check_activation(Activation, const Tensor& u, Tensor& a) {
  need_f32(u, "activation", "u");
  need_f32(a, "activation", "a");
  need_shape(a, u.shape(), "activation", "a");
}
void Backend::check_activation_grad(Activation, const Tensor& u, const Tensor& da, Tensor& du) {
  need_f32(u, "activation_grad", "u");
  need_f32(da, "activation_grad", "da");
  need_f32(du, "activation_grad", "du");
  need_shape(da, u.shape(), "activation_grad", "da");
  need_shape(du, u.shape(), "activation_grad", "du");
}

// ------------------------------------------------------------ loss, metrics
namespace {
void need_logits_labels(const Tensor& logits, const Tensor& labels, const char* op) {
  need_f32(logits, op, "logits", 2);
  need_dtype(labels, DType::u8, op, "labels");
  need_shape(labels, {logits.dim(0)}, op, "labels");
}
}  // namespace
void Backend::check_cross_entropy(const Tensor& logits, const Tensor& labels, float, Tensor& dlogits) {
  need_logits_labels(logits, labels, "cross_entropy");
  need_f32(dlogits, "cross_entropy", "dlogits");
  need_shape(dlogits, logits.shape(), "cross_entropy", "dlogits");
}
void Backend::check_cross_entropy_deferred(const Tensor& logits, const Tensor& labels, float g, Tensor& dlogits,
                                           double*) {
  check_cross_entropy(logits, labels, g, dlogits);
}
void Backend::check_argmax_rows(const Tensor& logits, Tensor& pred) {
  need_f32(logits, "argmax_rows", "logits", 2);
  need_dtype(pred, DType::i32, "argmax_rows", "pred");
  need_shape(pred, {logits.dim(0)}, "argmax_rows", "pred");
}
void Backend::check_count_correct(const Tensor& logits, const Tensor& labels) {
  need_logits_labels(logits, labels, "count_correct");
}
void Backend::check_count_correct_deferred(const Tensor& logits, const Tensor& labels, int64_t*) {
  check_count_correct(logits, labels);
}
void Backend::check_l2_norm(const Tensor& x) { need_f32(x, "l2_norm", "x"); }
void Backend::check_l2_norm_deferred(const Tensor& x, double*) { check_l2_norm(x); }
void Backend::check_amax_deferred(const Tensor& x, float*) { check_amax(x); }
void Backend::check_output_error_deferred(const Tensor& ref, const Tensor& test, OutputError* dst) {
  need_f32(ref, "output_error", "ref");
  need_f32(test, "output_error", "test");
  need_shape(test, ref.shape(), "output_error", "test");
  if (!dst) throw std::invalid_argument("output_error: dst is null");
}

// ------------------------------------------------------------ optimizer, de-oscillation, metrics
void Backend::check_adamw(Tensor& master, Tensor& m, Tensor& v, const Tensor& grad, const AdamW&, Tensor& model) {
  need_f32(master, "adamw", "master");
  for (auto [t, what] : {std::pair<const Tensor*, const char*>{&m, "m"}, {&v, "v"}, {&grad, "grad"}, {&model, "model"}}) {
    need_f32(*t, "adamw", what);
    need_shape(*t, master.shape(), "adamw", what);
  }
}
void Backend::check_deosc_update(Tensor& w, const Tensor& q, Tensor& prev, Tensor& prev_q, Tensor& dist_w,
                                 Tensor& dist_q, bool, float, Tensor* snaps) {
  need_f32(w, "deosc_update", "w");
  for (auto [t, what] : {std::pair<const Tensor*, const char*>{&q, "q"}, {&prev, "prev"}, {&prev_q, "prev_q"},
                         {&dist_w, "dist_w"}, {&dist_q, "dist_q"}}) {
    need_f32(*t, "deosc_update", what);
    need_shape(*t, w.shape(), "deosc_update", what);
  }
  if (snaps) {
    need_dtype(*snaps, DType::u32, "deosc_update", "snaps");
    need_shape(*snaps, w.shape(), "deosc_update", "snaps");
  }
}
void Backend::check_osc_update(const Tensor& w, const Tensor& q, OscState& s, float, bool) {
  const char* op = "osc_update";
  need_f32(w, op, "w");
  // The state may be kept flat ([n]) or in the weight's shape: only the element count must agree.
  for (auto [t, what, dt] : {std::tuple<const Tensor*, const char*, DType>{&q, "q", DType::f32},
                             {&s.prev_w, "prev_w", DType::f32}, {&s.prev_q, "prev_q", DType::f32},
                             {&s.dist_w, "dist_w", DType::f32}, {&s.dist_q, "dist_q", DType::f32},
                             {&s.ema, "ema", DType::f32}, {&s.last_dir, "last_dir", DType::u8},
                             {&s.flips, "flips", DType::u32}}) {
    need_dtype(*t, dt, op, what);
    if (t->numel() != w.numel()) need_shape(*t, w.shape(), op, what);
  }
}
void Backend::check_osc_update_deferred(const Tensor& w, const Tensor& q, OscState& s, float momentum, bool window_end,
                                        OscStep* dst) {
  check_osc_update(w, q, s, momentum, window_end);
  if (!dst) throw std::invalid_argument("osc_update: dst is null");
}

}  // namespace mxsim
