// The C interface's trace recorder (c_api.h "The trace recorder"): a run plan
// from the caller becomes core's RunPlan, and core's TraceRecorder (the one the
// simulator writes with) declares the series, queues the rows and writes them
// on its writer thread. The C layer only checks the caller's arrays.
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "c_api_internal.hpp"
#include "mxsim/io/safetensors.hpp"
#include "mxsim/sim/recorder.hpp"

using namespace mxsim;
using namespace mxsim::capi;

struct mxsim_recorder {
  sim::RunPlan plan;
  std::optional<sim::TraceRecorder> rec;  // empty once closed
};

namespace {

std::string str_or(const char* s, const char* fallback = "") { return s ? std::string(s) : std::string(fallback); }

sim::RunPlan run_plan(const mxsim_run_plan& p) {
  const char* op = "mxsim_recorder_create";
  if (p.micro_batches < 1)
    throw std::invalid_argument(std::string(op) + ": micro_batches is " + std::to_string(p.micro_batches) +
                                ", must be at least 1");
  if ((p.n_scalars && !p.scalars) || (p.n_layers && !p.layers))
    throw std::invalid_argument(std::string(op) + ": scalars or layers is NULL with a non-zero count");
  if (p.experts < 0) throw std::invalid_argument(std::string(op) + ": experts is negative");
  if (p.n_snapshot_steps && !p.snapshot_steps)
    throw std::invalid_argument(std::string(op) + ": snapshot_steps is NULL with a non-zero count");
  sim::RunPlan r;
  r.micro_batches = uint64_t(p.micro_batches);
  r.snapshot_steps.assign(p.snapshot_steps, p.snapshot_steps + p.n_snapshot_steps);
  r.first_step = p.first_step;
  r.experts = uint64_t(p.experts);
  for (size_t i = 0; i < p.n_scalars; ++i) {
    if (!p.scalars[i]) throw std::invalid_argument(std::string(op) + ": scalar name " + std::to_string(i) + " is NULL");
    r.scalars.emplace_back(p.scalars[i]);
  }
  for (size_t i = 0; i < p.n_layers; ++i) {
    const mxsim_layer_plan& l = p.layers[i];
    if (!l.name) throw std::invalid_argument(std::string(op) + ": layer " + std::to_string(i) + ": name is NULL");
    if (l.groups < 1 || l.out_features < 1 || l.in_features < 1)
      throw std::invalid_argument(std::string(op) + ": layer " + l.name + ": weight shape [" + std::to_string(l.groups) +
                                  ", " + std::to_string(l.out_features) + ", " + std::to_string(l.in_features) +
                                  "] must be positive");
    sim::LayerPlan lp;
    lp.name = l.name;
    lp.slot = i;
    lp.recipe = str_or(l.recipe);
    lp.module = str_or(l.module);
    lp.G = uint64_t(l.groups), lp.N = uint64_t(l.out_features), lp.K = uint64_t(l.in_features);
    lp.quantized = l.quantized != 0;
    lp.deosc = l.deosc != 0;
    lp.snapshots = l.snapshots != 0;
    lp.snapshot_wgrad_mb = lp.snapshots && l.snapshot_wgrad_mb != 0;
    lp.grad_added = l.grad_added != 0;
    for (size_t g = 0; g < 3; ++g) lp.shadow[g] = l.shadow[g] != 0;
    for (size_t r = 0; r < 3; ++r) lp.tensor_scale[r] = lp.quantized && l.tensor_scale[r] != 0;
    if (l.watch < 0) throw std::invalid_argument(std::string(op) + ": layer " + l.name + ": watch is negative");
    if (l.watch > 0) {
      if (!lp.quantized)
        throw std::invalid_argument(std::string(op) + ": layer " + l.name + ": watched elements need a quantized layer");
      lp.watch = uint64_t(l.watch);
      lp.watch_fp32_scale =
          sim::parse_linear_recipe(lp.recipe, sim::RecipeConfig{}).weight_spec().scale_kind == ScaleKind::FP32;
    }
    r.layers.push_back(lp);
  }
  return r;
}


sim::StepRecord step_record(const sim::RunPlan& plan, const mxsim_step_row& row) {
  const char* op = "mxsim_recorder_append";
  if ((!plan.scalars.empty() && !row.scalars) || (!plan.layers.empty() && !row.layers))
    throw std::invalid_argument(std::string(op) + ": step " + std::to_string(row.step) + ": scalars or layers is NULL");
  sim::StepRecord r;
  r.step = row.step;
  r.loss = row.loss;
  r.lr = row.lr;
  r.scalars.assign(row.scalars, row.scalars + plan.scalars.size());
  if (plan.experts > 0) {
    if (!row.tokens_per_expert)
      throw std::invalid_argument(std::string(op) + ": step " + std::to_string(row.step) + ": tokens_per_expert is NULL");
    r.tokens_per_expert.assign(row.tokens_per_expert, row.tokens_per_expert + plan.micro_batches * plan.experts);
  }
  r.layers.resize(plan.layers.size());
  for (size_t i = 0; i < plan.layers.size(); ++i) {
    const sim::LayerPlan& lp = plan.layers[i];
    const mxsim_layer_row& c = row.layers[i];
    sim::StepRecord::LayerRecord& l = r.layers[i];
    if (!c.main_grad_norm)
      throw std::invalid_argument(std::string(op) + ": layer " + lp.name + ": main_grad_norm is NULL");
    l.main_grad_norm.assign(c.main_grad_norm, c.main_grad_norm + plan.micro_batches);
    if (lp.quantized) {
      for (size_t o = 0; o < 3; ++o) {
        if (!c.scale_exp_hist[o])
          throw std::invalid_argument(std::string(op) + ": layer " + lp.name + ": scale_exp_hist[" + std::to_string(o) +
                                      "] is NULL");
        l.quant[o].q = quant_stats_of(c.quant[o]);
        std::copy(c.scale_exp_hist[o], c.scale_exp_hist[o] + l.quant[o].scale_exp_hist.size(),
                  l.quant[o].scale_exp_hist.begin());
      }
      l.osc.flips = c.osc.flips, l.osc.flips_total = c.osc.flips_total;
      l.osc.ema_mean = c.osc.ema_mean, l.osc.ema_frac_above = c.osc.ema_frac_above;
      l.osc.dist_ratio_mean = c.osc.dist_ratio_mean;
    }
    l.snapped = c.snapped;
    if (lp.grad_added) {
      if (!c.grad_added) throw std::invalid_argument(std::string(op) + ": layer " + lp.name + ": grad_added is NULL");
      l.grad_added.assign(c.grad_added, c.grad_added + plan.micro_batches);
    }
    for (size_t g = 0; g < 3; ++g) {
      if (!lp.shadow[g]) continue;
      if (!c.shadow[g])
        throw std::invalid_argument(std::string(op) + ": layer " + lp.name + ": shadow[" + std::to_string(g) + "] is NULL");
      std::vector<OutputError> e(plan.micro_batches);
      for (size_t m = 0; m < e.size(); ++m) {
        const mxsim_output_error& s = c.shadow[g][m];
        e[m].count = size_t(s.count), e[m].nonfinite = size_t(s.nonfinite);
        e[m].rel_l2 = s.rel_l2, e[m].sqnr_db = s.sqnr_db, e[m].max_abs_err = s.max_abs_err;
        e[m].max_index = s.max_index;
      }
      l.shadow[g].set(e);
    }
    if (lp.watch > 0) {
      const size_t W = lp.watch;
      if (!c.watch_element || !c.watch_master || !c.watch_code || !c.watch_value || !c.watch_flips ||
          (lp.watch_fp32_scale ? !c.watch_scale_inv : !c.watch_scale_bytes) || (lp.deosc && !c.watch_snaps))
        throw std::invalid_argument(std::string(op) + ": layer " + lp.name + ": a watch array is NULL");
      auto& w = l.watch;
      w.element.assign(c.watch_element, c.watch_element + W);
      w.master.assign(c.watch_master, c.watch_master + W);
      w.q.code.assign(c.watch_code, c.watch_code + W);
      if (lp.watch_fp32_scale) w.q.scale_inv.assign(c.watch_scale_inv, c.watch_scale_inv + W);
      else w.q.scale_bytes.assign(c.watch_scale_bytes, c.watch_scale_bytes + W);
      w.q.value.assign(c.watch_value, c.watch_value + W);
      w.flips.assign(c.watch_flips, c.watch_flips + W);
      if (lp.deosc) w.snaps.assign(c.watch_snaps, c.watch_snaps + W);
    }
  }
  return r;
}

}  // namespace

