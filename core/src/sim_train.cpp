// The training loop of the simulator: data order and micro-batches, the
// optimizer step, de-oscillation and metrics, evaluation; the trace goes
// through the recorder (sim_recorder.cpp), checkpoints through the one state
// list (sim_checkpoint.cpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <cmath>
#include <limits>
#include <span>
#include <stdexcept>

#include <unistd.h>

#include "mxsim/data/fashion_mnist.hpp"
#include "mxsim/format.hpp"
#include "mxsim/hd/quant_block.hpp"
#include "mxsim/philox.hpp"
#include "mxsim/sim/dist_optimizer.hpp"
#include "mxsim/sim/maps.hpp"
#include "mxsim/sim/model.hpp"
#include "mxsim/sim/recorder.hpp"
#include "mxsim/sim/trainer.hpp"
#include "mxsim/trace/schema.hpp"
#include "sim_checkpoint.hpp"

namespace mxsim::sim {

namespace {

/// The training and test sets and the data order: step n reads batch
/// position (n - 1) % steps_per_epoch of epoch (n - 1) / steps_per_epoch.
class TrainData {
 public:
  TrainData(const Config& cfg, Backend& be, bool evaluate) : cfg_(cfg), be_(be) {
    // only the examples the run uses are decoded (run.train_limit / test_limit)
    tr_ = data::load_fashion_mnist(cfg.data_dir, data::Split::train, size_t(std::max<int64_t>(0, cfg.train_limit)));
    if (evaluate)
      te_ = data::load_fashion_mnist(cfg.data_dir, data::Split::test, size_t(std::max<int64_t>(0, cfg.test_limit)));
    n_train = cfg.train_limit > 0 ? std::min<size_t>(tr_.count, size_t(cfg.train_limit)) : tr_.count;
    n_test = cfg.test_limit > 0 ? std::min<size_t>(te_.count, size_t(cfg.test_limit)) : te_.count;
    steps_per_epoch = cfg.steps_per_epoch(int64_t(n_train));
    if (steps_per_epoch < 1)
      throw std::invalid_argument("batch.global_batch is larger than the training set (" + std::to_string(n_train) + ")");
    const size_t Bm = size_t(cfg.global_batch / cfg.num_microbatches);
    x = be.alloc(DType::f32, {Bm, 784});
    y = be.alloc(DType::u8, {Bm});
    xh_.resize(Bm * 784);
    yh_.resize(Bm);
  }

  /// Gathers micro-batch mb of step n on the host (the data loader) and
  /// uploads it into x [B_mb, 784] and y [B_mb].
  void load_microbatch(Step n, size_t mb) {
    const int64_t t = n.done_before(), epoch = t / steps_per_epoch, pos = t % steps_per_epoch;
    if (epoch != order_epoch_) {
      order_ = epoch_order(cfg_.seed, epoch, n_train);
      order_epoch_ = epoch;
    }
    const size_t B = size_t(cfg_.global_batch), Bm = yh_.size();
    for (size_t i = 0; i < Bm; ++i) {
      const uint32_t idx = order_[size_t(pos) * B + mb * Bm + i];
      std::copy_n(tr_.images.data() + size_t(idx) * 784, 784, xh_.data() + i * 784);
      yh_[i] = tr_.labels[idx];
    }
    be_.upload(x, std::span<const float>(xh_));
    be_.upload(y, std::span<const uint8_t>(yh_));
  }

  /// Test accuracy over the first n_test test images, in chunks of 1000.
  double evaluate(Model& model) {
    int64_t correct = 0;
    Tensor xe, ye, logits;
    for (size_t i0 = 0; i0 < n_test; i0 += 1000) {
      const size_t n = std::min<size_t>(1000, n_test - i0);
      if (xe.empty() || xe.dim(0) != n) {
        xe = be_.alloc(DType::f32, {n, 784});
        ye = be_.alloc(DType::u8, {n});
      }
      be_.upload(xe, std::span<const float>(te_.images.data() + i0 * 784, n * 784));
      be_.upload(ye, std::span<const uint8_t>(te_.labels.data() + i0, n));
      model.forward_eval(xe, logits);
      correct += be_.count_correct(logits, ye);
    }
    return double(correct) / double(n_test);
  }

