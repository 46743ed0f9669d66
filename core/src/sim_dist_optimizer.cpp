// The distributed optimizer over virtual ranks and the shard-edge de-oscillation QDQ
// (sim/dist_optimizer.hpp).
#include "mxsim/sim/dist_optimizer.hpp"

#include <algorithm>
#include <stdexcept>

#include "mxsim/sim/recipe.hpp"

namespace mxsim::sim {

FlatLayout flat_layout_of(const std::vector<Weight*>& ws, int ranks) {
  std::vector<size_t> n;
  for (const Weight* w : ws) n.push_back(w->G * w->N * w->K);
  return FlatLayout(std::move(n), ranks);
}

int grad_owner(const Weight& w, size_t g, int ranks) {
  if (w.G == 1) return 0;
  if (w.G % size_t(ranks) != 0)
    throw std::invalid_argument(w.name + ": " + std::to_string(w.G) + " experts do not divide over " +
                                std::to_string(ranks) + " ranks");
  return int(g / (w.G / size_t(ranks)));
}

DistributedOptimizer::DistributedOptimizer(Backend& be, Comm& comm, const std::vector<Weight*>& ws)
    : be_(be), comm_(comm), ws_(ws), layout_(flat_layout_of(ws, comm.size())) {}

void DistributedOptimizer::step(const Backend::AdamW& h) {
  const std::vector<int>& ranks = comm_.local_ranks();
  const int P = comm_.size();
  const size_t L = ranks.size(), shard = layout_.shard();
  // (1) + (2): each rank's computed gradient elements, reduced in rank order into its shard
  std::vector<Tensor> grad(L);
  {
    std::vector<Tensor> contrib(L);
    for (size_t i = 0; i < L; ++i) {
      contrib[i] = be_.alloc(DType::f32, {layout_.padded()});
      be_.fill_zero(contrib[i]);
      for (size_t p = 0; p < ws_.size(); ++p) {
        const Weight& w = *ws_[p];
        const size_t per = w.N * w.K;
        for (size_t g = 0; g < w.G; ++g)
          if (grad_owner(w, g, P) == ranks[i]) be_.copy_range(w.main_grad, g * per, contrib[i], layout_.offset(p) + g * per, per);
      }
      grad[i] = be_.alloc(DType::f32, {shard});
    }
    comm_.reduce_scatter(contrib, grad);
  }
  // (3): AdamW on each rank's shard of master, m, v (the padding stays 0: a zero gradient on a
  // zero master with zero moments updates nothing)
  std::vector<Tensor> master(L), m(L), v(L), model(L);
  for (size_t i = 0; i < L; ++i) {
    const Range s = layout_.shard_range(ranks[i]);
    for (Tensor* t : {&master[i], &m[i], &v[i], &model[i]}) *t = be_.alloc(DType::f32, {shard});
    for (Tensor* t : {&master[i], &m[i], &v[i]}) be_.fill_zero(*t);
    for (size_t p = 0; p < ws_.size(); ++p) {
      const Range pc = layout_.piece(p, ranks[i]);
      if (pc.empty()) continue;
      const size_t at = layout_.offset(p) + pc.begin - s.begin;
      be_.copy_range(ws_[p]->master, pc.begin, master[i], at, pc.size());
      be_.copy_range(ws_[p]->m, pc.begin, m[i], at, pc.size());
      be_.copy_range(ws_[p]->v, pc.begin, v[i], at, pc.size());
    }
    be_.adamw(master[i], m[i], v[i], grad[i], h, model[i]);
  }
  // (4): every rank gathers the whole BF16 model (Megatron's parameter all-gather) and, since
  // every rank runs de-oscillation, the metrics, the trace and checkpoints over whole tensors,
  // the FP32 master and the moments too; the storage takes the first local rank's copy
  auto gather = [&](const std::vector<Tensor>& shards, Tensor Weight::*field) {
    std::vector<Tensor> full(L);
    for (Tensor& t : full) t = be_.alloc(DType::f32, {layout_.padded()});
    comm_.all_gather(shards, full);
    for (size_t p = 0; p < ws_.size(); ++p) be_.copy_range(full[0], layout_.offset(p), ws_[p]->*field, 0, layout_.numel(p));
  };
  gather(model, &Weight::model);
  gather(master, &Weight::master);
  gather(m, &Weight::m);
  gather(v, &Weight::v);
}

void shard_edge_qdq(Backend& be, Weight& w, const FlatLayout& layout, size_t p, Tensor& q) {
  constexpr size_t kBand = 32;  // the MXFP4 weight tile's rows
  if (layout.numel(p) != w.G * w.N * w.K)
    throw std::invalid_argument("shard_edge_qdq: " + w.name + " has " + std::to_string(w.G * w.N * w.K) +
                                " elements, the layout's parameter " + std::to_string(p) + " " +
                                std::to_string(layout.numel(p)));
  if (q.empty() || !(q.shape() == w.shape())) q = be.alloc(DType::f32, w.shape());
  const Tensor bm = w.bf16_master(be);
  const size_t N = w.N, K = w.K, per = N * K;
  for (int r = 0; r < layout.ranks(); ++r) {
    const Range pc = layout.piece(p, r);
    for (size_t g = pc.begin / per; !pc.empty() && g * per < pc.end; ++g) {
      const size_t b = std::max(pc.begin, g * per) - g * per, e = std::min(pc.end, (g + 1) * per) - g * per;
      const size_t r0 = b / K / kBand * kBand, r1 = std::min(N, ((e - 1) / K / kBand + 1) * kBand);
      Tensor band = be.alloc(DType::f32, {r1 - r0, K});
      be.fill_zero(band);
      be.copy_range(bm, g * per + b, band, b - r0 * K, e - b);
      Tensor dq = be.alloc(DType::f32, band.shape());
      be.dequantize(be.quantize(band, mxfp4_weight_spec(), Axis::Cols), dq);
      be.copy_range(dq, b - r0 * K, q, g * per + b, e - b);
    }
  }
}

}  // namespace mxsim::sim
