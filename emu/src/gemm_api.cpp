// Grouped GEMM API: validation, operand panels, dispatch (docs/numerics.md §5).
#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

#include "gemm_internal.hpp"
#include "cpu_dispatch.hpp"
#include "gemm_mx_direct.hpp"
#include "mxsim/bits.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/gemm_plan.hpp"
#include "mxsim/hd/quant_block.hpp"
#include "mxsim/m_splits.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::emu {

using gemm::GemmClass;
using gemm::Panel;

namespace {

/// An operand source: a QuantizedTensor, or FP32 values already rounded to BF16.
struct Src {
  const QuantizedTensor* q = nullptr;
  const Tensor3f* f = nullptr;  // [groups, rows, cols], BF16 values
  GemmOperandDesc desc() const {
    return q ? GemmOperandDesc::of(*q) : GemmOperandDesc::of_bf16(f->shape(0), f->shape(1), f->shape(2));
  }
};

/// One group's operand as the plan's panel [R, K] (element (r, k) at logical
/// (r0 + r, k), or at (k, r) when the contraction runs along logical rows),
/// its codes and per-block scales gathered into dense arrays. The plan
/// (core/src/gemm_plan.cpp) has checked the operand.
Panel make_panel(const Src& s, const GemmPanel& gp) {
  Panel p;
  const size_t R = gp.R, K = gp.K;
  const bool contract_rows = gp.contract_rows;
  const size_t r0 = gp.r0, g = gp.group;
  p.R = R;
  p.K = K;
  p.code.resize(R * K);
  if (s.f) {
    p.elem = Format::BF16;
    // Row-major [groups, rows, cols] storage read directly, in parallel.
    const size_t cols = s.f->shape(2);
    const float* src = s.f->data() + g * s.f->shape(1) * cols;
    uint32_t* dst = p.code.data();
    if (!contract_rows) {
#pragma omp parallel for schedule(static)
      for (size_t r = 0; r < R; ++r)
        for (size_t k = 0; k < K; ++k) dst[r * K + k] = f32_bits(src[(r0 + r) * cols + k]) >> 16;
    } else {  // element (r, k) is logical (k, r): 64 x 64 tiles
      const size_t nt = (R + 63) / 64;
#pragma omp parallel for schedule(static)
      for (size_t t = 0; t < nt; ++t)
        for (size_t k0 = 0; k0 < K; k0 += 64)
          for (size_t k = k0; k < std::min(K, k0 + 64); ++k)
            for (size_t r = t * 64; r < std::min(R, t * 64 + 64); ++r) dst[r * K + k] = f32_bits(src[k * cols + r]) >> 16;
    }
    return p;
  }
  const QuantizedTensor& q = *s.q;
  p.elem = q.spec.elem;
  const bool along_scols = gp.along_scols;
  const size_t br = q.block_rows(), bc = q.block_cols();
  {
    // Direct reads of the packed storage (layout: quantized_tensor.hpp).
    const size_t rb = q.row_bytes();
    const uint8_t* base = q.data.data() + g * q.srows() * rb;
    const bool e2m1 = q.spec.elem == Format::E2M1;
    auto at = [&](size_t sr, size_t sc) -> uint32_t {
      const uint8_t b = base[sr * rb + (e2m1 ? sc / 2 : sc)];
      return e2m1 ? ((sc & 1) ? b >> 4 : b & 0xFu) : b;
    };
    if (along_scols) {
#pragma omp parallel for schedule(static)
      for (size_t r = 0; r < R; ++r) {
        uint32_t* dst = p.code.data() + r * K;
        const uint8_t* src = base + (r0 + r) * rb;
        if (e2m1) {
          for (size_t k = 0; k + 1 < K; k += 2) dst[k] = src[k / 2] & 0xFu, dst[k + 1] = src[k / 2] >> 4;
          if (K & 1) dst[K - 1] = src[K / 2] & 0xFu;
        } else {
          for (size_t k = 0; k < K; ++k) dst[k] = src[k];
        }
      }
    } else {
      const size_t nt = (R + 63) / 64;
#pragma omp parallel for schedule(static)
      for (size_t t = 0; t < nt; ++t)
        for (size_t k0 = 0; k0 < K; k0 += 64)
          for (size_t k = k0; k < std::min(K, k0 + 64); ++k)
            for (size_t r = t * 64; r < std::min(R, t * 64 + 64); ++r) p.code[r * K + k] = at(k, r0 + r);
    }
  }
  // One scale per (row, K-block): K-blocks of 32 for E8M0, 16 for UE4M3,
  // chunks of 128 for FP32 scale_inv (numerics.md §5.2).
  auto gather = [&](auto& dst, size_t nk, size_t step, const auto& scales) {
    dst.resize(R * nk);
    for (size_t r = 0; r < R; ++r)
      for (size_t b = 0; b < nk; ++b) {
        const size_t lr = contract_rows ? b * step : r0 + r, lc = contract_rows ? r : b * step;
        const size_t sr = q.transposed ? lc : lr, sc = q.transposed ? lr : lc;
        dst[r * nk + b] = scales(g, sr / br, sc / bc);
      }
  };
  if (q.spec.scale_kind == ScaleKind::E8M0) {
    gather(p.sbyte, p.kb(), 32, q.scale_bytes);
  } else if (q.spec.scale_kind == ScaleKind::UE4M3) {  // NVFP4: E4M3 bytes per 16, and the tensor scale
    p.bk = 16;
    p.tsi = q.tensor_scale_inv;
    gather(p.sbyte, p.kb(), 16, q.scale_bytes);
  } else {
    gather(p.sinv, p.kc(), 128, q.scale_inv);
    // Divisors s (torchao Float8TrainingTensor) enter as scale_inv = fl32(1 / s), as
    // torchao's matmul passes them (numerics.md §5.2, fp8-chunk128).
    if (q.divides_by_scale())
      for (float& v : p.sinv) v = 1.0f / v;
  }
  return p;
}

/// MX-exact with GemmImpl::Fast reads the packed codes directly
/// (gemm_mx_direct.cpp) when the CPU path has a direct kernel.
gemm::MxDirectIsa direct_isa(const GemmPlan& plan) {
  if (plan.opt.impl != GemmImpl::Fast || !plan.all_runs(GemmClass::MxExact)) return gemm::MxDirectIsa::None;
  return gemm::mx_direct_isa(cpu_path());
}

/// Computes what a plan lists into `out` (the output's elements, row stride
/// plan.ld()). A panel's operand index picks its source from A (first
/// panels) or B (second).
void run_plan(const GemmPlan& plan, std::span<const Src> A, std::span<const Src> B, float* out) {
  const GemmOptions& opt = plan.opt;
  const size_t ld = plan.ld(), per_group = plan.rows * plan.cols;
  if (!opt.accumulate)  // wgrad's groups without tokens: the sum over no tokens is +0
    for (size_t g : plan.empty) std::fill(out + g * per_group, out + (g + 1) * per_group, 0.0f);
  if (plan.runs.empty() || plan.cols == 0 || (plan.form == GemmForm::Wgrad && plan.rows == 0)) return;
  if (const gemm::MxDirectIsa isa = direct_isa(plan); isa != gemm::MxDirectIsa::None) {
    std::vector<gemm::MxGroup> jobs;
    auto op = [](const Src& s, const GemmPanel& p) { return gemm::MxOperand{s.q, p.group, p.contract_rows, p.r0, p.R}; };
    for (const GemmPlan::Group& r : plan.runs)
      jobs.push_back({op(A[r.a.operand], r.a), op(B[r.b.operand], r.b), out + r.out_offset, ld});
    if (gemm::run_mx_exact_direct(jobs, opt.accumulate, opt.out, isa)) return;
  }
  for (const GemmPlan::Group& r : plan.runs) {
    const Panel pa = make_panel(A[r.a.operand], r.a), pb = make_panel(B[r.b.operand], r.b);
    if (opt.impl == GemmImpl::Reference) gemm::run_reference(r.cls, pa, pb, {out + r.out_offset, ld}, opt.accumulate, opt.out);
    else gemm::run_fast(r.cls, pa, pb, {out + r.out_offset, ld}, opt.accumulate, opt.out);
  }
}

/// The output's container: checked when accumulating into it, else (re)shaped to the plan's.
template <class T>
void prepare_out(const GemmPlan& plan, T& out) {
  const std::vector<size_t> want = plan.out_extents();
  std::vector<size_t> have(out.shape().begin(), out.shape().end());
  if (plan.opt.accumulate) plan.check_out(have);
  else if (have != want) {
    typename T::shape_type shape;
    std::copy(want.begin(), want.end(), shape.begin());
    out = T::from_shape(shape);
  }
}

// fprop / dgrad share the token-major form: out[M, J] = A_tokens . B[g]^T.
void token_gemm(GemmForm form, const Src& a, const Src& w, std::span<const int64_t> m_splits, Tensor2f& out,
                const GemmOptions& opt) {
  const GemmPlan plan = plan_token_gemm(form, a.desc(), w.desc(), m_splits, opt);
  if (opt.impl == GemmImpl::Fast) (void)cpu_path();  // a bad MXSIM_CPU_PATH throws here, before any output changes
  prepare_out(plan, out);
  run_plan(plan, std::span(&a, 1), std::span(&w, 1), out.data());
}

void wgrad_impl(std::span<const Src> dy, std::span<const Src> x, std::span<const int64_t> m_splits, Tensor3f& dw,
                const GemmOptions& opt) {
  std::vector<GemmOperandDesc> da, db;
  for (const Src& s : dy) da.push_back(s.desc());
  for (const Src& s : x) db.push_back(s.desc());
  const GemmPlan plan = plan_wgrad(da, db, m_splits, opt);
  if (opt.impl == GemmImpl::Fast) (void)cpu_path();
  prepare_out(plan, dw);
  run_plan(plan, dy, x, dw.data());
}

Tensor3f to_bf16_3(const Tensor3f& x) {
  Tensor3f r = Tensor3f::from_shape({x.shape(0), x.shape(1), x.shape(2)});
  const float* src = x.data();
  float* dst = r.data();
  const size_t n = x.size();
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) dst[i] = round_bf16(src[i]);
  return r;
}
/// m_splits that cut a high-precision operand of M rows (m_splits.hpp's rule).
void check_splits(std::span<const int64_t> m_splits, size_t M, const std::string& what) {
  if (const std::string why = m_splits_error(m_splits, M); !why.empty())
    throw std::invalid_argument("grouped " + what + ": " + why);
}

