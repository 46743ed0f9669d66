// HIP Backend ops: loss and metrics, l2 norm, AdamW, de-oscillation,
// oscillation metrics (docs/numerics.md §6). Element arithmetic:
// hd/elementwise.hpp, called as the emulator's loops call it
// (emu/src/backend_emu_train.cpp); every sum with a host result is the fixed
// tree of tree_sum.hpp (chunks of 256 from +0.0, then the chunk sums the same
// way), counts as exact FP64 sums. State updates run once per element in a
// kernel of their own; the reductions only read.
#include "tree_sum.hpp"

#include <cmath>
#include <initializer_list>

#include "mxsim/hd/elementwise.hpp"

namespace mxsim::hip {

using detail::grid_for;

namespace {

constexpr unsigned kThreads = 256;

#define MXSIM_GRID_STRIDE(i, n) \
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += size_t(gridDim.x) * blockDim.x)

// ---------------------------------------------------------------- loss, metrics

// Row t's FP32 loss into loss[t] and its dlogits row; a label outside the
// classes leaves the row alone (the host throws, see CrossEntropyFold).
__global__ void cross_entropy_kernel(const float* __restrict__ l, const uint8_t* __restrict__ y, size_t T, size_t C,
                                     float grad_scale, float* __restrict__ dl, float* __restrict__ loss) {
  MXSIM_GRID_STRIDE(t, T) {
    if (y[t] >= C) {
      loss[t] = 0.0f;
      continue;
    }
    loss[t] = hd::cross_entropy_row(l + t * C, C, y[t], grad_scale, dl + t * C);
  }
}
// Component 0: the sum of the row losses (FP64); 1: the first row whose label
// is outside the classes, as min of 256 i + label (exact in FP64 for any row
// count a device holds), so the message needs no second read.
struct CrossEntropyFold {
  const float* loss;
  const uint8_t* y;
  size_t C;
  __device__ void operator()(size_t i, double* acc) const {
    const double bad = double(i) * 256.0 + double(y[i]);
    if (y[i] >= C) acc[1] = bad < acc[1] ? bad : acc[1];
    else acc[0] = acc[0] + double(loss[i]);
  }
};

__global__ void argmax_rows_kernel(const float* __restrict__ l, size_t T, size_t C, int32_t* __restrict__ o) {
  MXSIM_GRID_STRIDE(t, T) o[t] = int32_t(hd::argmax_row(l + t * C, C));
}
__global__ void argmax_index_kernel(const float* __restrict__ l, size_t T, size_t C, uint64_t* __restrict__ o) {
  MXSIM_GRID_STRIDE(t, T) o[t] = uint64_t(hd::argmax_row(l + t * C, C));
}
// The number of rows whose argmax (computed per row before) equals the label.
struct CorrectFold {
  const uint64_t* am;
  const uint8_t* y;
  __device__ void operator()(size_t i, double* acc) const { acc[0] = acc[0] + (am[i] == uint64_t(y[i]) ? 1.0 : 0.0); }
};

struct SumSqFold {
  const float* x;
  __device__ void operator()(size_t i, double* acc) const { acc[0] = acc[0] + hd::sq_f64(x[i]); }
};

// output_error (numerics.md §4.8) as one tree reduction: components 0 sum (t - r)^2, 1 sum r^2
// (tree sums), 2 elements not compared (exact count), 3 max |t - r| (max), 4 its first index.
struct OutputErrorFold {
  const float* r;
  const float* t;
  __device__ void operator()(size_t i, double* acc) const {
    const float rv = r[i], tv = t[i];
    if (!isfinite(rv) || !isfinite(tv)) {
      acc[2] = acc[2] + 1.0;
      return;
    }
    const double e = double(tv) - double(rv);
    acc[0] = acc[0] + e * e;
    acc[1] = acc[1] + double(rv) * double(rv);
    const double ae = fabs(e);
    if (acc[3] < ae) {
      acc[3] = ae;
      acc[4] = double(i);
    }
  }
};

// ---------------------------------------------------------------- optimizer

__global__ void adamw_kernel(float* __restrict__ pw, float* __restrict__ pm, float* __restrict__ pv,
                             const float* __restrict__ pg, hd::AdamWCoeffs c, float* __restrict__ pmod, size_t n) {
  MXSIM_GRID_STRIDE(i, n) pmod[i] = hd::adamw(pw[i], pm[i], pv[i], pg[i], c);
}

// ---------------------------------------------------------------- de-oscillation

// The observation; at a window end then the element's window-end step (the
// emulator's second pass: each element depends on its own state only), its
// snap (0/1) into snapped[i] and, when snaps is given, +1 into snaps[i].
__global__ void deosc_kernel(float* __restrict__ pw, const float* __restrict__ pq, float* __restrict__ pp,
                             float* __restrict__ ppq, float* __restrict__ dw, float* __restrict__ dq, size_t n,
                             bool window_end, float ratio, uint8_t* __restrict__ snapped, uint32_t* __restrict__ snaps) {
  MXSIM_GRID_STRIDE(i, n) {
    hd::deosc_observe(pw[i], pq[i], pp[i], ppq[i], dw[i], dq[i]);
    if (window_end) {
      const bool s = hd::deosc_window_end(pw[i], pq[i], pp[i], dw[i], dq[i], ratio);
      snapped[i] = s ? 1 : 0;
      if (snaps && s) snaps[i] += 1u;
    }
  }
}
struct CountFold {
  const uint8_t* v;
  __device__ void operator()(size_t i, double* acc) const { acc[0] = acc[0] + double(v[i]); }
};

// ---------------------------------------------------------------- oscillation metrics

// hd::osc_update per element, its state updated once, here, in the reduction's
// own pass (tree_sum.hpp calls a fold once per element, a warp on neighbouring
// elements): then prev_w = w, prev_q = q and, at a window end, dist_w = dist_q
// = 0. The emulator does these after its sums, which read the element's
// results only, so doing them in the same pass gives the same state and sums.
// Components: 0 flips this step, 1 flips_total, 2 ema sum, 3 count of ema >
// 0.01, 4 ratio sum over moved elements, 5 moved count.
struct OscFold {
  const float* pw;
  const float* pq;
  float* prev_w;
  float* prev_q;
  int8_t* last_dir;
  uint32_t* flips;
  float* ema;
  float* dist_w;
  float* dist_q;
  float momentum;
  bool window_end;
  __device__ void operator()(size_t i, double* acc) const {
    const float w = pw[i], q = pq[i];
    const hd::OscElem e =
        hd::osc_update(w, q, prev_w[i], prev_q[i], last_dir[i], flips[i], ema[i], dist_w[i], dist_q[i], momentum);
    acc[0] = acc[0] + (e.flip ? 1.0 : 0.0);
    acc[1] = acc[1] + double(e.flips);
    acc[2] = acc[2] + double(e.ema);
    acc[3] = acc[3] + (e.ema > hd::kOscEmaThreshold ? 1.0 : 0.0);
    if (e.moved) {
      acc[4] = acc[4] + e.ratio;
      acc[5] = acc[5] + 1.0;
    }
    prev_w[i] = w;
    prev_q[i] = q;
    if (window_end) {
      dist_w[i] = 0.0f;
      dist_q[i] = 0.0f;
    }
  }
};

#undef MXSIM_GRID_STRIDE

}  // namespace

