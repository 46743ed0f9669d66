// Matrix-unit models (mma_model.hpp) on top of the exact fused group of
// gemm_exact.hpp, and the ULP report (Boost.Histogram not needed: fixed
// power-of-two buckets).
#include <bit>
#include <cmath>
#include <stdexcept>
#include <string>

#include "gemm_exact.hpp"
#include "gemm_internal.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/mma_model.hpp"

namespace mxsim::emu {

MmaModel mma_model_from_name(std::string_view n) {
  if (n == "contract") return MmaModel::Contract;
  if (n == "hopper") return MmaModel::HopperWgmmaFp8;
  if (n == "blackwell") return MmaModel::BlackwellMxf8f6f4;
  throw std::invalid_argument("unknown matrix-unit model '" + std::string(n) + "' (contract, hopper, blackwell)");
}
const char* name_of(MmaModel m) {
  switch (m) {
    case MmaModel::Contract: return "contract";
    case MmaModel::HopperWgmmaFp8: return "hopper";
    case MmaModel::BlackwellMxf8f6f4: return "blackwell";
  }
  return "?";
}

Tensor2f mma_model_gemm(const QuantizedTensor& a, const QuantizedTensor& b, MmaModel model) {
  if (a.cols != b.cols) throw std::invalid_argument("model gemm: contraction mismatch (" + std::to_string(a.cols) + " vs " + std::to_string(b.cols) + ")");
  if (model == MmaModel::Contract) {
    Tensor2f y;
    const int64_t ms[] = {int64_t(a.rows)};
    grouped_fprop(a, b, ms, y);
    return y;
  }
  using namespace gemm;
  // Named references, not a structured binding: OpenMP regions cannot capture bindings (Clang 14).
  const std::pair<Panel, Panel> panels = model_panels(a, b);
  const Panel& A = panels.first;
  const Panel& B = panels.second;
  const bool mx = a.spec.scale_kind == ScaleKind::E8M0 && b.spec.scale_kind == ScaleKind::E8M0;
  const bool fp32 = a.spec.scale_kind == ScaleKind::FP32 && b.spec.scale_kind == ScaleKind::FP32;
  if (!mx && !fp32)
    throw std::invalid_argument(std::string("model gemm: the ") + name_of(model) +
                                " model takes operands both E8M0-scaled or both FP32-scaled" +
                                (a.spec.scale_kind == ScaleKind::UE4M3 || b.spec.scale_kind == ScaleKind::UE4M3
                                     ? " (NVFP4 has no matrix-unit model yet: use --model contract)"
                                     : ""));
  if (fp32)
    for (const Panel* p : {&A, &B})
      for (size_t r = 0; r < p->R; ++r)
        for (size_t c = 1; c < p->kc(); ++c)
          if (std::bit_cast<uint32_t>(p->sinv[r * p->kc() + c]) != std::bit_cast<uint32_t>(p->sinv[r * p->kc()]))
            throw std::invalid_argument("model gemm: FP32 scales must be constant along K (per-tensor or per-row)");
  const int F = model == MmaModel::HopperWgmmaFp8 ? 13 : 25;
  const bool e8 = model == MmaModel::HopperWgmmaFp8;
  const FormatSpec fa = spec_of(A.elem), fb = spec_of(B.elem);
  Tensor2f y = Tensor2f::from_shape({A.R, B.R});
  const size_t K = A.K;
#pragma omp parallel for schedule(dynamic)
  for (size_t i = 0; i < A.R; ++i)
    for (size_t j = 0; j < B.R; ++j) {
      float acc = 0.0f;
      for (size_t q = 0; q < K; q += 32) {
        std::vector<Term> t;
        Ex s = Ex::zero();
        int se = 0;
        if (mx) {
          s = ex_mul(ex_e8m0(A.sbyte[i * A.kb() + q / 32]), ex_e8m0(B.sbyte[j * B.kb() + q / 32]));
          se = int(A.sbyte[i * A.kb() + q / 32]) + int(B.sbyte[j * B.kb() + q / 32]) - 254;
        }
        for (size_t k = q; k < std::min(K, q + 32); ++k) {
          Ex p = ex_mul(ex_elem(fa, A.c(i, k)), ex_elem(fb, B.c(j, k)));
          if (mx) p = ex_mul(p, s);
          t.push_back({p, elem_exp(fa, A.c(i, k)) + elem_exp(fb, B.c(j, k)) + se});
        }
        acc = fused_group(t, acc, F, e8);
      }
      if (fp32) acc = acc * (A.sinv[i * A.kc()] * B.sinv[j * B.kc()]);
      if (std::isnan(acc)) acc = std::bit_cast<float>(kCanonicalNan32);
      y(i, j) = acc;
    }
  return y;
}

UlpReport ulp_report(const Tensor2f& m, const Tensor2f& c) {
  if (m.shape() != c.shape()) throw std::invalid_argument("ulp_report: shapes differ");
  UlpReport r;
  // Ordered integer line of FP32 patterns with both zeros at 0: -0 and +0 are
  // the same point (they compare equal and any result rounded to zero may carry
  // either sign), the smallest subnormals of either sign one ulp from it.
  auto ord = [](float f) {
    const int64_t b = std::bit_cast<uint32_t>(f);
    return (b & 0x80000000) ? -(b & 0x7FFFFFFF) : b;
  };
  for (size_t n = 0; n < m.size(); ++n) {
    ++r.total;
    const float a = m.data()[n], b = c.data()[n];
    if (std::isnan(a) || std::isnan(b)) {
      if (std::isnan(a) != std::isnan(b)) ++r.nan_mismatch;
      else ++r.buckets[0];
      continue;
    }
    const uint64_t d = uint64_t(std::llabs(ord(a) - ord(b)));
    r.max_ulp = std::max(r.max_ulp, d);
    r.buckets[d == 0 ? 0 : std::min<int>(32, 64 - std::countl_zero(d))]++;
  }
  return r;
}

}  // namespace mxsim::emu