  size_t n_train = 0, n_test = 0;
  int64_t steps_per_epoch = 0;
  Tensor x, y;  ///< the current micro-batch

 private:
  /// Fisher-Yates with Philox words keyed by (seed, 0xDA7A, epoch): the data
  /// order is a pure function of (seed, epoch), so resume needs no RNG state.
  static std::vector<uint32_t> epoch_order(uint64_t seed, int64_t epoch, size_t n) {
    std::vector<uint32_t> p(n);
    for (size_t i = 0; i < n; ++i) p[i] = uint32_t(i);
    PhiloxStream rs{seed, make_stream(0xDA7Au, uint32_t(epoch))};
    for (size_t i = n - 1; i > 0; --i) {
      const uint64_t r = (uint64_t(rs(2 * i)) << 32) | rs(2 * i + 1);
      std::swap(p[i], p[size_t(r % (i + 1))]);
    }
    return p;
  }
  const Config& cfg_;
  Backend& be_;
  data::Dataset tr_, te_;
  std::vector<float> xh_;
  std::vector<uint8_t> yh_;
  std::vector<uint32_t> order_;
  int64_t order_epoch_ = -1;
};

/// The long-lived state of a run and the step it performs.
class Trainer {
 public:
  Trainer(const Config& cfg, Backend& be, const TrainOptions& opt)
      : t0_(std::chrono::steady_clock::now()),
        cfg_(cfg),
        be_(be),
        opt_(opt),
        data_(cfg, be, opt.evaluate),
        model_(cfg, be),
        ws_(model_.weights()),
        deosc_(cfg.deosc_period, cfg.deosc_ratio, cfg.deosc_start_step),
        osc_(cfg.osc_ema_momentum, cfg.deosc_period),
        cfg_text_(to_toml(cfg)) {
    total_ = data_.steps_per_epoch * cfg.epochs;
    if (cfg.max_steps > 0) total_ = std::min(total_, cfg.max_steps);
    if (opt.comm) {
      if (opt.comm->size() != cfg.ranks)
        throw std::invalid_argument("parallel.ranks = " + std::to_string(cfg.ranks) + " but the run has " +
                                    std::to_string(opt.comm->size()) + " processes (one per rank): set parallel.ranks=" +
                                    std::to_string(opt.comm->size()));
      comm_ = opt.comm;
      lead_ = opt.comm->local_ranks().front() == 0;
    } else if (cfg.ranks > 1 || cfg.deosc_shard_edge) {
      own_comm_ = make_virtual_comm(be, cfg.ranks);
      comm_ = own_comm_.get();
    }
    if (comm_) {
      dopt_ = std::make_unique<DistributedOptimizer>(be, *comm_, ws_);
      model_.set_comm(comm_);
    }
    if (cfg.deosc_shard_edge) {
      std::map<std::string, size_t> index;
      for (size_t p = 0; p < ws_.size(); ++p) index[ws_[p]->name] = p;
      deosc_.set_shard_edge(&dopt_->layout(), std::move(index));
    }
  }