/// x as [1, rows, cols], rounded to BF16 (RNE) on the way.
Tensor3f as3_bf16(const Tensor2f& x) {
  Tensor3f r = Tensor3f::from_shape({1, x.shape(0), x.shape(1)});
  const float* src = x.data();
  float* dst = r.data();
  const size_t n = x.size();
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) dst[i] = round_bf16(src[i]);
  return r;
}

}  // namespace

namespace gemm {
std::pair<Panel, Panel> model_panels(const QuantizedTensor& a, const QuantizedTensor& b) {
  // y = a . b^T is the fprop of one group, b its weight: the same plan and checks.
  const int64_t ms[] = {int64_t(a.rows)};
  const GemmPlan plan = plan_token_gemm(GemmForm::Fprop, GemmOperandDesc::of(a), GemmOperandDesc::of(b), ms, {});
  if (plan.runs.empty()) return {};
  const GemmPlan::Group& r = plan.runs.front();
  return {make_panel(Src{&a, nullptr}, r.a), make_panel(Src{&b, nullptr}, r.b)};
}
}  // namespace gemm

const char* gemm_class_name(const QuantSpec& a, const QuantSpec& b) {
  return hd::gemm_class_name(gemm_pair_class(a, b, "gemm"));
}

void grouped_fprop(const QuantizedTensor& x, const QuantizedTensor& w, std::span<const int64_t> m_splits, Tensor2f& y,
                   const GemmOptions& opt) {
  token_gemm(GemmForm::Fprop, Src{&x, nullptr}, Src{&w, nullptr}, m_splits, y, opt);
}
void grouped_dgrad(const QuantizedTensor& dy, const QuantizedTensor& w, std::span<const int64_t> m_splits, Tensor2f& dx,
                   const GemmOptions& opt) {
  token_gemm(GemmForm::Dgrad, Src{&dy, nullptr}, Src{&w, nullptr}, m_splits, dx, opt);
}
void grouped_wgrad(std::span<const QuantizedTensor> dy, std::span<const QuantizedTensor> x,
                   std::span<const int64_t> m_splits, Tensor3f& dw, const GemmOptions& opt) {
  std::vector<Src> a, b;
  for (const auto& t : dy) a.push_back(Src{&t, nullptr});
  for (const auto& t : x) b.push_back(Src{&t, nullptr});
  wgrad_impl(a, b, m_splits, dw, opt);
}

