// Contexts of the C interface (c_api.h "Statistics that keep state on a
// device"): one Backend on one device, fed the caller's tensors through the
// backend's front door (borrow_native: read in place on CUDA, ordered on the
// caller's stream; upload_native where an op writes its copy), so that the
// recorder's norms and oscillation metrics are the backends' own ops,
// the simulator's bits, with their state kept on the device.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "c_api_internal.hpp"
#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/sim/maps.hpp"
#include "mxsim/sim/model.hpp"

using namespace mxsim;
using namespace mxsim::capi;

struct mxsim_context {
  DLDevice device{};
  std::unique_ptr<Backend> be;
  // Deferred results (mxsim_context_resolve): the inputs the queued work reads, kept until
  // then, and what turns the backend's values into the caller's.
  struct Pending {
    std::vector<Tensor> tensors;
    std::vector<QTensor> quantized;
    std::vector<std::shared_ptr<void>> values;
    std::vector<std::function<void()>> deliver;
  } pending;

  /// Waits for every deferred value and hands each to the caller (then forgets them).
  void resolve() {
    Pending p = std::move(pending);
    pending = Pending{};
    {
      const DeferredScope scope(*be);
      be->resolve_deferred();
    }
    for (auto& f : p.deliver) f();
  }

  /// f on this context's device (the GPU backend's errors mapped as every CUDA op maps them).
  void run(const char* op, const std::function<void()>& f) {
    if (device.device_type == kDLCUDA) gpu_call(device.device_id, op, f);
    else f();
  }
  /// The caller's float32 tensor t as a backend tensor (rank 1 to 3; with flat, any rank as one
  /// row; with `as`, that shape of t's elements), read after the work queued on `stream`: a view
  /// of t's memory (Backend::borrow_native) that the queued ops only read, then release(stream);
  /// with copy, the backend's own copy (an op that writes it: de-oscillation's snaps).
  Tensor import(const DLTensor& t, void* stream, const char* op, const char* what, bool flat,
                const Shape* as = nullptr, bool copy = false) {
    if (t.device.device_type != device.device_type ||
        (device.device_type == kDLCUDA && t.device.device_id != device.device_id))
      throw std::invalid_argument(std::string(op) + ": " + what + " is on another device than the context");
    if (!is_f32(t)) throw std::invalid_argument(std::string(op) + ": " + what + " must be float32");
    check_contiguous(t, op, what);
    const size_t n = numel(t, op, what);
    Shape s{n};
    if (as) {
      if (as->numel() != n)
        throw std::invalid_argument(std::string(op) + ": " + what + " holds " + std::to_string(n) + " elements, " +
                                    as->str() + " expected");
      s = *as;
    } else if (!flat) {
      if (t.ndim < 1 || t.ndim > 3)
        throw std::invalid_argument(std::string(op) + ": " + what + " has rank " + std::to_string(t.ndim) +
                                    "; takes rank 1 to 3");
      s = Shape{};
      s.rank = t.ndim;
      for (int i = 0; i < t.ndim; ++i) s.dim[size_t(i)] = size_t(t.shape[i]);
    }
    if (!copy) return be->borrow_native(DType::f32, s, data_of(t), stream);
    Tensor out = be->alloc(DType::f32, s);
    be->upload_native(out, data_of(t), n * sizeof(float), stream);
    return out;
  }
  /// The caller's later work on `stream` after every op queued so far (their borrowed inputs
  /// may then change or be freed there).
  void release(void* stream) { be->release_native(stream); }
};

struct mxsim_deosc {
  mxsim_context* ctx = nullptr;
  sim::DeOsc d;
};

struct mxsim_osc_metrics {
  mxsim_context* ctx = nullptr;
  sim::OscMetrics m;
};

namespace {
/// A backend tensor's elements into host memory of n of them (nothing when t is empty: zeros).
template <class T>
void state_to_host(Backend& be, const Tensor& t, T* out, size_t n, const char* op, const char* what) {
  if (t.empty()) {
    std::fill(out, out + n, T(0));
    return;
  }
  if (t.numel() != n)
    throw std::invalid_argument(std::string(op) + ": " + what + " holds " + std::to_string(t.numel()) +
                                " elements, not " + std::to_string(n));
  be.download(t, out, n * sizeof(T));
}
}  // namespace

