// The elementwise arithmetic of the training-step ops (docs/numerics.md §6),
// written once for host and device: the emu backend (emu/src/backend_emu_*.cpp)
// calls these in its loops, a GPU backend calls them in its kernels, so both
// evaluate literally the same expressions.
//
// Rules (numerics.md §1, §6): FP32 arithmetic in the order written, no
// contraction (-ffp-contract=off on the host, -fmad=false on the device),
// every sum a left-to-right loop in the index order given; bf16() is
// round_bf16 (rounding.hpp: RNE, IEEE overflow). exp / log / erf / x^n come
// from hd/libm.hpp: the project's own correctly rounded functions
// (hd/math.hpp), never the host libm.
//
// Granularity: a function per output element or per row, taking raw pointers
// and sizes, so that a kernel can give one thread (or one row) to each call.
// Reductions that span a whole tensor are given as their per-element step or
// term: amax and counts fold in ascending flat (row-major) index; the FP64
// sums (norms, the oscillation sums) are hd::tree_sum (hd/reduce.hpp) over
// the terms in that index order.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "mxsim/activation.hpp"
#include "mxsim/bits.hpp"
#include "mxsim/hd.hpp"
#include "mxsim/hd/libm.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::hd {

/// std::max(a, b) exactly: (a < b) ? b : a (a NaN b keeps a).
MXSIM_HD inline float max_f32(float a, float b) { return a < b ? b : a; }

// ---------------------------------------------------------------- router

/// Softmax of one row l[0..n) into p: mx = max_j l_j (std::max fold from
/// -inf), e_j = exp(l_j - mx), s = sum_j e_j (j ascending), p_j = e_j / s.
MXSIM_HD inline void softmax_row(const float* l, float* p, size_t n) {
  float mx = -INFINITY;
  for (size_t j = 0; j < n; ++j) mx = max_f32(mx, l[j]);
  float s = 0;
  for (size_t j = 0; j < n; ++j) {
    p[j] = exp_f32(l[j] - mx);
    s = s + p[j];
  }
  for (size_t j = 0; j < n; ++j) p[j] = canonical_nan(p[j] / s);
}

/// "a ranks above b" for top-k: larger probability first; NaN below every
/// number (-inf included); NaNs equal among themselves. A strict weak order.
MXSIM_HD inline bool topk_above(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return !std::isnan(a) && std::isnan(b);
  return a > b;
}

/// Top-k of one row p[0..n) into idx[0..k): the order a stable sort by
/// topk_above gives (ties, NaNs among themselves too, to the lower index),
/// found by k selection passes.
MXSIM_HD inline void topk_row(const float* p, size_t n, int k, int* idx) {
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (size_t e = 0; e < n; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken = taken || idx[i] == int(e);
      if (taken) continue;
      if (best < 0 || topk_above(p[e], p[size_t(best)])) best = int(e);
    }
    idx[j] = best;
  }
}

/// Rows expert e occupies in the permuted tensor: its token count padded up to
/// a multiple of `pad` (16: the Hadamard run; the grouped GEMM's m_splits).
MXSIM_HD inline int64_t padded_rows(int64_t count, int64_t pad) { return (count + pad - 1) / pad * pad; }

/// Load-balancing share of expert e: f_e = count_e / (T k) in FP32.
MXSIM_HD inline float aux_share(int64_t count, size_t assignments) { return float(count) / float(assignments); }

/// Auxiliary-loss sum term of expert e: double(f_e) * double(P_e / T), P_e the
/// FP32 sum of p[t, e] over t ascending (Switch Transformer eq. 4).
MXSIM_HD inline double aux_term(float f, float P, size_t T) { return double(f) * double(P / float(T)); }

// ---------------------------------------------------------------- loss

