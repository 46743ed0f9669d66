// The trace recorder: one list of datasets, declared and appended from it.
#include "mxsim/sim/recorder.hpp"

#include <algorithm>
#include <chrono>
#include <limits>

#include "mxsim/hd/elementwise.hpp"
#include "mxsim/sim/maps.hpp"
#include "mxsim/trace/schema.hpp"
#include "mxsim/trace/writer.hpp"

namespace mxsim::sim {

namespace schema = trace::schema;
using trace::DType;

namespace {
const Weight* ws_by_slot(const std::vector<Weight*>& ws, size_t slot) {
  for (const Weight* w : ws)
    if (size_t(w->layer) == slot) return w;
  throw std::logic_error("trace recorder: no weight in slot " + std::to_string(slot));
}
}  // namespace

void StepRecord::LayerRecord::Shadow::set(const std::vector<OutputError>& e) {
  rel_l2.clear(), sqnr_db.clear(), max_abs_err.clear(), max_index.clear(), nonfinite.clear();
  for (const OutputError& o : e) {
    rel_l2.push_back(o.rel_l2);
    sqnr_db.push_back(o.sqnr_db);
    max_abs_err.push_back(o.max_abs_err);
    max_index.push_back(o.max_index);
    nonfinite.push_back(o.nonfinite);
  }
}

RunPlan simulator_plan(const Config& cfg, const std::vector<Weight*>& ws,
                       const std::function<bool(Layer, GemmForm)>& shadows) {
  RunPlan p;
  p.micro_batches = uint64_t(cfg.num_microbatches);
  p.experts = uint64_t(cfg.experts);
  p.model_metrics = true;
  for (const Weight* w : ws) {
    LayerPlan l;
    l.name = name_of(w->layer);
    l.slot = size_t(w->layer);
    l.recipe = linear_recipe_name(w->recipe);
    l.G = w->G, l.N = w->N, l.K = w->K;
    l.quantized = w->recipe.weight_quantized();
    for (Role r : kRoles) l.tensor_scale[size_t(r)] = l.quantized && w->recipe.two_level_scale(r);
    l.deosc = cfg.deosc && w->recipe.deosc_eligible();
    l.shard_edge = l.deosc && cfg.deosc_shard_edge;
    for (GemmForm g : {GemmForm::Fprop, GemmForm::Dgrad, GemmForm::Wgrad})
      l.shadow[size_t(g)] = shadows && shadows(w->layer, g);
    const bool snap_layer =
        std::find(cfg.snapshot_layers.begin(), cfg.snapshot_layers.end(), w->layer) != cfg.snapshot_layers.end();
    l.snapshots = snap_layer;
    l.snapshot_wgrad_mb = true;
    if (snap_layer && l.quantized) {
      l.watch = cfg.watch_elements.size();
      l.watch_fp32_scale = w->recipe.weight_spec().scale_kind == ScaleKind::FP32;
    }
    p.layers.push_back(l);
  }
  return p;
}

namespace {
/// Where a quantization statistic of schema::kQuantStats lives in a layer's operand record, and
/// the dtype of that field (checked against the table's: a mismatch would write reinterpreted bits).
struct QuantField {
  const void* (*get)(const OperandStats&);
  DType dtype;
};
QuantField quant_field(const schema::SeriesName& s) {
  using O = const OperandStats&;
  const std::string_view n = s.name;
// the field's own type gives the dtype that is compared with the table's
#define MXSIM_QF(name, member)                                                                     \
  n == name ? QuantField{[](O o) -> const void* { return &o.member; },                             \
                         trace::dtype_of<std::remove_cvref_t<decltype(std::declval<O>().member)>>()}
  const QuantField f = MXSIM_QF("mse", q.mse)
      : MXSIM_QF("sqnr_db", q.sqnr_db)
      : MXSIM_QF("underflow", q.underflow)
      : MXSIM_QF("saturated", q.saturated)
      : MXSIM_QF("count", q.count)
      : MXSIM_QF("scale_exp_hist", scale_exp_hist[0])
      : MXSIM_QF("mean_err", q.mean_err)
      : MXSIM_QF("rounded", q.rounded)
      : MXSIM_QF("rounded_up", q.rounded_up)
      : MXSIM_QF("expected_up", q.expected_up)
      : MXSIM_QF("tensor_scale_inv", q.tensor_scale_inv)
      : QuantField{nullptr, s.dtype};
#undef MXSIM_QF
  if (!f.get || f.dtype != s.dtype)
    throw std::logic_error("trace schema: quant series " + std::string(n) + " has no QuantStats field of its dtype");
  return f;
}

/// A layer or scalar name that can be one HDF5 path component of the schema.
void check_component(const std::string& what, const std::string& n) {
  if (n.empty() || n.find('/') != std::string::npos || n == "." || n == "..")
    throw std::invalid_argument("trace " + what + " name '" + n + "' must be non-empty and hold no '/'");
}
}  // namespace

void TraceRecorder::plan_series(const RunPlan& plan) {
  const uint64_t NMB = plan.micro_batches, E = plan.experts;
  auto add = [&](std::string name, DType dt, std::vector<uint64_t> shape, std::function<const void*(const StepRecord&)> f) {
    for (const Series& s : series_)
      if (s.name == name) throw std::invalid_argument("trace series " + name + " declared twice (a repeated name)");
    series_.push_back({std::move(name), dt, std::move(shape), std::move(f)});
  };
  add(schema::kTrainStep, DType::i64, {}, [](const StepRecord& r) { return &r.step; });
  add(schema::kTrainLoss, DType::f64, {}, [](const StepRecord& r) { return &r.loss; });
  if (plan.model_metrics) {
    add(schema::kTrainAuxLoss, DType::f64, {}, [](const StepRecord& r) { return &r.aux_loss; });
    add(schema::kTrainAccuracy, DType::f64, {}, [](const StepRecord& r) { return &r.accuracy; });
  }
  add(schema::kTrainLr, DType::f32, {}, [](const StepRecord& r) { return &r.lr; });
  if (E > 0)
    add(schema::kTokensPerExpert, DType::i64, {NMB, E}, [](const StepRecord& r) { return r.tokens_per_expert.data(); });
  if (plan.model_metrics)
    add(schema::kTestAccuracy, DType::f64, {}, [](const StepRecord& r) { return &r.test_accuracy; });
  for (size_t i = 0; i < plan.scalars.size(); ++i) {
    check_component("scalar", plan.scalars[i]);
    add(schema::train_scalar(plan.scalars[i]), DType::f64, {}, [i](const StepRecord& r) { return &r.scalars.at(i); });
  }
  for (const LayerPlan& lp : plan.layers) {
    check_component("layer", lp.name);
    const size_t l = lp.slot;
    const std::string& L = lp.name;
    add(schema::main_grad_norm(L), DType::f64, {NMB}, [l](const StepRecord& r) { return r.layers.at(l).main_grad_norm.data(); });
    if (lp.grad_added)
      add(schema::grad_added(L), DType::u8, {NMB}, [l](const StepRecord& r) { return r.layers.at(l).grad_added.data(); });
    for (GemmForm g : {GemmForm::Fprop, GemmForm::Dgrad, GemmForm::Wgrad}) {
      if (!lp.shadow[size_t(g)]) continue;
      const char* gn = kGemmNames[size_t(g)];
      auto sh = [l, g](const StepRecord& r) -> const StepRecord::LayerRecord::Shadow& {
        return r.layers.at(l).shadow[size_t(g)];
      };
      add(schema::shadow(L, gn, "rel_l2"), DType::f64, {NMB}, [sh](const StepRecord& r) { return sh(r).rel_l2.data(); });
      add(schema::shadow(L, gn, "sqnr_db"), DType::f64, {NMB}, [sh](const StepRecord& r) { return sh(r).sqnr_db.data(); });
      add(schema::shadow(L, gn, "max_abs_err"), DType::f64, {NMB},
          [sh](const StepRecord& r) { return sh(r).max_abs_err.data(); });
      add(schema::shadow(L, gn, "max_index"), DType::i64, {NMB},
          [sh](const StepRecord& r) { return sh(r).max_index.data(); });
      add(schema::shadow(L, gn, "nonfinite"), DType::u64, {NMB},
          [sh](const StepRecord& r) { return sh(r).nonfinite.data(); });
    }
    if (lp.quantized) {
      for (Role role : kRoles)
        for (const schema::SeriesName& s : schema::kQuantStats) {
          const QuantField f = quant_field(s);
          const size_t o = size_t(role);
          add(schema::quant(L, name_of(role), s.name), s.dtype,
              std::string_view(s.name) == "scale_exp_hist" ? std::vector<uint64_t>{schema::kScaleExpBins}
                                                            : std::vector<uint64_t>{},
              [l, o, f](const StepRecord& r) { return f.get(r.layers.at(l).quant[o]); });
        }
      const QuantField ts = quant_field(schema::kTensorScaleInv);  // two-level scales only
      for (Role role : kRoles)
        if (lp.tensor_scale[size_t(role)])
          add(schema::quant(L, name_of(role), schema::kTensorScaleInv.name), schema::kTensorScaleInv.dtype, {},
              [l, o = size_t(role), ts](const StepRecord& r) { return ts.get(r.layers.at(l).quant[o]); });
      auto osc = [l](const StepRecord& r) -> const Backend::OscStep& { return r.layers.at(l).osc; };
      add(schema::osc(L, "flips"), DType::u64, {}, [osc](const StepRecord& r) { return &osc(r).flips; });
      add(schema::osc(L, "flips_total"), DType::u64, {}, [osc](const StepRecord& r) { return &osc(r).flips_total; });
      add(schema::osc(L, "ema_mean"), DType::f64, {}, [osc](const StepRecord& r) { return &osc(r).ema_mean; });
      add(schema::osc(L, "ema_frac_above"), DType::f64, {}, [osc](const StepRecord& r) { return &osc(r).ema_frac_above; });
      add(schema::osc(L, "dist_ratio_mean"), DType::f64, {}, [osc](const StepRecord& r) { return &osc(r).dist_ratio_mean; });
    }
    if (lp.deosc) add(schema::deosc_snapped(L), DType::i64, {}, [l](const StepRecord& r) { return &r.layers.at(l).snapped; });
    if (lp.shard_edge) {
      add(schema::deosc_shard_edge_qdiff(L), DType::i64, {}, [l](const StepRecord& r) { return &r.layers.at(l).edge.qdiff; });
      add(schema::deosc_shard_edge_changed(L), DType::i64, {},
          [l](const StepRecord& r) { return &r.layers.at(l).edge.changed; });
    }
    if (lp.watch > 0) {  // format 4: watched elements
      const uint64_t W = lp.watch;
      auto wt = [l](const StepRecord& r) -> const StepRecord::LayerRecord::Watch& { return r.layers.at(l).watch; };
      add(schema::watch(L, "element"), DType::i64, {W}, [wt](const StepRecord& r) { return wt(r).element.data(); });
      add(schema::watch(L, "master"), DType::f32, {W}, [wt](const StepRecord& r) { return wt(r).master.data(); });
      add(schema::watch(L, "weight_q"), DType::f32, {W}, [wt](const StepRecord& r) { return wt(r).q.value.data(); });
      add(schema::watch(L, "code"), DType::u8, {W}, [wt](const StepRecord& r) { return wt(r).q.code.data(); });
      if (lp.watch_fp32_scale)
        add(schema::watch(L, "scale"), DType::f32, {W}, [wt](const StepRecord& r) { return wt(r).q.scale_inv.data(); });
      else
        add(schema::watch(L, "scale"), DType::u8, {W}, [wt](const StepRecord& r) { return wt(r).q.scale_bytes.data(); });
      add(schema::watch(L, "flips"), DType::u32, {W}, [wt](const StepRecord& r) { return wt(r).flips.data(); });
      if (lp.deosc)
        add(schema::watch(L, "snaps"), DType::u32, {W}, [wt](const StepRecord& r) { return wt(r).snaps.data(); });
    }
  }
  static_assert(sizeof(size_t) == sizeof(uint64_t), "QuantStats counts are written as u64");
}

TraceRecorder::TraceRecorder(const std::string& path, const std::string& config_toml, const std::string& backend,
                             const Config& cfg, const std::vector<Weight*>& ws, Step first, Step last,
                             const std::function<bool(Layer, GemmForm)>& shadows)
    : first_(first) {
  const RunPlan plan = simulator_plan(cfg, ws, shadows);
  plan_series(plan);
  set_snapshot_steps(cfg.snapshot_steps, first.n(), last.n());
  for (const LayerPlan& l : plan.layers)
    if (l.snapshots && !snap_steps_.empty()) {
      declare_weight_snapshots(l, plan.micro_batches);
      if (l.quantized) declare_operand_maps(cfg, *ws_by_slot(ws, l.slot));
    }
  open(path, config_toml, trace::make_provenance(backend, cfg.seed), plan);
}

TraceRecorder::TraceRecorder(const std::string& path, const std::string& config_toml, const trace::Provenance& prov,
                             const RunPlan& plan)
    : first_(Step(plan.first_step)) {
  plan_series(plan);  // (checks every layer name)
  set_snapshot_steps(plan.snapshot_steps, plan.first_step, std::numeric_limits<int64_t>::max());
  for (const LayerPlan& l : plan.layers)
    if (l.snapshots && !snap_steps_.empty()) declare_weight_snapshots(l, plan.micro_batches);
  if (snaps_.empty()) snap_steps_.clear();  // no layer takes snapshots: no step is due
  open(path, config_toml, prov, plan);
}

void TraceRecorder::set_snapshot_steps(const std::vector<int64_t>& steps, int64_t first, int64_t last) {
  for (int64_t s : steps)
    if (s >= first && s <= last) snap_steps_.push_back(s);
  std::sort(snap_steps_.begin(), snap_steps_.end());
  snap_steps_.erase(std::unique(snap_steps_.begin(), snap_steps_.end()), snap_steps_.end());
}

void TraceRecorder::open(const std::string& path, const std::string& config_toml, const trace::Provenance& prov,
                         const RunPlan& plan) {
  w_ = std::make_unique<trace::Writer>(path, config_toml, prov);
  for (const LayerPlan& l : plan.layers) {
    const std::string g = schema::layer(l.name);
    if (!l.recipe.empty()) w_->set_group_attribute(g, schema::kLayerRecipeAttr, l.recipe);
    if (!l.module.empty()) w_->set_group_attribute(g, schema::kLayerModuleAttr, l.module);
    w_->set_group_attribute(g, schema::kLayerShapeAttr, std::vector<int64_t>{int64_t(l.G), int64_t(l.N), int64_t(l.K)});
  }
  for (const Series& s : series_) w_->declare_series(s.name, s.dtype, s.shape);
  // Snapshot rows are trace rows: row r holds global step first + r.
  std::vector<int64_t> rows;
  for (int64_t s : snap_steps_) rows.push_back(s - first_.n());
  for (const Snapshot& s : snaps_) w_->declare_snapshot(s.name, s.dtype, s.shape, rows);
  w_->start_swmr();
  if (trace::hdf5_thread_safe()) writer_ = std::thread([this] { writer_loop(); });
}

TraceRecorder::~TraceRecorder() { stop_writer(); }

void TraceRecorder::writer_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and every row written
    busy_ = true;
    const StepRecord r = std::move(queue_.front());
    queue_.pop_front();
    lk.unlock();
    std::exception_ptr e;
    while (test_hold_writer.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!error_) try {  // (error_ is written only here)
        write_row(r);
      } catch (...) {
        e = std::current_exception();
      }
    lk.lock();
    if (e) error_ = e;
    busy_ = false;
    cv_.notify_all();
  }
}

