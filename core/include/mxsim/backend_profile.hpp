// ProfilingBackend: a Backend that forwards every op to another one and
// measures it: calls and wall time per op, by default with the backend
// synchronised after each op so that a GPU's asynchronous work is charged to
// the op that queued it (Mode::Host times the calls alone). Results are the
// wrapped backend's, bit for bit; only the timing of the run changes (in
// Device mode every op becomes a synchronisation point).
//
//   auto be = std::make_unique<ProfilingBackend>(emu::make_emu_backend());
//   ... train with *be ...
//   std::cout << be->report();   // one line per op, most time first
//
// `mxsim train --profile` does this and prints the table after the summary.
#pragma once
#include <array>
#include <chrono>
#include <memory>
#include <string>

#include "mxsim/backend.hpp"

namespace mxsim {

class ProfilingBackend final : public Backend {
 public:
  /// What an op's time is: Device = until its work is done (the backend is
  /// synchronised after every op, so a GPU's queued work is charged to the
  /// op that queued it); Host = the call itself (validation, allocation,
  /// launches, and any wait the op makes of its own accord), nothing added:
  /// the host-side cost of driving the backend.
  enum class Mode : uint8_t { Device, Host };
  explicit ProfilingBackend(std::unique_ptr<Backend> inner, Mode mode = Mode::Device);

  /// Per op: calls, total and mean wall time (ms), share of the total; rows
  /// with at least one call, most time first.
  std::string report() const;
  /// Total wall time spent inside the wrapped backend's ops, seconds.
  double total_seconds() const;

  std::string name() const override { return inner_->name(); }
  std::string device() const override { return inner_->device(); }
  void set_threads(int n) override { inner_->set_threads(n); }
  void synchronize() override { inner_->synchronize(); }
  bool supports(Op op) const override { return inner_->supports(op); }

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
  GroupedQTensor quantize_grouped_colwise(const Tensor& x, std::span<const int64_t> ms, const QuantSpec& spec) override;
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
  void resolve_deferred() override;

 private:
  // Timed slots: the ops of Backend::Op, with the GEMM and transfer forms apart.
  enum Slot : uint8_t {
    kAlloc, kUpload, kDownload, kCopy, kFillZero, kQUpload, kQDownload,
    kQuantize, kQuantizeGrouped, kDequantize, kQuantStats, kScaleHist, kAmax, kRoundBf16,
    kFpropQ, kFpropBf16, kDgradQ, kDgradBf16, kWgradQ, kWgradBf16, kAccumulate,
    kSoftmax, kTopk, kRoute, kPermute, kCombine, kCombineBackward, kAuxLoss, kRouterBackward, kEmbedGrad,
    kActivation, kActivationGrad, kCrossEntropy, kArgmax, kCountCorrect, kL2Norm, kAdamW, kDeOsc, kOsc,
    kGather, kQuantElements, kResolve, kSlots
  };
  struct Stat {
    uint64_t calls = 0;
    double seconds = 0;
  };
  /// Runs f, synchronises, charges the wall time to slot s.
  template <class F>
  decltype(auto) timed(Slot s, F&& f);
  static const char* slot_name(Slot s);

  Mode mode_;
  std::unique_ptr<Backend> inner_;
  std::array<Stat, kSlots> stats_{};
};

}  // namespace mxsim