extern "C" {

mxsim_status mxsim_context_create(DLDevice device, mxsim_context** out, mxsim_error* err) {
  return guard(err, [&] {
    if (!out) throw std::invalid_argument("mxsim_context_create: out is NULL");
    *out = nullptr;
    auto c = std::make_unique<mxsim_context>();
    c->device = device;
    if (device.device_type == kDLCPU) c->be = emu::make_emu_backend();
    else if (device.device_type == kDLCUDA) c->be = gpu_backend(device.device_id);
    else
      throw std::invalid_argument("mxsim_context_create: device type " + std::to_string(int(device.device_type)) +
                                  " (mxsim runs kDLCPU and kDLCUDA)");
    *out = c.release();
  });
}

void mxsim_context_destroy(mxsim_context* ctx) {
  if (!ctx) return;
  try {
    ctx->run("mxsim_context_destroy", [&] { ctx->be.reset(); });  // its stream and memory on its device
  } catch (...) {
  }
  delete ctx;
}

mxsim_status mxsim_context_resolve(mxsim_context* ctx, mxsim_error* err) {
  return guard(err, [&] {
    if (!ctx) throw std::invalid_argument("mxsim_context_resolve: ctx is NULL");
    ctx->run("mxsim_context_resolve", [&] { ctx->resolve(); });
  });
}

mxsim_status mxsim_l2_norm(mxsim_context* ctx, const DLTensor* x, void* stream, double* out, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_l2_norm";
    if (!ctx || !x || !out) throw std::invalid_argument(std::string(op) + ": ctx, x or out is NULL");
    ctx->run(op, [&] {
      const Tensor t = ctx->import(*x, stream, op, "x", true);
      ctx->be->l2_norm_deferred(t, out);  // delivered by mxsim_context_resolve
      ctx->pending.tensors.push_back(t);
      ctx->release(stream);
    });
  });
}

namespace {
/// The caller's quantized tensor as the backend's upload_native reads it.
Backend::NativeQuantized native_of(const mxsim_qtensor& q, const GemmOperandDesc& d) {
  Backend::NativeQuantized n;
  n.spec = d.spec;
  n.groups = d.layout.groups, n.rows = d.layout.rows, n.cols = d.layout.cols;
  n.transposed = d.layout.transposed;
  n.divides_by_scale = d.spec.scale_convention == ScaleConvention::TorchaoTraining;
  n.data = data_of(q.data);
  n.scales = data_of(q.scale);
  n.tensor_scale_inv = q.tensor_scale ? data_of(*q.tensor_scale) : nullptr;
  return n;
}
}  // namespace

mxsim_status mxsim_context_quant_elements(mxsim_context* ctx, const mxsim_qtensor* q, const int64_t* idx, size_t n,
                                          void* stream, uint8_t* code, uint8_t* scale_bytes, float* scale_inv,
                                          float* value, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_context_quant_elements";
    if (!ctx || !q || (n && (!idx || !code || !scale_bytes || !scale_inv || !value)))
      throw std::invalid_argument(std::string(op) + ": a NULL argument");
    const GemmOperandDesc d = desc_of(*q, op, "q");
    ctx->run(op, [&] {
      Backend& be = *ctx->be;
      const QTensor bq = be.borrow_native(native_of(*q, d), stream);
      auto e = std::make_shared<Backend::QuantElements>();
      auto ix = std::make_shared<std::vector<int64_t>>(idx, idx + n);
      be.quant_elements_deferred(bq, *ix, e.get());  // delivered by mxsim_context_resolve
      ctx->release(stream);
      ctx->pending.quantized.push_back(bq);
      ctx->pending.values.push_back(e);
      ctx->pending.values.push_back(ix);
      ctx->pending.deliver.push_back([e, n, code, scale_bytes, scale_inv, value] {
        for (size_t i = 0; i < n; ++i) {
          code[i] = e->code[i];
          scale_bytes[i] = e->scale_bytes[i];
          scale_inv[i] = e->scale_inv[i];
          value[i] = e->value[i];
        }
      });
    });
  });
}

mxsim_status mxsim_context_quant_stats(mxsim_context* ctx, const DLTensor* x, const mxsim_qtensor* q, void* stream,
                                       mxsim_qstats* out, uint64_t* hist, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_context_quant_stats";
    if (!ctx || !x || !q || !out) throw std::invalid_argument(std::string(op) + ": ctx, x, q or out is NULL");
    const GemmOperandDesc d = desc_of(*q, op, "q");
    const hd::QuantLayout& L = d.layout;
    ctx->run(op, [&] {
      Backend& be = *ctx->be;
      const Shape want = L.groups > 1 ? Shape{L.groups, L.rows, L.cols} : Shape{L.rows, L.cols};
      const Tensor tx = ctx->import(*x, stream, op, "x", false, &want);  // q's logical shape
      const QTensor bq = be.borrow_native(native_of(*q, d), stream);
      auto s = std::make_shared<QuantStats>();
      auto h = std::make_shared<ScaleExpCounts>();
      be.quant_stats_deferred(tx, bq, s.get());  // delivered by mxsim_context_resolve
      if (hist) be.scale_exp_histogram_deferred(bq, h.get());
      ctx->release(stream);
      ctx->pending.tensors.push_back(tx);
      ctx->pending.quantized.push_back(bq);
      ctx->pending.values.push_back(s);
      ctx->pending.values.push_back(h);
      ctx->pending.deliver.push_back([s, h, out, hist] {
        *out = qstats_of(*s);
        if (hist) std::copy(h->begin(), h->end(), hist);
      });
    });
  });
}