void TraceRecorder::drain() {
  if (writer_.joinable()) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [this] { return queue_.empty() && !busy_; });
  }
  if (error_) std::rethrow_exception(error_);
}

void TraceRecorder::stop_writer() noexcept {
  if (!writer_.joinable()) return;
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  writer_.join();  // the queued rows are written first
}

OperandGrid operand_grid(const Config& cfg, const Weight& w, Operand o) {
  const OperandSpecs& sp = w.recipe.specs(gemm_of(o));
  const QuantSpec& s = o == Operand::X ? sp.x_fprop : o == Operand::Dy ? sp.dy_dgrad : o == Operand::XWgrad ? sp.x_wgrad : sp.dy_wgrad;
  const bool experts = w.layer == Layer::Fc1 || w.layer == Layer::Fc2;
  const int64_t b = cfg.global_batch / cfg.num_microbatches;  // tokens of a micro-batch
  OperandGrid g;
  g.G = experts ? w.G : 1;
  // an expert gets each token at most once (top-k picks distinct experts), padded to 16 rows
  g.R = uint64_t(experts ? hd::padded_rows(b, kExpertRowPad) : b);
  g.C = o == Operand::X || o == Operand::XWgrad ? w.K : w.N;
  const BlockExtent e = logical_block_extent(s, along_m(o));
  g.BR = blocks_along(g.R, e.rows);
  g.BC = blocks_along(g.C, e.cols);
  g.fp32_scales = s.scale_kind == ScaleKind::FP32;
  g.two_level = has_tensor_scale(s.scale_kind);
  return g;
}

