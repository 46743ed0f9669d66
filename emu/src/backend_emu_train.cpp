// emu Backend ops: loss and metrics, AdamW, weight de-oscillation and
// oscillation metrics. Element arithmetic: core/include/mxsim/hd/elementwise.hpp;
// every whole-tensor FP64 sum is hd::tree_sum (hd/reduce.hpp), other
// reductions fold in ascending flat index (docs/numerics.md §6).
#include <cmath>

#include "backend_emu_impl.hpp"
#include "mxsim/hd/elementwise.hpp"
#include "mxsim/hd/reduce.hpp"

namespace mxsim::emu {

double EmuBackend::cross_entropy_impl(const Tensor& logits, const Tensor& labels, float grad_scale, Tensor& dlogits) {
  const Tensor2f& l = mat(logits, "cross_entropy", "logits");
  Tensor2f& dl = mat(dlogits, "cross_entropy", "dlogits");
  const size_t T = l.shape(0), C = l.shape(1);
  const uint8_t* y = data<uint8_t>(labels, "cross_entropy", "labels");
  hd::TreeSum sum;
  for (size_t t = 0; t < T; ++t) {
    if (y[t] >= C) throw std::invalid_argument("cross_entropy: label " + std::to_string(y[t]) + " outside the classes");
    sum.add(hd::cross_entropy_row(&l(t, 0), C, y[t], grad_scale, &dl(t, 0)));
  }
  return canonical_nan(sum.result());
}

void EmuBackend::argmax_rows_impl(const Tensor& logits, Tensor& pred) {
  const Tensor2f& l = mat(logits, "argmax_rows", "logits");
  int32_t* o = data<int32_t>(pred, "argmax_rows", "pred");
  for (size_t t = 0; t < l.shape(0); ++t) o[t] = int32_t(hd::argmax_row(&l(t, 0), l.shape(1)));
}

int64_t EmuBackend::count_correct_impl(const Tensor& logits, const Tensor& labels) {
  const Tensor2f& l = mat(logits, "count_correct", "logits");
  const uint8_t* y = data<uint8_t>(labels, "count_correct", "labels");
  int64_t c = 0;
  for (size_t t = 0; t < l.shape(0); ++t) c += hd::argmax_row(&l(t, 0), l.shape(1)) == y[t];
  return c;
}

double EmuBackend::l2_norm_impl(const Tensor& x) {
  const float* p = f32(x, "l2_norm", "x");
  return canonical_nan(std::sqrt(hd::tree_sum([p](size_t i) { return hd::sq_f64(p[i]); }, x.numel())));
}

void EmuBackend::adamw_impl(Tensor& master, Tensor& m, Tensor& v, const Tensor& grad, const AdamW& h, Tensor& model) {
  const hd::AdamWCoeffs c = hd::adamw_coeffs(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.t);
  float* pw = f32(master, "adamw", "master");
  float* pm = f32(m, "adamw", "m");
  float* pv = f32(v, "adamw", "v");
  float* pmod = f32(model, "adamw", "model");
  const float* pg = f32(grad, "adamw", "grad");
  for (size_t i = 0, n = master.numel(); i < n; ++i) pmod[i] = hd::adamw(pw[i], pm[i], pv[i], pg[i], c);
}

int64_t EmuBackend::deosc_update_impl(Tensor& w, const Tensor& q, Tensor& prev, Tensor& prev_q, Tensor& dist_w,
                                 Tensor& dist_q, bool window_end, float ratio, Tensor* snaps) {
  uint32_t* ps = snaps ? data<uint32_t>(*snaps, "deosc_update", "snaps") : nullptr;
  float* pw = f32(w, "deosc_update", "w");
  const float* pq = f32(q, "deosc_update", "q");
  float* pp = f32(prev, "deosc_update", "prev");
  float* ppq = f32(prev_q, "deosc_update", "prev_q");
  float* dw = f32(dist_w, "deosc_update", "dist_w");
  float* dq = f32(dist_q, "deosc_update", "dist_q");
  const size_t n = w.numel();
  for (size_t i = 0; i < n; ++i) hd::deosc_observe(pw[i], pq[i], pp[i], ppq[i], dw[i], dq[i]);
  if (!window_end) return 0;
  int64_t cnt = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool snapped = hd::deosc_window_end(pw[i], pq[i], pp[i], dw[i], dq[i], ratio);
    cnt += snapped;
    if (ps && snapped) ps[i] += 1u;
  }
  return cnt;
}

Backend::OscStep EmuBackend::osc_update_impl(const Tensor& w, const Tensor& q, OscState& s, float momentum,
                                        bool window_end) {
  const float* pw = f32(w, "osc_update", "w");
  const float* pq = f32(q, "osc_update", "q");
  float* prev_w = f32(s.prev_w, "osc_update", "prev_w");
  float* prev_q = f32(s.prev_q, "osc_update", "prev_q");
  float* dist_w = f32(s.dist_w, "osc_update", "dist_w");
  float* dist_q = f32(s.dist_q, "osc_update", "dist_q");
  float* ema = f32(s.ema, "osc_update", "ema");
  int8_t* last_dir = reinterpret_cast<int8_t*>(data<uint8_t>(s.last_dir, "osc_update", "last_dir"));
  uint32_t* flips = data<uint32_t>(s.flips, "osc_update", "flips");
  const size_t n = w.numel();
  uint64_t fl = 0, tot = 0, above = 0, moved = 0;
  hd::TreeSum ema_sum, ratio_sum;  // an unmoved element's ratio term is +0.0
  for (size_t i = 0; i < n; ++i) {
    const hd::OscElem e =
        hd::osc_update(pw[i], pq[i], prev_w[i], prev_q[i], last_dir[i], flips[i], ema[i], dist_w[i], dist_q[i], momentum);
    fl += e.flip;
    ema_sum.add(e.ema);
    above += e.ema > hd::kOscEmaThreshold;
    tot += e.flips;
    ratio_sum.add(e.moved ? e.ratio : 0.0);
    moved += e.moved;
  }
  std::copy_n(pw, n, prev_w);
  std::copy_n(pq, n, prev_q);
  if (window_end) {
    std::fill_n(dist_w, n, 0.0f);
    std::fill_n(dist_q, n, 0.0f);
  }
  OscStep r;
  r.flips = fl;
  r.flips_total = tot;
  r.ema_mean = canonical_nan(ema_sum.result() / double(n));
  r.ema_frac_above = double(above) / double(n);
  r.dist_ratio_mean = moved ? canonical_nan(ratio_sum.result() / double(moved)) : 0.0;
  return r;
}

}  // namespace mxsim::emu
