// MoE classifier: explicit forward and backward against mxsim::Backend.
#include "mxsim/sim/model.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "mxsim/philox.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::sim {

namespace {

Tensor3f as3(const Tensor2f& x) {
  Tensor3f r = Tensor3f::from_shape({1, x.shape(0), x.shape(1)});
  std::copy(x.begin(), x.end(), r.begin());
  return r;
}

float amax_of(const float* p, size_t n) {
  float a = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(p[i])) return p[i];  // NaN is not skipped: the amax is NaN
    a = std::max(a, std::fabs(p[i]));
  }
  return a;
}

float elem_max(Format f) { return decode(f, spec_of(f).max_code()); }

/// Resolve a per-tensor FP32 spec's scale for operand `role` of `w`:
/// fp8_delayed takes the scale of the role's DelayedScaling (computed at the
/// end of the previous step) and records this use's amax into its history;
/// current scaling takes the amax of the whole tensor now (so per-group wgrad
/// slices share one scale, as Turbo does). Other specs pass through.
const char* const kRoleName[3] = {"w", "x", "dy"};

/// The same spec without recording an amax (peek).
QuantSpec resolved_spec(const Weight& w, int role, QuantSpec s, const float* p, size_t n) {
  if (!s.per_tensor() || s.scale_kind != ScaleKind::FP32) return s;
  if (const auto& d = w.delayed[size_t(role)]) return d->spec(s);
  const float a = amax_of(p, n);
  s.fixed_scale = current_scale(elem_max(s.elem), a, s.amax_epsilon, s.pow2_scale);
  if (std::isnan(s.fixed_scale))  // fixed_scale 0 would silently mean per-group scaling
    throw std::runtime_error(w.name + ": operand " + kRoleName[role] + " has a non-finite amax (" +
                             std::to_string(a) + "); FP8 current scaling has no finite scale");
  return s;
}
QuantSpec resolve(Weight& w, int role, QuantSpec s, const float* p, size_t n) {
  if (s.per_tensor() && s.scale_kind == ScaleKind::FP32)
    if (auto& d = w.delayed[size_t(role)]) d->record(amax_of(p, n));
  return resolved_spec(w, role, s, p, n);
}

/// MoE dispatch from the top-k expert indices `top` [B, k]: counts[e] =
/// assignments to expert e, ms[e] = counts[e] padded up to a multiple of 16
/// rows (the grouped GEMM's m_splits), M = sum ms, row_of[t * k + s] = the
/// permuted row of token t's slot s, in stable (expert, token, slot) order.
struct Routing {
  std::vector<int64_t> counts, ms, row_of;
  int64_t M = 0;
};
Routing route(const std::vector<int>& top, size_t B, size_t E, size_t k) {
  Routing r;
  r.counts.assign(E, 0);
  r.ms.assign(E, 0);
  for (size_t i = 0; i < B * k; ++i) ++r.counts[size_t(top[i])];
  std::vector<int64_t> fill(E);
  for (size_t e = 0; e < E; ++e) {
    r.ms[e] = (r.counts[e] + 15) / 16 * 16;
    fill[e] = r.M;
    r.M += r.ms[e];
  }
  r.row_of.resize(B * k);
  for (size_t e = 0; e < E; ++e)
    for (size_t i = 0; i < B * k; ++i)  // i = t * k + s: token-major, then slot
      if (size_t(top[i]) == e) r.row_of[i] = fill[e]++;
  return r;
}

/// Predicted class of row t of logits [T, C]: the first index of the maximum.
size_t argmax_row(const Tensor2f& logits, size_t t) {
  size_t am = 0;
  for (size_t j = 1; j < logits.shape(1); ++j)
    if (logits(t, j) > logits(t, am)) am = j;
  return am;
}

}  // namespace

// ---------------------------------------------------------------- Weight

void Weight::zero_grad() {
  main_grad = xt::zeros<float>({G, N, K});
  added.assign(size_t(num_microbatches) * G, 0);
}
void Weight::mark_added(int mb, size_t g) {
  if (mb < 0 || mb >= num_microbatches || g >= G) throw MechanicsError(name + ": main_grad guard index out of range");
  uint8_t& f = added[size_t(mb) * G + g];
  if (f)
    throw MechanicsError(name + ": main_grad of group " + std::to_string(g) + " already received micro-batch " +
                         std::to_string(mb) + "'s wgrad (grad_added_to_main_grad set; a second add is an error)");
  f = 1;
}
void Weight::invalidate() {
  ++version;
  cache.valid = false;
}
void Weight::update_scaling() {
  for (auto& d : delayed)
    if (d) d->update();
}