void TraceRecorder::declare_weight_snapshots(const LayerPlan& l, uint64_t NMB) {
  const std::string& L = l.name;
  const std::vector<uint64_t> sh = {l.G, l.N, l.K};
  for (const char* kind : schema::kSnapshotKinds) {
    std::vector<uint64_t> s = sh;
    if (std::string_view(kind) == "wgrad_mb") {
      if (!l.snapshot_wgrad_mb) continue;
      s.insert(s.begin(), NMB);
    }
    snaps_.push_back({schema::snapshot(L, kind), l.slot, kind, DType::f32, s});
  }
  if (!l.quantized) return;
  // format 2: the weight's block maps and element maps, in the recipe's block grid over [N, K]
  const QuantSpec ws = parse_linear_recipe(l.recipe, RecipeConfig{}).weight_spec();
  const uint64_t br = ws.block_rows == 0 ? l.N : uint64_t(ws.block_rows),
                 bc = ws.block_cols == 0 ? l.K : uint64_t(ws.block_cols);
  const std::vector<uint64_t> bs = {l.G, (l.N + br - 1) / br, (l.K + bc - 1) / bc};
  for (const char* m : {"block_mse", "block_sqnr_db", "block_amax"})
    snaps_.push_back({schema::block_map(L, "w", m), l.slot, std::string("quant/w/") + m, DType::f32, bs});
  snaps_.push_back({schema::block_map(L, "w", "scale"), l.slot, "quant/w/scale",
                    ws.scale_kind == ScaleKind::FP32 ? DType::f32 : DType::u8, bs});
  snaps_.push_back({schema::block_map(L, "w", "codes"), l.slot, "quant/w/codes", DType::u8, sh});
  snaps_.push_back({schema::element_map(L, "flips"), l.slot, "osc/flips", DType::u32, sh});
  snaps_.push_back({schema::element_map(L, "ema"), l.slot, "osc/ema", DType::f32, sh});
  snaps_.push_back({schema::element_map(L, "dist_ratio"), l.slot, "osc/dist_ratio", DType::f32, sh});
  if (l.deosc) snaps_.push_back({schema::element_map(L, "snaps"), l.slot, "osc/snaps", DType::u32, sh});  // format 4
}

