// ProfilingBackend (backend_profile.hpp): forwards, synchronises, times.
#include "mxsim/backend_profile.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <type_traits>
#include <vector>

namespace mxsim {

ProfilingBackend::ProfilingBackend(std::unique_ptr<Backend> inner, Mode mode) : mode_(mode), inner_(std::move(inner)) {}

template <class F>
decltype(auto) ProfilingBackend::timed(Slot s, F&& f) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto charge = [&] {
    if (mode_ == Mode::Device) inner_->synchronize();
    stats_[s].seconds += std::chrono::duration<double>(clock::now() - t0).count();
    ++stats_[s].calls;
  };
  if constexpr (std::is_void_v<std::invoke_result_t<F>>) {
    f();
    charge();
  } else {
    decltype(auto) r = f();
    charge();
    return r;
  }
}

const char* ProfilingBackend::slot_name(Slot s) {
  static const char* const names[kSlots] = {
      "alloc", "upload", "download", "copy", "fill_zero", "upload (quantized)", "download (quantized)",
      "quantize", "quantize_grouped_colwise", "dequantize", "quant_stats", "scale_exp_histogram", "amax", "round_bf16",
      "grouped_fprop (quantized)", "grouped_fprop (bf16)", "grouped_dgrad (quantized)", "grouped_dgrad (bf16)",
      "grouped_wgrad (quantized)", "grouped_wgrad (bf16)", "accumulate_groups",
      "softmax_rows", "topk_rows", "moe_route", "permute_rows", "unpermute_combine", "combine_backward", "aux_loss",
      "router_backward", "embed_grad_sum", "activation", "activation_grad", "cross_entropy", "argmax_rows",
      "count_correct", "l2_norm", "adamw", "deosc_update", "osc_update", "gather (watched elements)",
      "quant_elements (watched)", "resolve_deferred"};
  static_assert(sizeof(names) / sizeof(names[0]) == kSlots, "one name per slot");
  return names[s];
}

double ProfilingBackend::total_seconds() const {
  return std::accumulate(stats_.begin(), stats_.end(), 0.0, [](double a, const Stat& b) { return a + b.seconds; });
}

std::string ProfilingBackend::report() const {
  std::vector<int> order;
  for (int s = 0; s < kSlots; ++s)
    if (stats_[size_t(s)].calls) order.push_back(s);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return stats_[size_t(a)].seconds > stats_[size_t(b)].seconds; });
  const double total = total_seconds();
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "%-28s %10s %12s %12s %7s\n", "op", "calls", "total ms", "mean us", "share");
  out += line;
  for (int s : order) {
    const Stat& st = stats_[size_t(s)];
    std::snprintf(line, sizeof line, "%-28s %10llu %12.2f %12.2f %6.1f%%\n", slot_name(Slot(s)),
                  static_cast<unsigned long long>(st.calls), st.seconds * 1e3, st.seconds * 1e6 / double(st.calls),
                  total > 0 ? 100.0 * st.seconds / total : 0.0);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-28s %10s %12.2f\n", "all ops", "", total * 1e3);
  out += line;
  return out;
}

Tensor ProfilingBackend::alloc(DType d, Shape s) { return timed(kAlloc, [&] { return inner_->alloc(d, s); }); }
void ProfilingBackend::upload(Tensor& t, const void* src, size_t n) { timed(kUpload, [&] { inner_->upload(t, src, n); }); }
void ProfilingBackend::download(const Tensor& t, void* dst, size_t n) {
  timed(kDownload, [&] { inner_->download(t, dst, n); });
}
void ProfilingBackend::copy(const Tensor& a, Tensor& b) { timed(kCopy, [&] { inner_->copy(a, b); }); }
void ProfilingBackend::copy_into(const Tensor& a, Tensor& b, size_t o) { timed(kCopy, [&] { inner_->copy_into(a, b, o); }); }
void ProfilingBackend::copy_range(const Tensor& a, size_t ao, Tensor& b, size_t bo, size_t n) {
  timed(kCopy, [&] { inner_->copy_range(a, ao, b, bo, n); });
}
void ProfilingBackend::fill_zero(Tensor& t) { timed(kFillZero, [&] { inner_->fill_zero(t); }); }
QuantizedTensor ProfilingBackend::download(const QTensor& q) { return timed(kQDownload, [&] { return inner_->download(q); }); }
QTensor ProfilingBackend::upload(const QuantizedTensor& q) { return timed(kQUpload, [&] { return inner_->upload(q); }); }
std::vector<QuantizedTensor> ProfilingBackend::download(const GroupedQTensor& q) {
  return timed(kQDownload, [&] { return inner_->download(q); });
}