QuantSpec weight_fprop_spec(const Weight& w, const Tensor3f& wm) {
  return resolved_spec(w, 0, operand_specs(w.recipe).w, wm.data(), wm.size());
}

static QuantizedTensor quantize_weight(Backend& be, Weight& w) {
  const auto& sp = operand_specs(w.recipe);
  QuantSpec s = resolve(w, 0, sp.w, w.model.data(), w.model.size());
  return be.quantize(w.model, s, Axis::Cols);
}

const QuantizedTensor& weight_for_fprop(Backend& be, Weight& w, int mb, int num_mb, QuantizedTensor& scratch) {
  if (num_mb == 1) {  // Primus PR #891: no cache, quantize inside the op
    scratch = quantize_weight(be, w);
    return scratch;
  }
  if (mb == 0) {
    w.cache.q = quantize_weight(be, w);
    w.cache.version = w.version;
    w.cache.valid = true;
    return w.cache.q;
  }
  if (!w.cache.valid)
    throw MechanicsError(w.name + ": micro-batch " + std::to_string(mb) +
                         " found no quantized weight cache (invalidated by the optimizer step; micro-batch 0 must "
                         "rebuild it)");
  if (w.cache.version != w.version)
    throw MechanicsError(w.name + ": stale quantized weight cache (made from version " +
                         std::to_string(w.cache.version) + ", weight is at version " + std::to_string(w.version) + ")");
  return w.cache.q;
}

const QuantizedTensor& weight_for_dgrad(Backend& be, Weight& w, int mb, int num_mb, QuantizedTensor& scratch) {
  if (!transposed_cache_allowed(w.recipe) || num_mb == 1) {
    // Current scaling: never a cached transposed copy; the per-tensor bytes
    // are re-derived from the current BF16 weight (same values).
    scratch = quantize_weight(be, w);
    return scratch;
  }
  // 2-D tiles / per-tensor: the columnwise copy is the fprop bytes (§1).
  if (!w.cache.valid || w.cache.version != w.version)
    throw MechanicsError(w.name + ": stale or missing quantized weight cache in dgrad of micro-batch " +
                         std::to_string(mb));
  return w.cache.q;
}

// ---------------------------------------------------------------- Model

struct Model::LinearCtx {
  Tensor2f x;  ///< the fprop input (BF16 values)
};

Model::Model(const Config& c, Backend& be) : cfg_(c), be_(be) {
  struct L {
    const char* name;
    size_t G, N, K;
    std::string recipe;
  };
  const size_t d = size_t(c.d_model), f = size_t(c.d_ff), E = size_t(c.experts);
  const L ls[] = {{"embed", 1, d, 784, c.recipe.embed},
                  {"router", 1, E, d, c.recipe.router},
                  {"fc1", E, f, d, c.recipe.fc1},
                  {"fc2", E, d, f, c.recipe.fc2},
                  {"head", 1, 10, d, c.recipe.head}};
  uint32_t id = 1;
  for (const auto& l : ls) {
    auto w = std::make_unique<Weight>();
    w->name = l.name;
    w->G = l.G;
    w->N = l.N;
    w->K = l.K;
    w->recipe = make_recipe(l.recipe, c.recipe);
    if (const auto* dr = std::get_if<Fp8DelayedRecipe>(&w->recipe)) {
      const Format fmt[3] = {dr->specs.w.elem, dr->specs.x_fprop.elem, dr->specs.dy_dgrad.elem};
      for (size_t r = 0; r < 3; ++r) w->delayed[r].emplace(fmt[r], dr->history, dr->margin, AmaxAlgo::Max);
    }
    w->num_microbatches = c.num_microbatches;
    w->master = Tensor3f::from_shape({l.G, l.N, l.K});
    // Uniform(-b, b), b = sqrt(3) * std, std = init_std or 1/sqrt(fan_in);
    // Philox keyed by (seed, layer id, 0xFFFF) with the element index as counter.
    const float sd = c.init_std > 0 ? c.init_std : 1.0f / std::sqrt(float(l.K));
    const float b = std::sqrt(3.0f) * sd;
    PhiloxStream rs{c.seed, make_stream(id, 0xFFFFu)};
    for (size_t i = 0; i < w->master.size(); ++i) {
      const float u = float(rs(i) >> 8) * (1.0f / 16777216.0f);  // [0, 1)
      w->master.data()[i] = (2.0f * u - 1.0f) * b;
    }
    if (std::string(l.name) == "fc2") w->master *= 0.5f;  // residual branch starts small
    w->m = xt::zeros<float>({l.G, l.N, l.K});
    w->v = xt::zeros<float>({l.G, l.N, l.K});
    w->model = w->master;
    be.round_bf16(w->model);
    w->zero_grad();
    ++id;
    w_.push_back(std::move(w));
  }
}