extern "C" {

mxsim_status mxsim_recorder_create(const char* path, const mxsim_run_plan* plan, mxsim_recorder** out,
                                   mxsim_error* err) {
  return guard(err, [&] {
    if (!path || !plan || !out) throw std::invalid_argument("mxsim_recorder_create: path, plan or out is NULL");
    *out = nullptr;
    auto r = std::make_unique<mxsim_recorder>();
    r->plan = run_plan(*plan);
    trace::Provenance prov = trace::make_provenance(str_or(plan->backend, "emu"), plan->seed);
    prov.producer = trace::kProducerRecorder;
    prov.model = str_or(plan->model);
    r->rec.emplace(path, str_or(plan->config_toml), prov, r->plan);
    *out = r.release();
  });
}

mxsim_status mxsim_recorder_append(mxsim_recorder* r, const mxsim_step_row* row, mxsim_error* err) {
  return guard(err, [&] {
    if (!r || !row) throw std::invalid_argument("mxsim_recorder_append: recorder or row is NULL");
    if (!r->rec) throw std::invalid_argument("mxsim_recorder_append: the recorder is closed");
    r->rec->append(step_record(r->plan, *row));
  });
}

mxsim_status mxsim_recorder_snapshots(const mxsim_recorder* r, int64_t step, size_t* n, mxsim_error* err) {
  return guard(err, [&] {
    if (!r || !n) throw std::invalid_argument("mxsim_recorder_snapshots: recorder or n is NULL");
    if (!r->rec) throw std::invalid_argument("mxsim_recorder_snapshots: the recorder is closed");
    *n = r->rec->snapshot_due(sim::Step(step)) ? r->rec->snapshot_keys().size() : 0;
  });
}

mxsim_status mxsim_recorder_snapshot_key(const mxsim_recorder* r, size_t i, int32_t* layer, char* kind,
                                         size_t kind_cap, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_recorder_snapshot_key";
    if (!r || !layer || !kind || kind_cap == 0) throw std::invalid_argument(std::string(op) + ": a NULL argument");
    if (!r->rec) throw std::invalid_argument(std::string(op) + ": the recorder is closed");
    const auto keys = r->rec->snapshot_keys();
    if (i >= keys.size())
      throw std::invalid_argument(std::string(op) + ": key " + std::to_string(i) + " of " + std::to_string(keys.size()));
    if (keys[i].kind.size() + 1 > kind_cap)
      throw std::invalid_argument(std::string(op) + ": kind_cap " + std::to_string(kind_cap) + " below " +
                                  std::to_string(keys[i].kind.size() + 1));
    *layer = int32_t(keys[i].slot);
    std::memcpy(kind, keys[i].kind.c_str(), keys[i].kind.size() + 1);
  });
}