mxsim_status mxsim_context_output_error(mxsim_context* ctx, const DLTensor* ref, const DLTensor* test, void* stream,
                                        mxsim_output_error* out, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_context_output_error";
    if (!ctx || !ref || !test || !out) throw std::invalid_argument(std::string(op) + ": ctx, ref, test or out is NULL");
    ctx->run(op, [&] {
      const Tensor r = ctx->import(*ref, stream, op, "ref", true);
      const Tensor t = ctx->import(*test, stream, op, "test", true);
      if (r.numel() != t.numel())
        throw std::invalid_argument(std::string(op) + ": ref holds " + std::to_string(r.numel()) + " elements, test " +
                                    std::to_string(t.numel()));
      auto e = std::make_shared<OutputError>();
      ctx->be->output_error_deferred(r, t, e.get());  // delivered by mxsim_context_resolve
      ctx->release(stream);
      ctx->pending.tensors.push_back(r);
      ctx->pending.tensors.push_back(t);
      ctx->pending.values.push_back(e);
      ctx->pending.deliver.push_back([e, out] {
        *out = {e->count, e->nonfinite, e->rel_l2, e->sqnr_db, e->max_abs_err, e->max_index};
      });
    });
  });
}

mxsim_status mxsim_osc_metrics_create(mxsim_context* ctx, float momentum, int64_t period, mxsim_osc_metrics** out,
                                      mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_osc_metrics_create";
    if (!ctx || !out) throw std::invalid_argument(std::string(op) + ": ctx or out is NULL");
    if (!(momentum > 0.0f && momentum <= 1.0f))
      throw std::invalid_argument(std::string(op) + ": momentum " + std::to_string(momentum) + " outside (0, 1]");
    if (period < 1) throw std::invalid_argument(std::string(op) + ": period " + std::to_string(period) + " below 1");
    *out = new mxsim_osc_metrics{ctx, sim::OscMetrics(momentum, period)};
  });
}

void mxsim_osc_metrics_destroy(mxsim_osc_metrics* m) {
  if (!m) return;
  try {
    m->ctx->run("mxsim_osc_metrics_destroy", [&] { m->m = sim::OscMetrics(0.01f, 1); });  // frees its state there
  } catch (...) {
  }
  delete m;
}

mxsim_status mxsim_osc_metrics_maps(mxsim_osc_metrics* m, const char* name, uint32_t* flips, float* ema,
                                    float* dist_ratio, size_t n, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_osc_metrics_maps";
    if (!m || !name || (n && (!flips || !ema || !dist_ratio))) throw std::invalid_argument(std::string(op) + ": a NULL argument");
    m->ctx->run(op, [&] {
      Backend& be = *m->ctx->be;
      const Backend::OscState* s = m->m.state(name);
      state_to_host(be, s ? s->flips : Tensor(), flips, n, op, name);
      state_to_host(be, s ? s->ema : Tensor(), ema, n, op, name);
      std::vector<float> dq(n), dw(n);
      state_to_host(be, s ? s->dist_q : Tensor(), dq.data(), n, op, name);
      state_to_host(be, s ? s->dist_w : Tensor(), dw.data(), n, op, name);
      const std::vector<float> r = sim::dist_ratio_map(dq, dw);
      std::copy(r.begin(), r.end(), dist_ratio);
    });
  });
}

mxsim_status mxsim_osc_metrics_update(mxsim_osc_metrics* m, const char* name, const DLTensor* w, const DLTensor* q,
                                      void* stream, mxsim_osc_step* out, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_osc_metrics_update";
    if (!m || !name || !w || !q || !out) throw std::invalid_argument(std::string(op) + ": an argument is NULL");
    m->ctx->run(op, [&] {
      const Tensor tw = m->ctx->import(*w, stream, op, "w", false);
      const Tensor tq = m->ctx->import(*q, stream, op, "q", false);
      if (!(tw.shape() == tq.shape()))
        throw std::invalid_argument(std::string(op) + ": " + name + ": w " + tw.shape().str() + " and q " +
                                    tq.shape().str() + " differ");
      auto r = std::make_shared<Backend::OscStep>();
      m->m.observe_deferred(*m->ctx->be, name, tw, tq, r.get());  // delivered by mxsim_context_resolve
      m->ctx->release(stream);
      auto& p = m->ctx->pending;
      p.tensors.push_back(tw);
      p.tensors.push_back(tq);
      p.values.push_back(r);
      p.deliver.push_back([r, out] { *out = {r->flips, r->flips_total, r->ema_mean, r->ema_frac_above, r->dist_ratio_mean}; });
    });
  });
}