  TrainResult run() {
    Step done(0);
    if (!opt_.resume_path.empty()) {
      done = load_checkpoint(opt_.resume_path, be_, cfg_text_, total_, state());
      // Nothing left to run (the config, and so the step count, is the checkpoint's own): say so
      // instead of a zero-step run with no loss and no evaluation, before any trace is created.
      if (done.n() >= total_)
        throw std::runtime_error(opt_.resume_path + ": checkpoint is at step " + std::to_string(done.n()) +
                                 ", the last of this run's " + std::to_string(total_) +
                                 " steps: the run is complete, nothing to resume");
    }
    const Step last(opt_.stop_after > 0 ? std::min(total_, opt_.stop_after) : total_);
    model_.set_shadow(!opt_.trace_path.empty() && lead_);  // computed only where a trace records it
    if (!opt_.trace_path.empty() && lead_)
      rec_ = std::make_unique<TraceRecorder>(opt_.trace_path, cfg_text_, be_.name(), cfg_, ws_, done.next(), last,
                                             [this](Layer l, GemmForm g) { return model_.shadows(l, g); });
    TrainResult res;
    res.total_steps = total_;
    auto tl = std::chrono::steady_clock::now();
    const auto stop_requested = [&] { return opt_.stop_requested && opt_.stop_requested->load(); };
    for (Step n = done.next(); n <= last && !halted_ && !stop_requested(); n = n.next()) {
      const StepRecord r = step(n, res);
      if (halted_) break;  // stopped after a micro-batch: the step is dropped, the weights are untouched
      if (rec_) rec_->append(r);
      res.losses.push_back(r.loss);
      res.final_loss = r.loss;
      res.final_train_acc = r.accuracy;
      ++res.steps;
      if (cfg_.checkpoint_every > 0 && n.n() % cfg_.checkpoint_every == 0) checkpoint(n);
      if (opt_.on_step) {
        const auto now = std::chrono::steady_clock::now();
        StepInfo si{n.n(), total_, r.loss, r.accuracy, r.lr,
                    1.0 / std::max(1e-9, std::chrono::duration<double>(now - tl).count()),
                    std::isnan(r.test_accuracy) ? -1 : r.test_accuracy};
        tl = now;
        opt_.on_step(si);
      }
      if (opt_.control && !opt_.control({n.n(), total_, -1, cfg_.num_microbatches, r.loss})) halted_ = true;
    }
    checkpoint(Step(done.n() + res.steps));
    if (rec_) rec_->close();
    summarize(res);
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    return res;
  }

 private:
  CheckpointedState state() { return {model_, deosc_, osc_, snaps_total_}; }
  void checkpoint(Step done) {
    if (!opt_.checkpoint_path.empty() && lead_) save_checkpoint(opt_.checkpoint_path, be_, cfg_text_, done, state());
  }