mxsim_status mxsim_recorder_write_snapshots(mxsim_recorder* r, int64_t step, const DLTensor* const* data, size_t n,
                                            mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_recorder_write_snapshots";
    if (!r || (n && !data)) throw std::invalid_argument(std::string(op) + ": recorder or data is NULL");
    if (!r->rec) throw std::invalid_argument(std::string(op) + ": the recorder is closed");
    if (!r->rec->snapshot_due(sim::Step(step)))
      throw std::invalid_argument(std::string(op) + ": step " + std::to_string(step) + " takes no snapshots");
    const auto keys = r->rec->snapshot_keys();
    if (n != keys.size())
      throw std::invalid_argument(std::string(op) + ": " + std::to_string(n) + " tensors for " +
                                  std::to_string(keys.size()) + " snapshots");
    r->rec->write_snapshots(sim::Step(step), [&](size_t slot, std::string_view kind) {
      for (size_t i = 0; i < keys.size(); ++i)
        if (keys[i].slot == slot && keys[i].kind == kind) {
          const DLTensor& t = *data[i];
          if (t.device.device_type != kDLCPU)
            throw std::invalid_argument(std::string(op) + ": snapshot " + keys[i].kind + " is not a CPU tensor");
          check_contiguous(t, op, keys[i].kind.c_str());
          const size_t bytes = numel(t, op, keys[i].kind.c_str()) * ((t.dtype.bits * t.dtype.lanes + 7) / 8);
          const auto* p = static_cast<const unsigned char*>(data_of(t));
          return std::vector<unsigned char>(p, p + bytes);  // the recorder checks the size against the shape
        }
      throw std::logic_error(std::string(op) + ": no tensor for snapshot " + std::string(kind));
    });
  });
}