std::vector<Weight*> Model::weights() {
  std::vector<Weight*> r;
  for (auto& w : w_) r.push_back(w.get());
  return r;
}
Weight& Model::weight(const std::string& n) {
  for (auto& w : w_)
    if (w->name == n) return *w;
  throw std::invalid_argument("no layer named '" + n + "'");
}

static uint32_t layer_id(const Weight& w) {
  static const char* names[] = {"embed", "router", "fc1", "fc2", "head"};
  for (uint32_t i = 0; i < 5; ++i)
    if (w.name == names[i]) return i + 1;
  return 0;
}

void Model::linear_forward(Weight& w, const Tensor2f& x, std::span<const int64_t> ms, Tensor2f& y, int mb,
                           int num_mb, bool st, LinearCtx& ctx) {
  ctx.x = x;
  const GemmOut out{w.name == "router" || w.name == "head" ? Format::FP32 : Format::BF16, false};
  if (!is_quantized(w.recipe)) {
    be_.grouped_fprop(x, nullptr, w.model, nullptr, ms, y, out);
    return;
  }
  const auto& sp = operand_specs(w.recipe);
  const QuantSpec xs = resolve(w, 1, sp.x_fprop, x.data(), x.size());
  const Tensor3f x3 = as3(x);
  const QuantizedTensor xq = be_.quantize(x3, xs, Axis::Cols);
  QuantizedTensor scratch;
  const QuantizedTensor& wq = weight_for_fprop(be_, w, mb, num_mb, scratch);
  be_.grouped_fprop(x, &xq, w.model, &wq, ms, y, out);
  if (st) {
    stats[w.name][0] = be_.quant_stats(w.model, wq);
    stats[w.name][1] = be_.quant_stats(x3, xq);
  }
}

void Model::linear_backward(Weight& w, const Tensor2f& dy, std::span<const int64_t> ms, Tensor2f* dx, int mb,
                            int num_mb, int64_t step, bool st, LinearCtx& ctx, Tensor3f* record) {
  const bool q = is_quantized(w.recipe);
  const uint32_t lid = layer_id(w);
  const uint64_t sr_ctr = uint64_t(step) * uint64_t(num_mb) + uint64_t(mb);
  // dgrad
  if (dx) {
    if (!q) {
      be_.grouped_dgrad(dy, nullptr, w.model, nullptr, ms, *dx, {Format::BF16, false});
    } else {
      const auto& sp = operand_specs(w.recipe);
      QuantSpec ds = resolve(w, 2, sp.dy_dgrad, dy.data(), dy.size());
      ds.sr = PhiloxStream{cfg_.seed, make_stream(lid * 16 + 1, uint32_t(sr_ctr))};
      const Tensor3f dy3 = as3(dy);
      const QuantizedTensor dyq = be_.quantize(dy3, ds, Axis::Cols);
      QuantizedTensor scratch;
      const QuantizedTensor& wq = weight_for_dgrad(be_, w, mb, num_mb, scratch);
      be_.grouped_dgrad(dy, &dyq, w.model, &wq, ms, *dx, {Format::BF16, false});
      if (st) stats[w.name][2] = be_.quant_stats(dy3, dyq);
    }
  }
  // wgrad: the grad_added_to_main_grad guard, per (micro-batch, group); an
  // empty group adds nothing and sets nothing.
  for (size_t g = 0; g < ms.size(); ++g)
    if (ms[g] > 0) w.mark_added(mb, g);
  std::vector<QuantizedTensor> dyq, xq;
  if (q) {
    const auto& sp = operand_specs(w.recipe);
    QuantSpec ds = resolve(w, 2, sp.dy_wgrad, dy.data(), dy.size());
    ds.sr = PhiloxStream{cfg_.seed, make_stream(lid * 16 + 2, uint32_t(sr_ctr))};
    const QuantSpec xs = resolve(w, 1, sp.x_wgrad, ctx.x.data(), ctx.x.size());
    dyq = be_.quantize_grouped_colwise(dy, ms, ds);
    xq = be_.quantize_grouped_colwise(ctx.x, ms, xs);
  }
  if (fused_wgrad_accum(w.recipe)) {
    // Gradient-accumulation fusion (Primus PR #995): the wgrad GEMM's FP32
    // accumulator starts at main_grad and is rounded once to FP32.
    be_.grouped_wgrad(dy, dyq, ctx.x, xq, ms, w.main_grad, {Format::FP32, true});
    if (record) be_.grouped_wgrad(dy, dyq, ctx.x, xq, ms, *record, {Format::FP32, false});
  } else {
    // Unfused bridge: dW_mb in BF16, then main_grad = fl32(main_grad + dW_mb).
    Tensor3f tmp;
    be_.grouped_wgrad(dy, dyq, ctx.x, xq, ms, tmp, {Format::BF16, false});
    for (size_t g = 0; g < ms.size(); ++g) {
      if (ms[g] == 0) continue;
      float* mg = &w.main_grad(g, 0, 0);
      const float* t = &tmp(g, 0, 0);
      for (size_t i = 0; i < w.N * w.K; ++i) mg[i] = mg[i] + t[i];
    }
    if (record) *record = std::move(tmp);
  }
}

