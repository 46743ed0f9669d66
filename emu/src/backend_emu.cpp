// mxsim::Backend on the CPU emulator.
//
// GEMMs: every grouped fprop/dgrad/wgrad and the per-group quantization of
// wgrad operands go through the grouped GEMM of emu/include/mxsim/emu/
// grouped_gemm.hpp (docs/numerics.md §5, bit-exact contract, results
// independent of the thread count); this file adds no GEMM of its own.
#include "mxsim/emu/backend_emu.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim {
namespace {

class EmuBackend final : public Backend {
 public:
  std::string name() const override { return "emu"; }
  bool supports_training() const override { return true; }
  void set_threads(int n) override { omp_set_num_threads(std::max(1, n)); }

  QuantizedTensor quantize(const Tensor3f& x, const QuantSpec& spec, Axis axis) override {
    return emu::quantize(x, spec, axis);
  }
  Tensor3f dequantize(const QuantizedTensor& q) override { return emu::dequantize3(q); }
  QStats quant_stats(const Tensor3f& x, const QuantizedTensor& q) override {
    const auto s = emu::quant_stats(x, q);
    QStats r;
    r.mse = s.mse;
    r.sqnr_db = s.sqnr_db;
    r.count = s.count;
    r.underflow = s.underflow;
    r.saturated = s.saturated;
    r.nonfinite = s.nonfinite_in + s.nan_out;
    for (const auto& b : emu::block_stats(x, q)) r.scale_exp.push_back(b.scale_exp);
    return r;
  }
  void round_bf16(Tensor3f& x) override {
    for (auto& v : x) v = ::mxsim::round_bf16(v);
  }
  void round_bf16(Tensor2f& x) override {
    for (auto& v : x) v = ::mxsim::round_bf16(v);
  }

  // The model's GEMMs: the contract grouped GEMM (grouped_gemm.hpp), so the
  // simulator's numbers are the ones docs/numerics.md §5 defines.
  static emu::GemmOptions opts(GemmOut o) { return {o.out, o.accumulate, emu::GemmImpl::Fast}; }
  void grouped_fprop(const Tensor2f& x, const QuantizedTensor* xq, const Tensor3f& w, const QuantizedTensor* wq,
                     std::span<const int64_t> ms, Tensor2f& y, GemmOut o) override {
    if (xq && wq) emu::grouped_fprop(*xq, *wq, ms, y, opts(o));
    else if (!xq && !wq) emu::grouped_fprop(x, emu::bf16_spec(), w, emu::bf16_spec(), ms, y, opts(o));
    else throw std::invalid_argument("grouped_fprop: both operands quantized or both BF16");
  }
  void grouped_dgrad(const Tensor2f& dy, const QuantizedTensor* dyq, const Tensor3f& w, const QuantizedTensor* wq,
                     std::span<const int64_t> ms, Tensor2f& dx, GemmOut o) override {
    if (dyq && wq) emu::grouped_dgrad(*dyq, *wq, ms, dx, opts(o));
    else if (!dyq && !wq) emu::grouped_dgrad(dy, emu::bf16_spec(), w, emu::bf16_spec(), ms, dx, opts(o));
    else throw std::invalid_argument("grouped_dgrad: both operands quantized or both BF16");
  }
  void grouped_wgrad(const Tensor2f& dy, std::span<const QuantizedTensor> dyq, const Tensor2f& x,
                     std::span<const QuantizedTensor> xq, std::span<const int64_t> ms, Tensor3f& dw,
                     GemmOut o) override {
    if (!dyq.empty() && !xq.empty()) emu::grouped_wgrad(dyq, xq, ms, dw, opts(o));
    else if (dyq.empty() && xq.empty()) emu::grouped_wgrad(dy, emu::bf16_spec(), x, emu::bf16_spec(), ms, dw, opts(o));
    else throw std::invalid_argument("grouped_wgrad: both operands quantized or both BF16");
  }
  std::vector<QuantizedTensor> quantize_grouped_colwise(const Tensor2f& x, std::span<const int64_t> ms,
                                                        const QuantSpec& spec) override {
    return emu::quantize_grouped_colwise(x, ms, spec);
  }

