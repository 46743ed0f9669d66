// emu Backend ops: quantization, statistics, amax, BF16 rounding
// (docs/numerics.md §2-§4; the quantizer itself is emu/include/mxsim/emu/quantize.hpp).
#include <algorithm>
#include <climits>
#include <cmath>

#include "backend_emu_impl.hpp"
#include "mxsim/bits.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/hd/elementwise.hpp"
#include "mxsim/rounding.hpp"
#include "mxsim/scale_rule.hpp"

namespace mxsim::emu {

QTensor EmuBackend::quantize_impl(const Tensor& x, const QuantSpec& spec, Axis axis) {
  QuantizedTensor q = x.rank() == 3 ? ::mxsim::emu::quantize(ten3(x, "quantize", "x"), spec, axis)
                                    : ::mxsim::emu::quantize(mat(x, "quantize", "x"), spec, axis);
  const size_t G = q.groups, R = q.rows, C = q.cols;
  const bool tr = q.transposed;
  return QTensor(std::make_shared<EmuQBuffer>(this, std::move(q)), spec, G, R, C, tr);
}

GroupedQTensor EmuBackend::quantize_grouped_colwise_impl(const Tensor& x, std::span<const int64_t> ms,
                                                    const QuantSpec& spec) {
  const Tensor2f& xm = mat(x, "quantize_grouped_colwise", "x");
  auto qs = ::mxsim::emu::quantize_grouped_colwise(xm, ms, spec);
  return GroupedQTensor(std::make_shared<EmuGroupedQBuffer>(this, std::move(qs)), spec,
                        std::vector<int64_t>(ms.begin(), ms.end()), xm.shape(1));
}

void EmuBackend::dequantize_impl(const QTensor& qh, Tensor& out) {
  const QuantizedTensor& q = host(qh, "dequantize", "q");
  if (out.rank() == 3) {
    ten3(out, "dequantize", "out") = dequantize3(q);
  } else {
    mat(out, "dequantize", "out") = ::mxsim::emu::dequantize(q);
  }
}

QuantStats EmuBackend::quant_stats_impl(const Tensor& x, const QTensor& qh) {
  const QuantizedTensor& q = host(qh, "quant_stats", "q");
  return x.rank() == 3 ? ::mxsim::emu::quant_stats(ten3(x, "quant_stats", "x"), q)
                       : ::mxsim::emu::quant_stats(mat(x, "quant_stats", "x"), q);
}

ScaleExpCounts EmuBackend::scale_exp_histogram_impl(const QTensor& qh) {
  return scale_exp_counts(host(qh, "scale_exp_histogram", "q"));
}

float EmuBackend::amax_impl(const Tensor& x) {
  const float* p = f32(x, "amax", "x");
  float a = 0;
  for (size_t i = 0, n = x.numel(); i < n; ++i) a = hd::amax_step(a, p[i]);
  return a;
}

void EmuBackend::round_bf16_impl(Tensor& x) {
  float* p = f32(x, "round_bf16", "x");
  for (size_t i = 0, n = x.numel(); i < n; ++i) p[i] = ::mxsim::round_bf16(p[i]);
}
void EmuBackend::round_bf16_impl(const Tensor& src, Tensor& dst) {
  const float* s = f32(src, "round_bf16", "src");
  const size_t n = src.numel();
  if (dst.dtype() == DType::bf16) {  // the bit patterns
    auto* d = bf16(dst, "round_bf16", "dst");
    for (size_t i = 0; i < n; ++i) d[i] = uint16_t(round_bf16_code(f32_bits(s[i])));
    return;
  }
  float* d = f32(dst, "round_bf16", "dst");
  for (size_t i = 0; i < n; ++i) d[i] = ::mxsim::round_bf16(s[i]);
}

}  // namespace mxsim::emu