QTensor ProfilingBackend::quantize(const Tensor& x, const QuantSpec& spec, Axis axis) {
  return timed(kQuantize, [&] { return inner_->quantize(x, spec, axis); });
}
GroupedQTensor ProfilingBackend::quantize_grouped_colwise(const Tensor& x, std::span<const int64_t> ms,
                                                          const QuantSpec& spec) {
  return timed(kQuantizeGrouped, [&] { return inner_->quantize_grouped_colwise(x, ms, spec); });
}
void ProfilingBackend::dequantize(const QTensor& q, Tensor& out) { timed(kDequantize, [&] { inner_->dequantize(q, out); }); }
QuantStats ProfilingBackend::quant_stats(const Tensor& x, const QTensor& q) {
  return timed(kQuantStats, [&] { return inner_->quant_stats(x, q); });
}
ScaleExpCounts ProfilingBackend::scale_exp_histogram(const QTensor& q) {
  return timed(kScaleHist, [&] { return inner_->scale_exp_histogram(q); });
}
float ProfilingBackend::amax(const Tensor& x) { return timed(kAmax, [&] { return inner_->amax(x); }); }
void ProfilingBackend::round_bf16(Tensor& x) { timed(kRoundBf16, [&] { inner_->round_bf16(x); }); }
void ProfilingBackend::round_bf16(const Tensor& a, Tensor& b) { timed(kRoundBf16, [&] { inner_->round_bf16(a, b); }); }

void ProfilingBackend::grouped_fprop(const QTensor& x, const QTensor& w, std::span<const int64_t> ms, Tensor& y,
                                     const GemmOptions& o) {
  timed(kFpropQ, [&] { inner_->grouped_fprop(x, w, ms, y, o); });
}
void ProfilingBackend::grouped_fprop(const Tensor& x, const Tensor& w, std::span<const int64_t> ms, Tensor& y,
                                     const GemmOptions& o) {
  timed(kFpropBf16, [&] { inner_->grouped_fprop(x, w, ms, y, o); });
}
void ProfilingBackend::grouped_dgrad(const QTensor& dy, const QTensor& w, std::span<const int64_t> ms, Tensor& dx,
                                     const GemmOptions& o) {
  timed(kDgradQ, [&] { inner_->grouped_dgrad(dy, w, ms, dx, o); });
}
void ProfilingBackend::grouped_dgrad(const Tensor& dy, const Tensor& w, std::span<const int64_t> ms, Tensor& dx,
                                     const GemmOptions& o) {
  timed(kDgradBf16, [&] { inner_->grouped_dgrad(dy, w, ms, dx, o); });
}
void ProfilingBackend::grouped_wgrad(const GroupedQTensor& dy, const GroupedQTensor& x, std::span<const int64_t> ms,
                                     Tensor& dw, const GemmOptions& o) {
  timed(kWgradQ, [&] { inner_->grouped_wgrad(dy, x, ms, dw, o); });
}
void ProfilingBackend::grouped_wgrad(const Tensor& dy, const Tensor& x, std::span<const int64_t> ms, Tensor& dw,
                                     const GemmOptions& o) {
  timed(kWgradBf16, [&] { inner_->grouped_wgrad(dy, x, ms, dw, o); });
}
void ProfilingBackend::accumulate_groups(Tensor& acc, const Tensor& x, std::span<const int64_t> ms) {
  timed(kAccumulate, [&] { inner_->accumulate_groups(acc, x, ms); });
}

void ProfilingBackend::softmax_rows(const Tensor& l, Tensor& p) { timed(kSoftmax, [&] { inner_->softmax_rows(l, p); }); }
void ProfilingBackend::topk_rows(const Tensor& p, int k, Tensor& top) { timed(kTopk, [&] { inner_->topk_rows(p, k, top); }); }
void ProfilingBackend::moe_route(const Tensor& top, size_t E, int64_t pad, Tensor& counts, Tensor& row_of) {
  timed(kRoute, [&] { inner_->moe_route(top, E, pad, counts, row_of); });
}
void ProfilingBackend::permute_rows(const Tensor& src, const Tensor& row_of, size_t k, Tensor& dst) {
  timed(kPermute, [&] { inner_->permute_rows(src, row_of, k, dst); });
}
void ProfilingBackend::unpermute_combine(const Tensor& yp, const Tensor& h0, const Tensor& p, const Tensor& top,
                                         const Tensor& row_of, size_t k, Tensor& h1) {
  timed(kCombine, [&] { inner_->unpermute_combine(yp, h0, p, top, row_of, k, h1); });
}
void ProfilingBackend::combine_backward(const Tensor& dh1, const Tensor& yp, const Tensor& p, const Tensor& top,
                                        const Tensor& row_of, size_t k, Tensor& dyp, Tensor& dgate) {
  timed(kCombineBackward, [&] { inner_->combine_backward(dh1, yp, p, top, row_of, k, dyp, dgate); });
}
double ProfilingBackend::aux_loss(const Tensor& p, const Tensor& counts, size_t k, float coeff, Tensor& f) {
  return timed(kAuxLoss, [&] { return inner_->aux_loss(p, counts, k, coeff, f); });
}
void ProfilingBackend::router_backward(const Tensor& p, const Tensor& top, const Tensor& dgate, const Tensor& f,
                                       float aux_grad, size_t k, Tensor& dlogits) {
  timed(kRouterBackward, [&] { inner_->router_backward(p, top, dgate, f, aux_grad, k, dlogits); });
}
void ProfilingBackend::embed_grad_sum(const Tensor& dh1, const Tensor& dh0r, const Tensor& dxp, const Tensor& row_of,
                                      size_t k, Tensor& dh0) {
  timed(kEmbedGrad, [&] { inner_->embed_grad_sum(dh1, dh0r, dxp, row_of, k, dh0); });
}
void ProfilingBackend::activation(Activation a, const Tensor& u, Tensor& y) {
  timed(kActivation, [&] { inner_->activation(a, u, y); });
}
void ProfilingBackend::activation_grad(Activation a, const Tensor& u, const Tensor& da, Tensor& du) {
  timed(kActivationGrad, [&] { inner_->activation_grad(a, u, da, du); });
}

