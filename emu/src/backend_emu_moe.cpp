// emu Backend ops: router softmax and top-k, MoE dispatch (routing,
// permutation, combine and their backward), auxiliary loss, activations.
// The arithmetic is core/include/mxsim/hd/elementwise.hpp (docs/numerics.md §6).
#include <algorithm>
#include <vector>

#include "backend_emu_impl.hpp"
#include "mxsim/hd/elementwise.hpp"

namespace mxsim::emu {

void EmuBackend::softmax_rows_impl(const Tensor& logits, Tensor& p) {
  const Tensor2f& l = mat(logits, "softmax_rows", "logits");
  Tensor2f& o = mat(p, "softmax_rows", "p");
  for (size_t i = 0; i < l.shape(0); ++i) hd::softmax_row(&l(i, 0), &o(i, 0), l.shape(1));
}

void EmuBackend::topk_rows_impl(const Tensor& p, int k, Tensor& top) {
  const Tensor2f& pm = mat(p, "topk_rows", "p");
  int* idx = data<int32_t>(top, "topk_rows", "top");
  for (size_t i = 0; i < pm.shape(0); ++i) hd::topk_row(&pm(i, 0), pm.shape(1), k, idx + i * size_t(k));
}

void EmuBackend::moe_route_impl(const Tensor& top, size_t E, int64_t pad, Tensor& counts, Tensor& row_of) {
  const size_t n = top.numel();
  const int* t = data<int32_t>(top, "moe_route", "top");
  int64_t* c = data<int64_t>(counts, "moe_route", "counts");
  int64_t* r = data<int64_t>(row_of, "moe_route", "row_of");
  std::fill(c, c + E, int64_t(0));
  for (size_t i = 0; i < n; ++i) {
    if (t[i] < 0 || size_t(t[i]) >= E)
      throw std::invalid_argument("moe_route: expert index " + std::to_string(t[i]) + " outside [0, " + std::to_string(E) + ")");
    ++c[t[i]];
  }
  // Row of assignment i = t * k + s: its expert's first row plus the number of
  // earlier assignments to that expert, i.e. stable (expert, token, slot) order.
  std::vector<int64_t> fill(E);
  int64_t M = 0;
  for (size_t e = 0; e < E; ++e) {
    fill[e] = M;
    M += hd::padded_rows(c[e], pad);
  }
  for (size_t i = 0; i < n; ++i) r[i] = fill[size_t(t[i])]++;
}

void EmuBackend::permute_rows_impl(const Tensor& src, const Tensor& row_of, size_t k, Tensor& dst) {
  const Tensor2f& s = mat(src, "permute_rows", "src");
  Tensor2f& d = mat(dst, "permute_rows", "dst");
  const size_t w = s.shape(1), M = d.shape(0);
  const int64_t* r = data<int64_t>(row_of, "permute_rows", "row_of");
  std::fill(d.begin(), d.end(), 0.0f);
  for (size_t i = 0; i < row_of.numel(); ++i) {
    if (r[i] < 0 || size_t(r[i]) >= M) throw std::invalid_argument("permute_rows: row_of entry outside dst");
    std::copy_n(&s(i / k, 0), w, &d(size_t(r[i]), 0));
  }
}

void EmuBackend::unpermute_combine_impl(const Tensor& ypt, const Tensor& h0t, const Tensor& pt, const Tensor& topt,
                                   const Tensor& rowt, size_t k, Tensor& h1t) {
  const Tensor2f& yp = mat(ypt, "unpermute_combine", "yp");
  const Tensor2f& h0 = mat(h0t, "unpermute_combine", "h0");
  const Tensor2f& p = mat(pt, "unpermute_combine", "p");
  Tensor2f& h1 = mat(h1t, "unpermute_combine", "h1");
  const int* top = data<int32_t>(topt, "unpermute_combine", "top");
  const int64_t* row_of = data<int64_t>(rowt, "unpermute_combine", "row_of");
  const size_t B = h0.shape(0), d = h0.shape(1);
  std::vector<float> gate(k);
  std::vector<const float*> rows(k);
  for (size_t t = 0; t < B; ++t) {
    for (size_t s = 0; s < k; ++s) {
      gate[s] = p(t, size_t(top[t * k + s]));
      rows[s] = &yp(size_t(row_of[t * k + s]), 0);
    }
    for (size_t j = 0; j < d; ++j) h1(t, j) = hd::combine(h0(t, j), gate.data(), rows.data(), k, j);
  }
}

void EmuBackend::combine_backward_impl(const Tensor& dh1t, const Tensor& ypt, const Tensor& pt, const Tensor& topt,
                                  const Tensor& rowt, size_t k, Tensor& dypt, Tensor& dgatet) {
  const Tensor2f& dh1 = mat(dh1t, "combine_backward", "dh1");
  const Tensor2f& yp = mat(ypt, "combine_backward", "yp");
  const Tensor2f& p = mat(pt, "combine_backward", "p");
  Tensor2f& dyp = mat(dypt, "combine_backward", "dyp");
  const size_t B = dh1.shape(0), d = dh1.shape(1);
  float* dgate = data<float>(dgatet, "combine_backward", "dgate");
  const int* top = data<int32_t>(topt, "combine_backward", "top");
  const int64_t* row_of = data<int64_t>(rowt, "combine_backward", "row_of");
  std::fill(dyp.begin(), dyp.end(), 0.0f);
  for (size_t t = 0; t < B; ++t)
    for (size_t s = 0; s < k; ++s) {
      const size_t r = size_t(row_of[t * k + s]);
      dgate[t * k + s] = hd::combine_backward_slot(&dh1(t, 0), &yp(r, 0), p(t, size_t(top[t * k + s])), d, &dyp(r, 0));
    }
}

double EmuBackend::aux_loss_impl(const Tensor& pt, const Tensor& countst, size_t k, float coeff, Tensor& ft) {
  const Tensor2f& p = mat(pt, "aux_loss", "p");
  const size_t T = p.shape(0), E = p.shape(1);
  const int64_t* counts = data<int64_t>(countst, "aux_loss", "counts");
  float* f = data<float>(ft, "aux_loss", "f");
  std::vector<float> P(E, 0.0f);
  for (size_t e = 0; e < E; ++e) f[e] = hd::aux_share(counts[e], T * k);
  for (size_t t = 0; t < T; ++t)
    for (size_t e = 0; e < E; ++e) P[e] = P[e] + p(t, e);
  double aux = 0;
  for (size_t e = 0; e < E; ++e) aux += hd::aux_term(f[e], P[e], T);
  return canonical_nan(double(coeff) * double(E) * aux);
}

void EmuBackend::router_backward_impl(const Tensor& pt, const Tensor& topt, const Tensor& dgatet, const Tensor& ft,
                                 float aux_g, size_t k, Tensor& dlt) {
  const Tensor2f& p = mat(pt, "router_backward", "p");
  Tensor2f& dl = mat(dlt, "router_backward", "dlogits");
  const size_t B = p.shape(0), E = p.shape(1);
  const int* top = data<int32_t>(topt, "router_backward", "top");
  const float* dgate = data<float>(dgatet, "router_backward", "dgate");
  const float* f = data<float>(ft, "router_backward", "f");
  std::vector<float> dp(E);
  for (size_t t = 0; t < B; ++t)
    hd::router_backward_row(&p(t, 0), top + t * k, dgate + t * k, f, aux_g, E, k, dp.data(), &dl(t, 0));
}

void EmuBackend::embed_grad_sum_impl(const Tensor& dh1t, const Tensor& dh0rt, const Tensor& dxpt, const Tensor& rowt,
                                size_t k, Tensor& dh0t) {
  const Tensor2f& dh1 = mat(dh1t, "embed_grad_sum", "dh1");
  const Tensor2f& dh0r = mat(dh0rt, "embed_grad_sum", "dh0_router");
  const Tensor2f& dxp = mat(dxpt, "embed_grad_sum", "dxp");
  Tensor2f& dh0 = mat(dh0t, "embed_grad_sum", "dh0");
  const int64_t* row_of = data<int64_t>(rowt, "embed_grad_sum", "row_of");
  const size_t B = dh1.shape(0), d = dh1.shape(1);
  std::vector<const float*> rows(k);
  for (size_t t = 0; t < B; ++t) {
    for (size_t s = 0; s < k; ++s) rows[s] = &dxp(size_t(row_of[t * k + s]), 0);
    for (size_t j = 0; j < d; ++j) dh0(t, j) = hd::embed_grad(dh1(t, j), dh0r(t, j), rows.data(), k, j);
  }
}

void EmuBackend::activation_impl(Activation kind, const Tensor& u, Tensor& a) {
  const float* x = f32(u, "activation", "u");
  float* y = f32(a, "activation", "a");
  for (size_t i = 0, n = u.numel(); i < n; ++i) y[i] = hd::activation(kind, x[i]);
}

void EmuBackend::activation_grad_impl(Activation kind, const Tensor& u, const Tensor& da, Tensor& du) {
  const float* x = f32(u, "activation_grad", "u");
  const float* g = f32(da, "activation_grad", "da");
  float* y = f32(du, "activation_grad", "du");
  for (size_t i = 0, n = u.numel(); i < n; ++i) y[i] = hd::activation_grad(kind, x[i], g[i]);
}

}  // namespace mxsim::emu