/// Cross-entropy of one row l[0..C) against `label`: dl = (softmax(l) -
/// onehot) * grad_scale (not rounded); returns log(sum_j exp(l_j - mx)) + mx
/// - l_label in FP32.
MXSIM_HD inline float cross_entropy_row(const float* l, size_t C, size_t label, float grad_scale, float* dl) {
  softmax_row(l, dl, C);
  float mx = -INFINITY;
  for (size_t j = 0; j < C; ++j) mx = max_f32(mx, l[j]);
  float s = 0;
  for (size_t j = 0; j < C; ++j) s = s + exp_f32(l[j] - mx);
  const float loss = log_f32(s) + mx - l[label];
  for (size_t j = 0; j < C; ++j) dl[j] = canonical_nan((dl[j] - (j == label ? 1.0f : 0.0f)) * grad_scale);
  return canonical_nan(loss);
}

/// Predicted class of one row: the first index of the maximum (a later equal
/// value does not win; a NaN compares false, so it is never chosen past
/// index 0 and a NaN at index 0 keeps 0).
MXSIM_HD inline size_t argmax_row(const float* l, size_t C) {
  size_t am = 0;
  for (size_t j = 1; j < C; ++j)
    if (l[j] > l[am]) am = j;
  return am;
}

// ---------------------------------------------------------------- activation

/// act(x): relu x > 0 ? x : 0; gelu 0.5 x (1 + erf(x * 0.70710678)); silu x / (1 + exp(-x)).
MXSIM_HD inline float act(Activation a, float x) {
  switch (a) {
    case Activation::Relu: return x > 0 ? x : 0.0f;
    case Activation::Gelu: return 0.5f * x * (1.0f + erf_f32(x * 0.70710678f));
    case Activation::Silu: break;
  }
  return x / (1.0f + exp_f32(-x));
}
/// act'(x): relu x > 0; gelu cdf + x * 0.39894228 * exp(-0.5 x x); silu s (1 + x (1 - s)), s = 1 / (1 + exp(-x)).
MXSIM_HD inline float act_grad(Activation a, float x) {
  switch (a) {
    case Activation::Relu: return x > 0 ? 1.0f : 0.0f;
    case Activation::Gelu: {
      const float cdf = 0.5f * (1.0f + erf_f32(x * 0.70710678f));
      const float pdf = 0.39894228f * exp_f32(-0.5f * x * x);
      return cdf + x * pdf;
    }
    case Activation::Silu: break;
  }
  const float s = 1.0f / (1.0f + exp_f32(-x));
  return s * (1.0f + x * (1.0f - s));
}
/// Forward output bf16(act(u)).
MXSIM_HD inline float activation(Activation a, float u) { return canonical_nan(round_bf16(act(a, u))); }
/// Backward output bf16(da * act'(u)).
MXSIM_HD inline float activation_grad(Activation a, float u, float da) {
  return canonical_nan(round_bf16(da * act_grad(a, u)));
}

// ---------------------------------------------------------------- MoE combine

