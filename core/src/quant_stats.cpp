// The block-scale exponent histogram of a quantized tensor (quant_stats.hpp).
#include "mxsim/quant_stats.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

#include "mxsim/bits.hpp"
#include "mxsim/hd/quant_block.hpp"
#include "mxsim/hd/reduce.hpp"
#include "mxsim/quantized_tensor.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/scale_rule.hpp"

namespace mxsim {

void set_error_stats(QuantStats& s, size_t pairs, double se, double sx, double max_abs_err, double sum_err) {
  if (pairs == 0) {
    s.mse = s.max_abs_err = s.signal_power = s.sqnr_db = s.mean_err = NAN;
    return;
  }
  s.mean_err = sum_err / double(pairs);
  s.max_abs_err = max_abs_err;
  s.mse = se / double(pairs);
  s.signal_power = sx / double(pairs);
  s.sqnr_db = se == 0 ? INFINITY : 10.0 * std::log10(sx / se);
}

QuantStats not_recorded() {
  QuantStats s;
  set_error_stats(s, 0, 0, 0, 0, 0);
  s.expected_up = NAN;
  s.tensor_scale_inv = NAN;
  return s;
}

OutputError output_error(const float* ref, const float* test, size_t n) {
  hd::TreeSum se, sr;
  size_t nonfinite = 0;
  double max_abs_err = 0;
  int64_t max_index = -1;
  for (size_t i = 0; i < n; ++i) {
    const double r = ref[i], t = test[i];
    if (!std::isfinite(r) || !std::isfinite(t)) {
      ++nonfinite;
      se.add(0.0);
      sr.add(0.0);
      continue;
    }
    const double e = t - r;  // exact: both are floats
    se.add(e * e);
    sr.add(r * r);
    if (std::fabs(e) > max_abs_err) {  // strictly: the first index of the largest error
      max_abs_err = std::fabs(e);
      max_index = int64_t(i);
    }
  }
  return output_error_of(n, nonfinite, se.result(), sr.result(), max_abs_err, max_index);
}

OutputError output_error_of(size_t n, size_t nonfinite, double se, double sr, double max_abs_err, int64_t max_index) {
  OutputError o;
  o.count = n;
  o.nonfinite = nonfinite;
  o.max_index = max_index;
  if (n == nonfinite) {  // nothing compared
    o.rel_l2 = o.sqnr_db = o.max_abs_err = NAN;
    return o;
  }
  o.max_abs_err = max_abs_err;
  o.rel_l2 = sr > 0 ? std::sqrt(se / sr) : NAN;
  o.sqnr_db = se == 0 ? INFINITY : 10.0 * std::log10(sr / se);
  return o;
}

ScaleExpCounts scale_exp_counts(const QuantizedTensor& q) {
  // hd::scale_exp_bin of every block (the GPU's histogram kernel bins with it too), in storage
  // order (the counts do not depend on it).
  ScaleExpCounts h{};
  const ScaleKind k = q.spec.scale_kind;
  if (k == ScaleKind::FP32) {
    for (float si : q.scale_inv)  // a divisor s (torchao Float8TrainingTensor) applies as 1 / s
      ++h[hd::scale_exp_bin(k, 0, q.divides_by_scale() ? 1.0f / si : si, 1.0f)];
  } else {
    for (uint8_t b : q.scale_bytes) ++h[hd::scale_exp_bin(k, b, 0.0f, q.tensor_scale_inv)];
  }
  return h;
}

}  // namespace mxsim