  /// One optimizer step: every micro-batch (forward, backward, main_grad),
  /// snapshots, AdamW, de-oscillation, metrics, evaluation at epoch ends.
  StepRecord step(Step n, TrainResult& res) {
    const size_t NMB = size_t(cfg_.num_microbatches), B = size_t(cfg_.global_batch);
    // every rank takes the snapshot steps' records (their gathers are collectives); rank 0 writes
    const bool snap = !opt_.trace_path.empty() &&
                      std::find(cfg_.snapshot_steps.begin(), cfg_.snapshot_steps.end(), n.n()) != cfg_.snapshot_steps.end();
    StepRecord r;
    r.step = n.n();
    r.layers.resize(std::size(kLayers));  // slots by Layer (simulator_plan)
    for (Weight* w : ws_) w->zero_grad(be_);
    // The micro-batches' losses, counts and main_grad norms arrive deferred
    // (Backend::*_deferred): one synchronisation for all of them after the
    // last micro-batch, or after each one when a control hook wants the
    // running loss.
    std::vector<Model::MbResult> mbs(NMB);
    for (Weight* w : ws_) r.layers[size_t(w->layer)].main_grad_norm.assign(NMB, 0.0);
    const DeferredScope guard(be_);  // an exception below leaves no value pending for mbs or r
    auto resolve = [&] {
      try {
        be_.resolve_deferred();
      } catch (const std::runtime_error& e) {
        throw std::runtime_error("step " + std::to_string(n.n()) + ": " + e.what());
      }
      // FP8 current scaling refuses a non-finite amax here, before the step's loss or gradients
      // are kept: the same error as when each amax was read at once, found without a wait per operand.
      if (std::optional<std::string> e = model_.take_current_amax_error())
        throw std::runtime_error("step " + std::to_string(n.n()) + ", " + *e);
    };
    double loss_sum = 0, aux_sum = 0;
    int64_t correct = 0;
    for (size_t mb = 0; mb < NMB; ++mb) {
      data_.load_microbatch(n, mb);
      MicroRecord mrec;
      Model::MbResult& m = mbs[mb];
      if (snap && mb == 0) model_.capture_operands(cfg_.snapshot_layers);  // the operands' block maps
      try {
        model_.train_microbatch(data_.x, data_.y, int(mb), int(NMB), n, 1.0f / float(B), mb == 0, snap, &mrec, m);
      } catch (const std::runtime_error& e) {  // numeric failure (e.g. a non-finite amax): name the step
        throw std::runtime_error("step " + std::to_string(n.n()) + ", micro-batch " + std::to_string(mb) + ": " +
                                 e.what());
      }
      model_.stop_capture();
      r.tokens_per_expert.insert(r.tokens_per_expert.end(), m.tokens_per_expert.begin(), m.tokens_per_expert.end());
      for (Weight* w : ws_) be_.l2_norm_deferred(w->main_grad, &r.layers[size_t(w->layer)].main_grad_norm[mb]);
      if (snap) stage_wgrad(mrec, mb);
      if (opt_.control) {
        resolve();
        double running = 0;
        for (size_t i = 0; i <= mb; ++i) running += mbs[i].loss_sum;
        if (!opt_.control({n.n(), total_, int(mb), int(NMB), running / double((mb + 1) * (B / NMB))})) {
          halted_ = true;
          for (Weight* w : ws_) w->drop_step_amaxes();  // the step is abandoned: its amaxes with it
          return r;
        }
      }
    }
    resolve();
    for (const Model::MbResult& m : mbs) {  // micro-batch order, as before
      loss_sum += m.loss_sum;
      aux_sum += m.aux;
      correct += m.correct;
    }
    r.loss = loss_sum / double(B) + aux_sum / double(NMB);
    r.aux_loss = aux_sum / double(NMB);
    r.accuracy = double(correct) / double(B);
    // A NaN/inf loss ends the run before anything of this step reaches the
    // trace or the weights: the trace stays complete up to the previous step.
    if (!std::isfinite(r.loss))
      throw std::runtime_error("training diverged: loss is " + std::string(std::isnan(r.loss) ? "NaN" : "infinite") +
                               " at step " + std::to_string(n.n()) + " (cross-entropy sum " +
                               std::to_string(loss_sum) + ", aux " + std::to_string(aux_sum) +
                               "); the trace ends at the step before");
    record_watch(r);
    if (snap && rec_) {
      maps_.clear();  // this step's block maps, computed on first use
      op_maps_.clear();
      rec_->write_snapshots(n, [&](size_t slot, std::string_view kind) { return snapshot(Layer(slot), kind); });
    }
    for (Weight* w : ws_)
      for (GemmForm g : {GemmForm::Fprop, GemmForm::Dgrad, GemmForm::Wgrad})
        if (model_.shadows(w->layer, g)) r.layers[size_t(w->layer)].shadow[size_t(g)].set(model_.shadow(w->layer, g));
    for (Weight* w : ws_)
      if (w->recipe.weight_quantized())
        for (Role role : kRoles) r.layers[size_t(w->layer)].quant[size_t(role)] = model_.stats(w->layer, role);
    // ---- optimizer: AdamW on FP32 masters, BF16 model copy, caches invalidated
    r.lr = lr_at(cfg_, n.n(), total_);
    const Backend::AdamW h{r.lr, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay, n.n()};
    if (dopt_) dopt_->step(h);  // per rank on its flat shard (sim/dist_optimizer.hpp)
    else
      for (Weight* w : ws_) be_.adamw(w->master, w->m, w->v, w->main_grad, h, w->model);
    for (Weight* w : ws_) {
      w->invalidate();
      w->update_scaling(be_);  // fp8_delayed: next step's scales from this step's amax history
    }
    if (cfg_.deosc) {
      for (auto& [nm, c] : deosc_.step(be_, ws_, n)) {
        snaps_total_[nm] += c;
        r.layers[size_t(model_.weight(nm).layer)].snapped = c;
      }
      for (const auto& [nm, e] : deosc_.edge_last()) r.layers[size_t(model_.weight(nm).layer)].edge = e;
    }
    for (Weight* w : ws_)
      if (w->recipe.weight_quantized()) {
        r.layers[size_t(w->layer)].osc = osc_.update(be_, *w);
        flips_total_[w->name] = r.layers[size_t(w->layer)].osc.flips_total;
      }
    r.test_accuracy = std::numeric_limits<double>::quiet_NaN();
    const bool epoch_end = n.n() % data_.steps_per_epoch == 0 || n.n() == total_;
    if (opt_.evaluate && epoch_end) {
      r.test_accuracy = data_.evaluate(model_);
      res.epoch_test_accuracy.push_back(r.test_accuracy);
      res.test_accuracy = r.test_accuracy;
    }
    resolve();  // the watched elements (record_watch) land in r before it leaves
    return r;
  }