/// h1[t, j] = bf16(h0[t, j] + bf16(m)), m = sum over slots s ascending of
/// fl32(gate_s * yp[row_s, j]), gate_s = p[t, top_s]. `gate` and `yp_rows`
/// hold the k gates and the k row pointers of token t.
MXSIM_HD inline float combine(float h0, const float* gate, const float* const* yp_rows, size_t k, size_t j) {
  float m = 0;
  for (size_t s = 0; s < k; ++s) m = m + gate[s] * yp_rows[s][j];
  return canonical_nan(round_bf16(h0 + round_bf16(m)));
}
/// Backward of the combine for token t, slot s: dyp[row, j] = bf16(gate * dh1[t, j])
/// for j < d; returns dgate = sum_j dh1[t, j] * yp[row, j] (FP32, j ascending).
MXSIM_HD inline float combine_backward_dyp(float gate, float dh1) { return canonical_nan(round_bf16(gate * dh1)); }
/// The gate gradient's running sum continued over d more elements:
/// dg + dh1[0] * yp_row[0] + ... (FP32, unfused, j ascending). A walk cut
/// into pieces and chained through dg is the same walk.
MXSIM_HD inline float combine_backward_dgate_acc(float dg, const float* dh1, const float* yp_row, size_t d) {
  for (size_t j = 0; j < d; ++j) dg = dg + dh1[j] * yp_row[j];
  return dg;
}
/// The gate gradient of a slot: sum over j ascending of dh1[j] * yp_row[j].
MXSIM_HD inline float combine_backward_dgate(const float* dh1, const float* yp_row, size_t d) {
  return canonical_nan(combine_backward_dgate_acc(0.0f, dh1, yp_row, d));
}
MXSIM_HD inline float combine_backward_slot(const float* dh1, const float* yp_row, float gate, size_t d,
                                            float* dyp_row) {
  for (size_t j = 0; j < d; ++j) dyp_row[j] = combine_backward_dyp(gate, dh1[j]);
  return combine_backward_dgate(dh1, yp_row, d);
}
/// Router softmax backward of token t with the auxiliary loss: dp_e = aux_g *
/// f_e, then dp[top_s] += dgate_s (s ascending); dot = sum_e p_e dp_e;
/// dl_e = bf16(p_e (dp_e - dot)). `dp` is caller scratch of E floats.
MXSIM_HD inline void router_backward_row(const float* p, const int* top, const float* dgate, const float* f,
                                         float aux_g, size_t E, size_t k, float* dp, float* dl) {
  for (size_t e = 0; e < E; ++e) dp[e] = aux_g * f[e];
  for (size_t s = 0; s < k; ++s) dp[size_t(top[s])] = dp[size_t(top[s])] + dgate[s];
  float dot = 0;
  for (size_t e = 0; e < E; ++e) dot = dot + p[e] * dp[e];
  for (size_t e = 0; e < E; ++e) dl[e] = canonical_nan(round_bf16(p[e] * (dp[e] - dot)));
}
/// dh0[t, j] = bf16(dh1 + dh0_router + sum over slots s ascending of dxp[row_s, j]).
MXSIM_HD inline float embed_grad(float dh1, float dh0_router, const float* const* dxp_rows, size_t k, size_t j) {
  float v = dh1 + dh0_router;
  for (size_t s = 0; s < k; ++s) v = v + dxp_rows[s][j];
  return canonical_nan(round_bf16(v));
}

// ---------------------------------------------------------------- optimizer

/// Per-step constants of AdamW (torch.optim.AdamW's algorithm in FP32;
/// docs/simulator.md "Optimizer"): bias corrections of step t >= 1.
struct AdamWCoeffs {
  float lr, beta1, beta2, eps, decay;  ///< decay = 1 - lr * weight_decay
  float step;                          ///< lr / (1 - beta1^t)
  float sbc2;                          ///< sqrt(1 - beta2^t)
};
MXSIM_HD inline AdamWCoeffs adamw_coeffs(float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t) {
  const float bc1 = 1.0f - pow_int_f32(beta1, t), bc2 = 1.0f - pow_int_f32(beta2, t);
  return {lr, beta1, beta2, eps, 1.0f - lr * weight_decay, lr / bc1, std::sqrt(bc2)};
}
/// One element: w = w (1 - lr wd); m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g g;
/// w = w - step (m / (sqrt(v) / sbc2 + eps)); returns the BF16 model copy bf16(w).
MXSIM_HD inline float adamw(float& w, float& m, float& v, float g, const AdamWCoeffs& c) {
  w = w * c.decay;
  m = c.beta1 * m + (1.0f - c.beta1) * g;
  v = c.beta2 * v + (1.0f - c.beta2) * g * g;
  const float denom = std::sqrt(v) / c.sbc2 + c.eps;
  w = canonical_nan(w - c.step * (m / denom));
  m = canonical_nan(m);
  v = canonical_nan(v);
  return canonical_nan(round_bf16(w));
}

// ---------------------------------------------------------------- reductions

