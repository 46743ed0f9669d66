// The simulator's weights (sim/model.hpp Weight): main_grad and its per-micro-batch guard, the
// quantized copies of a weight version, the fprop cache and what dgrad takes, and the scale of a
// per-tensor FP32 operand at its use (sim_weight.hpp).
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "mxsim/sim/model.hpp"
#include "sim_ensure.hpp"
#include "sim_weight.hpp"

namespace mxsim::sim {

// ---------------------------------------------------------------- scales at use

namespace detail {

QuantSpec resolved_spec(Backend&, const Weight& w, Role role, QuantSpec s, const Tensor&) {
  if (!s.fp32_per_tensor()) return s;
  if (const auto& d = w.delayed[size_t(role)]) return d->spec(s);
  s.whole_tensor_scale = true;  // current scaling: the quantizer takes the whole tensor's amax where it lives
  return s;
}
QuantSpec resolve(Backend& be, Weight& w, Role role, QuantSpec s, const Tensor& x) {
  const bool fp32_tensor = s.fp32_per_tensor();
  if (fp32_tensor && w.delayed[size_t(role)] && w.records_amax)
    be.amax_deferred(x, &w.pending_amax[size_t(role)].emplace_back(0.0f));  // recorded at update_scaling
  if (fp32_tensor && !w.delayed[size_t(role)]) {
    if (w.current_checks && w.records_amax) {  // checked once the step's deferred values resolve
      CurrentAmaxChecks& c = *w.current_checks;
      be.amax_deferred(x, &c.pending.emplace_back(CurrentAmaxChecks::Entry{&w.name, role, c.microbatch}).amax);
    } else if (const float a = be.amax(x); !std::isfinite(a)) {
      throw std::runtime_error(current_amax_error(w.name, role, a));
    }
  }
  return resolved_spec(be, w, role, s, x);
}

std::string current_amax_error(const std::string& weight, Role role, float amax) {
  return weight + ": operand " + name_of(role) + " has a non-finite amax (" + std::to_string(amax) +
         "); FP8 current scaling has no finite scale";
}

}  // namespace detail

using detail::resolve;
using detail::resolved_spec;

std::optional<std::string> CurrentAmaxChecks::take_error() {
  std::optional<std::string> e;
  for (const Entry& p : pending)
    if (!std::isfinite(p.amax)) {
      e = "micro-batch " + std::to_string(p.microbatch) + ": " + detail::current_amax_error(*p.weight, p.role, p.amax);
      break;
    }
  pending.clear();
  return e;
}

// ---------------------------------------------------------------- Weight

void Weight::zero_grad(Backend& be) {
  ensure(be, main_grad, shape());
  be.fill_zero(main_grad);
  added.assign(size_t(num_microbatches) * G, 0);
}
void Weight::mark_added(int mb, size_t g) {
  if (mb < 0 || mb >= num_microbatches || g >= G) throw MechanicsError(name + ": main_grad guard index out of range");
  uint8_t& f = added[size_t(mb) * G + g];
  if (f)
    throw MechanicsError(name + ": main_grad of group " + std::to_string(g) + " already received micro-batch " +
                         std::to_string(mb) + "'s wgrad (grad_added_to_main_grad set; a second add is an error)");
  f = 1;
}
void Weight::invalidate() {
  ++version;
  cache.valid = false;
  memo_.clear();
  model_bf16_ = Tensor();
  master_matches_model = true;
}
const QTensor& Weight::quantized(Backend& be, const QuantSpec& spec) {
  for (const auto& [s, q] : memo_)
    if (s == spec) return q;
  ++quantizations_;
  memo_.emplace_back(spec, be.quantize(model, spec, Axis::Cols));
  return memo_.back().second;
}
const Tensor& Weight::bf16_model(Backend& be) {
  if (model_bf16_.empty()) {
    model_bf16_ = be.alloc(DType::bf16, shape());
    be.round_bf16(model, model_bf16_);  // exact: the model copy holds BF16 values
  }
  return model_bf16_;
}
Tensor Weight::bf16_master(Backend& be) const {
  if (master_matches_model) return model;
  Tensor b = be.alloc(DType::f32, shape());
  be.round_bf16(master, b);
  return b;
}
void Weight::qdq_master(Backend& be, const QuantSpec& spec, Tensor& q) {
  ensure(be, q, shape());
  if (master_matches_model) {
    be.dequantize(quantized(be, spec), q);
    return;
  }
  ++quantizations_;
  be.dequantize(be.quantize(bf16_master(be), spec, Axis::Cols), q);
}
void Weight::drop_step_amaxes() {
  for (auto& p : pending_amax) p.clear();
}
void Weight::update_scaling(Backend& be) {
  if (std::any_of(pending_amax.begin(), pending_amax.end(), [](const auto& p) { return !p.empty(); }))
    be.resolve_deferred();
  for (size_t r = 0; r < delayed.size(); ++r) {
    if (auto& d = delayed[r]) {
      for (float a : pending_amax[r]) d->record(a);
      d->update();
    }
    pending_amax[r].clear();
  }
}

QuantSpec weight_fprop_spec(Backend& be, const Weight& w, const Tensor& wm) {
  return resolved_spec(be, w, Role::W, w.recipe.weight_spec(), wm);
}

/// W for GEMM g of this step: resolve g's spec (recording fp8_delayed's amax
/// for this use), then the one quantization of this version by that spec.
static QTensor quantize_weight(Backend& be, Weight& w, GemmForm g) {
  const QuantSpec s = resolve(be, w, Role::W, w.recipe.specs(g).w, w.model);
  return w.quantized(be, s);
}

const QTensor& weight_for_fprop(Backend& be, Weight& w, int mb, int num_mb, QTensor& scratch) {
  if (num_mb == 1) {  // Primus PR #891: no cache, quantize inside the op
    scratch = quantize_weight(be, w, GemmForm::Fprop);
    return scratch;
  }
  if (mb == 0) {
    w.cache.q = quantize_weight(be, w, GemmForm::Fprop);
    w.cache.version = w.version;
    w.cache.valid = true;
    return w.cache.q;
  }
  if (!w.cache.valid)
    throw MechanicsError(w.name + ": micro-batch " + std::to_string(mb) +
                         " found no quantized weight cache (invalidated by the optimizer step; micro-batch 0 must "
                         "rebuild it)");
  if (w.cache.version != w.version)
    throw MechanicsError(w.name + ": stale quantized weight cache (made from version " +
                         std::to_string(w.cache.version) + ", weight is at version " + std::to_string(w.version) + ")");
  return w.cache.q;
}

const QTensor& weight_for_dgrad(Backend& be, Weight& w, int mb, int num_mb, QTensor& scratch) {
  if (!w.recipe.dgrad_reuses_fprop_w() || num_mb == 1) {
    // Current scaling: never a cached transposed copy; the per-tensor bytes
    // come from quantized() of this version (the same spec as fprop's: the
    // same bytes). A dgrad recipe other than fprop's quantizes W by its own
    // spec (once per version).
    scratch = quantize_weight(be, w, GemmForm::Dgrad);
    return scratch;
  }
  // 2-D tiles / per-tensor: the columnwise copy is the fprop bytes (§1).
  if (!w.cache.valid || w.cache.version != w.version)
    throw MechanicsError(w.name + ": stale or missing quantized weight cache in dgrad of micro-batch " +
                         std::to_string(mb));
  return w.cache.q;
}

}  // namespace mxsim::sim
