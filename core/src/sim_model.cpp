// MoE classifier (sim/model.hpp Model): explicit forward and backward against mxsim::Backend.
// The weights it trains are sim_weight.cpp's.
#include "mxsim/sim/model.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>
#include <sstream>
#include <string>

#include "mxsim/hd/elementwise.hpp"
#include "mxsim/philox.hpp"
#include "mxsim/sim/dist_optimizer.hpp"
#include "mxsim/sim/state_io.hpp"
#include "mxsim/trace/schema.hpp"
#include "sim_ensure.hpp"
#include "sim_weight.hpp"

namespace mxsim::sim {

using detail::resolve;
using detail::resolved_spec;

// ---------------------------------------------------------------- Model

struct Model::LinearCtx {
  Tensor x;  ///< the fprop input (BF16 values); shares the workspace buffer
};

/// The expert-parallel moves of one micro-batch (Model::set_comm), per local rank i of the comm
/// (rank ranks[i]): as a source, the global permuted rows it sends (its tokens' rows, grouped by
/// destination, each destination's in (expert, token, slot) order) and how many go to each rank;
/// as a destination, its local layout: its experts' rows in expert order, within an expert by
/// source rank (= the single-rank order, since sources hold ascending token ranges), padded to
/// 16 rows per expert with zero rows as route() pads them.
struct Model::Dispatch {
  std::vector<std::vector<int64_t>> send_rows, send_splits;  ///< [i][row] global rows; [i][dest]
  std::vector<std::vector<int64_t>> local_from_recv;         ///< [i][local row]: received row (-1 = padding)
  std::vector<std::vector<int64_t>> ms;                      ///< [i][expert]: m_splits, 0 outside rank's own
};

namespace {

/// dst [idx.size(), C] with row j = src row idx[j] (-1: a +0 row); runs of consecutive rows move
/// as one Backend::copy_range.
Tensor gather_rows(Backend& be, const Tensor& src, std::span<const int64_t> idx, size_t C) {
  Tensor dst = be.alloc(DType::f32, {idx.size(), C});
  be.fill_zero(dst);
  for (size_t j = 0; j < idx.size();) {
    if (idx[j] < 0) {
      ++j;
      continue;
    }
    size_t n = 1;
    while (j + n < idx.size() && idx[j + n] == idx[j] + int64_t(n)) ++n;
    be.copy_range(src, size_t(idx[j]) * C, dst, j * C, n * C);
    j += n;
  }
  return dst;
}

}  // namespace

/// Activations and gradients of one micro-batch, kept across micro-batches
/// (reallocated only when a shape changes, e.g. the permuted row count M).
struct Model::Workspace {
  Tensor x, h0, rl, p, top, counts, row_of, xp, u, a, yp, h1, logits, dlog;
  Tensor dh1, dyp, dgate, da, du, dxp, f, dl_r, dh0_r, dh0, pred;
  std::array<Tensor, 5> wgrad_tmp;  ///< per layer [G, N, K]: the unfused recipes' BF16 dW_mb
  // expert parallelism: the micro-batch's moves and each local rank's expert tensors
  Dispatch D;
  std::vector<Tensor> ep_x, ep_u, ep_a, ep_y, ep_dy, ep_da, ep_du, ep_dx, ep_rec;
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
    w->recipe = c.recipe.linear(l.layer);
    // fp8_delayed is all three GEMMs or none (make_linear_recipe), so fprop's recipe decides
    for (Role r : kRoles) w->delayed[size_t(r)] = delayed_scaling_of(w->recipe.of(GemmForm::Fprop), r);
    // the statistics of an operand no GEMM quantizes stay NaN (the trace's "not recorded"), as do
    // dy's of a layer without dgrad
    for (Role r : kRoles)
      if (!w->recipe.records(r) || (r == Role::Dy && !has_dgrad(l.layer)))
        stats_[size_t(l.layer)][size_t(r)].q = not_recorded();
    for (auto& v : shadow_[size_t(l.layer)]) v.assign(size_t(c.num_microbatches), output_error_of(0, 0, 0, 0, 0, -1));
    w->num_microbatches = c.num_microbatches;
    w->current_checks = &current_checks_;
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
  if (r != Role::W && capturing(l)) capture_rowwise(l, r == Role::X ? Operand::X : Operand::Dy, x, q);
}

bool Model::shadows(Layer l, GemmForm g) const {
  return shadow_on_ && !expert_parallel() && w_[size_t(l)]->recipe.quantized(g) &&
         (g != GemmForm::Dgrad || has_dgrad(l)) &&
         std::find(cfg_.shadow_layers.begin(), cfg_.shadow_layers.end(), l) != cfg_.shadow_layers.end();
}

void Model::queue_shadow(const Weight& w, GemmForm g, int mb, const Tensor& ref, const Tensor& test) {
  be_.output_error_deferred(ref, test, &shadow_[size_t(w.layer)][size_t(g)].at(size_t(mb)));
}

bool Model::capturing(Layer l) const {
  return std::find(capture_layers_.begin(), capture_layers_.end(), l) != capture_layers_.end();
}

void Model::capture_rowwise(Layer l, Operand o, const Tensor& x, const QTensor& q) {
  const bool experts = l == Layer::Fc1 || l == Layer::Fc2;
  const std::vector<float> xh = be_.download<float>(x);
  const QuantizedTensor qh = be_.download(q);
  OperandCapture c;
  c.cols = x.dim(1);
  c.rows = experts ? capture_ms_ : std::vector<int64_t>{int64_t(x.dim(0))};
  size_t r0 = 0;
  for (int64_t n : c.rows) {
    c.x.emplace_back(xh.begin() + std::ptrdiff_t(r0 * c.cols), xh.begin() + std::ptrdiff_t((r0 + size_t(n)) * c.cols));
    c.q.push_back(slice_rows(qh, r0, size_t(n), std::string(name_of(l)) + "." + name_of(o)));
    r0 += size_t(n);
  }
  captures_[{l, o}] = std::move(c);
}

void Model::capture_grouped(Layer l, Operand o, const Tensor& x, std::span<const int64_t> ms, const GroupedQTensor& q) {
  const std::vector<float> xh = be_.download<float>(x);
  std::vector<QuantizedTensor> qs = be_.download(q);
  OperandCapture& c = captures_[{l, o}];
  if (c.rows.empty()) {
    c.cols = x.dim(1);
    c.rows.assign(ms.size(), 0);
    c.x.resize(ms.size());
    c.q.resize(ms.size());
  }
  size_t r0 = 0;
  for (size_t g = 0; g < ms.size(); ++g) {
    const size_t n = size_t(ms[g]);
    if (n > 0) {
      c.rows[g] = int64_t(n);
      c.x[g].assign(xh.begin() + std::ptrdiff_t(r0 * c.cols), xh.begin() + std::ptrdiff_t((r0 + n) * c.cols));
      c.q[g] = std::move(qs.at(g));
    }
    r0 += n;
  }
}

void Model::linear_forward(Weight& w, const Tensor& x, std::span<const int64_t> ms, Tensor& y, int mb, int num_mb,
                           bool st, LinearCtx& ctx) {
  ctx.x = x;
  ensure(be_, y, {x.dim(0), w.N});
  const GemmOptions out{w.layer == Layer::Router || w.layer == Layer::Head ? Format::FP32 : Format::BF16, false};
  if (!w.recipe.quantized(GemmForm::Fprop)) {
    be_.grouped_fprop(x, w.bf16_model(be_), ms, y, out);
    return;
  }
  const QuantSpec xs = resolve(be_, w, Role::X, w.recipe.specs(GemmForm::Fprop).x_fprop, x);
  const QTensor xq = be_.quantize(x, xs, Axis::Cols);
  QTensor scratch;
  const QTensor& wq = weight_for_fprop(be_, w, mb, num_mb, scratch);
  be_.grouped_fprop(xq, wq, ms, y, out);
  if (shadows(w.layer, GemmForm::Fprop)) {
    Tensor ref = be_.alloc(DType::f32, y.shape());
    be_.grouped_fprop(x, w.bf16_model(be_), ms, ref, out);
    queue_shadow(w, GemmForm::Fprop, mb, ref, y);
  }
  if (st) {
    queue_stats(w.layer, Role::W, w.model, wq);
    queue_stats(w.layer, Role::X, x, xq);
  }
}

void Model::linear_backward(Weight& w, const Tensor& dy, std::span<const int64_t> ms, Tensor* dx, int mb, int num_mb,
                            Step step, bool st, LinearCtx& ctx, Tensor* record, Tensor& wgrad_tmp) {
  const bool qd = w.recipe.quantized(GemmForm::Dgrad), q = w.recipe.quantized(GemmForm::Wgrad);
  const uint32_t lid = layer_id(w.layer);
  const uint64_t sr_ctr = step.sr_counter(mb, num_mb);
  // dgrad
  if (dx) {
    ensure(be_, *dx, {dy.dim(0), w.K});
    if (!qd) {
      be_.grouped_dgrad(dy, w.bf16_model(be_), ms, *dx, {Format::BF16, false});
    } else {
      QuantSpec ds = resolve(be_, w, Role::Dy, w.recipe.specs(GemmForm::Dgrad).dy_dgrad, dy);
      ds.sr = PhiloxStream{cfg_.seed, make_stream(lid * 16 + 1, uint32_t(sr_ctr))};
      const QTensor dyq = be_.quantize(dy, ds, Axis::Cols);
      QTensor scratch;
      const QTensor& wq = weight_for_dgrad(be_, w, mb, num_mb, scratch);
      be_.grouped_dgrad(dyq, wq, ms, *dx, {Format::BF16, false});
      if (shadows(w.layer, GemmForm::Dgrad)) {
        Tensor ref = be_.alloc(DType::f32, dx->shape());
        be_.grouped_dgrad(dy, w.bf16_model(be_), ms, ref, {Format::BF16, false});
        queue_shadow(w, GemmForm::Dgrad, mb, ref, *dx);
      }
      if (st) {
        queue_stats(w.layer, Role::Dy, dy, dyq);
        if (w.recipe.weight_gemm() == GemmForm::Dgrad) queue_stats(w.layer, Role::W, w.model, wq);
      }
    }
  }
  // wgrad: the grad_added_to_main_grad guard, per (micro-batch, group); an
  // empty group adds nothing and sets nothing.
  for (size_t g = 0; g < ms.size(); ++g)
    if (ms[g] > 0) w.mark_added(mb, g);
  GroupedQTensor dyq, xq;
  if (q) {
    const OperandSpecs& sp = w.recipe.specs(GemmForm::Wgrad);
    QuantSpec ds = resolve(be_, w, Role::Dy, sp.dy_wgrad, dy);
    ds.sr = PhiloxStream{cfg_.seed, make_stream(lid * 16 + 2, uint32_t(sr_ctr))};
    const QuantSpec xs = resolve(be_, w, Role::X, sp.x_wgrad, ctx.x);
    dyq = be_.quantize_grouped_colwise(dy, ms, ds);
    xq = be_.quantize_grouped_colwise(ctx.x, ms, xs);
    if (capturing(w.layer)) {
      capture_grouped(w.layer, Operand::DyWgrad, dy, ms, dyq);
      capture_grouped(w.layer, Operand::XWgrad, ctx.x, ms, xq);
    }
  }
  auto wgrad = [&](Tensor& out, const GemmOptions& o) {
    if (q) be_.grouped_wgrad(dyq, xq, ms, out, o);
    else be_.grouped_wgrad(dy, ctx.x, ms, out, o);
  };
  // The wgrad shadow: dW_mb on the BF16 operands beside the quantized GEMM's dW_mb in the form
  // the run adds it (FP32 where fused, else BF16).
  const bool shadow = shadows(w.layer, GemmForm::Wgrad);
  auto wgrad_shadow = [&](const Tensor& test, const GemmOptions& o) {
    Tensor ref = be_.alloc(DType::f32, w.shape());
    be_.grouped_wgrad(dy, ctx.x, ms, ref, o);
    queue_shadow(w, GemmForm::Wgrad, mb, ref, test);
  };
  if (w.recipe.fused_wgrad_accum()) {
    // Gradient-accumulation fusion (Primus PR #995): the wgrad GEMM's FP32
    // accumulator starts at main_grad and is rounded once to FP32.
    wgrad(w.main_grad, {Format::FP32, true});
    if (record) wgrad(ensure(be_, *record, w.shape()), {Format::FP32, false});
    if (shadow) {
      Tensor own;  // the quantized dW_mb alone (record holds it on a snapshot step)
      if (!record) wgrad(ensure(be_, own, w.shape()), {Format::FP32, false});
      wgrad_shadow(record ? *record : own, {Format::FP32, false});
    }
  } else {
    // Unfused bridge: dW_mb in BF16, then main_grad = fl32(main_grad + dW_mb).
    Tensor& tmp = record ? ensure(be_, *record, w.shape()) : ensure(be_, wgrad_tmp, w.shape());
    wgrad(tmp, {Format::BF16, false});
    be_.accumulate_groups(w.main_grad, tmp, ms);
    if (shadow) wgrad_shadow(tmp, {Format::BF16, false});
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

Model::Dispatch Model::make_dispatch(const Workspace& ws, const Routing& rt, size_t B) const {
  const std::vector<int>& ranks = comm_->local_ranks();
  const int P = comm_->size();
  const size_t E = size_t(cfg_.experts), EL = E / size_t(P), k = size_t(cfg_.top_k), L = ranks.size();
  const std::vector<int64_t> row_of = be_.download<int64_t>(ws.row_of);  // routing metadata, as counts
  std::vector<int64_t> token_of(size_t(rt.M), -1), start(E + 1, 0);
  for (size_t j = 0; j < row_of.size(); ++j) token_of[size_t(row_of[j])] = int64_t(j / k);
  for (size_t e = 0; e < E; ++e) start[e + 1] = start[e] + rt.ms[e];
  Dispatch D;
  D.send_rows.resize(L);
  D.send_splits.assign(L, std::vector<int64_t>(size_t(P), 0));
  std::vector<std::vector<int64_t>> per_expert(L, std::vector<int64_t>(E, 0));  // [i][dest * EL + local expert]
  for (size_t i = 0; i < L; ++i) {
    const Range tok = split_even(B, P, ranks[i]);  // this source rank's tokens
    for (size_t e = 0; e < E; ++e)
      for (int64_t p = start[e]; p < start[e] + rt.counts[e]; ++p)
        if (token_of[size_t(p)] >= int64_t(tok.begin) && token_of[size_t(p)] < int64_t(tok.end)) {
          D.send_rows[i].push_back(p);
          ++D.send_splits[i][e / EL];
          ++per_expert[i][e];
        }
  }
  // the m_splits exchange: tokens per local expert from every source
  const std::vector<std::vector<int64_t>> recv = comm_->all_to_all_counts(per_expert);
  D.local_from_recv.resize(L);
  D.ms.assign(L, std::vector<int64_t>(E, 0));
  for (size_t i = 0; i < L; ++i) {
    std::vector<int64_t> at(size_t(P) * EL + 1, 0);  // first received row of (source, local expert)
    for (size_t j = 0; j < size_t(P) * EL; ++j) at[j + 1] = at[j] + recv[i][j];
    for (size_t el = 0; el < EL; ++el) {
      const size_t e = size_t(ranks[i]) * EL + el;
      int64_t n = 0;
      for (int s = 0; s < P; ++s)
        for (int64_t r = 0; r < recv[i][size_t(s) * EL + el]; ++r, ++n)
          D.local_from_recv[i].push_back(at[size_t(s) * EL + el] + r);
      const int64_t padded = hd::padded_rows(n, kExpertRowPad);
      for (int64_t r = n; r < padded; ++r) D.local_from_recv[i].push_back(-1);
      D.ms[i][e] = padded;
      if (padded != rt.ms[e])  // the exchange must reproduce the router's counts
        throw std::logic_error("expert dispatch: expert " + std::to_string(e) + " received " + std::to_string(n) +
                               " rows, the router assigned " + std::to_string(rt.counts[e]));
    }
  }
  return D;
}

std::vector<Tensor> Model::ep_scatter(const Dispatch& D, const Tensor& global, size_t C) {
  std::vector<Tensor> send;
  for (const auto& rows : D.send_rows) send.push_back(gather_rows(be_, global, rows, C));
  const std::vector<Tensor> recv = comm_->all_to_all_v(send, D.send_splits);
  std::vector<Tensor> local;
  for (size_t i = 0; i < recv.size(); ++i) local.push_back(gather_rows(be_, recv[i], D.local_from_recv[i], C));
  return local;
}

Tensor Model::all_gather_rows(const Routing& rt, const std::vector<Tensor>& local, size_t C) {
  const std::vector<int>& ranks = comm_->local_ranks();
  const size_t P = size_t(comm_->size()), EL = size_t(cfg_.experts) / P;
  std::vector<size_t> rows(P, 0);  // rank r's rows: its experts' padded counts (every rank knows the routing)
  for (size_t e = 0; e < size_t(cfg_.experts); ++e) rows[e / EL] += size_t(rt.ms[e]);
  const size_t R = *std::max_element(rows.begin(), rows.end());
  std::vector<Tensor> in(local.size()), out(local.size());
  for (size_t i = 0; i < local.size(); ++i) {
    const size_t n = rows[size_t(ranks[i])];
    if (local[i].dim(0) != n || local[i].dim(1) != C)
      throw std::logic_error("expert combine: rank " + std::to_string(ranks[i]) + " holds " + local[i].shape().str() +
                             ", its experts have " + std::to_string(n) + " rows");
    in[i] = be_.alloc(DType::f32, {R * C});
    if (n < R) be_.fill_zero(in[i]);
    be_.copy_range(local[i], 0, in[i], 0, n * C);
    out[i] = be_.alloc(DType::f32, {P * R * C});
  }
  comm_->all_gather(in, out);
  Tensor g = be_.alloc(DType::f32, {size_t(rt.M), C});
  size_t at = 0;
  for (size_t r = 0; r < P; ++r) {
    be_.copy_range(out[0], r * R * C, g, at * C, rows[r] * C);
    at += rows[r];
  }
  return g;
}

void Model::share_expert_groups(const Weight& w, Tensor& t) {
  const std::vector<int>& ranks = comm_->local_ranks();
  const size_t n = w.G * w.N * w.K, chunk = n / size_t(comm_->size());  // rank r: groups [r G/P, (r + 1) G/P)
  std::vector<Tensor> in(ranks.size()), out(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    in[i] = be_.alloc(DType::f32, {chunk});
    be_.copy_range(t, size_t(ranks[i]) * chunk, in[i], 0, chunk);
    out[i] = be_.alloc(DType::f32, {n});
  }
  comm_->all_gather(in, out);
  be_.copy_range(out[0], 0, t, 0, n);
}

void Model::experts_forward(Workspace& ws, const Routing& rt, size_t B, bool st, const LinearFwd& fwd) {
  Weight &W1 = weight(Layer::Fc1), &W2 = weight(Layer::Fc2);
  if (!expert_parallel()) {
    LinearCtx c1, c2;
    fwd(W1, ws.xp, rt.ms, ws.u, c1);
    be_.activation(cfg_.activation, ws.u, ensure(be_, ws.a, ws.u.shape()));
    fwd(W2, ws.a, rt.ms, ws.yp, c2);
    return;
  }
  const size_t d = size_t(cfg_.d_model), f = size_t(cfg_.d_ff);
  ws.D = make_dispatch(ws, rt, B);
  ws.ep_x = ep_scatter(ws.D, ws.xp, d);
  const size_t L = ws.ep_x.size();
  ws.ep_u.assign(L, {});
  ws.ep_a.assign(L, {});
  ws.ep_y.assign(L, {});
  for (size_t i = 0; i < L; ++i) {  // each rank's grouped launches over its own experts
    LinearCtx c1, c2;
    fwd(W1, ws.ep_x[i], ws.D.ms[i], ws.ep_u[i], c1);
    ws.ep_a[i] = be_.alloc(DType::f32, ws.ep_u[i].shape());
    be_.activation(cfg_.activation, ws.ep_u[i], ws.ep_a[i]);
    fwd(W2, ws.ep_a[i], ws.D.ms[i], ws.ep_y[i], c2);
  }
  ws.yp = all_gather_rows(rt, ws.ep_y, d);
  if (st) {  // statistics of the whole micro-batch's operands, as one rank computes them
    ws.a = all_gather_rows(rt, ws.ep_a, f);
    for (auto [w, x] : {std::pair<Weight*, const Tensor*>{&W1, &ws.xp}, {&W2, &ws.a}}) {
      if (w->recipe.weight_quantized())
        queue_stats(w->layer, Role::W, w->model, w->quantized(be_, weight_fprop_spec(be_, *w, w->model)));
      if (!w->recipe.quantized(GemmForm::Fprop)) continue;
      const QuantSpec xs = resolved_spec(be_, *w, Role::X, w->recipe.specs(GemmForm::Fprop).x_fprop, *x);
      queue_stats(w->layer, Role::X, *x, be_.quantize(*x, xs, Axis::Cols));
    }
  }
}

void Model::experts_backward(Workspace& ws, const Routing& rt, int mb, int num_mb, Step step, bool st, Tensor* rec1,
                             Tensor* rec2) {
  Weight &W1 = weight(Layer::Fc1), &W2 = weight(Layer::Fc2);
  if (!expert_parallel()) {
    LinearCtx c1{ws.xp}, c2{ws.a};
    linear_backward(W2, ws.dyp, rt.ms, &ws.da, mb, num_mb, step, st, c2, rec2, ws.wgrad_tmp[size_t(Layer::Fc2)]);
    be_.activation_grad(cfg_.activation, ws.u, ws.da, ensure(be_, ws.du, ws.u.shape()));
    linear_backward(W1, ws.du, rt.ms, &ws.dxp, mb, num_mb, step, st, c1, rec1, ws.wgrad_tmp[size_t(Layer::Fc1)]);
    return;
  }
  const size_t d = size_t(cfg_.d_model), f = size_t(cfg_.d_ff), L = ws.ep_x.size();
  ws.ep_dy = ep_scatter(ws.D, ws.dyp, d);
  ws.ep_da.assign(L, {});
  ws.ep_du.assign(L, {});
  ws.ep_dx.assign(L, {});
  ws.ep_rec.assign(2 * L, {});
  // A rank's record holds its experts' dW_mb; the others' groups are copied from their ranks.
  auto keep = [&](Weight& w, const Tensor& part, Tensor* rec, size_t i) {
    if (!rec) return;
    ensure(be_, *rec, w.shape());
    const size_t per = w.N * w.K;
    for (size_t g = 0; g < w.G; ++g)
      if (grad_owner(w, g, comm_->size()) == comm_->local_ranks()[i])
        be_.copy_range(part, g * per, *rec, g * per, per);
  };
  for (size_t i = 0; i < L; ++i) {
    LinearCtx c1{ws.ep_x[i]}, c2{ws.ep_a[i]};
    linear_backward(W2, ws.ep_dy[i], ws.D.ms[i], &ws.ep_da[i], mb, num_mb, step, false, c2,
                    rec2 ? &ws.ep_rec[2 * i + 1] : nullptr, ws.wgrad_tmp[size_t(Layer::Fc2)]);
    keep(W2, ws.ep_rec[2 * i + 1], rec2, i);
    ws.ep_du[i] = be_.alloc(DType::f32, ws.ep_u[i].shape());
    be_.activation_grad(cfg_.activation, ws.ep_u[i], ws.ep_da[i], ws.ep_du[i]);
    linear_backward(W1, ws.ep_du[i], ws.D.ms[i], &ws.ep_dx[i], mb, num_mb, step, false, c1,
                    rec1 ? &ws.ep_rec[2 * i] : nullptr, ws.wgrad_tmp[size_t(Layer::Fc1)]);
    keep(W1, ws.ep_rec[2 * i], rec1, i);
  }
  ws.dxp = all_gather_rows(rt, ws.ep_dx, d);
  // every rank's groups everywhere: main_grad (the trace's norms and snapshots read all groups;
  // the optimizer reads a rank's own) and this micro-batch's dW records
  for (auto [w, rec] : {std::pair<Weight*, Tensor*>{&W1, rec1}, {&W2, rec2}}) {
    share_expert_groups(*w, w->main_grad);
    if (rec) share_expert_groups(*w, *rec);
  }
  if (st) {  // dgrad operand statistics of the whole micro-batch, as one rank computes them
    const Tensor du = all_gather_rows(rt, ws.ep_du, f);
    for (auto [w, dy] : {std::pair<Weight*, const Tensor*>{&W2, &ws.dyp}, {&W1, &du}}) {
      if (!w->recipe.quantized(GemmForm::Dgrad)) continue;
      QuantSpec ds = resolved_spec(be_, *w, Role::Dy, w->recipe.specs(GemmForm::Dgrad).dy_dgrad, *dy);
      ds.sr = PhiloxStream{cfg_.seed, make_stream(layer_id(w->layer) * 16 + 1, uint32_t(step.sr_counter(mb, num_mb)))};
      queue_stats(w->layer, Role::Dy, *dy, be_.quantize(*dy, ds, Axis::Cols));
    }
  }
}

Model::MbResult Model::train_microbatch(const Tensor& xin, const Tensor& labels, int mb, int num_mb, Step step,
                                        float grad_scale, bool st, bool rec_w, MicroRecord* rec) {
  MbResult res;
  current_checks_.pending.clear();  // what an earlier call left by an exception (its values never resolved)
  {
    const DeferredScope guard(be_);
    train_microbatch(xin, labels, mb, num_mb, step, grad_scale, st, rec_w, rec, res);
  }
  be_.resolve_deferred();
  if (std::optional<std::string> e = take_current_amax_error()) throw std::runtime_error(*e);
  return res;
}

void Model::train_microbatch(const Tensor& xin, const Tensor& labels, int mb, int num_mb, Step step, float grad_scale,
                             bool st, bool rec_w, MicroRecord* rec, MbResult& res) {
  Workspace& ws = *ws_;
  const size_t B = xin.dim(0), E = size_t(cfg_.experts), k = size_t(cfg_.top_k);
  res = MbResult{};
  current_checks_.microbatch = mb;  // names the micro-batch of the amaxes queued below
  if (mb == 0) current_checks_.pending.clear();  // a step begins: an earlier one's left by an exception go
  auto record = [&](Layer l) -> Tensor* {
    if (!rec_w || !rec ||
        std::find(cfg_.snapshot_layers.begin(), cfg_.snapshot_layers.end(), l) == cfg_.snapshot_layers.end())
      return nullptr;
    return &rec->wgrad[l];
  };
  LinearCtx c_embed, c_router, c_head;
  Weight &We = weight(Layer::Embed), &Wr = weight(Layer::Router), &Wh = weight(Layer::Head);
  const std::vector<int64_t> one = {int64_t(B)};

  // ---- forward
  be_.round_bf16(xin, ensure(be_, ws.x, xin.shape()));
  linear_forward(We, ws.x, one, ws.h0, mb, num_mb, st, c_embed);
  linear_forward(Wr, ws.h0, one, ws.rl, mb, num_mb, st, c_router);
  // permutation: stable (expert, token, slot) order, groups padded to 16 rows
  const Routing rt = route(ws, ws.h0, B);
  capture_ms_ = rt.ms;
  experts_forward(ws, rt, B, st, [&](Weight& w, const Tensor& x, std::span<const int64_t> ms, Tensor& y, LinearCtx& c) {
    linear_forward(w, x, ms, y, mb, num_mb, st && !expert_parallel(), c);
  });
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
  experts_backward(ws, rt, mb, num_mb, step, st, record(Layer::Fc1), record(Layer::Fc2));
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
  struct Restore {  // evaluation runs no shadow; the training's is back after it, thrown or not
    bool& flag;
    bool was;
    ~Restore() { flag = was; }
  } restore{shadow_on_, shadow_on_};
  shadow_on_ = false;
  auto fwd = [&](Weight& w, const Tensor& x, std::span<const int64_t> ms, Tensor& y) {
    LinearCtx c;
    const auto saved = w.cache;
    struct NoAmax {  // evaluation queues no amax for fp8_delayed's history, thrown or not
      bool& flag;
      bool was;
      ~NoAmax() { flag = was; }
    } no_amax{w.records_amax, w.records_amax};
    w.records_amax = false;
    linear_forward(w, x, ms, y, 0, 1, false, c);
    w.cache = saved;
  };
  be_.round_bf16(xin, ensure(be_, ws.x, xin.shape()));
  fwd(weight(Layer::Embed), ws.x, one, ws.h0);
  fwd(weight(Layer::Router), ws.h0, one, ws.rl);
  const Routing rt = route(ws, ws.h0, B);
  experts_forward(ws, rt, B, false, [&](Weight& w, const Tensor& x, std::span<const int64_t> ms, Tensor& y, LinearCtx&) {
    fwd(w, x, ms, y);
  });
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

float lr_at(const Config& c, int64_t t, int64_t total) {
  if (c.warmup_steps > 0 && t <= c.warmup_steps) return c.lr * float(t) / float(c.warmup_steps);
  const int64_t span = std::max<int64_t>(1, total - c.warmup_steps);
  const double prog = std::min(1.0, double(t - c.warmup_steps) / double(span));
  return float(c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(3.14159265358979323846 * prog)));
}

}  // namespace mxsim::sim