/// amax fold (ascending index, start 0): max |x|, except that the first NaN
/// met is the result (its bits kept): a NaN is never skipped.
MXSIM_HD inline float amax_step(float acc, float x) {
  if (std::isnan(acc)) return acc;
  if (std::isnan(x)) return x;
  return max_f32(acc, std::fabs(x));
}
/// Term of the L2 norm's sum of squares: double(x)^2, summed by hd::tree_sum (hd/reduce.hpp).
MXSIM_HD inline double sq_f64(float x) { return double(x) * double(x); }

// ---------------------------------------------------------------- de-oscillation

/// Primus weight de-oscillation (training-mechanics.md §6), one element at
/// one observation: movement sums dist_w += |w - prev|, dist_q += |q - prev_q|,
/// then prev = w, prev_q = q.
MXSIM_HD inline void deosc_observe(float w, float q, float& prev, float& prev_q, float& dist_w, float& dist_q) {
  dist_w = canonical_nan(dist_w + std::fabs(w - prev));
  dist_q = canonical_nan(dist_q + std::fabs(q - prev_q));
  prev = w;
  prev_q = q;
}
/// At a window end: snap (w = prev = q) when dist_w > 0 and dist_q /
/// max(dist_w, 1e-12) >= ratio; the sums restart at 0. Returns whether it snapped.
MXSIM_HD inline bool deosc_window_end(float& w, float q, float& prev, float& dist_w, float& dist_q, float ratio) {
  bool snap = false;
  if (dist_w > 0 && dist_q / max_f32(dist_w, 1e-12f) >= ratio) {
    w = q;
    prev = q;
    snap = true;
  }
  dist_w = 0;
  dist_q = 0;
  return snap;
}

// ---------------------------------------------------------------- oscillation metrics

/// One element's contributions to a step's oscillation metrics (Nagel et al.
/// 2022, arXiv:2203.11086).
/// The EMA flip frequency above which an element counts in the oscillation
/// metrics' ema_frac_above (Backend::OscStep).
constexpr float kOscEmaThreshold = 0.01f;
struct OscElem {
  bool flip;        ///< an oscillation at this step
  float ema;        ///< the updated EMA frequency
  uint32_t flips;   ///< the element's cumulative flips
  bool moved;       ///< dist_w > 0 in the current window
  double ratio;     ///< dist_q / max(dist_w, 1e-12) in FP64 (when moved)
};
/// DistRatio of one element's window sums: dist_q / max(dist_w, 1e-12) in FP64 (defined
/// for an element that moved, dist_w > 0).
MXSIM_HD inline double osc_dist_ratio(float dist_q, float dist_w) {
  const double dw = double(dist_w);
  return canonical_nan(double(dist_q) / (dw < 1e-12 ? 1e-12 : dw));
}

/// Direction of the quantized value's change dq = q - prev_q (its sign; 0 no
/// change); an oscillation is a non-zero change opposite to the last non-zero
/// one; ema = m ind + (1 - m) ema; window sums dist_w += |w - prev_w|,
/// dist_q += |dq|. Updates last_dir, flips, ema, dist_w, dist_q (prev_w and
/// prev_q are the caller's to replace after the step).
MXSIM_HD inline OscElem osc_update(float w, float q, float prev_w, float prev_q, int8_t& last_dir, uint32_t& flips,
                                   float& ema, float& dist_w, float& dist_q, float momentum) {
  OscElem r{};
  const float dq = q - prev_q;
  const int8_t dir = dq > 0 ? 1 : (dq < 0 ? -1 : 0);
  float ind = 0;
  if (dir != 0) {
    if (last_dir != 0 && dir != last_dir) {
      ind = 1;
      ++flips;
      r.flip = true;
    }
    last_dir = dir;
  }
  ema = canonical_nan(momentum * ind + (1.0f - momentum) * ema);
  r.ema = ema;
  r.flips = flips;
  dist_w = canonical_nan(dist_w + std::fabs(w - prev_w));
  dist_q = canonical_nan(dist_q + std::fabs(dq));
  if (dist_w > 0) {
    r.moved = true;
    r.ratio = osc_dist_ratio(dist_q, dist_w);
  }
  return r;
}

}  // namespace mxsim::hd
