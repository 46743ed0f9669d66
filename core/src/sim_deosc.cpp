// Primus weight de-oscillation (sim/deosc.hpp, training-mechanics.md §6).
#include "mxsim/sim/deosc.hpp"

#include <bit>
#include <stdexcept>
#include <string>

#include "mxsim/hd/elementwise.hpp"
#include "mxsim/sim/dist_optimizer.hpp"
#include "mxsim/sim/model.hpp"
#include "mxsim/sim/state_io.hpp"
#include "mxsim/trace/schema.hpp"
#include "sim_ensure.hpp"

namespace mxsim::sim {

namespace {
/// Elements of two f32 tensors whose bits differ (host; a diagnostic of shard-edge runs).
int64_t count_differing(Backend& be, const Tensor& a, const Tensor& b) {
  const auto x = be.download<float>(a), y = be.download<float>(b);
  int64_t n = 0;
  for (size_t i = 0; i < x.size(); ++i) n += std::bit_cast<uint32_t>(x[i]) != std::bit_cast<uint32_t>(y[i]);
  return n;
}

}  // namespace

void mxfp4_forward_qdq(Backend& be, const Tensor& master, Tensor& q) {
  Tensor b = be.alloc(DType::f32, master.shape());
  be.round_bf16(master, b);
  ensure(be, q, master.shape());
  be.dequantize(be.quantize(b, mxfp4_weight_spec(), Axis::Cols), q);
}

std::map<std::string, int64_t> DeOsc::step(Backend& be, const std::vector<Weight*>& ws, Step n) {
  std::map<std::string, int64_t> snapped;
  edge_last_.clear();
  if (n.n() < start_) return snapped;
  if (!built_) {
    for (Weight* w : ws)
      if (w->recipe.deosc_eligible()) eligible_.push_back(w->name);  // by fprop's recipe type only
    built_ = !eligible_.empty();
  }
  for (Weight* w : ws) {
    if (std::find(eligible_.begin(), eligible_.end(), w->name) == eligible_.end()) continue;
    State& s = state_[w->name];
    Tensor Qfull;
    w->qdq_master(be, mxfp4_weight_spec(), Qfull);  // = mxfp4_forward_qdq(master), shared with fprop's W
    Tensor Q;  // the Q this run's de-oscillation uses
    if (edge_layout_) shard_edge_qdq(be, *w, *edge_layout_, edge_index_.at(w->name), Q);
    else Q = Qfull;
    if (edge_layout_ && !s.seeded) {  // the full-tensor QDQ's shadow state, seeded beside the weight's
      s.full_prev_q = Qfull;
      s.full_dist_q = be.alloc(DType::f32, w->shape());
      be.fill_zero(s.full_dist_q);
      edge_last_[w->name] = EdgeStep{count_differing(be, Q, Qfull), 0};
    } else if (edge_layout_) {
      edge_last_[w->name] = edge_observe(be, *w, s, Q, Qfull, s.step + 1 >= period_);
    }
    // snap: Q into the FP32 master (reaches the model at the next step's copy)
    const std::optional<int64_t> cnt = observe(be, w->name, w->master, Q);
    if (cnt) snapped[w->name] = *cnt;
    if (cnt && *cnt > 0) w->master_matches_model = false;
  }
  return snapped;
}

std::optional<int64_t> DeOsc::observe(Backend& be, const std::string& name, Tensor& w, const Tensor& q) {
  State& s = state_[name];
  if (!s.seeded) {  // the first observation only seeds
    s.prev = be.alloc(DType::f32, w.shape());
    be.copy(w, s.prev);
    s.prev_q = be.alloc(DType::f32, q.shape());  // its own copy: q may be the caller's memory (a borrowed
    be.copy(q, s.prev_q);                        // tensor of the C interface), reused once the call returns
    s.dist_w = be.alloc(DType::f32, w.shape());
    s.dist_q = be.alloc(DType::f32, w.shape());
    be.fill_zero(s.dist_w);
    be.fill_zero(s.dist_q);
    s.snaps = be.alloc(DType::u32, w.shape());
    be.fill_zero(s.snaps);
    s.seeded = true;
    return std::nullopt;
  }
  if (!(s.prev.shape() == w.shape()))
    throw std::invalid_argument("de-oscillation of " + name + ": weight of shape " + w.shape().str() +
                                ", earlier steps had " + s.prev.shape().str());
  const bool window_end = ++s.step >= period_;
  const int64_t cnt = be.deosc_update(w, q, s.prev, s.prev_q, s.dist_w, s.dist_q, window_end, ratio_, &s.snaps);
  if (!window_end) return std::nullopt;
  s.step = 0;
  return cnt;
}

DeOsc::EdgeStep DeOsc::edge_observe(Backend& be, Weight& w, State& s, const Tensor& Q, const Tensor& Qfull,
                                    bool window_end) {
  // A diagnostic on the host (like the trace's statistics): the shared master, prev and dist_w,
  // the shard-edge Q and its state, the full-tensor Q and its shadow state; per element the
  // decision of each at a window end by the one definition (hd::deosc_observe, deosc_window_end).
  const auto master = be.download<float>(w.master), prev = be.download<float>(s.prev),
             dist_w = be.download<float>(s.dist_w), q = be.download<float>(Q), prev_q = be.download<float>(s.prev_q),
             dist_q = be.download<float>(s.dist_q), qf = be.download<float>(Qfull);
  std::vector<float> fprev_q = be.download<float>(s.full_prev_q), fdist_q = be.download<float>(s.full_dist_q);
  EdgeStep r;
  for (size_t i = 0; i < master.size(); ++i) {
    r.qdiff += std::bit_cast<uint32_t>(q[i]) != std::bit_cast<uint32_t>(qf[i]);
    float pf = prev[i], dwf = dist_w[i];
    hd::deosc_observe(master[i], qf[i], pf, fprev_q[i], dwf, fdist_q[i]);
    if (!window_end) continue;
    float pe = prev[i], dwe = dist_w[i], pqe = prev_q[i], dqe = dist_q[i], we = master[i], wf = master[i];
    hd::deosc_observe(master[i], q[i], pe, pqe, dwe, dqe);
    const bool snap_e = hd::deosc_window_end(we, q[i], pe, dwe, dqe, ratio_);
    const bool snap_f = hd::deosc_window_end(wf, qf[i], pf, dwf, fdist_q[i], ratio_);  // restarts the shadow's sum
    r.changed += snap_e != snap_f;
  }
  be.upload(s.full_prev_q, std::span<const float>(fprev_q));
  be.upload(s.full_dist_q, std::span<const float>(fdist_q));
  return r;
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
    if (io.loading()) s.snaps = be.alloc(DType::u32, w->shape());
    io.tensor(ck::deosc_state(w->name, "snaps"), s.snaps);  // per-element snap counts (u32)
    if (edge_layout_) {  // the full-tensor shadow of shard-edge runs (the config says whether it exists)
      for (Tensor* t : {&s.full_prev_q, &s.full_dist_q})
        if (io.loading()) *t = be.alloc(DType::f32, w->shape());
      io.tensor(ck::deosc_state(w->name, "full_prev_q"), s.full_prev_q);
      io.tensor(ck::deosc_state(w->name, "full_dist_q"), s.full_dist_q);
    }
    io.i64(ck::deosc_state(w->name, "step"), s.step);
    check_range(io, ck::deosc_state(w->name, "step"), s.step, 0, period_ - 1);  // the window position
    io.flag(ck::deosc_state(w->name, "seeded"), s.seeded);
  }
}

}  // namespace mxsim::sim