namespace {
/// fprop / dgrad from high-precision operands: the token operand [M, K] is
/// quantized along its cols, W along its contraction axis (cols for fprop,
/// rows for dgrad); a BF16 spec rounds to BF16 instead.
void token_gemm_hp(GemmForm form, const Tensor2f& a, const QuantSpec& as, const Tensor3f& w, const QuantSpec& ws,
                   std::span<const int64_t> m_splits, Tensor2f& out, const GemmOptions& opt) {
  const bool w_contract_rows = form == GemmForm::Dgrad;
  const bool ab = as.elem == Format::BF16, wb = ws.elem == Format::BF16;
  QuantizedTensor qa, qw;
  Tensor3f fa, fw;
  if (ab) fa = as3_bf16(a); else qa = quantize(a, as, Axis::Cols);
  if (wb) fw = to_bf16_3(w); else qw = quantize(w, ws, w_contract_rows ? Axis::Rows : Axis::Cols);
  token_gemm(form, ab ? Src{nullptr, &fa} : Src{&qa, nullptr}, wb ? Src{nullptr, &fw} : Src{&qw, nullptr}, m_splits,
             out, opt);
}
}  // namespace

void grouped_fprop(const Tensor2f& x, const QuantSpec& xs, const Tensor3f& w, const QuantSpec& ws,
                   std::span<const int64_t> m_splits, Tensor2f& y, const GemmOptions& opt) {
  token_gemm_hp(GemmForm::Fprop, x, xs, w, ws, m_splits, y, opt);
}
void grouped_dgrad(const Tensor2f& dy, const QuantSpec& dys, const Tensor3f& w, const QuantSpec& ws,
                   std::span<const int64_t> m_splits, Tensor2f& dx, const GemmOptions& opt) {
  token_gemm_hp(GemmForm::Dgrad, dy, dys, w, ws, m_splits, dx, opt);
}

