#include "mxsim/delayed_scaling.hpp"

#include <cfloat>
#include <cmath>
#include <stdexcept>
#include <string>

#include "mxsim/rounding.hpp"

namespace mxsim {

AmaxAlgo amax_algo_from_name(std::string_view n) {
  if (n == "max") return AmaxAlgo::Max;
  if (n == "most_recent") return AmaxAlgo::MostRecent;
  throw std::invalid_argument("unknown amax_compute_algo '" + std::string(n) + "' (known: max, most_recent)");
}

const char* name_of(AmaxAlgo a) { return a == AmaxAlgo::Max ? "max" : "most_recent"; }

DelayedScaling::DelayedScaling(Format fmt, int history_len, int margin, AmaxAlgo algo)
    : fmt_(fmt), margin_(margin), algo_(algo) {
  if (history_len < 1)
    throw std::invalid_argument("DelayedScaling: amax history length must be >= 1, got " + std::to_string(history_len));
  if (margin < 0) throw std::invalid_argument("DelayedScaling: margin must be >= 0, got " + std::to_string(margin));
  if (fmt == Format::FP32 || fmt == Format::E8M0)
    throw std::invalid_argument(std::string("DelayedScaling: ") + spec_of(fmt).name + " is not an element format");
  fp8_max_ = spec_of(fmt).max_value();
  hist_.assign(size_t(history_len), 0.0f);
}

void DelayedScaling::record(float amax) {
  const float a = std::fabs(amax);
  float& s0 = hist_[0];
  if (std::isnan(s0)) return;
  if (std::isnan(a) || a > s0) s0 = a;
}

void DelayedScaling::update() {
  const size_t n = hist_.size();
  float amax = 0.0f;
  if (algo_ == AmaxAlgo::MostRecent) {
    amax = hist_[0];
  } else {
    for (size_t i = 0; i < n; ++i)
      if (std::isnan(hist_[i]) || (!std::isnan(amax) && hist_[i] > amax)) amax = hist_[i];
  }
  if (std::isfinite(amax) && amax > 0.0f) {
    float s = fp8_max_ / amax;
    s = std::ldexp(s, -margin_);  // exact division by 2^margin (one rounding if subnormal)
    if (std::isinf(s)) s = FLT_MAX;
    // A scale that underflows to 0, or whose reciprocal scale_inv overflows to
    // +Inf (s < ~2^-128), would lose the tensor: keep the old one.
    if (s > 0.0f && std::isfinite(1.0f / s)) scale_ = s;
  }
  // roll: slot i <- slot i+1, last <- old slot 0; then slot 0 = 0
  const float first = hist_[0];
  for (size_t i = 0; i + 1 < n; ++i) hist_[i] = hist_[i + 1];
  hist_[n - 1] = first;
  hist_[0] = 0.0f;
}

QuantSpec DelayedScaling::spec(QuantSpec base) const {
  if (base.scale_kind != ScaleKind::FP32 || !base.per_tensor())
    throw std::invalid_argument("DelayedScaling::spec: the base recipe must use FP32 per-tensor scaling, got " +
                                base.describe());
  base.elem = fmt_;
  base.fixed_scale = scale_;
  base.whole_tensor_scale = false;  // the history's scale replaces the quantizer's own amax
  return base;
}

void DelayedScaling::restore(const std::vector<float>& history, float scale) {
  if (history.size() != hist_.size())
    throw std::invalid_argument("DelayedScaling::restore: history has " + std::to_string(history.size()) +
                                " slots, expected " + std::to_string(hist_.size()));
  if (!(scale > 0.0f) || !std::isfinite(scale) || !std::isfinite(1.0f / scale))
    throw std::invalid_argument("DelayedScaling::restore: scale " + std::to_string(scale) +
                                " is not a finite positive value with a finite inverse");
  hist_ = history;
  scale_ = scale;
}

}  // namespace mxsim