std::vector<TraceRecorder::SnapshotKey> TraceRecorder::snapshot_keys() const {
  std::vector<SnapshotKey> k;
  for (const Snapshot& s : snaps_) k.push_back({s.slot, s.kind});
  return k;
}

void TraceRecorder::declare_operand_maps(const Config& cfg, const Weight& w) {
  const char* L = name_of(w.layer);
  for (Operand o : kOperands) {
    if (!w.recipe.quantized(gemm_of(o))) continue;  // an operand of a BF16 GEMM has no blocks
    const OperandGrid g = operand_grid(cfg, w, o);
    const std::string op = name_of(o), pre = "quant/" + op + "/";
    const std::vector<uint64_t> bs = {g.G, g.BR, g.BC};
    snaps_.push_back({schema::block_map(L, op, "rows"), size_t(w.layer), pre + "rows", DType::i64, {g.G}});
    for (const char* m : {"block_mse", "block_sqnr_db", "block_amax"})
      snaps_.push_back({schema::block_map(L, op, m), size_t(w.layer), pre + m, DType::f32, bs});
    snaps_.push_back({schema::block_map(L, op, "scale"), size_t(w.layer), pre + "scale", g.fp32_scales ? DType::f32 : DType::u8, bs});
    snaps_.push_back({schema::block_map(L, op, "codes"), size_t(w.layer), pre + "codes", DType::u8, {g.G, g.R, g.C}});
    if (g.two_level)  // each group's own S_dec: the wgrad operands are quantized per expert
      snaps_.push_back({schema::block_map(L, op, schema::kTensorScaleInv.name), size_t(w.layer),
                        pre + schema::kTensorScaleInv.name, schema::kTensorScaleInv.dtype, {g.G}});
  }
}