  /// trace.watch_elements of the quantized snapshot layers (StepRecord::LayerRecord::Watch), taken
  /// where the snapshots are: after the last micro-batch, before the optimizer step.
  void record_watch(StepRecord& r) {
    if (!rec_ || cfg_.watch_elements.empty()) return;
    const std::vector<int64_t>& idx = cfg_.watch_elements;
    for (Weight* w : ws_) {
      if (!w->recipe.weight_quantized() ||
          std::find(cfg_.snapshot_layers.begin(), cfg_.snapshot_layers.end(), w->layer) == cfg_.snapshot_layers.end())
        continue;
      StepRecord::LayerRecord::Watch& o = r.layers[size_t(w->layer)].watch;
      o.element = idx;
      // Deferred: no synchronisation and no download of the whole weight per step; the
      // values arrive by the step's last resolve (o stays in place until then).
      o.master.assign(idx.size(), 0.0f);
      be_.gather_deferred(w->master, idx, o.master.data());
      // the quantization this step's fprop used (the weight_q snapshot's)
      be_.quant_elements_deferred(w->quantized(be_, weight_fprop_spec(be_, *w, w->model)), idx, &o.q);
      o.flips.assign(idx.size(), 0);
      if (const Backend::OscState* os = osc_.state(w->name)) be_.gather_deferred(os->flips, idx, o.flips.data());
      o.snaps.assign(idx.size(), 0);
      const DeOsc::State* ds = deosc_.state_of(w->name);
      if (ds && !ds->snaps.empty()) be_.gather_deferred(ds->snaps, idx, o.snaps.data());
    }
  }

  /// Snapshot layers: micro-batch mb's dW contribution into wgrad_mb [NMB * G, N, K].
  void stage_wgrad(const MicroRecord& mrec, size_t mb) {
    for (const auto& [l, g] : mrec.wgrad) {
      Tensor& st = staging_[size_t(l)];
      if (st.empty()) st = be_.alloc(DType::f32, {size_t(cfg_.num_microbatches) * g.dim(0), g.dim(1), g.dim(2)});
      be_.copy_into(g, st, mb * g.numel());
    }
  }