void HipBackend::cross_entropy_deferred_impl(const Tensor& logits, const Tensor& labels, float grad_scale, Tensor& dlogits,
                                        double* dst) {
  const float* l = mat(logits, "cross_entropy", "logits");
  float* dl = mat(dlogits, "cross_entropy", "dlogits");
  const size_t T = logits.dim(0), C = logits.dim(1);
  const uint8_t* y = data<uint8_t>(labels, "cross_entropy", "labels");
  if (T == 0) {
    *dst = 0;
    return;
  }
  DeviceBuffer loss(T * sizeof(float), "cross_entropy row losses");
  cross_entropy_kernel<<<grid_for(T, kThreads), kThreads, 0, stream_>>>(l, y, T, C, grad_scale, dl, loss.as<float>());
  MXSIM_HIP_CHECK_LAUNCH("cross_entropy_kernel");
  detail::tree_reduce_later<2>(*this, CrossEntropyFold{loss.as<float>(), y, C}, T, detail::TreeOps{0, 1u << 1},
                               [dst](const std::array<double, 2>& r) {
                                 if (!std::isinf(r[1]))  // the first row with a bad label: the emulator's message
                                   throw std::invalid_argument("cross_entropy: label " +
                                                               std::to_string(int(std::fmod(r[1], 256.0))) +
                                                               " outside the classes");
                                 *dst = canonical_nan(r[0]);
                               });
}
double HipBackend::cross_entropy_impl(const Tensor& logits, const Tensor& labels, float grad_scale, Tensor& dlogits) {
  return now<double>([&](double* d) { cross_entropy_deferred_impl(logits, labels, grad_scale, dlogits, d); });
}

void HipBackend::argmax_rows_impl(const Tensor& logits, Tensor& pred) {
  const float* l = mat(logits, "argmax_rows", "logits");
  const size_t T = logits.dim(0), C = logits.dim(1);
  int32_t* o = data<int32_t>(pred, "argmax_rows", "pred");
  if (T == 0) return;
  argmax_rows_kernel<<<grid_for(T, kThreads), kThreads, 0, stream_>>>(l, T, C, o);
  MXSIM_HIP_CHECK_LAUNCH("argmax_rows_kernel");
}

void HipBackend::count_correct_deferred_impl(const Tensor& logits, const Tensor& labels, int64_t* dst) {
  const float* l = mat(logits, "count_correct", "logits");
  const size_t T = logits.dim(0), C = logits.dim(1);
  const uint8_t* y = data<uint8_t>(labels, "count_correct", "labels");
  if (T == 0) {
    *dst = 0;
    return;
  }
  DeviceBuffer am(T * sizeof(uint64_t), "count_correct row argmax");
  argmax_index_kernel<<<grid_for(T, kThreads), kThreads, 0, stream_>>>(l, T, C, am.as<uint64_t>());
  MXSIM_HIP_CHECK_LAUNCH("argmax_index_kernel");
  detail::tree_reduce_later<1>(*this, CorrectFold{am.as<uint64_t>(), y}, T, {},
                               [dst](const std::array<double, 1>& r) { *dst = int64_t(r[0]); });
}
int64_t HipBackend::count_correct_impl(const Tensor& logits, const Tensor& labels) {
  return now<int64_t>([&](int64_t* d) { count_correct_deferred_impl(logits, labels, d); });
}