std::vector<QuantizedTensor> quantize_grouped_colwise(const Tensor2f& x, std::span<const int64_t> m_splits,
                                                      const QuantSpec& spec) {
  check_splits(m_splits, x.shape(0), "wgrad operand quantization");
  std::vector<QuantizedTensor> out;
  size_t m0 = 0;
  const size_t C = x.shape(1);
  // A whole-tensor scale: every slice's one block takes the amax of all of x (quantize_slice).
  std::optional<SliceAmax> whole;
  if (spec.whole_tensor_scale) {
    whole.emplace();
    uint32_t a = 0;
    for (float v : x) a = hd::amax_step(a, f32_bits(v));
    whole->group_amax_bits = a;
  }
  for (int64_t mg : m_splits) {
    if (mg == 0) {
      QuantizedTensor q;
      q.spec = spec;
      q.rows = 0;
      q.cols = C;
      q.transposed = true;
      out.push_back(std::move(q));
      continue;
    }
    Tensor2f slice = xt::view(x, xt::range(m0, m0 + size_t(mg)), xt::all());
    const QuantSpec s = row_slice_spec(spec, m0, uint64_t(mg), C);
    if (whole) {
      const Tensor3f s3 = xt::view(slice, xt::newaxis(), xt::all(), xt::all());
      out.push_back(quantize_slice(s3, s, Axis::Rows, *whole));
    } else {
      out.push_back(quantize(slice, s, Axis::Rows));
    }
    m0 += size_t(mg);
  }
  return out;
}

void grouped_wgrad(const Tensor2f& dy, const QuantSpec& dys, const Tensor2f& x, const QuantSpec& xs,
                   std::span<const int64_t> m_splits, Tensor3f& dw, const GemmOptions& opt) {
  check_splits(m_splits, dy.shape(0), "wgrad (dy)");
  check_splits(m_splits, x.shape(0), "wgrad (x)");
  const bool ab = dys.elem == Format::BF16, bb = xs.elem == Format::BF16;
  std::vector<QuantizedTensor> qa, qb;
  std::vector<Tensor3f> fa, fb;
  std::vector<Src> sa, sb;
  size_t m0 = 0;
  auto slice3 = [](const Tensor2f& t, size_t m0, size_t mg) {
    Tensor3f r = Tensor3f::from_shape({1, mg, t.shape(1)});
    const size_t n = mg * t.shape(1);
    const float* src = t.data() + m0 * t.shape(1);
    float* dst = r.data();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) dst[i] = round_bf16(src[i]);
    return r;
  };
  if (!ab) qa = quantize_grouped_colwise(dy, m_splits, dys);
  if (!bb) qb = quantize_grouped_colwise(x, m_splits, xs);
  for (size_t g = 0; g < m_splits.size(); ++g) {
    if (ab) fa.push_back(slice3(dy, m0, size_t(m_splits[g])));
    if (bb) fb.push_back(slice3(x, m0, size_t(m_splits[g])));
    m0 += size_t(m_splits[g]);
  }
  for (size_t g = 0; g < m_splits.size(); ++g) {
    sa.push_back(ab ? Src{nullptr, &fa[g]} : Src{&qa[g], nullptr});
    sb.push_back(bb ? Src{nullptr, &fb[g]} : Src{&qb[g], nullptr});
  }
  wgrad_impl(sa, sb, m_splits, dw, opt);
}

}  // namespace mxsim::emu
