// Checkpoint save / resume of the training simulator: one list of entries
// (visit_state), walked by a saver and a loader. Layout: docs/simulator.md
// "Checkpoints"; names: trace/schema.hpp (ckpt::).
#include "sim_checkpoint.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "mxsim/sim/config.hpp"
#include "mxsim/sim/state_io.hpp"
#include "mxsim/trace/checkpoint.hpp"
#include "mxsim/trace/schema.hpp"

namespace mxsim::sim {

namespace {

namespace ck = trace::schema::ckpt;

std::vector<uint64_t> shape_of(const Tensor& t) {
  std::vector<uint64_t> s;
  for (int i = 0; i < t.rank(); ++i) s.push_back(t.dim(i));
  return s;
}

/// The one list. `config` and `step` are checked while loading.
void visit_state(StateIO& io, const std::string& config_toml, int64_t total_steps, uint64_t& step, Backend& be,
                 CheckpointedState s) {
  std::string cfg = config_toml;
  io.text(ck::kConfig, cfg);
  // A checkpoint written before the canonical text came from toml++'s writer holds the same
  // config in the older layout: compare the configs then, not the texts.
  const auto same_config = [&] {
    if (cfg == config_toml) return true;
    try {
      return to_toml(parse_config(cfg, {}, io.path() + ": entry 'config'")) == config_toml;
    } catch (const std::exception&) {
      return false;
    }
  };
  if (io.loading() && !same_config()) {
    std::istringstream a(cfg), b(config_toml);
    std::string la, lb;
    while (std::getline(a, la) && std::getline(b, lb) && la == lb) {
    }
    throw std::runtime_error(io.path() + ": checkpoint was written by a different config (checkpoint has '" + la +
                             "', this run has '" + lb + "')");
  }
  io.u64(ck::kStep, step);
  if (io.loading() && step > uint64_t(total_steps))  // unsigned: 2^63 and above are past too
    throw std::runtime_error(io.path() + ": checkpoint step " + std::to_string(step) + " is past this run's " +
                             std::to_string(total_steps) + " steps");
  const std::vector<Weight*> ws = s.model.weights();
  for (Weight* w : ws) {
    io.tensor(ck::model(w->name, "master"), w->master);
    io.tensor(ck::model(w->name, "m"), w->m);
    io.tensor(ck::model(w->name, "v"), w->v);
    io.tensor(ck::model(w->name, "model"), w->model);
    if (io.loading()) w->invalidate();  // the copies made of the old model (its cache, quantizations, bf16 copy) go
    io.u64(ck::model(w->name, "version"), w->version);
    if (io.loading()) w->master_matches_model = false;  // the file's master may hold de-osc snaps
    for (Role r : kRoles)
      if (auto& d = w->delayed[size_t(r)]) {
        // a checkpoint is taken between steps: this step's amaxes were recorded by update_scaling
        if (!w->pending_amax[size_t(r)].empty())
          throw std::logic_error(w->name + ": checkpoint with fp8_delayed amaxes not yet recorded (mid-step)");
        std::vector<float> hist = d->history();
        float scale = d->scale();
        io.f32s(ck::delayed(w->name, name_of(r), "history"), hist);
        io.f32(ck::delayed(w->name, name_of(r), "scale"), scale);
        if (io.loading()) try {
            d->restore(hist, scale);
          } catch (const std::invalid_argument& e) {
            throw std::runtime_error(io.path() + ": checkpoint entry '" + ck::delayed(w->name, name_of(r), "") +
                                     "': " + e.what());
          }
      }
  }
  // De-oscillation observes the shared step counter (sim/step.hpp); the entry
  // keeps the global step it saw last for readers of the file.
  int64_t deosc_step = int64_t(step);
  io.i64(ck::deosc("global_step"), deosc_step);
  check_range(io, ck::deosc("global_step"), deosc_step, int64_t(step), int64_t(step));
  s.deosc.visit(io, be, ws);
  s.osc.visit(io, be, ws);
  for (Weight* w : ws)
    if (io.present(ck::snaps_group(w->name), s.snaps_total.count(w->name) != 0)) {
      int64_t& n = s.snaps_total[w->name];
      io.i64(ck::snaps_total(w->name), n);
      // at most every element once per window, at most one window per step
      const uint64_t most = uint64_t(w->G * w->N * w->K) * step;
      check_range(io, ck::snaps_total(w->name), n, 0,
                  int64_t(std::min<uint64_t>(most, uint64_t(std::numeric_limits<int64_t>::max()))));
    }
}

class Saver final : public StateIO {
 public:
  Saver(const std::string& path, Backend& be) : path_(path), be_(be) {}
  bool loading() const override { return false; }
  bool present(const std::string& group, bool now) override {
    o.put_u64(ck::present(group), now ? 1 : 0);
    return now;
  }
  void tensor(const std::string& n, Tensor& t) override {
    switch (t.dtype()) {
      case DType::f32: {
        const auto h = be_.download<float>(t);
        o.put(n, h.data(), shape_of(t));
        return;
      }
      case DType::u8: {
        const auto h = be_.download<uint8_t>(t);
        o.put(n, h.data(), {h.size()});
        return;
      }
      case DType::u32: {
        const auto h = be_.download<uint32_t>(t);
        const std::vector<uint64_t> w(h.begin(), h.end());
        o.put(n, w.data(), {w.size()});
        return;
      }
      default: throw std::logic_error("checkpoint: no storage rule for " + std::string(name_of(t.dtype())) + " tensors");
    }
  }
  void u64(const std::string& n, uint64_t& v) override { o.put_u64(n, v); }
  void i64(const std::string& n, int64_t& v) override { o.put_i64(n, v); }
  void flag(const std::string& n, bool& v) override { o.put_u64(n, v); }
  void f32(const std::string& n, float& v) override { o.put_f32(n, v); }
  void f32s(const std::string& n, std::vector<float>& v) override { o.put(n, v.data(), {v.size()}); }
  void text(const std::string& n, std::string& v) override { o.put_string(n, v); }
  const std::string& path() const override { return path_; }
  trace::CheckpointWriter o;

