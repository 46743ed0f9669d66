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

std::vector<uint64_t> shape_of(const Tensor& t) {
  std::vector<uint64_t> s;
  for (int i = 0; i < t.rank(); ++i) s.push_back(t.dim(i));
  return s;
}

void put_t(Backend& be, trace::CheckpointWriter& o, const std::string& n, const Tensor& t) {
  const auto h = be.download<float>(t);
  o.put(n, h.data(), shape_of(t));
}

/// Read an FP32 entry into `t`, whose shape the current config decides.
void get_t(Backend& be, const trace::Checkpoint& in, const std::string& path, const std::string& n, Tensor& t) {
  auto a = in.get_f32(n);
  if (a.shape != shape_of(t))
    throw std::runtime_error(path + ": checkpoint entry '" + n + "' has a different shape than this config's tensor");
  be.upload(t, std::span<const float>(a.data));
}

}  // namespace

TrainResult train(const Config& cfg, Backend& be, const TrainOptions& opt) {
  be.set_threads(opt.threads);
  const auto t0 = std::chrono::steady_clock::now();
  data::Dataset tr = data::load_fashion_mnist(cfg.data_dir, data::Split::train);
  data::Dataset te;
  if (opt.evaluate) te = data::load_fashion_mnist(cfg.data_dir, data::Split::test);
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
      get_t(be, in, P, L + "master", w->master);
      get_t(be, in, P, L + "m", w->m);
      get_t(be, in, P, L + "v", w->v);
      get_t(be, in, P, L + "model", w->model);
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
      Tensor* ts[] = {&s.prev, &s.prev_q, &s.dist_w, &s.dist_q};
      for (size_t i = 0; i < 4; ++i) {
        *ts[i] = be.alloc(DType::f32, w->shape());
        get_t(be, in, P, S + names[i], *ts[i]);
      }
      s.step = in.get_i64(S + "step");
      s.seeded = in.get_u64(S + "seeded") != 0;
    }
    for (Weight* w : ws) {
      const std::string S = "osc/" + w->name + "/";
      if (!in.has(S + "prev_w")) continue;
      OscMetrics::State& s = osc.state[w->name] = OscMetrics::make_state(be, w->shape());
      const char* names[] = {"prev_w", "prev_q", "dist_w", "dist_q", "ema"};
      Tensor* ts[] = {&s.t.prev_w, &s.t.prev_q, &s.t.dist_w, &s.t.dist_q, &s.t.ema};
      for (size_t i = 0; i < 5; ++i) get_t(be, in, P, S + names[i], *ts[i]);
      const auto ld = in.get_u8(S + "last_dir");
      const auto fl = in.get_u64_array(S + "flips");
      if (ld.data.size() != w->shape().numel() || fl.data.size() != w->shape().numel())
        throw std::runtime_error(P + ": checkpoint entry '" + S + "': size differs from this config's weight");
      be.upload(s.t.last_dir, std::span<const uint8_t>(ld.data));
      const std::vector<uint32_t> f32s(fl.data.begin(), fl.data.end());
      be.upload(s.t.flips, std::span<const uint32_t>(f32s));
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
      put_t(be, o, L + "master", w->master);
      put_t(be, o, L + "m", w->m);
      put_t(be, o, L + "v", w->v);
      put_t(be, o, L + "model", w->model);
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
      put_t(be, o, S + "prev", s.prev);
      put_t(be, o, S + "prev_q", s.prev_q);
      put_t(be, o, S + "dist_w", s.dist_w);
      put_t(be, o, S + "dist_q", s.dist_q);
      o.put_i64(S + "step", s.step);
      o.put_u64(S + "seeded", s.seeded);
    }
    for (const auto& [nm, s] : osc.state) {
      const std::string S = "osc/" + nm + "/";
      put_t(be, o, S + "prev_w", s.t.prev_w);
      put_t(be, o, S + "prev_q", s.t.prev_q);
      put_t(be, o, S + "dist_w", s.t.dist_w);
      put_t(be, o, S + "dist_q", s.t.dist_q);
      put_t(be, o, S + "ema", s.t.ema);
      const auto ld = be.download<uint8_t>(s.t.last_dir);
      o.put(S + "last_dir", ld.data(), {ld.size()});
      const auto f32s = be.download<uint32_t>(s.t.flips);
      const std::vector<uint64_t> fl(f32s.begin(), f32s.end());
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
    using DType = trace::DType;
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
          std::find(cfg.snapshot_layers.begin(), cfg.snapshot_layers.end(), w->layer) != cfg.snapshot_layers.end()) {
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
    Tensor xe, ye, logits;
    for (size_t i0 = 0; i0 < n_test; i0 += 1000) {
      const size_t n = std::min<size_t>(1000, n_test - i0);
      if (xe.empty() || xe.dim(0) != n) {
        xe = be.alloc(DType::f32, {n, 784});
        ye = be.alloc(DType::u8, {n});
      }
      be.upload(xe, std::span<const float>(te.images.data() + i0 * 784, n * 784));
      be.upload(ye, std::span<const uint8_t>(te.labels.data() + i0, n));
      model.forward_eval(xe, logits);
      correct += be.count_correct(logits, ye);
    }
    return double(correct) / double(n_test);
  };
  Tensor xm = be.alloc(DType::f32, {Bm, 784}), ym = be.alloc(DType::u8, {Bm});
  std::vector<float> xh(Bm * 784);
  std::vector<uint8_t> yh(Bm);
  std::map<std::string, Tensor> staging;  // snapshot layers: wgrad_mb [NMB, G, N, K]
  auto tl = std::chrono::steady_clock::now();
  for (int64_t t = step0; t < stop; ++t) {
    const int64_t epoch = t / spe, pos = t % spe;
    if (epoch != order_epoch) {
      order = epoch_order(cfg.seed, epoch, n_train);
      order_epoch = epoch;
    }
    const bool snap = tw && std::binary_search(snap_steps.begin(), snap_steps.end(), t - step0);
    for (Weight* w : ws) w->zero_grad(be);
    double loss_sum = 0, aux_sum = 0;
    int64_t correct = 0;
    std::map<std::string, std::vector<double>> gnorm;
    std::vector<int64_t> tpe;
    for (size_t mb = 0; mb < NMB; ++mb) {
      // the data loader: gather the micro-batch on the host, upload it
      for (size_t i = 0; i < Bm; ++i) {
        const uint32_t idx = order[size_t(pos) * B + mb * Bm + i];
        std::copy_n(tr.images.data() + size_t(idx) * 784, 784, xh.data() + i * 784);
        yh[i] = tr.labels[idx];
      }
      be.upload(xm, std::span<const float>(xh));
      be.upload(ym, std::span<const uint8_t>(yh));
      MicroRecord rec;
      Model::MbResult r;
      try {
        r = model.train_microbatch(xm, ym, int(mb), int(NMB), Step(t + 1), grad_scale, mb == 0, snap, &rec);
      } catch (const std::runtime_error& e) {  // numeric failure (e.g. a non-finite amax): name the step
        throw std::runtime_error("step " + std::to_string(t + 1) + ", micro-batch " + std::to_string(mb) + ": " +
                                 e.what());
      }
      loss_sum += r.loss_sum;
      aux_sum += r.aux;
      correct += r.correct;
      tpe.insert(tpe.end(), r.tokens_per_expert.begin(), r.tokens_per_expert.end());
      for (Weight* w : ws) gnorm[w->name].push_back(be.l2_norm(w->main_grad));
      if (snap) {
        // groups that got no tokens contributed nothing: the wgrad wrote zeros there
        for (auto& [l, g] : rec.wgrad) {
          Tensor& st = staging[name_of(l)];
          if (st.empty()) st = be.alloc(DType::f32, {NMB * g.dim(0), g.dim(1), g.dim(2)});
          be.copy_into(g, st, mb * g.numel());
        }
      }
    }
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
      for (Layer l : cfg.snapshot_layers) {
        Weight& w = model.weight(l);
        const std::string nm = name_of(l);
        std::vector<float> wq;
        if (is_quantized(w.recipe)) {
          // exactly the spec this step's fprop used (before update_scaling)
          Tensor d = be.alloc(DType::f32, w.shape());
          be.dequantize(be.quantize(w.model, weight_fprop_spec(be, w, w.model), Axis::Cols), d);
          wq = be.download<float>(d);
        } else {
          wq = be.download<float>(w.model);
        }
        tw->write_snapshot("/snap/" + nm + "/master", be.download<float>(w.master).data());
        tw->write_snapshot("/snap/" + nm + "/weight_q", wq.data());
        tw->write_snapshot("/snap/" + nm + "/main_grad", be.download<float>(w.main_grad).data());
        tw->write_snapshot("/snap/" + nm + "/wgrad_mb", be.download<float>(staging.at(nm)).data());
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
            const OperandStats& os = model.stats(w->layer, Role(i));
            const QuantStats& s = os.q;
            const std::string Q = L + "/quant/" + ops[i];
            tw->append(Q + "/mse", s.mse);
            tw->append(Q + "/sqnr_db", s.sqnr_db);
            tw->append(Q + "/underflow", uint64_t(s.underflow));
            tw->append(Q + "/saturated", uint64_t(s.saturated));
            tw->append(Q + "/count", uint64_t(s.count));
            tw->append(Q + "/scale_exp_hist", os.scale_exp_hist.data());
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
  }
  save_checkpoint(stop);
  if (tw) tw->close();
  for (Weight* w : ws) {
    LayerSummary l;
    l.name = w->name;
    l.recipe = recipe_name(w->recipe);
    if (is_quantized(w->recipe)) {
      l.w_mse = model.stats(w->layer, Role::W).q.mse;
      l.w_sqnr_db = model.stats(w->layer, Role::W).q.sqnr_db;
    }
    l.flips_total = flips_total[w->name];
    l.snaps_total = snaps_total[w->name];
    l.deosc_eligible = deosc_eligible(w->recipe);
    res.layers.push_back(l);
    res.final_masters.push_back(be.download<float>(w->master));
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace mxsim::sim