bool TraceRecorder::snapshot_due(Step n) const { return std::binary_search(snap_steps_.begin(), snap_steps_.end(), n.n()); }

void TraceRecorder::write_snapshots(Step n, const SnapshotSource& src) {
  (void)n;  // the writer knows its row; n is checked by the caller through snapshot_due
  drain();  // the rows before this step are written (the writer's row count places the snapshot)
  for (const Snapshot& s : snaps_) {
    const std::vector<unsigned char> b = src(s.slot, s.kind);
    uint64_t n = trace::dtype_size(s.dtype);
    for (uint64_t d : s.shape) n *= d;
    if (b.size() != n)
      throw std::logic_error("trace snapshot " + s.name + ": " + std::to_string(b.size()) + " bytes for " +
                             std::to_string(n));
    w_->write_snapshot_raw(s.name, s.dtype, b.data());
  }
}

void TraceRecorder::write_row(const StepRecord& r) {
  for (const Series& s : series_) w_->append_raw(s.name, s.dtype, s.row(r));
  w_->end_step();
}

void TraceRecorder::append(const StepRecord& r) {
  if (!writer_.joinable()) return write_row(r);
  std::unique_lock<std::mutex> lk(mu_);
  if (error_) std::rethrow_exception(error_);
  cv_.wait(lk, [this] { return queue_.size() < kMaxQueuedRows || error_; });
  if (error_) std::rethrow_exception(error_);
  queue_.push_back(r);
  cv_.notify_all();
}

void TraceRecorder::close() {
  stop_writer();
  if (error_) std::rethrow_exception(error_);
  w_->close();
}

}  // namespace mxsim::sim
