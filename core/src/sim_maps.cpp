// Block and element maps of snapshot layers (see mxsim/sim/maps.hpp).
#include "mxsim/sim/maps.hpp"

#include <cmath>
#include <stdexcept>

#include "mxsim/hd/elementwise.hpp"

namespace mxsim::sim {

BlockMaps block_maps(const float* x, const float* d, const QuantizedTensor& q) {
  if (q.transposed) throw std::invalid_argument("block_maps: a transposed (column-wise) quantization");
  BlockMaps m;
  const size_t R = q.rows, C = q.cols, br = q.block_rows(), bc = q.block_cols();
  m.G = q.groups;
  m.BR = (R + br - 1) / br;
  m.BC = (C + bc - 1) / bc;
  const size_t nb = m.G * m.BR * m.BC;
  m.mse.resize(nb);
  m.sqnr_db.resize(nb);
  m.amax.resize(nb);
  if (q.spec.scale_kind == ScaleKind::FP32) m.scale_inv.resize(nb);
  else m.scale_bytes.resize(nb);
  m.codes.resize(m.G * R * C);
  for (size_t g = 0; g < m.G; ++g) {
    for (size_t r = 0; r < R; ++r)
      for (size_t c = 0; c < C; ++c) m.codes[(g * R + r) * C + c] = uint8_t(q.code(g, r, c));
    for (size_t bi = 0; bi < m.BR; ++bi)
      for (size_t bj = 0; bj < m.BC; ++bj) {
        const size_t b = (g * m.BR + bi) * m.BC + bj;
        double se = 0, sx = 0;
        size_t n = 0;
        float amax = 0;
        for (size_t r = bi * br; r < std::min(R, (bi + 1) * br); ++r)
          for (size_t c = bj * bc; c < std::min(C, (bj + 1) * bc); ++c) {
            const size_t i = (g * R + r) * C + c;
            const float xv = x[i], dv = d[i];
            if (std::isnan(xv) || (!std::isnan(amax) && std::fabs(xv) > amax)) amax = std::fabs(xv);
            if (std::isfinite(xv) && !std::isnan(dv)) {
              const double e = double(xv) - double(dv);
              se += e * e;
              sx += double(xv) * double(xv);
              ++n;
            }
          }
        m.amax[b] = amax;
        m.mse[b] = n ? float(se / double(n)) : NAN;
        m.sqnr_db[b] = n == 0 ? NAN : se == 0 ? INFINITY : float(10.0 * std::log10(sx / se));
        if (q.spec.scale_kind == ScaleKind::FP32) m.scale_inv[b] = q.scale_inv(g, bi, bj);
        else m.scale_bytes[b] = q.scale_bytes(g, bi, bj);
      }
  }
  return m;
}

std::vector<float> dist_ratio_map(const std::vector<float>& dist_q, const std::vector<float>& dist_w) {
  std::vector<float> r(dist_w.size(), 0.0f);
  for (size_t i = 0; i < r.size() && i < dist_q.size(); ++i)
    if (dist_w[i] > 0) r[i] = float(hd::osc_dist_ratio(dist_q[i], dist_w[i]));
  return r;
}

}  // namespace mxsim::sim