Model::MbResult Model::train_microbatch(const Tensor2f& xin, std::span<const uint8_t> y, int mb, int num_mb,
                                        int64_t step, float grad_scale, bool st, bool rec_w, MicroRecord* rec) {
  const size_t B = xin.shape(0), E = size_t(cfg_.experts), k = size_t(cfg_.top_k);
  MbResult res;
  auto want = [&](const char* n) {
    return rec_w && rec && std::find(cfg_.snapshot_layers.begin(), cfg_.snapshot_layers.end(), n) != cfg_.snapshot_layers.end();
  };
  LinearCtx c_embed, c_router, c_fc1, c_fc2, c_head;
  Weight &We = weight("embed"), &Wr = weight("router"), &W1 = weight("fc1"), &W2 = weight("fc2"), &Wh = weight("head");
  const std::vector<int64_t> one = {int64_t(B)};

  // ---- forward
  Tensor2f x = xin;
  be_.round_bf16(x);
  Tensor2f h0, rl;
  linear_forward(We, x, one, h0, mb, num_mb, st, c_embed);
  linear_forward(Wr, h0, one, rl, mb, num_mb, st, c_router);
  const Tensor2f p = be_.softmax_rows(rl);
  const std::vector<int> top = be_.topk_rows(p, int(k));
  // permutation: stable (expert, token, slot) order, groups padded to 16 rows
  const Routing rt = route(top, B, E, k);
  const std::vector<int64_t>& counts = rt.counts;
  const std::vector<int64_t>& ms = rt.ms;
  const std::vector<int64_t>& row_of = rt.row_of;
  const int64_t M = rt.M;
  Tensor2f xp, u, a, yp, h1;
  be_.permute_rows(h0, row_of, k, size_t(M), xp);
  linear_forward(W1, xp, ms, u, mb, num_mb, st, c_fc1);
  be_.activation(cfg_.activation, u, a);
  linear_forward(W2, a, ms, yp, mb, num_mb, st, c_fc2);
  be_.unpermute_combine(yp, h0, p, top, row_of, k, h1);
  Tensor2f logits;
  linear_forward(Wh, h1, one, logits, mb, num_mb, st, c_head);
  Tensor2f dlog;
  const std::vector<float> loss = be_.cross_entropy(logits, y, grad_scale, dlog);
  be_.round_bf16(dlog);
  for (size_t t = 0; t < B; ++t) {
    res.loss_sum += loss[t];
    res.correct += (argmax_row(logits, t) == y[t]);
  }
  // auxiliary load-balancing loss (Switch Transformer eq. 4 / GShard):
  // aux = coeff * E * sum_e f_e * P_e, f_e = share of assignments, P_e = mean prob.
  std::vector<float> f(E), P(E, 0.0f);
  for (size_t e = 0; e < E; ++e) f[e] = float(counts[e]) / float(B * k);
  for (size_t t = 0; t < B; ++t)
    for (size_t e = 0; e < E; ++e) P[e] = P[e] + p(t, e);
  double aux = 0;
  for (size_t e = 0; e < E; ++e) aux += double(f[e]) * double(P[e] / float(B));
  res.aux = double(cfg_.aux_loss_coeff) * double(E) * aux;
  res.tokens_per_expert = counts;

  // ---- backward
  Tensor2f dh1;
  Tensor3f* rh = nullptr;
  if (want("head")) rh = &rec->wgrad["head"];
  linear_backward(Wh, dlog, one, &dh1, mb, num_mb, step, st, c_head, rh);
  Tensor2f dyp, da, dxp, du, dl_r, dh0_r, dh0;
  std::vector<float> dgate;
  be_.combine_backward(dh1, yp, p, top, row_of, k, dyp, dgate);
  linear_backward(W2, dyp, ms, &da, mb, num_mb, step, st, c_fc2, want("fc2") ? &rec->wgrad["fc2"] : nullptr);
  be_.activation_grad(cfg_.activation, u, da, du);
  linear_backward(W1, du, ms, &dxp, mb, num_mb, step, st, c_fc1, want("fc1") ? &rec->wgrad["fc1"] : nullptr);
  // router: dp from the gates and the aux loss (f_e held constant), softmax backward
  const float aux_g = cfg_.aux_loss_coeff * float(E) / (float(B) * float(num_mb));
  be_.router_backward(p, top, dgate, f, aux_g, k, dl_r);
  linear_backward(Wr, dl_r, one, &dh0_r, mb, num_mb, step, st, c_router, want("router") ? &rec->wgrad["router"] : nullptr);
  be_.embed_grad_sum(dh1, dh0_r, dxp, row_of, k, dh0);
  linear_backward(We, dh0, one, nullptr, mb, num_mb, step, st, c_embed, want("embed") ? &rec->wgrad["embed"] : nullptr);
  return res;
}