  Tensor2f softmax_rows(const Tensor2f& l) override {
    Tensor2f p = Tensor2f::from_shape(l.shape());
    for (size_t i = 0; i < l.shape(0); ++i) {
      float mx = -INFINITY;
      for (size_t j = 0; j < l.shape(1); ++j) mx = std::max(mx, l(i, j));
      float s = 0;
      for (size_t j = 0; j < l.shape(1); ++j) {
        p(i, j) = std::exp(l(i, j) - mx);
        s = s + p(i, j);
      }
      for (size_t j = 0; j < l.shape(1); ++j) p(i, j) = p(i, j) / s;
    }
    return p;
  }
  std::vector<int> topk_rows(const Tensor2f& p, int k) override {
    const size_t T = p.shape(0), E = p.shape(1);
    std::vector<int> idx(T * size_t(k));
    std::vector<int> order(E);
    for (size_t i = 0; i < T; ++i) {
      for (size_t e = 0; e < E; ++e) order[e] = int(e);
      // Descending probability; NaN ranks below every number (and -inf);
      // ties (NaNs among themselves too) by the lower expert index. A strict
      // weak ordering for any input, so std::stable_sort is defined.
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        const float pa = p(i, size_t(a)), pb = p(i, size_t(b));
        if (std::isnan(pa) || std::isnan(pb)) return !std::isnan(pa) && std::isnan(pb);
        return pa > pb;
      });
      for (int j = 0; j < k; ++j) idx[i * k + j] = order[j];
    }
    return idx;
  }
  std::vector<float> cross_entropy(const Tensor2f& logits, std::span<const uint8_t> labels, float grad_scale,
                                   Tensor2f& dl) override {
    const size_t T = logits.shape(0), C = logits.shape(1);
    Tensor2f p = softmax_rows(logits);
    dl = Tensor2f::from_shape({T, C});
    std::vector<float> loss(T);
    for (size_t i = 0; i < T; ++i) {
      float mx = -INFINITY;
      for (size_t j = 0; j < C; ++j) mx = std::max(mx, logits(i, j));
      float s = 0;
      for (size_t j = 0; j < C; ++j) s = s + std::exp(logits(i, j) - mx);
      loss[i] = std::log(s) + mx - logits(i, labels[i]);
      for (size_t j = 0; j < C; ++j) dl(i, j) = (p(i, j) - (j == labels[i] ? 1.0f : 0.0f)) * grad_scale;
    }
    return loss;
  }
  static float act(const std::string& a, float x) {
    if (a == "relu") return x > 0 ? x : 0.0f;
    if (a == "gelu") return 0.5f * x * (1.0f + std::erf(x * 0.70710678f));
    if (a == "silu") return x / (1.0f + std::exp(-x));
    throw std::invalid_argument("activation: unknown kind '" + a + "'");
  }
  static float act_grad(const std::string& a, float x) {
    if (a == "relu") return x > 0 ? 1.0f : 0.0f;
    if (a == "gelu") {
      const float cdf = 0.5f * (1.0f + std::erf(x * 0.70710678f));
      const float pdf = 0.39894228f * std::exp(-0.5f * x * x);
      return cdf + x * pdf;
    }
    const float s = 1.0f / (1.0f + std::exp(-x));
    return s * (1.0f + x * (1.0f - s));
  }
  void activation(const std::string& kind, const Tensor2f& u, Tensor2f& a) override {
    a = Tensor2f::from_shape(u.shape());
    for (size_t i = 0; i < u.size(); ++i) a.data()[i] = ::mxsim::round_bf16(act(kind, u.data()[i]));
  }
  void activation_grad(const std::string& kind, const Tensor2f& u, const Tensor2f& da, Tensor2f& du) override {
    du = Tensor2f::from_shape(u.shape());
    for (size_t i = 0; i < u.size(); ++i) du.data()[i] = ::mxsim::round_bf16(da.data()[i] * act_grad(kind, u.data()[i]));
  }
  void permute_rows(const Tensor2f& src, std::span<const int64_t> row_of, size_t k, size_t M, Tensor2f& dst) override {
    const size_t d = src.shape(1);
    dst = xt::zeros<float>({M, d});
    for (size_t i = 0; i < row_of.size(); ++i) std::copy_n(&src(i / k, 0), d, &dst(size_t(row_of[i]), 0));
  }
  void unpermute_combine(const Tensor2f& yp, const Tensor2f& h0, const Tensor2f& p, std::span<const int> top,
                         std::span<const int64_t> row_of, size_t k, Tensor2f& h1) override {
    const size_t B = h0.shape(0), d = h0.shape(1);
    h1 = Tensor2f::from_shape({B, d});
    for (size_t t = 0; t < B; ++t)
      for (size_t j = 0; j < d; ++j) {
        float m = 0;
        for (size_t s = 0; s < k; ++s) m = m + p(t, size_t(top[t * k + s])) * yp(size_t(row_of[t * k + s]), j);
        h1(t, j) = ::mxsim::round_bf16(h0(t, j) + ::mxsim::round_bf16(m));
      }
  }
  void combine_backward(const Tensor2f& dh1, const Tensor2f& yp, const Tensor2f& p, std::span<const int> top,
                        std::span<const int64_t> row_of, size_t k, Tensor2f& dyp, std::vector<float>& dgate) override {
    const size_t B = dh1.shape(0), d = dh1.shape(1);
    dyp = xt::zeros<float>(yp.shape());
    dgate.assign(B * k, 0.0f);
    for (size_t t = 0; t < B; ++t)
      for (size_t s = 0; s < k; ++s) {
        const size_t r = size_t(row_of[t * k + s]);
        const float gte = p(t, size_t(top[t * k + s]));
        float dg = 0;
        for (size_t j = 0; j < d; ++j) {
          dyp(r, j) = ::mxsim::round_bf16(gte * dh1(t, j));
          dg = dg + dh1(t, j) * yp(r, j);
        }
        dgate[t * k + s] = dg;
      }
  }
  void router_backward(const Tensor2f& p, std::span<const int> top, std::span<const float> dgate,
                       std::span<const float> f, float aux_g, size_t k, Tensor2f& dl) override {
    const size_t B = p.shape(0), E = p.shape(1);
    dl = Tensor2f::from_shape({B, E});
    std::vector<float> dp(E);
    for (size_t t = 0; t < B; ++t) {
      for (size_t e = 0; e < E; ++e) dp[e] = aux_g * f[e];
      for (size_t s = 0; s < k; ++s) dp[size_t(top[t * k + s])] = dp[size_t(top[t * k + s])] + dgate[t * k + s];
      float dot = 0;
      for (size_t e = 0; e < E; ++e) dot = dot + p(t, e) * dp[e];
      for (size_t e = 0; e < E; ++e) dl(t, e) = ::mxsim::round_bf16(p(t, e) * (dp[e] - dot));
    }
  }
  void embed_grad_sum(const Tensor2f& dh1, const Tensor2f& dh0_r, const Tensor2f& dxp, std::span<const int64_t> row_of,
                      size_t k, Tensor2f& dh0) override {
    const size_t B = dh1.shape(0), d = dh1.shape(1);
    dh0 = Tensor2f::from_shape({B, d});
    for (size_t t = 0; t < B; ++t)
      for (size_t j = 0; j < d; ++j) {
        float v = dh1(t, j) + dh0_r(t, j);
        for (size_t s = 0; s < k; ++s) v = v + dxp(size_t(row_of[t * k + s]), j);
        dh0(t, j) = ::mxsim::round_bf16(v);
      }
  }

  void adamw(Tensor3f& w, Tensor3f& m, Tensor3f& v, const Tensor3f& g, const AdamW& h, Tensor3f& model) override {
    const float bc1 = 1.0f - std::pow(h.beta1, float(h.t)), bc2 = 1.0f - std::pow(h.beta2, float(h.t));
    const float step = h.lr / bc1, sbc2 = std::sqrt(bc2);
    const size_t n = w.size();
    float *pw = w.data(), *pm = m.data(), *pv = v.data(), *pmod = model.data();
    const float* pg = g.data();
    for (size_t i = 0; i < n; ++i) {
      pw[i] = pw[i] * (1.0f - h.lr * h.weight_decay);
      pm[i] = h.beta1 * pm[i] + (1.0f - h.beta1) * pg[i];
      pv[i] = h.beta2 * pv[i] + (1.0f - h.beta2) * pg[i] * pg[i];
      const float denom = std::sqrt(pv[i]) / sbc2 + h.eps;
      pw[i] = pw[i] - step * (pm[i] / denom);
      pmod[i] = ::mxsim::round_bf16(pw[i]);
    }
  }
};

}  // namespace

namespace emu {
std::unique_ptr<Backend> make_emu_backend() { return std::make_unique<EmuBackend>(); }
}  // namespace emu

}  // namespace mxsim
