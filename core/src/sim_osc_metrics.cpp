// Oscillation metrics of the quantized weights (sim/osc_metrics.hpp; Nagel et al. 2022).
#include "mxsim/sim/osc_metrics.hpp"

#include <stdexcept>
#include <string>

#include "mxsim/sim/model.hpp"
#include "mxsim/sim/state_io.hpp"
#include "mxsim/trace/schema.hpp"

namespace mxsim::sim {

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
  if (!w.recipe.weight_quantized()) return r;
  // Quantized value on the forward grid of this weight's recipe, by the spec
  // the next fprop will use (fp8_current: amax of bf16(master); fp8_delayed:
  // the scale update_scaling() just produced), without recording an amax:
  // while no de-osc snap moved the master, the next fprop's own W.
  Tensor Q;
  w.qdq_master(be, weight_fprop_spec(be, w, w.bf16_master(be)), Q);
  return observe(be, w.name, w.master, Q);
}

OscMetrics::State& OscMetrics::seeded(Backend& be, const std::string& name, const Tensor& w, const Tensor& q) {
  auto it = state_.find(name);
  if (it == state_.end()) it = state_.emplace(name, make_state(be, w.shape())).first;
  State& s = it->second;
  if (!(s.t.prev_w.shape() == w.shape()))
    throw std::invalid_argument("oscillation metrics of " + name + ": weight of shape " + w.shape().str() +
                                ", earlier steps had " + s.t.prev_w.shape().str());
  if (!s.seeded) {
    be.copy(w, s.t.prev_w);
    be.copy(q, s.t.prev_q);
    s.seeded = true;
  }
  return s;
}

Backend::OscStep OscMetrics::observe(Backend& be, const std::string& name, const Tensor& w, const Tensor& q) {
  State& s = seeded(be, name, w, q);
  return be.osc_update(w, q, s.t, m_, next_window(s));
}

void OscMetrics::observe_deferred(Backend& be, const std::string& name, const Tensor& w, const Tensor& q,
                                  Backend::OscStep* dst) {
  State& s = seeded(be, name, w, q);
  be.osc_update_deferred(w, q, s.t, m_, next_window(s), dst);
}

bool OscMetrics::next_window(State& s) const {
  const bool window_end = s.window + 1 >= period_;
  s.window = window_end ? 0 : s.window + 1;
  return window_end;
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

}  // namespace mxsim::sim