std::vector<int> Model::predict(const Tensor2f& xin) {
  const size_t B = xin.shape(0), E = size_t(cfg_.experts), k = size_t(cfg_.top_k);
  const std::vector<int64_t> one = {int64_t(B)};
  // Evaluation: no cache (one "micro-batch"), no statistics.
  auto fwd = [&](Weight& w, const Tensor2f& x, std::span<const int64_t> ms, Tensor2f& y) {
    LinearCtx c;
    const auto saved = w.cache;
    const auto saved_scaling = w.delayed;  // evaluation records no amax
    linear_forward(w, x, ms, y, 0, 1, false, c);
    w.cache = saved;
    w.delayed = saved_scaling;
  };
  Tensor2f x = xin;
  be_.round_bf16(x);
  Tensor2f h0, rl;
  fwd(weight("embed"), x, one, h0);
  fwd(weight("router"), h0, one, rl);
  const Tensor2f p = be_.softmax_rows(rl);
  const std::vector<int> top = be_.topk_rows(p, int(k));
  const Routing rt = route(top, B, E, k);
  const std::vector<int64_t>& ms = rt.ms;
  const std::vector<int64_t>& row_of = rt.row_of;
  const int64_t M = rt.M;
  Tensor2f xp, u, a, yp, h1, logits;
  be_.permute_rows(h0, row_of, k, size_t(M), xp);
  fwd(weight("fc1"), xp, ms, u);
  be_.activation(cfg_.activation, u, a);
  fwd(weight("fc2"), a, ms, yp);
  be_.unpermute_combine(yp, h0, p, top, row_of, k, h1);
  fwd(weight("head"), h1, one, logits);
  std::vector<int> out(B);
  for (size_t t = 0; t < B; ++t) out[t] = int(argmax_row(logits, t));
  return out;
}

// ---------------------------------------------------------------- de-osc

Tensor3f mxfp4_forward_qdq(Backend& be, const Tensor3f& master) {
  Tensor3f b = master;
  be.round_bf16(b);
  return be.dequantize(be.quantize(b, mxfp4_weight_spec(), Axis::Cols));
}

