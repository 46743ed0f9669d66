// HIP Backend ops: router softmax / top-k, MoE routing, permutation, combine
// and their backward, auxiliary loss, activations (docs/numerics.md §6).
// The arithmetic is hd/elementwise.hpp, called with the pointers and strides
// of the emulator's loops (emu/src/backend_emu_moe.cpp): one thread per row
// for the row functions, one per output element for the elementwise ones.
// Validation and its messages are the emulator's; index checks the emulator
// makes on the host (moe_route, permute_rows) are made on the device and
// fetched, and throw the same message.
#include "backend_hip_impl.hpp"

#include <cstdint>

#include "mxsim/hd/elementwise.hpp"

namespace mxsim::hip {

using detail::grid_for;

namespace {

constexpr unsigned kThreads = 256;

#define MXSIM_GRID_STRIDE(i, n) \
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += size_t(gridDim.x) * blockDim.x)

// ---------------------------------------------------------------- router

// (no __restrict__: p may be logits, in place, as on the emulator)
__global__ void softmax_rows_kernel(const float* l, float* p, size_t T, size_t E) {
  MXSIM_GRID_STRIDE(t, T) hd::softmax_row(l + t * E, p + t * E, E);
}

__global__ void topk_rows_kernel(const float* __restrict__ p, size_t T, size_t E, int k, int* __restrict__ idx) {
  MXSIM_GRID_STRIDE(t, T) hd::topk_row(p + t * E, E, k, idx + t * size_t(k));
}

// ---------------------------------------------------------------- routing

// One block of kRouteThreads. Each thread owns experts e = tid, tid +
// blockDim, ...; `top` is staged through shared memory in chunks. Pass 1: each
// thread counts its experts' entries in index order (an entry outside [0, E)
// matches no expert) and notes the first entry outside [0, E) among those it
// staged. When there is one, status = {1, that entry's value} (the first in
// index order: the emulator's message names it) and nothing else is written.
// Else status = {0, 0}, thread 0 lays out the padded rows (fill[e], e
// ascending), and pass 2 gives every expert's entries consecutive rows in
// index order: the emulator's counts and row_of.
constexpr unsigned kRouteThreads = 256;
constexpr size_t kRouteChunk = 4096;  // entries of `top` staged in shared memory per pass

__global__ void moe_route_kernel(const int* __restrict__ top, size_t n, size_t E, int64_t pad,
                                 int64_t* __restrict__ counts, int64_t* __restrict__ fill, int64_t* __restrict__ row_of,
                                 int64_t* __restrict__ status) {
  __shared__ int chunk[kRouteChunk];
  __shared__ size_t first_bad[kRouteThreads];
  const size_t tid = threadIdx.x, nt = blockDim.x;
  const size_t none = ~size_t(0);
  size_t my_bad = none;
  for (size_t e = tid; e < E; e += nt) counts[e] = 0;
  for (size_t c0 = 0; c0 < n; c0 += kRouteChunk) {
    const size_t c1 = c0 + kRouteChunk < n ? c0 + kRouteChunk : n;
    __syncthreads();
    for (size_t i = c0 + tid; i < c1; i += nt) {
      const int v = top[i];
      chunk[i - c0] = v;
      if ((v < 0 || size_t(v) >= E) && i < my_bad) my_bad = i;
    }
    __syncthreads();
    for (size_t e = tid; e < E; e += nt) {
      int64_t c = counts[e];
      for (size_t i = c0; i < c1; ++i) c += size_t(chunk[i - c0]) == e ? 1 : 0;
      counts[e] = c;
    }
  }
  first_bad[tid] = my_bad;
  __syncthreads();
  if (tid == 0) {
    size_t b = none;
    for (size_t u = 0; u < nt; ++u) b = first_bad[u] < b ? first_bad[u] : b;
    status[0] = b == none ? 0 : 1;
    status[1] = b == none ? 0 : int64_t(top[b]);
    first_bad[0] = b;
    if (b == none) {
      int64_t M = 0;
      for (size_t e = 0; e < E; ++e) {
        fill[e] = M;
        M += hd::padded_rows(counts[e], pad);
      }
    }
  }
  __syncthreads();
  if (first_bad[0] != none) return;
  for (size_t c0 = 0; c0 < n; c0 += kRouteChunk) {
    const size_t c1 = c0 + kRouteChunk < n ? c0 + kRouteChunk : n;
    __syncthreads();
    for (size_t i = c0 + tid; i < c1; i += nt) chunk[i - c0] = top[i];
    __syncthreads();
    for (size_t e = tid; e < E; e += nt) {
      int64_t r = fill[e];
      for (size_t i = c0; i < c1; ++i)
        if (size_t(chunk[i - c0]) == e) row_of[i] = r++;
      fill[e] = r;
    }
  }
}

// dst (zero-filled before) row row_of[i] = src row i / k: one thread per
// element, `wc` = max(w, 1) cells per entry so that entries of width-0 rows
// are still checked; *bad = 1 where an entry is outside [0, M) (that row is
// skipped).
__global__ void permute_rows_kernel(const float* __restrict__ src, const int64_t* __restrict__ row_of, size_t rows,
                                    size_t k, size_t w, size_t wc, size_t M, float* __restrict__ dst,
                                    int* __restrict__ bad) {
  MXSIM_GRID_STRIDE(x, rows * wc) {
    const size_t i = x / wc, j = x % wc;
    const int64_t r = row_of[i];
    if (r < 0 || size_t(r) >= M) {
      *bad = 1;  // every writer stores the same value: no atomic needed
      continue;
    }
    if (j < w) dst[size_t(r) * w + j] = src[(i / k) * w + j];
  }
}

// ---------------------------------------------------------------- combine

// Per assignment i = t k + s: its gate p[t, top[i]] and the address of its
// permuted row (the emulator's gate[] / rows[] of token t, laid out for all t).
__global__ void gather_slots_kernel(const float* __restrict__ p, size_t pw, const int* __restrict__ top,
                                    const int64_t* __restrict__ row_of, const float* rows_base, size_t rw, size_t k,
                                    size_t n, float* __restrict__ gate, const float** __restrict__ rows) {
  MXSIM_GRID_STRIDE(i, n) {
    if (gate) gate[i] = p[(i / k) * pw + size_t(top[i])];
    rows[i] = rows_base + size_t(row_of[i]) * rw;
  }
}

__global__ void combine_kernel(const float* __restrict__ h0, const float* __restrict__ gate, const float* const* rows,
                               size_t B, size_t d, size_t k, float* __restrict__ h1) {
  MXSIM_GRID_STRIDE(x, B * d) {
    const size_t t = x / d, j = x % d;
    h1[x] = hd::combine(h0[x], gate + t * k, rows + t * k, k, j);
  }
}

// One block per slot i = (t, s), blockIdx.x striding: the threads write dyp's
// row of the slot (hd::combine_backward_dyp) and stage dh1[t] and yp[row] in
// shared memory, chunk by chunk, where thread 0 runs the sequential gate
// gradient sum (hd::combine_backward_dgate, j ascending, chained across chunks).
constexpr unsigned kCombineChunk = 1024;
__global__ void combine_backward_kernel(const float* __restrict__ dh1, size_t d, const float* __restrict__ yp,
                                        size_t yw, const float* __restrict__ p, size_t pw, const int* __restrict__ top,
                                        const int64_t* __restrict__ row_of, size_t k, size_t n,
                                        float* __restrict__ dyp, float* __restrict__ dgate) {
  __shared__ float sh[kCombineChunk], sy[kCombineChunk];
  for (size_t i = blockIdx.x; i < n; i += gridDim.x) {
    const size_t t = i / k, r = size_t(row_of[i]);
    const float gate = p[t * pw + size_t(top[i])];
    float dg = 0.0f;
    for (size_t j0 = 0; j0 < d; j0 += kCombineChunk) {
      const size_t m = d - j0 < kCombineChunk ? d - j0 : kCombineChunk;
      __syncthreads();  // thread 0 is done with the previous chunk
      for (size_t j = threadIdx.x; j < m; j += blockDim.x) {
        const float h = dh1[t * d + j0 + j];
        sh[j] = h;
        sy[j] = yp[r * yw + j0 + j];
        dyp[r * yw + j0 + j] = hd::combine_backward_dyp(gate, h);
      }
      __syncthreads();
      if (threadIdx.x == 0) dg = hd::combine_backward_dgate_acc(dg, sh, sy, m);  // chained: one walk over d
    }
    if (threadIdx.x == 0) dgate[i] = canonical_nan(dg);
  }
}

// ---------------------------------------------------------------- auxiliary loss, router backward

// One block: f[e] and P[e] per expert (threads over e, t ascending), then
// thread 0 sums the FP64 terms over e ascending into *aux.
// p's rows go through shared memory a chunk at a time (coalesced reads; the
// per-expert sums then walk shared memory), unless one row does not fit.
constexpr size_t kAuxChunk = 4096;
__global__ void aux_loss_kernel(const float* __restrict__ p, const int64_t* __restrict__ counts, size_t T, size_t E,
                                size_t k, float* __restrict__ f, float* __restrict__ P, double* __restrict__ aux) {
  __shared__ float sp[kAuxChunk];
  for (size_t e = threadIdx.x; e < E; e += blockDim.x) {
    f[e] = hd::aux_share(counts[e], T * k);
    P[e] = 0.0f;
  }
  const size_t R = E <= kAuxChunk ? kAuxChunk / E : 0;  // rows per chunk
  if (R == 0) {
    for (size_t e = threadIdx.x; e < E; e += blockDim.x) {
      float s = 0.0f;
      for (size_t t = 0; t < T; ++t) s = s + p[t * E + e];
      P[e] = s;
    }
  }
  for (size_t t0 = 0; R && t0 < T; t0 += R) {
    const size_t rows = T - t0 < R ? T - t0 : R;
    __syncthreads();
    for (size_t x = threadIdx.x; x < rows * E; x += blockDim.x) sp[x] = p[t0 * E + x];
    __syncthreads();
    for (size_t e = threadIdx.x; e < E; e += blockDim.x) {  // t ascending, chained across chunks
      float s = P[e];
      for (size_t t = 0; t < rows; ++t) s = s + sp[t * E + e];
      P[e] = s;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double a = 0;
    for (size_t e = 0; e < E; ++e) a += hd::aux_term(f[e], P[e], T);
    *aux = a;
  }
}

__global__ void router_backward_kernel(const float* __restrict__ p, const int* __restrict__ top,
                                       const float* __restrict__ dgate, const float* __restrict__ f, float aux_g,
                                       size_t B, size_t E, size_t k, float* __restrict__ dp, float* __restrict__ dl) {
  MXSIM_GRID_STRIDE(t, B)
  hd::router_backward_row(p + t * E, top + t * k, dgate + t * k, f, aux_g, E, k, dp + t * E, dl + t * E);
}

__global__ void embed_grad_kernel(const float* __restrict__ dh1, const float* __restrict__ dh0r, size_t rw,
                                  const float* const* rows, size_t B, size_t d, size_t k, float* __restrict__ dh0) {
  MXSIM_GRID_STRIDE(x, B * d) {
    const size_t t = x / d, j = x % d;
    dh0[x] = hd::embed_grad(dh1[x], dh0r[t * rw + j], rows + t * k, k, j);
  }
}

// ---------------------------------------------------------------- activations

__global__ void activation_kernel(Activation kind, const float* __restrict__ x, float* __restrict__ y, size_t n) {
  MXSIM_GRID_STRIDE(i, n) y[i] = hd::activation(kind, x[i]);
}
__global__ void activation_grad_kernel(Activation kind, const float* __restrict__ x, const float* __restrict__ g,
                                       float* __restrict__ y, size_t n) {
  MXSIM_GRID_STRIDE(i, n) y[i] = hd::activation_grad(kind, x[i], g[i]);
}

#undef MXSIM_GRID_STRIDE

}  // namespace

void HipBackend::softmax_rows_impl(const Tensor& logits, Tensor& p) {
  const float* l = mat(logits, "softmax_rows", "logits");
  float* o = mat(p, "softmax_rows", "p");
  const size_t T = logits.dim(0), E = logits.dim(1);
  if (T == 0) return;
  softmax_rows_kernel<<<grid_for(T, kThreads), kThreads, 0, stream_>>>(l, o, T, E);
  MXSIM_HIP_CHECK_LAUNCH("softmax_rows_kernel");
}

void HipBackend::topk_rows_impl(const Tensor& p, int k, Tensor& top) {
  const float* pm = mat(p, "topk_rows", "p");
  const size_t T = p.dim(0), E = p.dim(1);
  int* idx = data<int32_t>(top, "topk_rows", "top");
  if (T == 0) return;
  topk_rows_kernel<<<grid_for(T, kThreads), kThreads, 0, stream_>>>(pm, T, E, k, idx);
  MXSIM_HIP_CHECK_LAUNCH("topk_rows_kernel");
}

void HipBackend::moe_route_impl(const Tensor& top, size_t E, int64_t pad, Tensor& counts, Tensor& row_of) {
  const size_t n = top.numel();
  const int* t = data<int32_t>(top, "moe_route", "top");
  int64_t* c = data<int64_t>(counts, "moe_route", "counts");
  int64_t* r = data<int64_t>(row_of, "moe_route", "row_of");
  if (n == 0 && E == 0) return;
  DeviceBuffer fill(E * sizeof(int64_t), "moe_route expert fill");
  DeviceBuffer status(2 * sizeof(int64_t), "moe_route status");
  moe_route_kernel<<<1, kRouteThreads, 0, stream_>>>(t, n, E, pad, c, fill.as<int64_t>(), r, status.as<int64_t>());
  MXSIM_HIP_CHECK_LAUNCH("moe_route_kernel");
  // Checked at the next synchronisation (the download of counts that every
  // caller makes next), not with one of its own.
  fetch_later(status.get(), 2 * sizeof(int64_t), [E](const std::byte* h) {
    int64_t st[2];
    std::memcpy(st, h, sizeof st);
    if (st[0])
      throw std::invalid_argument("moe_route: expert index " + std::to_string(int32_t(st[1])) + " outside [0, " +
                                  std::to_string(E) + ")");
  });
}

void HipBackend::permute_rows_impl(const Tensor& src, const Tensor& row_of, size_t k, Tensor& dst) {
  const float* s = mat(src, "permute_rows", "src");
  float* d = mat(dst, "permute_rows", "dst");
  const size_t w = src.dim(1), M = dst.dim(0);
  const int64_t* r = data<int64_t>(row_of, "permute_rows", "row_of");
  if (dst.bytes()) MXSIM_HIP_CHECK(hipMemsetAsync(d, 0, dst.bytes(), stream_));
  const size_t rows = row_of.numel();
  if (rows == 0) return;
  DeviceBuffer bad(sizeof(int), "permute_rows status");
  MXSIM_HIP_CHECK(hipMemsetAsync(bad.get(), 0, sizeof(int), stream_));
  const size_t wc = w ? w : 1;
  permute_rows_kernel<<<grid_for(rows * wc, kThreads), kThreads, 0, stream_>>>(s, r, rows, k, w, wc, M, d, bad.as<int>());
  MXSIM_HIP_CHECK_LAUNCH("permute_rows_kernel");
  // Entries outside dst were skipped; the error is reported at the next synchronisation.
  fetch_later(bad.get(), sizeof(int), [](const std::byte* h) {
    int b;
    std::memcpy(&b, h, sizeof b);
    if (b) throw std::invalid_argument("permute_rows: row_of entry outside dst");
  });
}

void HipBackend::unpermute_combine_impl(const Tensor& ypt, const Tensor& h0t, const Tensor& pt, const Tensor& topt,
                                   const Tensor& rowt, size_t k, Tensor& h1t) {
  const float* yp = mat(ypt, "unpermute_combine", "yp");
  const float* h0 = mat(h0t, "unpermute_combine", "h0");
  const float* p = mat(pt, "unpermute_combine", "p");
  float* h1 = mat(h1t, "unpermute_combine", "h1");
  const int* top = data<int32_t>(topt, "unpermute_combine", "top");
  const int64_t* row_of = data<int64_t>(rowt, "unpermute_combine", "row_of");
  const size_t B = h0t.dim(0), d = h0t.dim(1);
  if (B * d == 0) return;
  const size_t n = B * k;
  DeviceBuffer gate(n * sizeof(float), "unpermute_combine gates");
  DeviceBuffer rows(n * sizeof(const float*), "unpermute_combine row addresses");
  if (n) {
    gather_slots_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_>>>(p, pt.dim(1), top, row_of, yp, ypt.dim(1), k,
                                                                         n, gate.as<float>(), rows.as<const float*>());
    MXSIM_HIP_CHECK_LAUNCH("gather_slots_kernel");
  }
  combine_kernel<<<grid_for(B * d, kThreads), kThreads, 0, stream_>>>(h0, gate.as<float>(), rows.as<const float*>(), B,
                                                                      d, k, h1);
  MXSIM_HIP_CHECK_LAUNCH("combine_kernel");
}

void HipBackend::combine_backward_impl(const Tensor& dh1t, const Tensor& ypt, const Tensor& pt, const Tensor& topt,
                                  const Tensor& rowt, size_t k, Tensor& dypt, Tensor& dgatet) {
  const float* dh1 = mat(dh1t, "combine_backward", "dh1");
  const float* yp = mat(ypt, "combine_backward", "yp");
  const float* p = mat(pt, "combine_backward", "p");
  float* dyp = mat(dypt, "combine_backward", "dyp");
  const size_t B = dh1t.dim(0), d = dh1t.dim(1);
  float* dgate = data<float>(dgatet, "combine_backward", "dgate");
  const int* top = data<int32_t>(topt, "combine_backward", "top");
  const int64_t* row_of = data<int64_t>(rowt, "combine_backward", "row_of");
  if (dypt.bytes()) MXSIM_HIP_CHECK(hipMemsetAsync(dyp, 0, dypt.bytes(), stream_));
  const size_t n = B * k;
  if (n == 0) return;
  const unsigned blocks = unsigned(n < 65535 ? n : 65535);
  combine_backward_kernel<<<blocks, kThreads, 0, stream_>>>(dh1, d, yp, ypt.dim(1), p, pt.dim(1), top, row_of, k, n,
                                                           dyp, dgate);
  MXSIM_HIP_CHECK_LAUNCH("combine_backward_kernel");
}

void HipBackend::aux_loss_deferred_impl(const Tensor& pt, const Tensor& countst, size_t k, float coeff, Tensor& ft,
                                   double* dst) {
  const float* p = mat(pt, "aux_loss", "p");
  const size_t T = pt.dim(0), E = pt.dim(1);
  const int64_t* counts = data<int64_t>(countst, "aux_loss", "counts");
  float* f = data<float>(ft, "aux_loss", "f");
  if (E == 0) {
    *dst = canonical_nan(double(coeff) * double(E) * 0.0);
    return;
  }
  DeviceBuffer P(E * sizeof(float), "aux_loss expert probability sums");
  DeviceBuffer out(sizeof(double), "aux_loss sum");
  aux_loss_kernel<<<1, kThreads, 0, stream_>>>(p, counts, T, E, k, f, P.as<float>(), out.as<double>());
  MXSIM_HIP_CHECK_LAUNCH("aux_loss_kernel");
  fetch_later(out.get(), sizeof(double), [dst, coeff, E](const std::byte* h) {
    double aux;
    std::memcpy(&aux, h, sizeof aux);
    *dst = canonical_nan(double(coeff) * double(E) * aux);
  });
}
double HipBackend::aux_loss_impl(const Tensor& p, const Tensor& counts, size_t k, float coeff, Tensor& f) {
  return now<double>([&](double* d) { aux_loss_deferred_impl(p, counts, k, coeff, f, d); });
}

void HipBackend::router_backward_impl(const Tensor& pt, const Tensor& topt, const Tensor& dgatet, const Tensor& ft,
                                 float aux_g, size_t k, Tensor& dlt) {
  const float* p = mat(pt, "router_backward", "p");
  float* dl = mat(dlt, "router_backward", "dlogits");
  const size_t B = pt.dim(0), E = pt.dim(1);
  const int* top = data<int32_t>(topt, "router_backward", "top");
  const float* dgate = data<float>(dgatet, "router_backward", "dgate");
  const float* f = data<float>(ft, "router_backward", "f");
  if (B == 0) return;
  DeviceBuffer dp(B * E * sizeof(float), "router_backward dp scratch");
  router_backward_kernel<<<grid_for(B, kThreads), kThreads, 0, stream_>>>(p, top, dgate, f, aux_g, B, E, k,
                                                                          dp.as<float>(), dl);
  MXSIM_HIP_CHECK_LAUNCH("router_backward_kernel");
}

void HipBackend::embed_grad_sum_impl(const Tensor& dh1t, const Tensor& dh0rt, const Tensor& dxpt, const Tensor& rowt,
                                size_t k, Tensor& dh0t) {
  const float* dh1 = mat(dh1t, "embed_grad_sum", "dh1");
  const float* dh0r = mat(dh0rt, "embed_grad_sum", "dh0_router");
  const float* dxp = mat(dxpt, "embed_grad_sum", "dxp");
  float* dh0 = mat(dh0t, "embed_grad_sum", "dh0");
  const int64_t* row_of = data<int64_t>(rowt, "embed_grad_sum", "row_of");
  const size_t B = dh1t.dim(0), d = dh1t.dim(1);
  if (B * d == 0) return;
  const size_t n = B * k;
  DeviceBuffer rows(n * sizeof(const float*), "embed_grad_sum row addresses");
  if (n) {
    gather_slots_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_>>>(nullptr, 0, nullptr, row_of, dxp, dxpt.dim(1),
                                                                         k, n, nullptr, rows.as<const float*>());
    MXSIM_HIP_CHECK_LAUNCH("gather_slots_kernel");
  }
  embed_grad_kernel<<<grid_for(B * d, kThreads), kThreads, 0, stream_>>>(dh1, dh0r, dh0rt.dim(1),
                                                                         rows.as<const float*>(), B, d, k, dh0);
  MXSIM_HIP_CHECK_LAUNCH("embed_grad_kernel");
}

void HipBackend::activation_impl(Activation kind, const Tensor& u, Tensor& a) {
  const float* x = f32(u, "activation", "u");
  float* y = f32(a, "activation", "a");
  const size_t n = u.numel();
  if (n == 0) return;
  activation_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_>>>(kind, x, y, n);
  MXSIM_HIP_CHECK_LAUNCH("activation_kernel");
}

void HipBackend::activation_grad_impl(Activation kind, const Tensor& u, const Tensor& da, Tensor& du) {
  const float* x = f32(u, "activation_grad", "u");
  const float* g = f32(da, "activation_grad", "da");
  float* y = f32(du, "activation_grad", "du");
  const size_t n = u.numel();
  if (n == 0) return;
  activation_grad_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_>>>(kind, x, g, y, n);
  MXSIM_HIP_CHECK_LAUNCH("activation_grad_kernel");
}

}  // namespace mxsim::hip
