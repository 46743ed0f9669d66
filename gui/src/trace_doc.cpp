// TraceDocument: metadata and asynchronous cached reads (see trace_doc.hpp).
#include "trace_doc.hpp"

#include <QFileInfo>
#include <QMetaObject>
#include <algorithm>
#include <cstring>
#include <exception>

#include "mxsim/format.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/recipe.hpp"
#include "names.hpp"

namespace mxsim::inspector {

namespace {

template <class T>
void widen(const std::vector<unsigned char>& raw, std::vector<double>& out) {
  const size_t n = raw.size() / sizeof(T);
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
    out[i] = double(v);
  }
}

void widen_any(trace::DType t, const std::vector<unsigned char>& raw, std::vector<double>& out) {
  using trace::DType;
  switch (t) {
    case DType::f32: widen<float>(raw, out); break;
    case DType::f64: widen<double>(raw, out); break;
    case DType::u8: widen<uint8_t>(raw, out); break;
    case DType::i32: widen<int32_t>(raw, out); break;
    case DType::u32: widen<uint32_t>(raw, out); break;
    case DType::i64: widen<int64_t>(raw, out); break;
    case DType::u64: widen<uint64_t>(raw, out); break;
  }
}

BlockShape block_of(const QuantSpec& s, bool transposed) {
  BlockShape b;
  b.rows = transposed ? s.block_cols : s.block_rows;
  b.cols = transposed ? s.block_rows : s.block_cols;
  b.format = short_name(s.elem);
  b.scale = s.scale_kind == ScaleKind::E8M0 ? "E8M0" : s.scale_kind == ScaleKind::FP32 ? "FP32 scale_inv" : "UE4M3";
  b.kind = s.scale_kind;
  return b;
}

/// Layer weight shapes [G, N, K] of the simulator's model (sim/model.hpp layer table),
/// used only when the trace holds no snapshot that states the shape.
std::array<uint64_t, 3> model_shape(const sim::Config& c, const std::string& l) {
  const uint64_t d = uint64_t(c.d_model), f = uint64_t(c.d_ff), E = uint64_t(c.experts);
  if (l == "embed") return {1, d, 784};
  if (l == "router") return {1, E, d};
  if (l == "fc1") return {E, f, d};
  if (l == "fc2") return {E, d, f};
  if (l == "head") return {1, 10, d};
  return {0, 0, 0};
}

/// The recipe name of simulator layer l in its config ("" for a name the simulator has not),
/// per GEMM where they differ (sim::linear_recipe_name).
std::string recipe_of(const sim::Config& c, const std::string& l) {
  sim::Layer layer;
  return sim::layer_from_name(l, layer) ? sim::linear_recipe_name(c.recipe.linear(layer)) : std::string();
}

/// The layers a trace holds (/layers/<l>/... and /snap/<l>/...): the simulator's in its model
/// order (sim/layers.hpp), then any other names (a recorder's module names) in name order.
std::vector<std::string> layer_names(const std::vector<trace::DatasetInfo>& ds) {
  std::vector<std::string> found;
  for (const auto& d : ds)
    for (const char* root : {"/layers/", "/snap/"}) {
      const size_t n = std::strlen(root);
      if (d.name.compare(0, n, root) != 0) continue;
      const size_t end = d.name.find('/', n);
      if (end == std::string::npos || end == n) continue;
      std::string l = d.name.substr(n, end - n);
      if (std::find(found.begin(), found.end(), l) == found.end()) found.push_back(std::move(l));
    }
  std::vector<std::string> out;
  for (sim::Layer sl : sim::kLayers)
    if (const char* l = sim::name_of(sl); std::find(found.begin(), found.end(), l) != found.end()) out.emplace_back(l);
  std::vector<std::string> rest;
  for (const std::string& l : found)
    if (std::find(out.begin(), out.end(), l) == out.end()) rest.push_back(l);
  std::sort(rest.begin(), rest.end());
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

TraceMeta build_meta(const trace::Reader& r, const QString& path) {
  TraceMeta m;
  m.path = path;
  m.format = r.format_version();
  if (m.format > names::kMaxFormat || m.format < names::kMinFormat)
    throw trace::TraceError(path.toStdString() + ": trace format " + std::to_string(m.format) +
                            (m.format > names::kMaxFormat ? " is newer than" : " is not one of") +
                            " the formats this inspector reads (" + std::to_string(names::kMinFormat) + ".." +
                            std::to_string(names::kMaxFormat) + "); open it with a newer mxsim-inspector");
  m.prov = r.provenance();
  m.config_toml = QString::fromStdString(r.config_toml());
  m.steps = r.steps_completed();
  m.datasets = r.datasets();
  if (const auto* t = m.dataset(names::kTokensPerExpert); t && t->row_shape.size() == 2) {
    m.num_microbatches = int(t->row_shape[0]);
    m.experts = int(t->row_shape[1]);
  }
  // A simulator's trace holds its config (the layers' recipes and shapes); a recorder's holds
  // its own settings, and every layer's recipe and shape as attributes of /layers/<l>.
  const bool simulator = m.prov.producer == trace::kProducerSimulator;
  std::optional<sim::Config> cfg;
  if (simulator) {
    try {
      cfg = sim::parse_config(m.config_toml.toStdString(), {}, "trace config");
    } catch (const std::exception& e) {
      m.config_note = QString("the trace's config could not be read by this inspector (%1); recipes and block "
                              "shapes are unknown")
                          .arg(e.what());
    }
  }
  for (const std::string& l : layer_names(m.datasets)) {
    LayerMeta lm;
    lm.name = QString::fromStdString(l);
    lm.quantized = m.dataset(names::quant(l, "w", "mse")) != nullptr;
    lm.osc = m.dataset(names::osc(l, "flips")) != nullptr;
    lm.deosc = m.dataset(names::deosc_snapped(l)) != nullptr;
    const auto shape_attr = r.group_i64_attribute(names::layer(l), trace::schema::kLayerShapeAttr);
    if (const auto* s = m.dataset(names::snap(l, "master")); s && s->row_shape.size() == 3) {
      lm.shape = {s->row_shape[0], s->row_shape[1], s->row_shape[2]};
      lm.snapshot_steps = s->snapshot_steps;
    } else if (shape_attr && shape_attr->size() == 3 && (*shape_attr)[0] > 0 && (*shape_attr)[1] > 0 &&
               (*shape_attr)[2] > 0) {
      lm.shape = {uint64_t((*shape_attr)[0]), uint64_t((*shape_attr)[1]), uint64_t((*shape_attr)[2])};
    } else if (cfg) {
      lm.shape = model_shape(*cfg, l);
    }
    if (m.dataset(names::watch(l, "element")) && m.steps > 0)  // one row: the indices are the same every step
      lm.watched = r.read_series<int64_t>(names::watch(l, "element"), 0, 1);
    std::string rn;
    if (auto a = r.group_string_attribute(names::layer(l), trace::schema::kLayerRecipeAttr)) rn = *a;
    else if (cfg) rn = recipe_of(*cfg, l);
    lm.recipe = QString::fromStdString(rn);
    if (!rn.empty()) {
      try {  // a recorder's recipe options (stochastic rounding, ...) do not change block shapes
        const sim::LinearRecipe rec = sim::parse_linear_recipe(rn, cfg ? cfg->recipe : sim::RecipeConfig{});
        // W [N, K] and x [M, K] along K, as stored; dy [M, N] along N; the wgrad operands
        // x [M, K] and dy [M, N] along M (stored transposed; sim/recipe.hpp). Each from the
        // GEMM that quantizes it; an operand of a BF16 GEMM keeps the unknown shape.
        using G = GemmForm;
        if (rec.weight_quantized()) lm.blocks[0] = block_of(rec.weight_spec(), false);
        if (rec.quantized(G::Fprop)) lm.blocks[1] = block_of(rec.specs(G::Fprop).x_fprop, false);
        if (rec.quantized(G::Dgrad)) lm.blocks[2] = block_of(rec.specs(G::Dgrad).dy_dgrad, false);
        if (rec.quantized(G::Wgrad)) {
          lm.blocks[3] = block_of(rec.specs(G::Wgrad).x_wgrad, true);
          lm.blocks[4] = block_of(rec.specs(G::Wgrad).dy_wgrad, true);
        }
      } catch (const std::exception&) {
      }
    }
    m.layers.push_back(lm);
  }
  if (m.dataset(names::kStep)) {
    m.global_step = r.read_series<int64_t>(names::kStep);
  }
  return m;
}

}  // namespace

QString BlockShape::text() const {
  if (rows == 0 && cols == 0) return "per tensor";
  auto d = [](int v) { return v == 0 ? QString("all") : QString::number(v); };
  return d(rows) + "x" + d(cols);
}

bool LayerMeta::first_watched(int g, int& eg, int& n, int& k) const {
  const int64_t N = int64_t(shape[1]), K = int64_t(shape[2]);
  if (N == 0 || K == 0) return false;
  for (const int64_t f : watched) {
    if (f < 0 || f >= int64_t(shape[0]) * N * K || (g >= 0 && f / (N * K) != g)) continue;
    eg = int(f / (N * K));
    n = int(f / K % N);
    k = int(f % K);
    return true;
  }
  return false;
}

const LayerMeta* TraceMeta::layer(const QString& name) const {
  for (const auto& l : layers)
    if (l.name == name) return &l;
  return nullptr;
}

const trace::DatasetInfo* TraceMeta::dataset(const std::string& name) const {
  auto it = std::lower_bound(datasets.begin(), datasets.end(), name,
                             [](const trace::DatasetInfo& a, const std::string& b) { return a.name < b; });
  return it != datasets.end() && it->name == name ? &*it : nullptr;
}

int64_t TraceMeta::global(uint64_t row) const {
  return row < global_step.size() ? global_step[row] : int64_t(row) + 1;
}

int64_t TraceMeta::row_of(int64_t step) const {
  if (global_step.empty()) return step >= 1 && uint64_t(step) <= steps ? step - 1 : -1;
  // /train/step grows by one per row (docs/trace-format.md); search, so that any increasing one works
  const auto end = global_step.begin() + std::ptrdiff_t(std::min<uint64_t>(steps, global_step.size()));
  const auto it = std::lower_bound(global_step.begin(), end, step);
  return it != end && *it == step ? int64_t(it - global_step.begin()) : -1;
}

SeriesData read_series_double(const trace::Reader& r, const std::string& name, uint64_t first, uint64_t count) {
  const auto& in = r.info(name);
  SeriesData s;
  s.row_shape = in.row_shape;
  s.elems = in.row_elems();
  widen_any(in.dtype, r.read_raw(name, in.dtype, first, count), s.v);
  s.rows = s.elems ? s.v.size() / s.elems : 0;
  return s;
}

SeriesData read_snapshot_double(const trace::Reader& r, const std::string& name, int64_t step) {
  const auto& in = r.info(name);
  SeriesData s;
  s.row_shape = in.row_shape;
  s.elems = in.row_elems();
  widen_any(in.dtype, r.read_snapshot_raw(name, in.dtype, step), s.v);
  s.rows = 1;
  return s;
}

QString explain_open_error(const QString& path, const QString& raw) {
  const QString name = QFileInfo(path).fileName();
  if (raw.contains("missing (no such file)")) return QString("%1: no such file").arg(path);
  if (raw.contains("not an HDF5 file")) return QString("%1 is not an HDF5 file, so not an mxsim trace").arg(name);
  if (raw.contains("not an mxsim trace"))
    return QString("%1 is an HDF5 file but not an mxsim trace (it has no mxsim_trace_format attribute or no /steps "
                   "dataset)")
        .arg(name);
  if (raw.contains("newer than")) return raw;
  if (raw.contains("cannot open") || raw.contains("truncated") || raw.contains("signature"))
    return QString("%1 cannot be opened: the file is truncated or damaged (HDF5 says: %2)").arg(name, raw);
  return QString("%1 cannot be read as an mxsim trace: %2").arg(name, raw);
}

/// The one I/O thread; lives while any document does.
class IoThread {
 public:
  static std::shared_ptr<IoThread> get() {
    static std::weak_ptr<IoThread> w;
    auto p = w.lock();
    if (!p) {
      p = std::shared_ptr<IoThread>(new IoThread);
      w = p;
    }
    return p;
  }
  ~IoThread() {
    t_.quit();
    t_.wait();
  }
  void post(std::function<void()> f) { QMetaObject::invokeMethod(worker_, std::move(f), Qt::QueuedConnection); }