double ProfilingBackend::cross_entropy(const Tensor& l, const Tensor& y, float gs, Tensor& dl) {
  return timed(kCrossEntropy, [&] { return inner_->cross_entropy(l, y, gs, dl); });
}
void ProfilingBackend::argmax_rows(const Tensor& l, Tensor& pred) { timed(kArgmax, [&] { inner_->argmax_rows(l, pred); }); }
int64_t ProfilingBackend::count_correct(const Tensor& l, const Tensor& y) {
  return timed(kCountCorrect, [&] { return inner_->count_correct(l, y); });
}
double ProfilingBackend::l2_norm(const Tensor& x) { return timed(kL2Norm, [&] { return inner_->l2_norm(x); }); }
void ProfilingBackend::adamw(Tensor& w, Tensor& m, Tensor& v, const Tensor& g, const AdamW& h, Tensor& model) {
  timed(kAdamW, [&] { inner_->adamw(w, m, v, g, h, model); });
}
int64_t ProfilingBackend::deosc_update(Tensor& w, const Tensor& q, Tensor& prev, Tensor& prev_q, Tensor& dist_w,
                                       Tensor& dist_q, bool window_end, float ratio, Tensor* snaps) {
  return timed(kDeOsc, [&] { return inner_->deosc_update(w, q, prev, prev_q, dist_w, dist_q, window_end, ratio, snaps); });
}
Backend::OscStep ProfilingBackend::osc_update(const Tensor& w, const Tensor& q, OscState& s, float momentum,
                                              bool window_end) {
  return timed(kOsc, [&] { return inner_->osc_update(w, q, s, momentum, window_end); });
}


// Deferred forms: timed in the immediate op's slot (the synchronisation after
// each op delivers the value at once, so the time is the op's).
void ProfilingBackend::gather_deferred(const Tensor& t, std::span<const int64_t> idx, void* dst) {
  timed(kGather, [&] { inner_->gather_deferred(t, idx, dst); });
}
void ProfilingBackend::quant_elements_deferred(const QTensor& q, std::span<const int64_t> idx, QuantElements* dst) {
  timed(kQuantElements, [&] { inner_->quant_elements_deferred(q, idx, dst); });
}
void ProfilingBackend::l2_norm_deferred(const Tensor& x, double* dst) {
  timed(kL2Norm, [&] { inner_->l2_norm_deferred(x, dst); });
}
void ProfilingBackend::quant_stats_deferred(const Tensor& x, const QTensor& q, QuantStats* dst) {
  timed(kQuantStats, [&] { inner_->quant_stats_deferred(x, q, dst); });
}
void ProfilingBackend::scale_exp_histogram_deferred(const QTensor& q, ScaleExpCounts* dst) {
  timed(kScaleHist, [&] { inner_->scale_exp_histogram_deferred(q, dst); });
}
void ProfilingBackend::cross_entropy_deferred(const Tensor& l, const Tensor& y, float gs, Tensor& dl, double* dst) {
  timed(kCrossEntropy, [&] { inner_->cross_entropy_deferred(l, y, gs, dl, dst); });
}
void ProfilingBackend::count_correct_deferred(const Tensor& l, const Tensor& y, int64_t* dst) {
  timed(kCountCorrect, [&] { inner_->count_correct_deferred(l, y, dst); });
}
void ProfilingBackend::aux_loss_deferred(const Tensor& p, const Tensor& c, size_t k, float coeff, Tensor& f,
                                         double* dst) {
  timed(kAuxLoss, [&] { inner_->aux_loss_deferred(p, c, k, coeff, f, dst); });
}
// In Host mode the step's one wait for its deferred values shows here.
void ProfilingBackend::resolve_deferred() { timed(kResolve, [&] { inner_->resolve_deferred(); }); }

}  // namespace mxsim
