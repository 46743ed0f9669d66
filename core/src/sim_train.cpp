// Training loop, trace and checkpoint of the simulator.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <limits>
#include <stdexcept>

#include "mxsim/data/fashion_mnist.hpp"
#include "mxsim/philox.hpp"
#include "mxsim/sim/model.hpp"
#include "mxsim/sim/trainer.hpp"
#include "mxsim/trace/checkpoint.hpp"
#include "mxsim/trace/histogram.hpp"
#include "mxsim/trace/writer.hpp"

namespace mxsim::sim {

namespace {

std::vector<uint32_t> epoch_order(uint64_t seed, int64_t epoch, size_t n) {
  // Fisher-Yates with Philox words keyed by (seed, 0xDA7A, epoch): the data
  // order is a pure function of (seed, epoch), so resume needs no RNG state.
  std::vector<uint32_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = uint32_t(i);
  PhiloxStream rs{seed, make_stream(0xDA7Au, uint32_t(epoch))};
  for (size_t i = n - 1; i > 0; --i) {
    const uint64_t r = (uint64_t(rs(2 * i)) << 32) | rs(2 * i + 1);
    std::swap(p[i], p[size_t(r % (i + 1))]);
  }
  return p;
}

double norm2(const Tensor3f& t) {
  double s = 0;
  for (float v : t) s += double(v) * double(v);
  return std::sqrt(s);
}

// ---- checkpoint entries (trace/checkpoint.hpp: one HDF5 file, written
// atomically, Fletcher-32 checksums). Layout (docs/simulator.md "Checkpoints"):
//   config (string), step (u64)
//   model/<layer>/{master,m,v,model} f32 [G, N, K], model/<layer>/version u64
//   model/<layer>/delayed/<w|x|dy>/{history f32 [len], scale f32}   (fp8_delayed)
//   deosc/{global_step i64, built u64, eligible string (names, '\n'-separated)}
//   deosc/state/<layer>/{prev,prev_q,dist_w,dist_q} f32, {step i64, seeded u64}
//   osc/<layer>/{prev_w,prev_q,dist_w,dist_q,ema} f32, last_dir u8 (int8 bits),
//     flips u64, {window i64, seeded u64}
//   snaps_total/<layer> i64
const char* const kRole[3] = {"w", "x", "dy"};

std::vector<uint64_t> shape_of(const Tensor3f& t) { return {t.shape(0), t.shape(1), t.shape(2)}; }

void put_t(trace::CheckpointWriter& o, const std::string& n, const Tensor3f& t) { o.put(n, t.data(), shape_of(t)); }

/// Read an FP32 entry into `t`, whose shape the current config decides.
void get_t(const trace::Checkpoint& in, const std::string& path, const std::string& n, Tensor3f& t) {
  auto a = in.get_f32(n);
  if (a.shape != shape_of(t))
    throw std::runtime_error(path + ": checkpoint entry '" + n + "' has a different shape than this config's tensor");
  std::copy(a.data.begin(), a.data.end(), t.begin());
}

}  // namespace

TrainResult train(const Config& cfg, Backend& be, const TrainOptions& opt) {
  be.set_threads(opt.threads);
  const auto t0 = std::chrono::steady_clock::now();
  data::Dataset tr = data::load_fashion_mnist(cfg.data_dir, data::Split::train, size_t(std::max<int64_t>(0, cfg.train_limit)));
  data::Dataset te;
  if (opt.evaluate) te = data::load_fashion_mnist(cfg.data_dir, data::Split::test, size_t(std::max<int64_t>(0, cfg.test_limit)));
  const size_t n_train = cfg.train_limit > 0 ? std::min<size_t>(tr.count, size_t(cfg.train_limit)) : tr.count;
  const size_t n_test = cfg.test_limit > 0 ? std::min<size_t>(te.count, size_t(cfg.test_limit)) : te.count;
  const int64_t spe = cfg.steps_per_epoch(int64_t(n_train));
  if (spe < 1) throw std::invalid_argument("batch.global_batch is larger than the training set (" + std::to_string(n_train) + ")");
  int64_t total = spe * cfg.epochs;
  if (cfg.max_steps > 0) total = std::min(total, cfg.max_steps);

  Model model(cfg, be);
  auto ws = model.weights();
  DeOsc deosc(cfg.deosc_period, cfg.deosc_ratio, cfg.deosc_start_step);
  OscMetrics osc(cfg.osc_ema_momentum, cfg.deosc_period);
  std::map<std::string, int64_t> snaps_total;
  std::map<std::string, uint64_t> flips_total;
  int64_t step0 = 0;
  const std::string cfg_text = to_toml(cfg);

  // ---- resume
  if (!opt.resume_path.empty()) {
    const std::string& P = opt.resume_path;
    const trace::Checkpoint in(P);
    const std::string saved_cfg = in.get_string("config");
    if (saved_cfg != cfg_text) {
      std::istringstream a(saved_cfg), b(cfg_text);
      std::string la, lb;
      while (std::getline(a, la) && std::getline(b, lb) && la == lb) {
      }
      throw std::runtime_error(P + ": checkpoint was written by a different config (checkpoint has '" + la +
                               "', this run has '" + lb + "')");
    }
    step0 = int64_t(in.get_u64("step"));
    if (step0 > total) throw std::runtime_error(P + ": checkpoint step " + std::to_string(step0) + " is past this run's " + std::to_string(total) + " steps");
    for (Weight* w : ws) {
      const std::string L = "model/" + w->name + "/";
      get_t(in, P, L + "master", w->master);
      get_t(in, P, L + "m", w->m);
      get_t(in, P, L + "v", w->v);
      get_t(in, P, L + "model", w->model);
      w->version = in.get_u64(L + "version");
      for (size_t r = 0; r < 3; ++r)
        if (auto& d = w->delayed[r]) {
          const std::string D = L + "delayed/" + kRole[r] + "/";
          try {
            d->restore(in.get_f32(D + "history").data, in.get_f32_scalar(D + "scale"));
          } catch (const std::invalid_argument& e) {
            throw std::runtime_error(P + ": checkpoint entry '" + D + "': " + e.what());
          }
        }
    }
    deosc.global_step = in.get_i64("deosc/global_step");
    deosc.built = in.get_u64("deosc/built") != 0;
    deosc.eligible.clear();
    {
      std::istringstream es(in.get_string("deosc/eligible"));
      for (std::string nm; std::getline(es, nm);) deosc.eligible.push_back(nm);
    }
    for (Weight* w : ws) {
      const std::string S = "deosc/state/" + w->name + "/";
      if (!in.has(S + "prev")) continue;
      DeOsc::State& s = deosc.state[w->name];
      const char* names[] = {"prev", "prev_q", "dist_w", "dist_q"};
      Tensor3f* ts[] = {&s.prev, &s.prev_q, &s.dist_w, &s.dist_q};
      for (size_t i = 0; i < 4; ++i) {
        *ts[i] = Tensor3f::from_shape(w->master.shape());
        get_t(in, P, S + names[i], *ts[i]);
      }
      s.step = in.get_i64(S + "step");
      s.seeded = in.get_u64(S + "seeded") != 0;
    }
    for (Weight* w : ws) {
      const std::string S = "osc/" + w->name + "/";
      if (!in.has(S + "prev_w")) continue;
      OscMetrics::State& s = osc.state[w->name];
      const char* names[] = {"prev_w", "prev_q", "dist_w", "dist_q", "ema"};
      Tensor3f* ts[] = {&s.prev_w, &s.prev_q, &s.dist_w, &s.dist_q, &s.ema};
      for (size_t i = 0; i < 5; ++i) {
        *ts[i] = Tensor3f::from_shape(w->master.shape());
        get_t(in, P, S + names[i], *ts[i]);
      }
      const auto ld = in.get_u8(S + "last_dir");
      const auto fl = in.get_u64_array(S + "flips");
      if (ld.data.size() != w->master.size() || fl.data.size() != w->master.size())
        throw std::runtime_error(P + ": checkpoint entry '" + S + "': size differs from this config's weight");
      s.last_dir.resize(ld.data.size());
      std::memcpy(s.last_dir.data(), ld.data.data(), ld.data.size());
      s.flips.assign(fl.data.begin(), fl.data.end());
      s.window = in.get_i64(S + "window");
      s.seeded = in.get_u64(S + "seeded") != 0;
    }
    for (Weight* w : ws)
      if (in.has("snaps_total/" + w->name)) snaps_total[w->name] = in.get_i64("snaps_total/" + w->name);
  }
  auto save_checkpoint = [&](int64_t step_done) {
    if (opt.checkpoint_path.empty()) return;
    trace::CheckpointWriter o;
    o.put_string("config", cfg_text);
    o.put_u64("step", uint64_t(step_done));
    for (Weight* w : ws) {
      const std::string L = "model/" + w->name + "/";
      put_t(o, L + "master", w->master);
      put_t(o, L + "m", w->m);
      put_t(o, L + "v", w->v);
      put_t(o, L + "model", w->model);
      o.put_u64(L + "version", w->version);
      for (size_t r = 0; r < 3; ++r)
        if (const auto& d = w->delayed[r]) {
          const std::string D = L + "delayed/" + kRole[r] + "/";
          o.put(D + "history", d->history().data(), {d->history().size()});
          o.put_f32(D + "scale", d->scale());
        }
    }
    o.put_i64("deosc/global_step", deosc.global_step);
    o.put_u64("deosc/built", deosc.built);
    std::string el;
    for (const auto& e : deosc.eligible) el += e + "\n";
    o.put_string("deosc/eligible", el);
    for (const auto& [nm, s] : deosc.state) {
      const std::string S = "deosc/state/" + nm + "/";
      put_t(o, S + "prev", s.prev);
      put_t(o, S + "prev_q", s.prev_q);
      put_t(o, S + "dist_w", s.dist_w);
      put_t(o, S + "dist_q", s.dist_q);
      o.put_i64(S + "step", s.step);
      o.put_u64(S + "seeded", s.seeded);
    }
    for (const auto& [nm, s] : osc.state) {
      const std::string S = "osc/" + nm + "/";
      put_t(o, S + "prev_w", s.prev_w);
      put_t(o, S + "prev_q", s.prev_q);
      put_t(o, S + "dist_w", s.dist_w);
      put_t(o, S + "dist_q", s.dist_q);
      put_t(o, S + "ema", s.ema);
      o.put(S + "last_dir", reinterpret_cast<const uint8_t*>(s.last_dir.data()), {s.last_dir.size()});
      const std::vector<uint64_t> fl(s.flips.begin(), s.flips.end());
      o.put(S + "flips", fl.data(), {fl.size()});
      o.put_i64(S + "window", s.window);
      o.put_u64(S + "seeded", s.seeded);
    }
    for (const auto& [nm, c] : snaps_total) o.put_i64("snaps_total/" + nm, c);
    o.commit(opt.checkpoint_path);
  };

  // ---- trace declarations
  const int64_t stop = opt.stop_after > 0 ? std::min(total, opt.stop_after) : total;
  const size_t NMB = size_t(cfg.num_microbatches), E = size_t(cfg.experts);
  std::unique_ptr<trace::Writer> tw;
  std::vector<int64_t> snap_steps;
  for (int64_t s : cfg.snapshot_steps)
    if (s >= step0 && s < stop) snap_steps.push_back(s - step0);  // trace rows are 0-based from this run's start
  std::sort(snap_steps.begin(), snap_steps.end());
  snap_steps.erase(std::unique(snap_steps.begin(), snap_steps.end()), snap_steps.end());
  if (!opt.trace_path.empty()) {
    tw = std::make_unique<trace::Writer>(opt.trace_path, cfg_text, trace::make_provenance(be.name(), cfg.seed));
    using trace::DType;
    tw->declare_series("/train/step", DType::i64, {});
    tw->declare_series("/train/loss", DType::f64, {});
    tw->declare_series("/train/aux_loss", DType::f64, {});
    tw->declare_series("/train/accuracy", DType::f64, {});
    tw->declare_series("/train/lr", DType::f32, {});
    tw->declare_series("/train/tokens_per_expert", DType::i64, {NMB, E});
    tw->declare_series("/eval/test_accuracy", DType::f64, {});
    for (Weight* w : ws) {
      const std::string L = "/layers/" + w->name;
      tw->declare_series(L + "/main_grad_norm", DType::f64, {NMB});
      if (is_quantized(w->recipe)) {
        for (const char* op : {"w", "x", "dy"}) {
          const std::string Q = L + "/quant/" + op;
          tw->declare_series(Q + "/mse", DType::f64, {});
          tw->declare_series(Q + "/sqnr_db", DType::f64, {});
          tw->declare_series(Q + "/underflow", DType::u64, {});
          tw->declare_series(Q + "/saturated", DType::u64, {});
          tw->declare_series(Q + "/count", DType::u64, {});
          tw->declare_series(Q + "/scale_exp_hist", DType::u64, {256});
        }
        tw->declare_series(L + "/osc/flips", DType::u64, {});
        tw->declare_series(L + "/osc/flips_total", DType::u64, {});
        tw->declare_series(L + "/osc/ema_mean", DType::f64, {});
        tw->declare_series(L + "/osc/ema_frac_above_0.01", DType::f64, {});
        tw->declare_series(L + "/osc/dist_ratio_mean", DType::f64, {});
      }
      if (cfg.deosc && deosc_eligible(w->recipe)) tw->declare_series(L + "/deosc/snapped", DType::i64, {});
      if (!snap_steps.empty() &&
          std::find(cfg.snapshot_layers.begin(), cfg.snapshot_layers.end(), w->name) != cfg.snapshot_layers.end()) {
        const std::vector<uint64_t> sh = {w->G, w->N, w->K};
        tw->declare_snapshot("/snap/" + w->name + "/master", DType::f32, sh, snap_steps);
        tw->declare_snapshot("/snap/" + w->name + "/weight_q", DType::f32, sh, snap_steps);
        tw->declare_snapshot("/snap/" + w->name + "/main_grad", DType::f32, sh, snap_steps);
        tw->declare_snapshot("/snap/" + w->name + "/wgrad_mb", DType::f32, {NMB, w->G, w->N, w->K}, snap_steps);
      }
    }
    tw->start_swmr();
  }

  // ---- loop
  TrainResult res;
  res.total_steps = total;
  const size_t B = size_t(cfg.global_batch), Bm = B / NMB;
  const float grad_scale = 1.0f / float(B);
  std::vector<uint32_t> order;
  int64_t order_epoch = -1;
  auto evaluate = [&]() {
    int64_t correct = 0;
    for (size_t i0 = 0; i0 < n_test; i0 += 1000) {
      const size_t n = std::min<size_t>(1000, n_test - i0);
      Tensor2f x = Tensor2f::from_shape({n, 784});
      std::copy_n(te.images.data() + i0 * 784, n * 784, x.data());
      const auto pred = model.predict(x);
      for (size_t i = 0; i < n; ++i) correct += pred[i] == te.labels[i0 + i];
    }
    return double(correct) / double(n_test);
  };
  auto tl = std::chrono::steady_clock::now();
  bool halted = false;
  for (int64_t t = step0; t < stop && !halted; ++t) {
    const int64_t epoch = t / spe, pos = t % spe;
    if (epoch != order_epoch) {
      order = epoch_order(cfg.seed, epoch, n_train);
      order_epoch = epoch;
    }
    const bool snap = tw && std::binary_search(snap_steps.begin(), snap_steps.end(), t - step0);
    for (Weight* w : ws) w->zero_grad();
    double loss_sum = 0, aux_sum = 0;
    int64_t correct = 0;
    std::map<std::string, std::vector<double>> gnorm;
    std::vector<int64_t> tpe;
    std::map<std::string, std::vector<Tensor3f>> contrib;
    std::map<std::string, Tensor3f> wq_snap;
    for (size_t mb = 0; mb < NMB; ++mb) {
      Tensor2f x = Tensor2f::from_shape({Bm, 784});
      std::vector<uint8_t> y(Bm);
      for (size_t i = 0; i < Bm; ++i) {
        const uint32_t idx = order[size_t(pos) * B + mb * Bm + i];
        std::copy_n(tr.images.data() + size_t(idx) * 784, 784, &x(i, 0));
        y[i] = tr.labels[idx];
      }
      MicroRecord rec;
      Model::MbResult r;
      try {
        r = model.train_microbatch(x, y, int(mb), int(NMB), t, grad_scale, mb == 0, snap, &rec);
      } catch (const std::runtime_error& e) {  // numeric failure (e.g. a non-finite amax): name the step
        throw std::runtime_error("step " + std::to_string(t + 1) + ", micro-batch " + std::to_string(mb) + ": " +
                                 e.what());
      }
      loss_sum += r.loss_sum;
      aux_sum += r.aux;
      correct += r.correct;
      tpe.insert(tpe.end(), r.tokens_per_expert.begin(), r.tokens_per_expert.end());
      for (Weight* w : ws) gnorm[w->name].push_back(norm2(w->main_grad));
      if (snap) {
        for (auto& [nm, g] : rec.wgrad) {
          Weight& w = model.weight(nm);
          if (g.size() != w.master.size()) g = xt::zeros<float>(w.master.shape());
          // groups that got no tokens contributed nothing: record zeros there
          contrib[nm].push_back(g);
        }
      }
      if (opt.control && !opt.control({t + 1, total, int(mb), int(NMB), loss_sum / double((mb + 1) * Bm)})) {
        halted = true;
        break;
      }
    }
    if (halted) break;
    const double loss = loss_sum / double(B) + aux_sum / double(NMB);
    // A NaN/inf loss ends the run before anything of this step reaches the
    // trace or the weights: the trace stays complete up to the previous step.
    if (!std::isfinite(loss))
      throw std::runtime_error("training diverged: loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") +
                               " at step " + std::to_string(t + 1) + " (cross-entropy sum " +
                               std::to_string(loss_sum) + ", aux " + std::to_string(aux_sum) +
                               "); the trace ends at the step before");
    const double acc = double(correct) / double(B);
    if (snap)
      for (const std::string& nm : cfg.snapshot_layers) {
        Weight& w = model.weight(nm);
        if (is_quantized(w.recipe)) {
          // exactly the spec this step's fprop used (before update_scaling)
          wq_snap[nm] = be.dequantize(be.quantize(w.model, weight_fprop_spec(w, w.model), Axis::Cols));
        } else {
          wq_snap[nm] = w.model;
        }
        tw->write_snapshot("/snap/" + nm + "/master", w.master.data());
        tw->write_snapshot("/snap/" + nm + "/weight_q", wq_snap[nm].data());
        tw->write_snapshot("/snap/" + nm + "/main_grad", w.main_grad.data());
        std::vector<float> all;
        for (auto& g : contrib[nm]) all.insert(all.end(), g.begin(), g.end());
        tw->write_snapshot("/snap/" + nm + "/wgrad_mb", all.data());
      }
    // ---- optimizer: AdamW on FP32 masters, BF16 model copy, caches invalidated
    const float lr = lr_at(cfg, t + 1, total);
    for (Weight* w : ws) {
      be.adamw(w->master, w->m, w->v, w->main_grad,
               {lr, cfg.beta1, cfg.beta2, cfg.eps, cfg.weight_decay, t + 1}, w->model);
      w->invalidate();
      w->update_scaling();  // fp8_delayed: next step's scales from this step's amax history
    }
    std::map<std::string, int64_t> snapped;
    if (cfg.deosc) snapped = deosc.step(be, ws);
    for (auto& [nm, c] : snapped) snaps_total[nm] += c;
    std::map<std::string, OscMetrics::Step> om;
    for (Weight* w : ws)
      if (is_quantized(w->recipe)) {
        om[w->name] = osc.update(be, *w);
        flips_total[w->name] = om[w->name].flips_total;
      }
    double test_acc = std::numeric_limits<double>::quiet_NaN();
    const bool epoch_end = (t + 1) % spe == 0 || t + 1 == total;
    if (opt.evaluate && epoch_end) {
      test_acc = evaluate();
      res.epoch_test_accuracy.push_back(test_acc);
      res.test_accuracy = test_acc;
    }
    // ---- trace row
    if (tw) {
      const int64_t gs = t + 1;
      tw->append("/train/step", gs);
      tw->append("/train/loss", loss);
      tw->append("/train/aux_loss", aux_sum / double(NMB));
      tw->append("/train/accuracy", acc);
      tw->append("/train/lr", lr);
      tw->append("/train/tokens_per_expert", tpe.data());
      tw->append("/eval/test_accuracy", test_acc);
      for (Weight* w : ws) {
        const std::string L = "/layers/" + w->name;
        tw->append(L + "/main_grad_norm", gnorm[w->name].data());
        if (is_quantized(w->recipe)) {
          const char* ops[] = {"w", "x", "dy"};
          for (int i = 0; i < 3; ++i) {
            const OperandStats& s = model.stats[w->name][size_t(i)];
            const std::string Q = L + "/quant/" + ops[i];
            tw->append(Q + "/mse", s.mse);
            tw->append(Q + "/sqnr_db", s.sqnr_db);
            tw->append(Q + "/underflow", uint64_t(s.underflow));
            tw->append(Q + "/saturated", uint64_t(s.saturated));
            tw->append(Q + "/count", uint64_t(s.count));
            trace::ScaleExpHistogram h;
            for (int e : s.scale_exp) {
              if (e == std::numeric_limits<int>::min()) h.add_nan();
              else h.add_exponent(std::clamp(e, -127, 127));
            }
            const auto c = h.counts();
            tw->append(Q + "/scale_exp_hist", c.data());
          }
          const auto& o = om[w->name];
          tw->append(L + "/osc/flips", o.flips);
          tw->append(L + "/osc/flips_total", o.flips_total);
          tw->append(L + "/osc/ema_mean", o.ema_mean);
          tw->append(L + "/osc/ema_frac_above_0.01", o.ema_frac_above);
          tw->append(L + "/osc/dist_ratio_mean", o.dist_ratio_mean);
        }
        if (cfg.deosc && deosc_eligible(w->recipe)) {
          auto it = snapped.find(w->name);
          tw->append(L + "/deosc/snapped", int64_t(it == snapped.end() ? 0 : it->second));
        }
      }
      tw->end_step();
    }
    res.losses.push_back(loss);
    res.final_loss = loss;
    res.final_train_acc = acc;
    ++res.steps;
    if (cfg.checkpoint_every > 0 && (t + 1) % cfg.checkpoint_every == 0) save_checkpoint(t + 1);
    if (opt.on_step) {
      const auto now = std::chrono::steady_clock::now();
      StepInfo si{t + 1, total, loss, acc, lr, 1.0 / std::max(1e-9, std::chrono::duration<double>(now - tl).count()),
                  opt.evaluate && epoch_end ? test_acc : -1};
      tl = now;
      opt.on_step(si);
    }
    if (opt.control && !opt.control({t + 1, total, -1, int(NMB), loss})) halted = true;
  }
  save_checkpoint(step0 + res.steps);
  if (tw) tw->close();
  for (Weight* w : ws) {
    LayerSummary l;
    l.name = w->name;
    l.recipe = recipe_name(w->recipe);
    if (is_quantized(w->recipe)) {
      l.w_mse = model.stats[w->name][0].mse;
      l.w_sqnr_db = model.stats[w->name][0].sqnr_db;
    }
    l.flips_total = flips_total[w->name];
    l.snaps_total = snaps_total[w->name];
    l.deosc_eligible = deosc_eligible(w->recipe);
    res.layers.push_back(l);
    res.final_masters.emplace_back(w->master.begin(), w->master.end());
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace mxsim::sim
