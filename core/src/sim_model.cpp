// MoE classifier: explicit forward and backward against mxsim::Backend.
#include "mxsim/sim/model.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <sstream>
#include <string>

#include "mxsim/hd/elementwise.hpp"
#include "mxsim/philox.hpp"
#include "mxsim/sim/state_io.hpp"
#include "mxsim/trace/schema.hpp"

namespace mxsim::sim {

namespace {

/// Rows each expert's permuted block is padded to (the Hadamard run of 16:
/// Turbo pads grouped column-wise spans likewise).
constexpr int64_t kExpertRowPad = 16;

/// (Re)allocate `t` unless it already is a tensor of this dtype and shape:
/// the workspace keeps its buffers across micro-batches of equal shapes.
Tensor& ensure(Backend& be, Tensor& t, DType dt, Shape s) {
  if (t.empty() || t.dtype() != dt || !(t.shape() == s)) t = be.alloc(dt, s);
  return t;
}
Tensor& ensure(Backend& be, Tensor& t, Shape s) { return ensure(be, t, DType::f32, s); }

/// Resolve a per-tensor FP32 spec's scale for operand `role` of `w`:
/// fp8_delayed takes the scale of the role's DelayedScaling (computed at the
/// end of the previous step); current scaling takes the amax of the whole
/// tensor now (so per-group wgrad slices share one scale, as Turbo does).
/// Other specs pass through. Records no amax (a peek).
QuantSpec resolved_spec(Backend& be, const Weight& w, Role role, QuantSpec s, const Tensor& x) {
  if (!s.per_tensor() || s.scale_kind != ScaleKind::FP32) return s;
  if (const auto& d = w.delayed[size_t(role)]) return d->spec(s);
  const float a = be.amax(x);
  s.fixed_scale = current_scale(spec_of(s.elem).max_value(), a, s.amax_epsilon, s.pow2_scale);
  if (std::isnan(s.fixed_scale))  // fixed_scale 0 would silently mean per-group scaling
    throw std::runtime_error(w.name + ": operand " + name_of(role) + " has a non-finite amax (" + std::to_string(a) +
                             "); FP8 current scaling has no finite scale");
  return s;
}
/// The same, recording this use's amax into fp8_delayed's history first.
QuantSpec resolve(Backend& be, Weight& w, Role role, QuantSpec s, const Tensor& x) {
  if (s.per_tensor() && s.scale_kind == ScaleKind::FP32)
    if (auto& d = w.delayed[size_t(role)]) d->record(be.amax(x));
  return resolved_spec(be, w, role, s, x);
}

}  // namespace

// ---------------------------------------------------------------- Weight

void Weight::zero_grad(Backend& be) {
  ensure(be, main_grad, shape());
  be.fill_zero(main_grad);
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
  memo_.clear();
  master_matches_model = true;
}
const QTensor& Weight::quantized(Backend& be, const QuantSpec& spec) {
  for (const auto& [s, q] : memo_)
    if (s == spec) return q;
  ++quantizations_;
  memo_.emplace_back(spec, be.quantize(model, spec, Axis::Cols));
  return memo_.back().second;
}
Tensor Weight::bf16_master(Backend& be) const {
  if (master_matches_model) return model;
  Tensor b = be.alloc(DType::f32, shape());
  be.round_bf16(master, b);
  return b;
}
void Weight::qdq_master(Backend& be, const QuantSpec& spec, Tensor& q) {
  ensure(be, q, shape());
  if (master_matches_model) {
    be.dequantize(quantized(be, spec), q);
    return;
  }
  ++quantizations_;
  be.dequantize(be.quantize(bf16_master(be), spec, Axis::Cols), q);
}
void Weight::update_scaling() {
  for (auto& d : delayed)
    if (d) d->update();
}

QuantSpec weight_fprop_spec(Backend& be, const Weight& w, const Tensor& wm) {
  return resolved_spec(be, w, Role::W, operand_specs(w.recipe).w, wm);
}

/// W for a GEMM of this step: resolve the spec (recording fp8_delayed's amax
/// for this use), then the one quantization of this version by that spec.
static QTensor quantize_weight(Backend& be, Weight& w) {
  const auto& sp = operand_specs(w.recipe);
  const QuantSpec s = resolve(be, w, Role::W, sp.w, w.model);
  return w.quantized(be, s);
}

const QTensor& weight_for_fprop(Backend& be, Weight& w, int mb, int num_mb, QTensor& scratch) {
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

const QTensor& weight_for_dgrad(Backend& be, Weight& w, int mb, int num_mb, QTensor& scratch) {
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
  Tensor x;  ///< the fprop input (BF16 values); shares the workspace buffer
};

/// Activations and gradients of one micro-batch, kept across micro-batches
/// (reallocated only when a shape changes, e.g. the permuted row count M).
struct Model::Workspace {
  Tensor x, h0, rl, p, top, counts, row_of, xp, u, a, yp, h1, logits, dlog;
  Tensor dh1, dyp, dgate, da, du, dxp, f, dl_r, dh0_r, dh0, pred;
  std::array<Tensor, 5> wgrad_tmp;  ///< per layer [G, N, K]: the unfused recipes' BF16 dW_mb
};

/// MoE dispatch of a micro-batch: counts and row_of in backend memory, the
/// host copy of the counts and the padded m_splits the grouped GEMMs take.
struct Model::Routing {
  std::vector<int64_t> counts, ms;
  int64_t M = 0;
};

Model::Model(const Config& c, Backend& be)
    : cfg_(c), be_(be), ws_(std::make_unique<Workspace>()), eval_ws_(std::make_unique<Workspace>()) {
  const size_t d = size_t(c.d_model), f = size_t(c.d_ff), E = size_t(c.experts);
  struct L {
    Layer layer;
    size_t G, N, K;
    const std::string& recipe;
  };
  const L ls[] = {{Layer::Embed, 1, d, 784, c.recipe.of(Layer::Embed)},
                  {Layer::Router, 1, E, d, c.recipe.of(Layer::Router)},
                  {Layer::Fc1, E, f, d, c.recipe.of(Layer::Fc1)},
                  {Layer::Fc2, E, d, f, c.recipe.of(Layer::Fc2)},
                  {Layer::Head, 1, 10, d, c.recipe.of(Layer::Head)}};
  for (const auto& l : ls) {
    auto w = std::make_unique<Weight>();
    w->name = name_of(l.layer);
    w->layer = l.layer;
    w->G = l.G;
    w->N = l.N;
    w->K = l.K;
    w->recipe = make_recipe(l.recipe, c.recipe);
    if (const auto* dr = std::get_if<Fp8DelayedRecipe>(&w->recipe)) {
      const Format fmt[3] = {dr->specs.w.elem, dr->specs.x_fprop.elem, dr->specs.dy_dgrad.elem};
      for (size_t r = 0; r < 3; ++r) w->delayed[r].emplace(fmt[r], dr->history, dr->margin, AmaxAlgo::Max);
    }
    w->num_microbatches = c.num_microbatches;
    // Uniform(-b, b), b = sqrt(3) * std, std = init_std or 1/sqrt(fan_in);
    // Philox keyed by (seed, layer id, 0xFFFF) with the element index as
    // counter: generated on the host, uploaded once.
    Tensor3f init = Tensor3f::from_shape({l.G, l.N, l.K});
    const float sd = c.init_std > 0 ? c.init_std : 1.0f / std::sqrt(float(l.K));
    const float b = std::sqrt(3.0f) * sd;
    PhiloxStream rs{c.seed, make_stream(layer_id(l.layer), 0xFFFFu)};
    for (size_t i = 0; i < init.size(); ++i) {
      const float u = float(rs(i) >> 8) * (1.0f / 16777216.0f);  // [0, 1)
      init.data()[i] = (2.0f * u - 1.0f) * b;
    }
    if (l.layer == Layer::Fc2) init *= 0.5f;  // residual branch starts small
    w->master = be.upload(init);
    w->m = be.alloc(DType::f32, w->shape());
    w->v = be.alloc(DType::f32, w->shape());
    be.fill_zero(w->m);
    be.fill_zero(w->v);
    w->model = be.alloc(DType::f32, w->shape());
    be.round_bf16(w->master, w->model);
    w->master_matches_model = true;
    w->zero_grad(be);
    w_.push_back(std::move(w));
  }
}

Model::~Model() = default;

std::vector<Weight*> Model::weights() {
  std::vector<Weight*> r;
  for (auto& w : w_) r.push_back(w.get());
  return r;
}
Weight& Model::weight(Layer l) { return *w_[size_t(l)]; }
Weight& Model::weight(const std::string& n) {
  Layer l;
  if (!layer_from_name(n, l)) throw std::invalid_argument("no layer named '" + n + "'");
  return weight(l);
}

void Model::queue_stats(Layer l, Role r, const Tensor& x, const QTensor& q) {
  OperandStats& o = stats_[size_t(l)][size_t(r)];  // a member: alive until the step resolves
  be_.quant_stats_deferred(x, q, &o.q);
  be_.scale_exp_histogram_deferred(q, &o.scale_exp_hist);
}

void Model::linear_forward(Weight& w, const Tensor& x, std::span<const int64_t> ms, Tensor& y, int mb, int num_mb,
                           bool st, LinearCtx& ctx) {
  ctx.x = x;
  ensure(be_, y, {x.dim(0), w.N});
  const GemmOptions out{w.layer == Layer::Router || w.layer == Layer::Head ? Format::FP32 : Format::BF16, false};
  if (!is_quantized(w.recipe)) {
    be_.grouped_fprop(x, w.model, ms, y, out);
    return;
  }
  const auto& sp = operand_specs(w.recipe);
  const QuantSpec xs = resolve(be_, w, Role::X, sp.x_fprop, x);
  const QTensor xq = be_.quantize(x, xs, Axis::Cols);
  QTensor scratch;
  const QTensor& wq = weight_for_fprop(be_, w, mb, num_mb, scratch);
  be_.grouped_fprop(xq, wq, ms, y, out);
  if (st) {
    queue_stats(w.layer, Role::W, w.model, wq);
    queue_stats(w.layer, Role::X, x, xq);
  }
}

void Model::linear_backward(Weight& w, const Tensor& dy, std::span<const int64_t> ms, Tensor* dx, int mb, int num_mb,
                            Step step, bool st, LinearCtx& ctx, Tensor* record, Tensor& wgrad_tmp) {
  const bool q = is_quantized(w.recipe);
  const uint32_t lid = layer_id(w.layer);
  const uint64_t sr_ctr = step.sr_counter(mb, num_mb);
  // dgrad
  if (dx) {
    ensure(be_, *dx, {dy.dim(0), w.K});
    if (!q) {
      be_.grouped_dgrad(dy, w.model, ms, *dx, {Format::BF16, false});
    } else {
      const auto& sp = operand_specs(w.recipe);
      QuantSpec ds = resolve(be_, w, Role::Dy, sp.dy_dgrad, dy);
      ds.sr = PhiloxStream{cfg_.seed, make_stream(lid * 16 + 1, uint32_t(sr_ctr))};
      const QTensor dyq = be_.quantize(dy, ds, Axis::Cols);
      QTensor scratch;
      const QTensor& wq = weight_for_dgrad(be_, w, mb, num_mb, scratch);
      be_.grouped_dgrad(dyq, wq, ms, *dx, {Format::BF16, false});
      if (st) queue_stats(w.layer, Role::Dy, dy, dyq);
    }
  }
  // wgrad: the grad_added_to_main_grad guard, per (micro-batch, group); an
  // empty group adds nothing and sets nothing.
  for (size_t g = 0; g < ms.size(); ++g)
    if (ms[g] > 0) w.mark_added(mb, g);
  GroupedQTensor dyq, xq;
  if (q) {
    const auto& sp = operand_specs(w.recipe);
    QuantSpec ds = resolve(be_, w, Role::Dy, sp.dy_wgrad, dy);
    ds.sr = PhiloxStream{cfg_.seed, make_stream(lid * 16 + 2, uint32_t(sr_ctr))};
    const QuantSpec xs = resolve(be_, w, Role::X, sp.x_wgrad, ctx.x);
    dyq = be_.quantize_grouped_colwise(dy, ms, ds);
    xq = be_.quantize_grouped_colwise(ctx.x, ms, xs);
  }
  auto wgrad = [&](Tensor& out, const GemmOptions& o) {
    if (q) be_.grouped_wgrad(dyq, xq, ms, out, o);
    else be_.grouped_wgrad(dy, ctx.x, ms, out, o);
  };
  if (fused_wgrad_accum(w.recipe)) {
    // Gradient-accumulation fusion (Primus PR #995): the wgrad GEMM's FP32
    // accumulator starts at main_grad and is rounded once to FP32.
    wgrad(w.main_grad, {Format::FP32, true});
    if (record) wgrad(ensure(be_, *record, w.shape()), {Format::FP32, false});
  } else {
    // Unfused bridge: dW_mb in BF16, then main_grad = fl32(main_grad + dW_mb).
    Tensor& tmp = record ? ensure(be_, *record, w.shape()) : ensure(be_, wgrad_tmp, w.shape());
    wgrad(tmp, {Format::BF16, false});
    be_.accumulate_groups(w.main_grad, tmp, ms);
  }
}

Model::Routing Model::route(Workspace& ws, const Tensor& h0, size_t B) {
  const size_t E = size_t(cfg_.experts), k = size_t(cfg_.top_k);
  Routing r;
  be_.softmax_rows(ws.rl, ensure(be_, ws.p, {B, E}));
  be_.topk_rows(ws.p, int(k), ensure(be_, ws.top, DType::i32, {B, k}));
  be_.moe_route(ws.top, E, kExpertRowPad, ensure(be_, ws.counts, DType::i64, {E}),
                ensure(be_, ws.row_of, DType::i64, {B * k}));
  r.counts = be_.download<int64_t>(ws.counts);  // the host metadata of the grouped launches
  for (int64_t c : r.counts) {
    r.ms.push_back(hd::padded_rows(c, kExpertRowPad));
    r.M += r.ms.back();
  }
  be_.permute_rows(h0, ws.row_of, k, ensure(be_, ws.xp, {size_t(r.M), size_t(cfg_.d_model)}));
  return r;
}

Model::MbResult Model::train_microbatch(const Tensor& xin, const Tensor& labels, int mb, int num_mb, Step step,
                                        float grad_scale, bool st, bool rec_w, MicroRecord* rec) {
  MbResult res;
  {
    const DeferredScope guard(be_);
    train_microbatch(xin, labels, mb, num_mb, step, grad_scale, st, rec_w, rec, res);
  }
  be_.resolve_deferred();
  return res;
}

void Model::train_microbatch(const Tensor& xin, const Tensor& labels, int mb, int num_mb, Step step, float grad_scale,
                             bool st, bool rec_w, MicroRecord* rec, MbResult& res) {
  Workspace& ws = *ws_;
  const size_t B = xin.dim(0), E = size_t(cfg_.experts), k = size_t(cfg_.top_k);
  res = MbResult{};
  auto record = [&](Layer l) -> Tensor* {
    if (!rec_w || !rec ||
        std::find(cfg_.snapshot_layers.begin(), cfg_.snapshot_layers.end(), l) == cfg_.snapshot_layers.end())
      return nullptr;
    return &rec->wgrad[l];
  };
  LinearCtx c_embed, c_router, c_fc1, c_fc2, c_head;
  Weight &We = weight(Layer::Embed), &Wr = weight(Layer::Router), &W1 = weight(Layer::Fc1),
         &W2 = weight(Layer::Fc2), &Wh = weight(Layer::Head);
  const std::vector<int64_t> one = {int64_t(B)};

  // ---- forward
  be_.round_bf16(xin, ensure(be_, ws.x, xin.shape()));
  linear_forward(We, ws.x, one, ws.h0, mb, num_mb, st, c_embed);
  linear_forward(Wr, ws.h0, one, ws.rl, mb, num_mb, st, c_router);
  // permutation: stable (expert, token, slot) order, groups padded to 16 rows
  const Routing rt = route(ws, ws.h0, B);
  linear_forward(W1, ws.xp, rt.ms, ws.u, mb, num_mb, st, c_fc1);
  be_.activation(cfg_.activation, ws.u, ensure(be_, ws.a, ws.u.shape()));
  linear_forward(W2, ws.a, rt.ms, ws.yp, mb, num_mb, st, c_fc2);
  be_.unpermute_combine(ws.yp, ws.h0, ws.p, ws.top, ws.row_of, k, ensure(be_, ws.h1, ws.h0.shape()));
  linear_forward(Wh, ws.h1, one, ws.logits, mb, num_mb, st, c_head);
  be_.cross_entropy_deferred(ws.logits, labels, grad_scale, ensure(be_, ws.dlog, ws.logits.shape()), &res.loss_sum);
  be_.round_bf16(ws.dlog);
  be_.count_correct_deferred(ws.logits, labels, &res.correct);
  // auxiliary load-balancing loss (Switch Transformer eq. 4 / GShard):
  // aux = coeff * E * sum_e f_e * P_e, f_e = share of assignments, P_e = mean prob.
  be_.aux_loss_deferred(ws.p, ws.counts, k, cfg_.aux_loss_coeff, ensure(be_, ws.f, {E}), &res.aux);
  res.tokens_per_expert = rt.counts;

  // ---- backward
  linear_backward(Wh, ws.dlog, one, &ws.dh1, mb, num_mb, step, st, c_head, record(Layer::Head),
                  ws.wgrad_tmp[size_t(Layer::Head)]);
  be_.combine_backward(ws.dh1, ws.yp, ws.p, ws.top, ws.row_of, k, ensure(be_, ws.dyp, ws.yp.shape()),
                       ensure(be_, ws.dgate, {B * k}));
  linear_backward(W2, ws.dyp, rt.ms, &ws.da, mb, num_mb, step, st, c_fc2, record(Layer::Fc2),
                  ws.wgrad_tmp[size_t(Layer::Fc2)]);
  be_.activation_grad(cfg_.activation, ws.u, ws.da, ensure(be_, ws.du, ws.u.shape()));
  linear_backward(W1, ws.du, rt.ms, &ws.dxp, mb, num_mb, step, st, c_fc1, record(Layer::Fc1),
                  ws.wgrad_tmp[size_t(Layer::Fc1)]);
  // router: dp from the gates and the aux loss (f_e held constant), softmax backward
  const float aux_g = cfg_.aux_loss_coeff * float(E) / (float(B) * float(num_mb));
  be_.router_backward(ws.p, ws.top, ws.dgate, ws.f, aux_g, k, ensure(be_, ws.dl_r, ws.p.shape()));
  linear_backward(Wr, ws.dl_r, one, &ws.dh0_r, mb, num_mb, step, st, c_router, record(Layer::Router),
                  ws.wgrad_tmp[size_t(Layer::Router)]);
  be_.embed_grad_sum(ws.dh1, ws.dh0_r, ws.dxp, ws.row_of, k, ensure(be_, ws.dh0, ws.h0.shape()));
  linear_backward(We, ws.dh0, one, nullptr, mb, num_mb, step, st, c_embed, record(Layer::Embed),
                  ws.wgrad_tmp[size_t(Layer::Embed)]);
}

void Model::forward_eval(const Tensor& xin, Tensor& logits) {
  Workspace& ws = *eval_ws_;
  const size_t B = xin.dim(0);
  const std::vector<int64_t> one = {int64_t(B)};
  // Evaluation: no cache (one "micro-batch"), no statistics.
  auto fwd = [&](Weight& w, const Tensor& x, std::span<const int64_t> ms, Tensor& y) {
    LinearCtx c;
    const auto saved = w.cache;
    const auto saved_scaling = w.delayed;  // evaluation records no amax
    linear_forward(w, x, ms, y, 0, 1, false, c);
    w.cache = saved;
    w.delayed = saved_scaling;
  };
  be_.round_bf16(xin, ensure(be_, ws.x, xin.shape()));
  fwd(weight(Layer::Embed), ws.x, one, ws.h0);
  fwd(weight(Layer::Router), ws.h0, one, ws.rl);
  const Routing rt = route(ws, ws.h0, B);
  fwd(weight(Layer::Fc1), ws.xp, rt.ms, ws.u);
  be_.activation(cfg_.activation, ws.u, ensure(be_, ws.a, ws.u.shape()));
  fwd(weight(Layer::Fc2), ws.a, rt.ms, ws.yp);
  be_.unpermute_combine(ws.yp, ws.h0, ws.p, ws.top, ws.row_of, size_t(cfg_.top_k), ensure(be_, ws.h1, ws.h0.shape()));
  fwd(weight(Layer::Head), ws.h1, one, logits);
}

std::vector<int> Model::predict(const Tensor& x) {
  Tensor logits;
  forward_eval(x, logits);
  Tensor& pred = ensure(be_, eval_ws_->pred, DType::i32, {x.dim(0)});
  be_.argmax_rows(logits, pred);
  const auto p = be_.download<int32_t>(pred);
  return std::vector<int>(p.begin(), p.end());
}

// ---------------------------------------------------------------- de-osc

void mxfp4_forward_qdq(Backend& be, const Tensor& master, Tensor& q) {
  Tensor b = be.alloc(DType::f32, master.shape());
  be.round_bf16(master, b);
  ensure(be, q, master.shape());
  be.dequantize(be.quantize(b, mxfp4_weight_spec(), Axis::Cols), q);
}

std::map<std::string, int64_t> DeOsc::step(Backend& be, const std::vector<Weight*>& ws, Step n) {
  std::map<std::string, int64_t> snapped;
  if (n.n() < start_) return snapped;
  if (!built_) {
    for (Weight* w : ws)
      if (deosc_eligible(w->recipe)) eligible_.push_back(w->name);  // by recipe type only
    built_ = !eligible_.empty();
  }
  for (Weight* w : ws) {
    if (std::find(eligible_.begin(), eligible_.end(), w->name) == eligible_.end()) continue;
    State& s = state_[w->name];
    Tensor Q;
    w->qdq_master(be, mxfp4_weight_spec(), Q);  // = mxfp4_forward_qdq(master), shared with fprop's W
    if (!s.seeded) {  // first observation only seeds
      s.prev = be.alloc(DType::f32, w->shape());
      be.copy(w->master, s.prev);
      s.prev_q = Q;
      s.dist_w = be.alloc(DType::f32, w->shape());
      s.dist_q = be.alloc(DType::f32, w->shape());
      be.fill_zero(s.dist_w);
      be.fill_zero(s.dist_q);
      s.seeded = true;
      continue;
    }
    const bool window_end = ++s.step >= period_;
    // snap: Q into the FP32 master (reaches the model at the next step's copy)
    const int64_t cnt = be.deosc_update(w->master, Q, s.prev, s.prev_q, s.dist_w, s.dist_q, window_end, ratio_);
    if (window_end) {
      s.step = 0;
      snapped[w->name] = cnt;
    }
    if (cnt > 0) w->master_matches_model = false;
  }
  return snapped;
}

const DeOsc::State* DeOsc::state_of(const std::string& name) const {
  auto it = state_.find(name);
  return it == state_.end() ? nullptr : &it->second;
}

void DeOsc::visit(StateIO& io, Backend& be, const std::vector<Weight*>& ws) {
  namespace ck = trace::schema::ckpt;
  io.flag(ck::deosc("built"), built_);
  std::string el;
  for (const auto& e : eligible_) el += e + "\n";
  io.text(ck::deosc("eligible"), el);
  if (io.loading()) {
    eligible_.clear();
    std::istringstream es(el);
    for (std::string nm; std::getline(es, nm);) eligible_.push_back(nm);
  }
  for (Weight* w : ws) {
    const auto it = state_.find(w->name);
    if (!io.present(ck::deosc_group(w->name), it != state_.end())) continue;
    State& s = state_[w->name];
    for (Tensor* t : {&s.prev, &s.prev_q, &s.dist_w, &s.dist_q})
      if (io.loading()) *t = be.alloc(DType::f32, w->shape());
    io.tensor(ck::deosc_state(w->name, "prev"), s.prev);
    io.tensor(ck::deosc_state(w->name, "prev_q"), s.prev_q);
    io.tensor(ck::deosc_state(w->name, "dist_w"), s.dist_w);
    io.tensor(ck::deosc_state(w->name, "dist_q"), s.dist_q);
    io.i64(ck::deosc_state(w->name, "step"), s.step);
    check_range(io, ck::deosc_state(w->name, "step"), s.step, 0, period_ - 1);  // the window position
    io.flag(ck::deosc_state(w->name, "seeded"), s.seeded);
  }
}

// ---------------------------------------------------------------- metrics

OscMetrics::State OscMetrics::make_state(Backend& be, const Shape& shape) {
  State s;
  for (Tensor* t : {&s.t.prev_w, &s.t.prev_q, &s.t.dist_w, &s.t.dist_q, &s.t.ema}) *t = be.alloc(DType::f32, shape);
  s.t.last_dir = be.alloc(DType::u8, shape);
  s.t.flips = be.alloc(DType::u32, shape);
  for (Tensor* t : {&s.t.prev_w, &s.t.prev_q, &s.t.dist_w, &s.t.dist_q, &s.t.ema, &s.t.last_dir, &s.t.flips})
    be.fill_zero(*t);
  return s;
}

Backend::OscStep OscMetrics::update(Backend& be, Weight& w) {
  Backend::OscStep r;
  if (!is_quantized(w.recipe)) return r;
  // Quantized value on the forward grid of this weight's recipe, by the spec
  // the next fprop will use (fp8_current: amax of bf16(master); fp8_delayed:
  // the scale update_scaling() just produced), without recording an amax:
  // while no de-osc snap moved the master, the next fprop's own W.
  Tensor Q;
  w.qdq_master(be, weight_fprop_spec(be, w, w.bf16_master(be)), Q);
  auto it = state_.find(w.name);
  if (it == state_.end()) it = state_.emplace(w.name, make_state(be, w.shape())).first;
  State& s = it->second;
  if (!s.seeded) {
    be.copy(w.master, s.t.prev_w);
    be.copy(Q, s.t.prev_q);
    s.seeded = true;
  }
  const bool window_end = s.window + 1 >= period_;
  r = be.osc_update(w.master, Q, s.t, m_, window_end);
  s.window = window_end ? 0 : s.window + 1;
  return r;
}

void OscMetrics::visit(StateIO& io, Backend& be, const std::vector<Weight*>& ws) {
  namespace ck = trace::schema::ckpt;
  for (Weight* w : ws) {
    const auto it = state_.find(w->name);
    if (!io.present(ck::osc_group(w->name), it != state_.end())) continue;
    if (io.loading()) state_[w->name] = make_state(be, w->shape());
    State& s = state_[w->name];
    io.tensor(ck::osc(w->name, "prev_w"), s.t.prev_w);
    io.tensor(ck::osc(w->name, "prev_q"), s.t.prev_q);
    io.tensor(ck::osc(w->name, "dist_w"), s.t.dist_w);
    io.tensor(ck::osc(w->name, "dist_q"), s.t.dist_q);
    io.tensor(ck::osc(w->name, "ema"), s.t.ema);
    io.tensor(ck::osc(w->name, "last_dir"), s.t.last_dir);  // int8 directions as their bytes
    io.tensor(ck::osc(w->name, "flips"), s.t.flips);
    io.i64(ck::osc(w->name, "window"), s.window);
    check_range(io, ck::osc(w->name, "window"), s.window, 0, period_ - 1);
    io.flag(ck::osc(w->name, "seeded"), s.seeded);
  }
}

float lr_at(const Config& c, int64_t t, int64_t total) {
  if (c.warmup_steps > 0 && t <= c.warmup_steps) return c.lr * float(t) / float(c.warmup_steps);
  const int64_t span = std::max<int64_t>(1, total - c.warmup_steps);
  const double prog = std::min(1.0, double(t - c.warmup_steps) / double(span));
  return float(c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(3.14159265358979323846 * prog)));
}

}  // namespace mxsim::sim