mxsim_status mxsim_recorder_close(mxsim_recorder* r, mxsim_error* err) {
  return guard(err, [&] {
    if (!r) throw std::invalid_argument("mxsim_recorder_close: recorder is NULL");
    if (!r->rec) return;
    try {
      r->rec->close();
    } catch (...) {
      r->rec.reset();
      throw;
    }
    r->rec.reset();
  });
}

mxsim_status mxsim_save_safetensors(const char* path, size_t n, const char* const* names, const char* const* dtypes,
                                    const int64_t* const* shapes, const int32_t* ndims, const DLTensor* const* tensors,
                                    size_t n_meta, const char* const* meta_keys, const char* const* meta_values,
                                    mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_save_safetensors";
    if (!path || (n && (!names || !dtypes || !shapes || !ndims || !tensors)) || (n_meta && (!meta_keys || !meta_values)))
      throw std::invalid_argument(std::string(op) + ": a NULL argument");
    std::vector<io::RawTensor> ts;
    for (size_t i = 0; i < n; ++i) {
      const std::string name = names[i] ? names[i] : "";
      io::RawTensor t;
      t.name = name;
      if (!dtypes[i] || !io::dtype_from_name(dtypes[i], t.dtype))
        throw std::invalid_argument(std::string(op) + ": " + name + ": unknown safetensors dtype " +
                                    (dtypes[i] ? dtypes[i] : "NULL"));
      for (int32_t d = 0; d < ndims[i]; ++d) {
        if (shapes[i][d] < 0) throw std::invalid_argument(std::string(op) + ": " + name + ": a negative extent");
        t.shape.push_back(size_t(shapes[i][d]));
      }
      const DLTensor& src = *tensors[i];
      if (src.device.device_type != kDLCPU)
        throw std::invalid_argument(std::string(op) + ": " + name + " is not a CPU tensor");
      check_contiguous(src, op, name.c_str());
      const size_t bytes = numel(src, op, name.c_str()) * ((src.dtype.bits * src.dtype.lanes + 7) / 8);
      const size_t want = io::byte_count(t.dtype, t.numel());
      if (bytes != want)
        throw std::invalid_argument(std::string(op) + ": " + name + ": " + std::to_string(bytes) + " bytes for " +
                                    dtypes[i] + " " + t.shape_str() + " (" + std::to_string(want) + " bytes)");
      const auto* p = static_cast<const uint8_t*>(data_of(src));
      t.bytes.assign(p, p + bytes);
      ts.push_back(std::move(t));
    }
    std::map<std::string, std::string> meta;
    for (size_t i = 0; i < n_meta; ++i) meta[meta_keys[i] ? meta_keys[i] : ""] = meta_values[i] ? meta_values[i] : "";
    try {
      io::write_safetensors(path, ts, meta);
    } catch (const io::IoError& e) {
      throw std::invalid_argument(std::string(op) + ": " + e.what());
    }
  });
}

void mxsim_recorder_destroy(mxsim_recorder* r) {
  if (!r) return;
  try {
    r->rec.reset();  // the destructor writes the queued rows and never throws
  } catch (...) {
  }
  delete r;
}

}  // extern "C"