mxsim_status mxsim_deosc_create(mxsim_context* ctx, int64_t period, float ratio, mxsim_deosc** out, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_deosc_create";
    if (!ctx || !out) throw std::invalid_argument(std::string(op) + ": ctx or out is NULL");
    if (period < 1) throw std::invalid_argument(std::string(op) + ": period " + std::to_string(period) + " below 1");
    if (!(ratio > 0.0f) || !std::isfinite(ratio))
      throw std::invalid_argument(std::string(op) + ": ratio " + std::to_string(ratio) + " must be a positive number");
    *out = new mxsim_deosc{ctx, sim::DeOsc(period, ratio, 0)};
  });
}

void mxsim_deosc_destroy(mxsim_deosc* d) {
  if (!d) return;
  try {
    d->ctx->run("mxsim_deosc_destroy", [&] { d->d = sim::DeOsc(1, 1.0f, 0); });  // frees its state there
  } catch (...) {
  }
  delete d;
}


namespace {
/// Elements idx of a backend state tensor into host u32s (zeros when the state does not exist yet).
void gather_u32(Backend& be, const Tensor& t, const int64_t* idx, size_t n, uint32_t* out) {
  if (t.empty()) {
    std::fill(out, out + n, 0u);
    return;
  }
  {
    const DeferredScope scope(be);
    be.gather_deferred(t, std::span<const int64_t>(idx, n), out);
    be.resolve_deferred();
  }
}
}  // namespace

mxsim_status mxsim_osc_metrics_gather(mxsim_osc_metrics* m, const char* name, const int64_t* idx, size_t n,
                                      uint32_t* flips, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_osc_metrics_gather";
    if (!m || !name || (n && (!idx || !flips))) throw std::invalid_argument(std::string(op) + ": a NULL argument");
    m->ctx->run(op, [&] {
      const Backend::OscState* s = m->m.state(name);
      gather_u32(*m->ctx->be, s ? s->flips : Tensor(), idx, n, flips);
    });
  });
}

mxsim_status mxsim_deosc_gather(mxsim_deosc* d, const char* name, const int64_t* idx, size_t n, uint32_t* snaps,
                                mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_deosc_gather";
    if (!d || !name || (n && (!idx || !snaps))) throw std::invalid_argument(std::string(op) + ": a NULL argument");
    d->ctx->run(op, [&] {
      const sim::DeOsc::State* s = d->d.state_of(name);
      gather_u32(*d->ctx->be, s ? s->snaps : Tensor(), idx, n, snaps);
    });
  });
}

mxsim_status mxsim_deosc_snaps(mxsim_deosc* d, const char* name, uint32_t* snaps, size_t n, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_deosc_snaps";
    if (!d || !name || (n && !snaps)) throw std::invalid_argument(std::string(op) + ": a NULL argument");
    d->ctx->run(op, [&] {
      const sim::DeOsc::State* s = d->d.state_of(name);
      state_to_host(*d->ctx->be, s ? s->snaps : Tensor(), snaps, n, op, name);
    });
  });
}

mxsim_status mxsim_deosc_observe(mxsim_deosc* d, const char* name, DLTensor* w, const DLTensor* q, void* stream,
                                 int64_t* snapped, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_deosc_observe";
    if (!d || !name || !w || !q || !snapped) throw std::invalid_argument(std::string(op) + ": an argument is NULL");
    d->ctx->run(op, [&] {
      Tensor tw = d->ctx->import(*w, stream, op, "w", false, nullptr, true);  // snapped in place, then copied back
      const Tensor tq = d->ctx->import(*q, stream, op, "q", false);
      if (!(tw.shape() == tq.shape()))
        throw std::invalid_argument(std::string(op) + ": " + name + ": w " + tw.shape().str() + " and q " +
                                    tq.shape().str() + " differ");
      const std::optional<int64_t> n = d->d.observe(*d->ctx->be, name, tw, tq);
      *snapped = n.value_or(-1);
      if (n && *n > 0) d->ctx->be->download_native(tw, data_of(*w), tw.bytes(), stream);  // the snapped master back
      d->ctx->release(stream);
    });
  });
}

}  // extern "C"