 private:
  const std::string& path_;
  Backend& be_;
};

class Loader final : public StateIO {
 public:
  Loader(const std::string& path, Backend& be) : path_(path), be_(be), in_(path) {}
  bool loading() const override { return true; }
  bool present(const std::string& group, bool) override {
    bool v = false;
    flag(ck::present(group), v);
    return v;
  }
  void tensor(const std::string& n, Tensor& t) override {
    auto size_error = [&] {
      throw std::runtime_error(path_ + ": checkpoint entry '" + n + "' has a different shape than this config's tensor");
    };
    switch (t.dtype()) {
      case DType::f32: {
        const auto a = in_.get_f32(n);
        if (a.shape != shape_of(t)) size_error();
        be_.upload(t, std::span<const float>(a.data));
        return;
      }
      case DType::u8: {
        const auto a = in_.get_u8(n);
        if (a.data.size() != t.numel()) size_error();
        be_.upload(t, std::span<const uint8_t>(a.data));
        return;
      }
      case DType::u32: {
        const auto a = in_.get_u64_array(n);
        if (a.data.size() != t.numel()) size_error();
        for (size_t i = 0; i < a.data.size(); ++i)  // u32 counters widened to u64 on save
          if (a.data[i] > UINT32_MAX)
            throw std::runtime_error(path_ + ": checkpoint entry '" + n + "' element " + std::to_string(i) + " is " +
                                     std::to_string(a.data[i]) + ", above the 32-bit counter's range");
        const std::vector<uint32_t> v(a.data.begin(), a.data.end());
        be_.upload(t, std::span<const uint32_t>(v));
        return;
      }
      default: throw std::logic_error("checkpoint: no storage rule for " + std::string(name_of(t.dtype())) + " tensors");
    }
  }
  void u64(const std::string& n, uint64_t& v) override { v = in_.get_u64(n); }
  void i64(const std::string& n, int64_t& v) override { v = in_.get_i64(n); }
  void flag(const std::string& n, bool& v) override {
    const uint64_t x = in_.get_u64(n);
    if (x > 1)
      throw std::runtime_error(path_ + ": checkpoint entry '" + n + "' is " + std::to_string(x) + ", expected 0 or 1");
    v = x != 0;
  }
  void f32(const std::string& n, float& v) override { v = in_.get_f32_scalar(n); }
  void f32s(const std::string& n, std::vector<float>& v) override { v = in_.get_f32(n).data; }
  void text(const std::string& n, std::string& v) override { v = in_.get_string(n); }
  const std::string& path() const override { return path_; }

 private:
  const std::string& path_;
  Backend& be_;
  trace::Checkpoint in_;
};

}  // namespace

void save_checkpoint(const std::string& path, Backend& be, const std::string& config_toml, Step done,
                     CheckpointedState s) {
  Saver sv(path, be);
  uint64_t step = uint64_t(done.n());
  visit_state(sv, config_toml, done.n(), step, be, s);
  sv.o.commit(path);
}

Step load_checkpoint(const std::string& path, Backend& be, const std::string& config_toml, int64_t total_steps,
                     CheckpointedState s) {
  Loader ld(path, be);
  uint64_t step = 0;
  visit_state(ld, config_toml, total_steps, step, be, s);
  return Step(int64_t(step));
}

}  // namespace mxsim::sim
