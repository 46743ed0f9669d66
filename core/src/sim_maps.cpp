// Block and element maps of snapshot layers (see mxsim/sim/maps.hpp).
#include "mxsim/sim/maps.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "mxsim/format.hpp"
#include "mxsim/hd/elementwise.hpp"
#include "mxsim/hd/quant_block.hpp"

namespace mxsim::sim {

BlockExtent logical_block_extent(const QuantSpec& spec, bool transposed) {
  const size_t r = size_t(spec.block_rows), c = size_t(spec.block_cols);
  return transposed ? BlockExtent{c, r} : BlockExtent{r, c};
}

size_t blocks_along(size_t n, size_t extent) { return extent == 0 || n == 0 ? 1 : (n + extent - 1) / extent; }

namespace {

/// The reference the codes approximate, logical [G, R, C]: x, or H x along the storage rows.
std::vector<float> reference(const float* x, const QuantizedTensor& q) {
  const size_t R = q.rows, C = q.cols, n = q.groups * R * C;
  std::vector<float> h(x, x + n);
  if (!q.spec.hadamard16) return h;
  float run[16];
  for (size_t g = 0; g < q.groups; ++g)
    for (size_t sr = 0; sr < q.srows(); ++sr)
      for (size_t c0 = 0; c0 + 16 <= q.scols(); c0 += 16) {
        auto at = [&](size_t k) -> float& {  // storage (sr, c0 + k) as a logical index
          return q.transposed ? h[(g * R + c0 + k) * C + sr] : h[(g * R + sr) * C + c0 + k];
        };
        for (size_t k = 0; k < 16; ++k) run[k] = at(k);
        hd::hadamard16(run, q.spec.hadamard16_signs);
        for (size_t k = 0; k < 16; ++k) at(k) = run[k];
      }
  return h;
}

}  // namespace

BlockMaps block_maps(const float* x, const QuantizedTensor& q) {
  // The maps record scale_inv; the training's tensors are quantizer-made (numerics.md §2.4).
  if (q.divides_by_scale())
    throw std::invalid_argument("block_maps: FP32 scales that divide (torchao Float8TrainingTensor) have no scale_inv map");
  BlockMaps m;
  const size_t R = q.rows, C = q.cols;
  const BlockExtent ext = logical_block_extent(q.spec, q.transposed);
  const size_t br = ext.rows == 0 ? std::max<size_t>(R, 1) : ext.rows, bc = ext.cols == 0 ? std::max<size_t>(C, 1) : ext.cols;
  m.G = q.groups;
  m.BR = blocks_along(R, ext.rows);
  m.BC = blocks_along(C, ext.cols);
  const size_t nb = m.G * m.BR * m.BC;
  const bool fp32 = q.spec.scale_kind == ScaleKind::FP32;
  m.mse.resize(nb);
  m.sqnr_db.resize(nb);
  m.amax.resize(nb);
  if (fp32) m.scale_inv.resize(nb);
  else m.scale_bytes.resize(nb);
  m.codes.resize(m.G * R * C);
  const std::vector<float> ref = reference(x, q);
  const FormatSpec ef = spec_of(q.spec.elem);
  auto code = [&](size_t g, size_t r, size_t c) { return q.transposed ? q.code(g, c, r) : q.code(g, r, c); };
  for (size_t g = 0; g < m.G; ++g) {
    for (size_t r = 0; r < R; ++r)
      for (size_t c = 0; c < C; ++c) m.codes[(g * R + r) * C + c] = uint8_t(code(g, r, c));
    for (size_t bi = 0; bi < m.BR; ++bi)
      for (size_t bj = 0; bj < m.BC; ++bj) {
        const size_t b = (g * m.BR + bi) * m.BC + bj;
        const size_t si = q.transposed ? bj : bi, sj = q.transposed ? bi : bj;  // the storage block
        const uint8_t byte = fp32 ? 0 : q.scale_bytes(g, si, sj);
        const float sinv = fp32 ? q.scale_inv(g, si, sj) : 0.0f;
        double se = 0, sx = 0;
        size_t n = 0;
        float amax = 0;
        for (size_t r = bi * br; r < std::min(R, (bi + 1) * br); ++r)
          for (size_t c = bj * bc; c < std::min(C, (bj + 1) * bc); ++c) {
            const float xv = ref[(g * R + r) * C + c];
            const float dv = hd::dequant_value(q.spec.scale_kind, decode(ef, code(g, r, c)), byte, sinv, q.tensor_scale_inv);
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
        if (fp32) m.scale_inv[b] = sinv;
        else m.scale_bytes[b] = byte;
      }
  }
  return m;
}

BlockMaps padded_group_maps(const std::vector<BlockMaps>& groups, size_t BR, size_t BC, size_t R, size_t C,
                            bool fp32_scales) {
  BlockMaps m;
  m.G = groups.size();
  m.BR = BR;
  m.BC = BC;
  const size_t nb = m.G * BR * BC;
  m.mse.assign(nb, NAN);
  m.sqnr_db.assign(nb, NAN);
  m.amax.assign(nb, NAN);
  if (fp32_scales) m.scale_inv.assign(nb, NAN);
  else m.scale_bytes.assign(nb, 0);
  m.codes.assign(m.G * R * C, 0);
  for (size_t g = 0; g < m.G; ++g) {
    const BlockMaps& s = groups[g];
    if (s.G == 0) continue;
    if (s.G != 1 || s.BR > BR || s.BC != BC || s.codes.size() > R * C || s.codes.size() % C != 0)
      throw std::logic_error("padded_group_maps: group " + std::to_string(g) + " does not fit its slot");
    for (size_t i = 0; i < s.BR * BC; ++i) {
      const size_t d = g * BR * BC + i;
      m.mse[d] = s.mse[i];
      m.sqnr_db[d] = s.sqnr_db[i];
      m.amax[d] = s.amax[i];
      if (fp32_scales) m.scale_inv[d] = s.scale_inv.at(i);
      else m.scale_bytes[d] = s.scale_bytes.at(i);
    }
    std::copy(s.codes.begin(), s.codes.end(), m.codes.begin() + std::ptrdiff_t(g * R * C));
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