  template <class T>
  static std::vector<unsigned char> bytes(const std::vector<T>& v) {
    std::vector<unsigned char> b(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
  }

  /// The tensor of one snapshot kind (TraceRecorder::SnapshotSource), taken after the last
  /// micro-batch and before the optimizer step.
  std::vector<unsigned char> snapshot(Layer l, std::string_view kind) {
    Weight& w = model_.weight(l);
    if (kind == "master") return bytes(be_.download<float>(w.master));
    if (kind == "main_grad") return bytes(be_.download<float>(w.main_grad));
    if (kind == "wgrad_mb") return bytes(be_.download<float>(staging_[size_t(l)]));
    if (kind == "weight_q" && !w.recipe.weight_quantized()) return bytes(be_.download<float>(w.model));
    if (kind == "weight_q") {
      // exactly the spec this step's fprop used (before update_scaling), so the W fprop quantized
      Tensor d = be_.alloc(DType::f32, w.shape());
      be_.dequantize(w.quantized(be_, weight_fprop_spec(be_, w, w.model)), d);
      return bytes(be_.download<float>(d));
    }
    if (kind.substr(0, 6) == "quant/" && kind.substr(0, 8) != "quant/w/") {
      const size_t slash = kind.find('/', 6);
      const std::string_view op = kind.substr(6, slash - 6), what = kind.substr(slash + 1);
      const OperandMaps& m = operand_maps(w, op);
      if (what == "rows") return bytes(m.rows);
      if (what == "block_mse") return bytes(m.maps.mse);
      if (what == "block_sqnr_db") return bytes(m.maps.sqnr_db);
      if (what == "block_amax") return bytes(m.maps.amax);
      if (what == "scale") return m.maps.scale_inv.empty() ? bytes(m.maps.scale_bytes) : bytes(m.maps.scale_inv);
      if (what == "codes") return bytes(m.maps.codes);
      if (what == trace::schema::kTensorScaleInv.name) return bytes(m.tensor_scale_inv);
    }
    if (kind.substr(0, 8) == "quant/w/") {
      const BlockMaps& m = weight_maps(w);
      const std::string_view what = kind.substr(8);
      if (what == "block_mse") return bytes(m.mse);
      if (what == "block_sqnr_db") return bytes(m.sqnr_db);
      if (what == "block_amax") return bytes(m.amax);
      if (what == "scale") return m.scale_inv.empty() ? bytes(m.scale_bytes) : bytes(m.scale_inv);
      if (what == "codes") return bytes(m.codes);
    }
    if (kind.substr(0, 4) == "osc/") {
      // as of the snapshot: after the previous step's metrics update; zeros before the first
      const Backend::OscState* s = osc_.state(w.name);
      const std::string_view what = kind.substr(4);
      const size_t n = w.G * w.N * w.K;
      if (what == "flips") return s ? bytes(be_.download<uint32_t>(s->flips)) : bytes(std::vector<uint32_t>(n, 0));
      if (what == "ema") return s ? bytes(be_.download<float>(s->ema)) : bytes(std::vector<float>(n, 0.0f));
      if (what == "snaps") {  // de-oscillation's per-element counts; zeros before its first observation
        const DeOsc::State* d = deosc_.state_of(w.name);
        return d && !d->snaps.empty() ? bytes(be_.download<uint32_t>(d->snaps)) : bytes(std::vector<uint32_t>(n, 0));
      }
      if (what == "dist_ratio")
        return s ? bytes(dist_ratio_map(be_.download<float>(s->dist_q), be_.download<float>(s->dist_w)))
                 : bytes(std::vector<float>(n, 0.0f));
    }
    throw std::logic_error("trace snapshot: unknown kind " + std::string(kind));
  }

  /// Block maps of the quantization of W this step's fprop used (the weight_q snapshot's).
  const BlockMaps& weight_maps(Weight& w) {
    auto it = maps_.find(w.layer);
    if (it != maps_.end()) return it->second;
    const QTensor& qt = w.quantized(be_, weight_fprop_spec(be_, w, w.model));
    const std::vector<float> x = be_.download<float>(w.model);
    return maps_.emplace(w.layer, block_maps(x.data(), be_.download(qt))).first->second;
  }

  /// Block maps of an activation operand of micro-batch 0 (Model::capture), in the trace's fixed
  /// per-group layout (operand_grid) with the rows of each group.
  struct OperandMaps {
    std::vector<int64_t> rows;
    BlockMaps maps;
    std::vector<float> tensor_scale_inv;  ///< [G] each group's quantization's (NaN: a group without rows)
  };
  const OperandMaps& operand_maps(Weight& w, std::string_view op_name) {
    Operand o = Operand::X;
    for (Operand c : kOperands)
      if (op_name == name_of(c)) o = c;
    auto it = op_maps_.find({w.layer, o});
    if (it != op_maps_.end()) return it->second;
    const OperandCapture* c = model_.capture(w.layer, o);
    if (!c) throw std::logic_error(w.name + "." + name_of(o) + ": operand not captured at a snapshot step");
    const OperandGrid g = operand_grid(cfg_, w, o);
    std::vector<BlockMaps> per;
    std::vector<float> ts;
    for (size_t i = 0; i < c->q.size(); ++i) {
      per.push_back(c->rows[i] > 0 ? block_maps(c->x[i].data(), c->q[i]) : BlockMaps{});
      ts.push_back(c->rows[i] > 0 ? c->q[i].tensor_scale_inv : NAN);
    }
    OperandMaps m{c->rows, padded_group_maps(per, g.BR, g.BC, g.R, g.C, g.fp32_scales), std::move(ts)};
    return op_maps_.emplace(std::pair{w.layer, o}, std::move(m)).first->second;
  }

  void summarize(TrainResult& res) {
    for (Weight* w : ws_) {
      LayerSummary l;
      l.name = w->name;
      l.recipe = linear_recipe_name(w->recipe);
      l.quantized = w->recipe.weight_quantized();
      if (l.quantized) {
        l.w_mse = model_.stats(w->layer, Role::W).q.mse;
        l.w_sqnr_db = model_.stats(w->layer, Role::W).q.sqnr_db;
      }
      l.flips_total = flips_total_[w->name];
      l.snaps_total = snaps_total_[w->name];
      l.w_quantizations = w->quantizations();
      l.deosc_eligible = w->recipe.deosc_eligible();
      res.layers.push_back(l);
      res.final_masters.push_back(be_.download<float>(w->master));
    }
  }

  const std::chrono::steady_clock::time_point t0_;  ///< the run's start (data loading included)
  const Config& cfg_;
  Backend& be_;
  const TrainOptions& opt_;
  TrainData data_;
  Model model_;
  std::vector<Weight*> ws_;
  std::unique_ptr<Comm> own_comm_;            ///< parallel.ranks > 1 or shard-edge de-osc: the virtual ranks
  Comm* comm_ = nullptr;                      ///< own_comm_ or TrainOptions::comm (nullptr: one rank, no comm)
  bool lead_ = true;                          ///< this process writes the trace and checkpoints (rank 0's)
  std::unique_ptr<DistributedOptimizer> dopt_;
  DeOsc deosc_;
  OscMetrics osc_;
  const std::string cfg_text_;
  int64_t total_ = 0;
  std::unique_ptr<TraceRecorder> rec_;
  bool halted_ = false;  ///< TrainOptions::control asked to stop
  std::map<std::string, int64_t> snaps_total_;
  std::map<std::string, uint64_t> flips_total_;
  std::array<Tensor, 5> staging_;  ///< by Layer
  std::map<Layer, BlockMaps> maps_;  ///< this snapshot step's block maps
  std::map<std::pair<Layer, Operand>, OperandMaps> op_maps_;  ///< and its operands' maps
};

}  // namespace

MemoryEstimate estimate_run_memory(const Config& c) {
  // Double arithmetic: the bounded keys (config.hpp kMax*) keep every product far inside its
  // range, and an estimate needs no exact integer.
  const double d = c.d_model, f = c.d_ff, E = c.experts, k = c.top_k;
  MemoryEstimate m;
  // Per weight element: master, Adam m and v, the BF16 model copy, main_grad and the unfused
  // recipes' per-micro-batch dW (FP32 each, 24 B); quantized recipes add the fprop QDQ and the
  // quantized cache (8 B) and the oscillation metrics' state (5 FP32, a u8, a u32: 25 B);
  // MXFP4 weights with de-oscillation on its prev, prev_q, dist_w, dist_q (16 B); the bf16 model
  // copy the BF16 GEMMs read (2 B; counted for every weight: a quantized one's shadow GEMMs read it).
  const struct {
    Layer l;
    double elems;
  } ls[] = {{Layer::Embed, 784 * d}, {Layer::Router, E * d}, {Layer::Fc1, E * f * d}, {Layer::Fc2, E * d * f},
            {Layer::Head, 10 * d}};
  double w = 0;
  for (const auto& l : ls) {
    const LinearRecipe r = c.recipe.linear(l.l);
    const bool deosc = c.deosc && r.deosc_eligible();
    double per = 24 + 2;
    if (r.quantized()) per += 8 + 25;
    if (r.quantized(GemmForm::Dgrad) && r.quantized(GemmForm::Fprop) &&
        !(r.specs(GemmForm::Dgrad).w == r.specs(GemmForm::Fprop).w))
      per += 8;  // dgrad's own quantized W
    if (deosc) per += 16;
    if (deosc && c.deosc_shard_edge) per += 8;  // the full-tensor shadow's prev_q, dist_q
    // virtual ranks: each rank's gradient buffer and gathered model copy of the flat layout (FP32)
    if (c.ranks > 1) per += 8.0 * c.ranks;
    w += per * l.elems;
  }
  // Activations, FP32: per token the input, embed output, router logits and probabilities, the
  // residual and head tensors with their gradients; per routed row (top_k per token, plus up to
  // 32 rows of padding per expert) fc1's output and activation and fc2's input and output with
  // their gradients (4 x d_ff + 4 x d_model), and the quantized operand copies (~2 B each).
  const double b = double(c.global_batch) / c.num_microbatches;
  const auto act = [&](double tokens, double fwd_bwd) {
    const double rows = tokens * k + E * 32;
    return fwd_bwd * (4 * tokens * (2 * 784 + 6 * d + 4 * E + 32) + 4 * rows * (4 * f + 4 * d) + 2 * rows * (f + d));
  };
  const double a = act(b, 1.0) + act(1000, 0.5);  // training micro-batch; evaluation chunk (forward only)
  const double n_train = c.train_limit > 0 ? std::min<double>(double(c.train_limit), 60000) : 60000;
  const double n_test = c.test_limit > 0 ? std::min<double>(double(c.test_limit), 10000) : 10000;
  m.weights = uint64_t(w);
  m.activations = uint64_t(a);
  m.data = uint64_t((n_train + n_test) * (784 * 4 + 1));
  return m;
}

uint64_t machine_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  uint64_t bytes = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : std::numeric_limits<uint64_t>::max();
  // cgroup v2 limit ("max" when none) and v1's
  for (const char* f : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(f);
    uint64_t lim = 0;
    if (in >> lim && lim > 0) bytes = std::min(bytes, lim);
  }
  return bytes;
}

void check_run_memory(const Config& cfg, uint64_t machine_bytes) {
  const MemoryEstimate e = estimate_run_memory(cfg);
  if (e.total() <= machine_bytes) return;
  const auto gib = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f GiB", v / double(uint64_t(1) << 30));
    return std::string(b);
  };
  throw std::runtime_error("the run needs about " + gib(double(e.total())) + " (weights and their state " +
                           gib(double(e.weights)) + ", activations of one micro-batch " + gib(double(e.activations)) +
                           ", images " + gib(double(e.data)) + "); the machine has " + gib(double(machine_bytes)) +
                           ": reduce model.d_model, model.d_ff, model.experts, model.top_k or batch.global_batch, or "
                           "raise batch.num_microbatches");
}

TrainResult train(const Config& cfg, Backend& be, const TrainOptions& opt) {
  check_run_memory(cfg, machine_memory_bytes());  // before anything is allocated
  be.set_threads(opt.threads);
  return Trainer(cfg, be, opt).run();
}

}  // namespace mxsim::sim