 private:
  IoThread() {
    t_.setObjectName("trace-io");
    worker_ = new QObject;
    worker_->moveToThread(&t_);
    QObject::connect(&t_, &QThread::finished, worker_, &QObject::deleteLater);
    t_.start();
  }
  QThread t_;
  QObject* worker_ = nullptr;  // lives on t_
};

TraceDocument::TraceDocument(const QString& path, QObject* parent)
    : QObject(parent), path_(path), io_(IoThread::get()), reader_(std::make_shared<std::unique_ptr<trace::Reader>>()) {
  cache_.setMaxCost(512ll << 20);
  connect(&poll_, &QTimer::timeout, this, &TraceDocument::refreshNow);
}

TraceDocument::~TraceDocument() {
  for (auto& f : inflight_) f.cancelled->store(true);
  // Closed on the I/O thread, after every job queued before (jobs hold the reader by reference
  // count, so a job still queued for another document that reads this file keeps it open).
  post([r = reader_] { r->reset(); });
}

void TraceDocument::post(std::function<void()> f) { io_->post(std::move(f)); }

QString TraceDocument::displayName() const { return QFileInfo(path_).fileName(); }

void TraceDocument::open() {
  state_ = State::Opening;
  QPointer<TraceDocument> self(this);
  post([self, r = reader_, path = path_] {
    TraceMeta m;
    QString err;
    try {
      *r = std::make_unique<trace::Reader>(path.toStdString());
      m = build_meta(**r, path);
    } catch (const std::exception& e) {
      err = explain_open_error(path, QString::fromUtf8(e.what()));
      r->reset();
    } catch (...) {
      err = explain_open_error(path, "unknown error");
      r->reset();
    }
    QMetaObject::invokeMethod(
        self.data(),
        [self, m = std::move(m), err] {
          if (!self) return;
          if (err.isEmpty()) {
            self->meta_ = m;
            self->state_ = State::Ready;
            emit self->opened();
          } else {
            self->error_ = err;
            self->state_ = State::Failed;
            emit self->failed(err);
          }
        },
        Qt::QueuedConnection);
  });
}

void TraceDocument::setFollow(bool on, int ms) {
  if (on) {
    poll_.start(ms);
    refreshNow();
  } else {
    poll_.stop();
  }
}

void TraceDocument::refreshNow() {
  if (state_ != State::Ready || refreshing_) return;
  refreshing_ = true;
  const uint64_t have = meta_.steps;
  const bool with_step = meta_.dataset(names::kStep) != nullptr;
  QPointer<TraceDocument> self(this);
  post([self, r = reader_, have, with_step] {
    uint64_t k = have;
    std::vector<int64_t> gs;
    QString err;
    try {
      if (*r) {
        (*r)->refresh();
        k = (*r)->steps_completed();
        if (k > have && with_step) gs = (*r)->read_series<int64_t>(names::kStep, have, k - have);
      }
    } catch (const std::exception& e) {
      err = e.what();
    }
    QMetaObject::invokeMethod(
        self.data(),
        [self, k, gs = std::move(gs), err] {
          if (!self) return;
          self->refreshing_ = false;
          if (!err.isEmpty() || k <= self->meta_.steps) return;
          self->meta_.global_step.insert(self->meta_.global_step.end(), gs.begin(), gs.end());
          self->meta_.steps = k;
          emit self->stepsChanged(k);
        },
        Qt::QueuedConnection);
  });
}

void TraceDocument::request(const QString& key, const QString& lane, Job job, QObject* receiver,
                            std::function<void(std::shared_ptr<const void>)> done,
                            std::function<void(const QString&)> fail) {
  if (state_ != State::Ready) {
    if (fail) fail(state_ == State::Failed ? error_ : QString("trace is still opening"));
    return;
  }
  if (Result* hit = cache_.object(key)) {
    done(hit->value);
    return;
  }
  // The same receiver's older request on this lane is superseded.
  if (!lane.isEmpty()) {
    for (auto it = inflight_.begin(); it != inflight_.end(); ++it) {
      auto& ws = it->waiters;
      ws.erase(std::remove_if(ws.begin(), ws.end(),
                              [&](const Waiter& w) { return w.lane == lane && w.receiver == receiver; }),
               ws.end());
      if (ws.empty()) it->cancelled->store(true);
    }
  }
  auto fit = inflight_.find(key);
  if (fit != inflight_.end()) {
    fit->waiters.push_back({receiver, lane, std::move(done), std::move(fail)});
    fit->cancelled->store(false);
    return;
  }
  Flight fl;
  fl.cancelled = std::make_shared<std::atomic<bool>>(false);
  fl.waiters.push_back({receiver, lane, std::move(done), std::move(fail)});
  fl.job = std::move(job);
  inflight_.insert(key, std::move(fl));
  launch(key);
}

void TraceDocument::launch(const QString& key) {
  const Flight& fl = inflight_[key];
  fl.cancelled->store(false);
  QPointer<TraceDocument> self(this);
  post([self, r = reader_, key, job = fl.job, cancelled = fl.cancelled] {
    Result res;
    QString err, lost;
    if (cancelled->load()) {
      err = "cancelled";
    } else {
      try {
        if (!*r) throw trace::TraceError("trace is not open");
        res = job(**r);
      } catch (const std::bad_alloc&) {
        err = "not enough memory to read this data";
      } catch (const trace::TraceError& e) {
        err = QString::fromUtf8(e.what());
        lost = QString::fromStdString(e.dataset());
      } catch (const std::exception& e) {
        err = QString::fromUtf8(e.what());
      }
    }
    QMetaObject::invokeMethod(
        self.data(), [self, key, res, err, lost] { if (self) self->finish(key, res, err, lost); },
        Qt::QueuedConnection);
  });
}

void TraceDocument::noteReadFailure(const QString& dataset, const QString& err) {
  const bool known = std::any_of(read_failures_.begin(), read_failures_.end(),
                                 [&](const ReadFailure& f) { return f.message == err; });
  if (known) return;
  read_failures_.push_back({dataset, err});
  emit readFailed(read_failures_.back().dataset, err);
}

void TraceDocument::finish(const QString& key, Result r, const QString& err, const QString& lost) {
  auto it = inflight_.find(key);
  if (it == inflight_.end()) return;
  if (err == "cancelled") {
    // Skipped because superseded; if someone asked for it again meanwhile, run it now.
    bool wanted = false;
    for (const auto& w : it->waiters) wanted = wanted || w.receiver;
    if (wanted) {
      launch(key);
    } else {
      inflight_.erase(it);
    }
    return;
  }
  Flight fl = std::move(*it);
  inflight_.erase(it);
  if (err.isEmpty()) {
    const qsizetype cost = qsizetype(std::min<size_t>(r.bytes, size_t(cache_.maxCost())));
    cache_.insert(key, new Result(r), cost);
    for (auto& w : fl.waiters)
      if (w.receiver && w.done) w.done(r.value);
  } else {
    if (!lost.isEmpty()) noteReadFailure(lost, err);  // damage, not a wrong request or a closed trace
    for (auto& w : fl.waiters)
      if (w.receiver && w.fail) w.fail(err);
  }
}

}  // namespace mxsim::inspector