std::map<std::string, int64_t> DeOsc::step(Backend& be, const std::vector<Weight*>& ws) {
  std::map<std::string, int64_t> snapped;
  ++global_step;
  if (global_step < start_) return snapped;
  if (!built) {
    for (Weight* w : ws)
      if (deosc_eligible(w->recipe)) eligible.push_back(w->name);  // by recipe type only
    built = !eligible.empty();
  }
  for (Weight* w : ws) {
    if (std::find(eligible.begin(), eligible.end(), w->name) == eligible.end()) continue;
    State& s = state[w->name];
    const Tensor3f Q = mxfp4_forward_qdq(be, w->master);
    if (!s.seeded) {  // first observation only seeds
      s.prev = w->master;
      s.prev_q = Q;
      s.dist_w = xt::zeros<float>(w->master.shape());
      s.dist_q = xt::zeros<float>(w->master.shape());
      s.seeded = true;
      continue;
    }
    const size_t n = w->master.size();
    float *pw = w->master.data(), *pp = s.prev.data(), *pq = s.prev_q.data(), *dw = s.dist_w.data(),
          *dq = s.dist_q.data();
    const float* q = Q.data();
    for (size_t i = 0; i < n; ++i) {
      dw[i] = dw[i] + std::fabs(pw[i] - pp[i]);
      dq[i] = dq[i] + std::fabs(q[i] - pq[i]);
      pp[i] = pw[i];
      pq[i] = q[i];
    }
    if (++s.step >= period_) {
      int64_t cnt = 0;
      for (size_t i = 0; i < n; ++i) {
        if (dw[i] > 0 && dq[i] / std::max(dw[i], 1e-12f) >= ratio_) {
          pw[i] = q[i];  // snap: Q into the FP32 master (reaches the model at the next step's copy)
          pp[i] = q[i];
          ++cnt;
        }
        dw[i] = 0;
        dq[i] = 0;
      }
      s.step = 0;
      snapped[w->name] = cnt;
    }
  }
  return snapped;
}

// ---------------------------------------------------------------- metrics

OscMetrics::Step OscMetrics::update(Backend& be, Weight& w) {
  Step r;
  if (!is_quantized(w.recipe)) return r;
  State& s = state[w.name];
  // Quantized value on the forward grid of this weight's recipe.
  Tensor3f b = w.master;
  be.round_bf16(b);
  // The spec the next fprop will use (fp8_current: amax of b; fp8_delayed:
  // the scale update_scaling() just produced), without recording an amax.
  const Tensor3f Q = be.dequantize(be.quantize(b, weight_fprop_spec(w, b), Axis::Cols));
  const size_t n = Q.size();
  if (!s.seeded) {
    s.prev_w = w.master;
    s.prev_q = Q;
    s.dist_w = xt::zeros<float>(Q.shape());
    s.dist_q = xt::zeros<float>(Q.shape());
    s.ema = xt::zeros<float>(Q.shape());
    s.last_dir.assign(n, 0);
    s.flips.assign(n, 0);
    s.seeded = true;
  }
  uint64_t fl = 0, tot = 0;
  double ema_sum = 0, ratio_sum = 0;
  uint64_t above = 0, moved = 0;
  for (size_t i = 0; i < n; ++i) {
    const float dq = Q.data()[i] - s.prev_q.data()[i];
    const int8_t dir = dq > 0 ? 1 : (dq < 0 ? -1 : 0);
    float ind = 0;
    if (dir != 0) {
      if (s.last_dir[i] != 0 && dir != s.last_dir[i]) {
        ind = 1;
        ++s.flips[i];
        ++fl;
      }
      s.last_dir[i] = dir;
    }
    float& e = s.ema.data()[i];
    e = m_ * ind + (1.0f - m_) * e;
    ema_sum += e;
    above += e > 0.01f;
    tot += s.flips[i];
    s.dist_w.data()[i] += std::fabs(w.master.data()[i] - s.prev_w.data()[i]);
    s.dist_q.data()[i] += std::fabs(dq);
    if (s.dist_w.data()[i] > 0) {
      ratio_sum += double(s.dist_q.data()[i]) / std::max(double(s.dist_w.data()[i]), 1e-12);
      ++moved;
    }
  }
  s.prev_w = w.master;
  s.prev_q = Q;
  if (++s.window >= period_) {
    s.dist_w.fill(0);
    s.dist_q.fill(0);
    s.window = 0;
  }
  r.flips = fl;
  r.flips_total = tot;
  r.ema_mean = ema_sum / double(n);
  r.ema_frac_above = double(above) / double(n);
  r.dist_ratio_mean = moved ? ratio_sum / double(moved) : 0.0;
  return r;
}

float lr_at(const Config& c, int64_t t, int64_t total) {
  if (c.warmup_steps > 0 && t <= c.warmup_steps) return c.lr * float(t) / float(c.warmup_steps);
  const int64_t span = std::max<int64_t>(1, total - c.warmup_steps);
  const double prog = std::min(1.0, double(t - c.warmup_steps) / double(span));
  return float(c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(3.14159265358979323846 * prog)));
}

}  // namespace mxsim::sim