void HipBackend::l2_norm_deferred_impl(const Tensor& x, double* dst) {
  const float* p = f32(x, "l2_norm", "x");
  detail::tree_reduce_later<1>(*this, SumSqFold{p}, x.numel(), {},
                               [dst](const std::array<double, 1>& r) { *dst = canonical_nan(std::sqrt(r[0])); });
}
void HipBackend::output_error_deferred_impl(const Tensor& ref, const Tensor& test, OutputError* dst) {
  const float* r = f32(ref, "output_error", "ref");
  const float* t = f32(test, "output_error", "test");
  const size_t n = ref.numel();
  detail::TreeOps ops;
  ops.max_mask = 1u << 3;
  ops.argmax_mask = 1u << 4;
  detail::tree_reduce_later<5>(*this, OutputErrorFold{r, t}, n, ops, [dst, n](const std::array<double, 5>& v) {
    *dst = output_error_of(n, size_t(v[2]), v[0], v[1], v[3], int64_t(v[4]));
  });
}

double HipBackend::l2_norm_impl(const Tensor& x) {
  return now<double>([&](double* d) { l2_norm_deferred_impl(x, d); });
}

void HipBackend::adamw_impl(Tensor& master, Tensor& m, Tensor& v, const Tensor& grad, const AdamW& h, Tensor& model) {
  const hd::AdamWCoeffs c = hd::adamw_coeffs(h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, h.t);
  float* pw = f32(master, "adamw", "master");
  float* pm = f32(m, "adamw", "m");
  float* pv = f32(v, "adamw", "v");
  float* pmod = f32(model, "adamw", "model");
  const float* pg = f32(grad, "adamw", "grad");
  const size_t n = master.numel();
  if (n == 0) return;
  adamw_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_>>>(pw, pm, pv, pg, c, pmod, n);
  MXSIM_HIP_CHECK_LAUNCH("adamw_kernel");
}

int64_t HipBackend::deosc_update_impl(Tensor& w, const Tensor& q, Tensor& prev, Tensor& prev_q, Tensor& dist_w,
                                 Tensor& dist_q, bool window_end, float ratio, Tensor* snaps) {
  uint32_t* ps = snaps ? data<uint32_t>(*snaps, "deosc_update", "snaps") : nullptr;
  float* pw = f32(w, "deosc_update", "w");
  const float* pq = f32(q, "deosc_update", "q");
  float* pp = f32(prev, "deosc_update", "prev");
  float* ppq = f32(prev_q, "deosc_update", "prev_q");
  float* dw = f32(dist_w, "deosc_update", "dist_w");
  float* dq = f32(dist_q, "deosc_update", "dist_q");
  const size_t n = w.numel();
  if (n == 0) return 0;
  DeviceBuffer snapped(window_end ? n : 0, "deosc_update snap flags");
  deosc_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_>>>(pw, pq, pp, ppq, dw, dq, n, window_end, ratio,
                                                                 snapped.as<uint8_t>(), ps);
  MXSIM_HIP_CHECK_LAUNCH("deosc_kernel");
  if (!window_end) return 0;
  const auto r = detail::tree_reduce<1>(*this, CountFold{snapped.as<uint8_t>()}, n);
  return int64_t(r[0]);
}

void HipBackend::osc_update_deferred_impl(const Tensor& w, const Tensor& q, OscState& s, float momentum,
                                          bool window_end, OscStep* dst) {
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
  auto deliver = [dst, n](const std::array<double, 6>& sums) {
    const uint64_t moved = uint64_t(sums[5]);
    OscStep r;
    r.flips = uint64_t(sums[0]);
    r.flips_total = uint64_t(sums[1]);
    r.ema_mean = canonical_nan(sums[2] / double(n));
    r.ema_frac_above = double(uint64_t(sums[3])) / double(n);
    r.dist_ratio_mean = moved ? canonical_nan(sums[4] / double(moved)) : 0.0;
    *dst = r;
  };
  if (n == 0) {
    deliver({});
    return;
  }
  const OscFold fold{pw, pq, prev_w, prev_q, last_dir, flips, ema, dist_w, dist_q, momentum, window_end};
  detail::tree_reduce_later<6>(*this, fold, n, {}, deliver);
}
Backend::OscStep HipBackend::osc_update_impl(const Tensor& w, const Tensor& q, OscState& s, float momentum,
                                        bool window_end) {
  return now<OscStep>([&](OscStep* d) { osc_update_deferred_impl(w, q, s, momentum, window_end, d); });
}

}  // namespace mxsim::hip
