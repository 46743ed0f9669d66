// Internal: the CPU emulator's mxsim::Backend, its buffers and their accessors.
// One source file per op family: backend_emu.cpp (memory), backend_emu_quant.cpp,
// backend_emu_gemm.cpp, backend_emu_moe.cpp, backend_emu_train.cpp.
//
// Buffers are host memory this backend reads in place: f32 tensors are xtensor
// containers (so the emu grouped GEMM and quantizer take them without a copy),
// quantized tensors are the host QuantizedTensor itself, other dtypes raw bytes.
#pragma once
#include <cstddef>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxsim/backend.hpp"

namespace mxsim::emu {

/// Storage of one dense tensor.
struct EmuBuffer final : BackendBuffer {
  using BackendBuffer::BackendBuffer;
  Tensor2f f2;                       ///< f32 of rank 1 (as [1, n]) and rank 2
  Tensor3f f3;                       ///< f32 of rank 3
  std::unique_ptr<std::byte[]> raw;  ///< every other dtype
};
/// Storage of one quantized tensor: the host layout itself.
struct EmuQBuffer final : BackendBuffer {
  EmuQBuffer(const Backend* b, QuantizedTensor q) : BackendBuffer(b), q(std::move(q)) {}
  QuantizedTensor q;
};
/// Storage of a per-group quantized wgrad operand.
struct EmuGroupedQBuffer final : BackendBuffer {
  EmuGroupedQBuffer(const Backend* b, std::vector<QuantizedTensor> q) : BackendBuffer(b), q(std::move(q)) {}
  std::vector<QuantizedTensor> q;
};

class EmuBackend final : public Backend {
 public:
  std::string name() const override { return "emu"; }
  std::string device() const override;
  void set_threads(int n) override;
  bool supports(Op) const override { return true; }

  Tensor alloc(DType dtype, Shape shape) override;
  using Backend::download;
  using Backend::upload;
  void upload(Tensor& t, const void* src, size_t bytes) override;
  void download(const Tensor& t, void* dst, size_t bytes) override;
  void copy(const Tensor& src, Tensor& dst) override;
  void copy_into(const Tensor& src, Tensor& dst, size_t offset) override;
  void copy_range(const Tensor& src, size_t src_offset, Tensor& dst, size_t dst_offset, size_t count) override;
  // The watched elements, read in place (Backend's defaults copy the whole tensor).
  void gather_deferred(const Tensor& t, std::span<const int64_t> idx, void* dst) override;
  void quant_elements_deferred(const QTensor& q, std::span<const int64_t> idx, QuantElements* dst) override;
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

  // ---- accessors for the op files (check owner, dtype, rank; throw naming op and operand)
  EmuBuffer& buf(const Tensor& t, const char* op, const char* what) const;
  const QuantizedTensor& host(const QTensor& q, const char* op, const char* what) const;
  const std::vector<QuantizedTensor>& host(const GroupedQTensor& q, const char* op, const char* what) const;
  /// f32 data of any rank.
  float* f32(const Tensor& t, const char* op, const char* what) const;
  /// f32 tensor of rank 2 as its container.
  Tensor2f& mat(const Tensor& t, const char* op, const char* what) const;
  /// f32 tensor of rank 3 as its container.
  Tensor3f& ten3(const Tensor& t, const char* op, const char* what) const;
  template <class T>
  T* data(const Tensor& t, const char* op, const char* what) const {
    if (t.dtype() != dtype_of<T>()) dtype_error(t, dtype_of<T>(), op, what);
    if constexpr (std::is_same_v<T, float>) return f32(t, op, what);
    else return reinterpret_cast<T*>(buf(t, op, what).raw.get());
  }
  /// Throws unless t has `shape`.
  static void expect_shape(const Tensor& t, const Shape& shape, const char* op, const char* what);
  [[noreturn]] static void dtype_error(const Tensor& t, DType want, const char* op, const char* what);
};

}  // namespace mxsim::emu
