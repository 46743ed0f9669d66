// Grouped GEMM API: validation, operand panels, dispatch (docs/numerics.md §5).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "gemm_internal.hpp"
#include "cpu_dispatch.hpp"
#include "gemm_mx_direct.hpp"
#include "mxsim/bits.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/m_splits.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::emu {

using gemm::GemmClass;
using gemm::Panel;

namespace {

[[noreturn]] void fail(const std::string& gemm, const std::string& msg) {
  throw std::invalid_argument("grouped " + gemm + ": " + msg);
}

/// An operand source: a QuantizedTensor, or FP32 values already rounded to BF16.
struct Src {
  const QuantizedTensor* q = nullptr;
  const Tensor3f* f = nullptr;  // [groups, rows, cols], BF16 values
  size_t groups() const { return q ? q->groups : f->shape(0); }
  size_t rows() const { return q ? q->rows : f->shape(1); }
  size_t cols() const { return q ? q->cols : f->shape(2); }
  bool bf16() const { return f != nullptr; }
};

std::string spec_name(const QuantSpec& s) { return s.elem == Format::BF16 ? std::string("bf16") : s.describe(); }
QuantSpec spec_of_src(const Src& s) { return s.bf16() ? bf16_spec() : s.q->spec; }
std::string spec_name(const Src& s) { return spec_name(spec_of_src(s)); }

/// One group's operand as [R, K] with K the contraction axis: logical rows
/// [r0, r0 + nr) when contraction runs along logical cols, else logical cols
/// (all of them) with contraction along logical rows.
Panel make_panel(const Src& s, size_t g, bool contract_rows, size_t r0, size_t nr, const std::string& gemm,
                 const char* what, bool build = true) {
  Panel p;
  const size_t R = contract_rows ? s.cols() : nr;
  const size_t K = contract_rows ? s.rows() : s.cols();
  p.R = R;
  p.K = K;
  if (build) p.code.resize(R * K);
  auto logical = [&](size_t r, size_t k, size_t& lr, size_t& lc) {
    if (contract_rows) { lr = k; lc = r; } else { lr = r0 + r; lc = k; }
  };
  if (s.bf16()) {
    p.elem = Format::BF16;
    if (!build) return p;
    // Row-major [groups, rows, cols] storage read directly, in parallel.
    const size_t cols = s.cols();
    const float* src = s.f->data() + g * s.rows() * cols;
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
  const bool along_scols = (contract_rows == q.transposed);
  const size_t br = q.block_rows(), bc = q.block_cols();
  const size_t bk = along_scols ? bc : br;
  auto stor = [&](size_t lr, size_t lc, size_t& sr, size_t& sc) {
    if (q.transposed) { sr = lc; sc = lr; } else { sr = lr; sc = lc; }
  };
  const char* axis_need = contract_rows ? "along its rows (Axis::Rows or 2-D tiles)" : "along its cols (Axis::Cols or 2-D tiles)";
  switch (q.spec.scale_kind) {
    case ScaleKind::UE4M3:
      fail(gemm, std::string(what) + ": NVFP4 (UE4M3 scales) is not defined by the GEMM contract yet");
    case ScaleKind::E8M0:
      if (!has_role(q.spec.elem, kRoleOcpMx))
        fail(gemm, std::string(what) + ": element format " + short_name(q.spec.elem) +
                       " is not defined for E8M0-scaled GEMM (E2M1, E2M3, E3M2, E4M3, E5M2)");
      if (bk != 32)
        fail(gemm, std::string(what) + " (" + q.spec.describe() + ") must have blocks of 32 along the contraction, i.e. quantized " +
                       axis_need + "; its blocks along the contraction are " + std::to_string(bk) + " long");
      break;
    case ScaleKind::FP32:
      if (q.spec.elem != Format::E4M3 && q.spec.elem != Format::E5M2)
        fail(gemm, std::string(what) + ": FP32-scaled operands must be E4M3 or E5M2, got " + short_name(q.spec.elem));
      if (!(bk == 128 || bk == (along_scols ? q.scols() : q.srows())))
        fail(gemm, std::string(what) + " (" + q.spec.describe() + ") needs one FP32 scale per 128-K chunk or per whole contraction " +
                       axis_need + "; its blocks along the contraction are " + std::to_string(bk) + " long");
      break;
  }
  if (q.tensor_scale_inv != 1.0f) fail(gemm, std::string(what) + ": tensor_scale_inv must be 1 outside NVFP4");
  if (!build) return p;  // validated only (the direct MX path reads the packed codes itself)
  {
    // Direct reads of the packed storage (layout: quantized_tensor.hpp).
    const size_t rb = q.row_bytes();
    const uint8_t* base = q.data.data() + g * q.srows() * rb;
    const bool e2m1 = q.spec.elem == Format::E2M1;
    auto at = [&](size_t sr, size_t sc) -> uint32_t {
      const uint8_t b = base[sr * rb + (e2m1 ? sc / 2 : sc)];
      return e2m1 ? ((sc & 1) ? b >> 4 : b & 0xFu) : b;
    };
    const size_t off = contract_rows ? 0 : r0;
    if (along_scols) {
#pragma omp parallel for schedule(static)
      for (size_t r = 0; r < R; ++r) {
        uint32_t* dst = p.code.data() + r * K;
        const uint8_t* src = base + (off + r) * rb;
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
            for (size_t r = t * 64; r < std::min(R, t * 64 + 64); ++r) p.code[r * K + k] = at(k, off + r);
    }
  }
  // One scale per (row, K-block): K-blocks of 32 for E8M0, chunks of 128 for
  // FP32 scale_inv (numerics.md §5.2).
  auto gather = [&](auto& dst, size_t nk, size_t step, const auto& scales) {
    dst.resize(R * nk);
    for (size_t r = 0; r < R; ++r)
      for (size_t b = 0; b < nk; ++b) {
        size_t lr, lc, sr, sc;
        logical(r, b * step, lr, lc);
        stor(lr, lc, sr, sc);
        dst[r * nk + b] = scales(g, sr / br, sc / bc);
      }
  };
  if (q.spec.scale_kind == ScaleKind::E8M0) {
    gather(p.sbyte, p.kb(), 32, q.scale_bytes);
  } else {
    gather(p.sinv, p.kc(), 128, q.scale_inv);
    // Divisors s (torchao Float8TrainingTensor) enter as scale_inv = fl32(1 / s), as
    // torchao's matmul passes them (numerics.md §5.2, fp8-chunk128).
    if (q.divides_by_scale())
      for (float& v : p.sinv) v = 1.0f / v;
  }
  return p;
}

/// The block-dot class of a pair: core's classifier (hd::gemm_class_of), the
/// one the GPU backend asks too, with both operands named when it refuses.
GemmClass pair_class(const QuantSpec& a, const QuantSpec& b, const std::string& gemm) {
  GemmClass c{};
  std::string why;
  if (!hd::gemm_class_of(a, b, c, &why)) fail(gemm, why + " (got " + spec_name(a) + " with " + spec_name(b) + ")");
  return c;
}
GemmClass pair_class(const Src& a, const Src& b, const std::string& gemm) {
  return pair_class(spec_of_src(a), spec_of_src(b), gemm);
}

size_t check_splits(std::span<const int64_t> m_splits, size_t M, const std::string& gemm) {
  if (const std::string why = m_splits_error(m_splits, M); !why.empty()) fail(gemm, why);
  return m_splits.size();
}

/// MX-exact with GemmImpl::Fast reads the packed codes directly
/// (gemm_mx_direct.cpp) when the CPU path has a direct kernel.
gemm::MxDirectIsa direct_isa(GemmClass kind, const GemmOptions& opt) {
  if (kind != GemmClass::MxExact || opt.impl != GemmImpl::Fast) return gemm::MxDirectIsa::None;
  return gemm::mx_direct_isa(cpu_path());
}
bool use_direct(GemmClass kind, const GemmOptions& opt) { return direct_isa(kind, opt) != gemm::MxDirectIsa::None; }

void run(GemmClass kind, const Panel& A, const Panel& B, gemm::Out out, const GemmOptions& opt) {
  if (opt.impl == GemmImpl::Reference) gemm::run_reference(kind, A, B, out, opt.accumulate, opt.out);
  else gemm::run_fast(kind, A, B, out, opt.accumulate, opt.out);
}

void check_opt(const GemmOptions& opt, const std::string& gemm) {
  if (opt.out != Format::FP32 && opt.out != Format::BF16)
    fail(gemm, std::string("output format must be fp32 or bf16, got ") + short_name(opt.out));
  if (opt.impl == GemmImpl::Fast) (void)cpu_path();  // a bad MXSIM_CPU_PATH throws here, before any output changes
}

// fprop / dgrad share the token-major form: out[M, J] = A_tokens . B[g]^T.
void token_gemm(const std::string& gemm, const Src& a, const Src& w, bool w_contract_rows,
                std::span<const int64_t> m_splits, Tensor2f& out, const GemmOptions& opt) {
  check_opt(opt, gemm);
  if (a.groups() != 1) fail(gemm, "the token operand must have groups = 1, has " + std::to_string(a.groups()));
  const size_t M = a.rows();
  const size_t G = check_splits(m_splits, M, gemm);
  if (w.groups() != G)
    fail(gemm, "W has " + std::to_string(w.groups()) + " groups but m_splits has " + std::to_string(G));
  const size_t Kc = w_contract_rows ? w.rows() : w.cols();
  const size_t J = w_contract_rows ? w.cols() : w.rows();
  if (a.cols() != Kc)
    fail(gemm, "contraction mismatch: token operand has " + std::to_string(a.cols()) + " columns, W has " + std::to_string(Kc));
  const GemmClass kind = pair_class(a, w, gemm);
  if (opt.accumulate && (out.shape(0) != M || out.shape(1) != J))
    fail(gemm, "accumulate: output has shape [" + std::to_string(out.shape(0)) + ", " + std::to_string(out.shape(1)) +
                   "], expected [" + std::to_string(M) + ", " + std::to_string(J) + "]");
  const bool direct = use_direct(kind, opt);
  std::vector<Panel> As(G), Bs(G);
  size_t m0 = 0;
  for (size_t g = 0; g < G; ++g) {
    const size_t mg = size_t(m_splits[g]);
    if (mg) {
      As[g] = make_panel(a, 0, false, m0, mg, gemm, "token operand", !direct);
      Bs[g] = make_panel(w, g, w_contract_rows, 0, J, gemm, "W", !direct);
    }
    m0 += mg;
  }
  if (!opt.accumulate && (out.dimension() != 2 || out.shape(0) != M || out.shape(1) != J)) out = Tensor2f::from_shape({M, J});
  if (direct && J) {
    std::vector<gemm::MxGroup> jobs;
    m0 = 0;
    for (size_t g = 0; g < G; ++g) {
      const size_t mg = size_t(m_splits[g]);
      if (mg) jobs.push_back({{a.q, 0, false, m0, mg}, {w.q, g, w_contract_rows, 0, J}, out.data() + m0 * J, J});
      m0 += mg;
    }
    if (gemm::run_mx_exact_direct(jobs, opt.accumulate, opt.out, direct_isa(kind, opt))) return;
    for (size_t g = 0, m1 = 0; g < G; m1 += size_t(m_splits[g]), ++g)  // declined: build the panels after all
      if (m_splits[g]) {
        As[g] = make_panel(a, 0, false, m1, size_t(m_splits[g]), gemm, "token operand");
        Bs[g] = make_panel(w, g, w_contract_rows, 0, J, gemm, "W");
      }
  }
  m0 = 0;
  for (size_t g = 0; g < G; ++g) {
    const size_t mg = size_t(m_splits[g]);
    if (mg && J) run(kind, As[g], Bs[g], {out.data() + m0 * J, J}, opt);
    m0 += mg;
  }
}

void wgrad_impl(std::span<const Src> dy, std::span<const Src> x, std::span<const int64_t> m_splits, Tensor3f& dw,
                const GemmOptions& opt) {
  const std::string gemm = "wgrad";
  check_opt(opt, gemm);
  const size_t G = m_splits.size();
  if (dy.size() != G || x.size() != G)
    fail(gemm, "m_splits has " + std::to_string(G) + " groups but dy has " + std::to_string(dy.size()) + " and x " +
                   std::to_string(x.size()));
  for (size_t g = 0; g < G; ++g)
    if (m_splits[g] < 0) fail(gemm, "m_splits[" + std::to_string(g) + "] = " + std::to_string(m_splits[g]) + " is negative");
  if (G == 0) {
    if (!opt.accumulate) dw = Tensor3f::from_shape({0, 0, 0});
    return;
  }
  const size_t N = dy[0].cols(), K = x[0].cols();
  for (size_t g = 0; g < G; ++g) {
    const std::string gs = "group " + std::to_string(g);
    if (dy[g].groups() != 1 || x[g].groups() != 1) fail(gemm, gs + ": per-group operands must have groups = 1");
    if (dy[g].rows() != size_t(m_splits[g]) || x[g].rows() != size_t(m_splits[g]))
      fail(gemm, gs + ": dy has " + std::to_string(dy[g].rows()) + " rows and x " + std::to_string(x[g].rows()) +
                     " but m_splits says " + std::to_string(m_splits[g]));
    if (dy[g].cols() != N || x[g].cols() != K)
      fail(gemm, gs + ": operand widths differ between groups (dy " + std::to_string(dy[g].cols()) + " vs " +
                     std::to_string(N) + ", x " + std::to_string(x[g].cols()) + " vs " + std::to_string(K) + ")");
  }
  if (opt.accumulate && (dw.shape(0) != G || dw.shape(1) != N || dw.shape(2) != K))
    fail(gemm, "accumulate: dW has shape [" + std::to_string(dw.shape(0)) + ", " + std::to_string(dw.shape(1)) + ", " +
                   std::to_string(dw.shape(2)) + "], expected [" + std::to_string(G) + ", " + std::to_string(N) + ", " +
                   std::to_string(K) + "]");
  std::vector<Panel> As(G), Bs(G);
  GemmClass kind = GemmClass::MxExact;
  bool direct = true;
  for (size_t g = 0; g < G; ++g) direct &= use_direct(pair_class(dy[g], x[g], gemm), opt);
  for (size_t g = 0; g < G; ++g) {
    kind = pair_class(dy[g], x[g], gemm);
    if (m_splits[g] == 0) continue;
    As[g] = make_panel(dy[g], 0, true, 0, 0, gemm, "dy", !direct);
    Bs[g] = make_panel(x[g], 0, true, 0, 0, gemm, "x", !direct);
  }
  if (!opt.accumulate && (dw.shape(0) != G || dw.shape(1) != N || dw.shape(2) != K)) dw = Tensor3f::from_shape({G, N, K});
  if (direct && N && K) {
    std::vector<gemm::MxGroup> jobs;
    for (size_t g = 0; g < G; ++g) {
      float* o = dw.data() + g * N * K;
      if (m_splits[g] == 0) {
        if (!opt.accumulate) std::fill(o, o + N * K, 0.0f);
        continue;
      }
      jobs.push_back({{dy[g].q, 0, true, 0, N}, {x[g].q, 0, true, 0, K}, o, K});
    }
    if (gemm::run_mx_exact_direct(jobs, opt.accumulate, opt.out, direct_isa(GemmClass::MxExact, opt))) return;
    for (size_t g = 0; g < G; ++g)  // declined: build the panels after all
      if (m_splits[g]) {
        As[g] = make_panel(dy[g], 0, true, 0, 0, gemm, "dy");
        Bs[g] = make_panel(x[g], 0, true, 0, 0, gemm, "x");
      }
  }
  for (size_t g = 0; g < G; ++g) {
    float* o = dw.data() + g * N * K;
    if (m_splits[g] == 0) {
      if (!opt.accumulate) std::fill(o, o + N * K, 0.0f);
      continue;
    }
    if (N && K) run(kind, As[g], Bs[g], {o, K}, opt);
  }
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
Panel operand_panel(const QuantizedTensor& q, const char* what) {
  if (q.groups != 1) fail("model gemm", std::string(what) + ": groups must be 1");
  return make_panel(Src{&q, nullptr}, 0, false, 0, q.rows, "model gemm", what);
}
}  // namespace gemm

QuantSpec bf16_spec() {
  QuantSpec s;
  s.elem = Format::BF16;
  s.block_rows = 0;
  s.block_cols = 0;
  s.scale_kind = ScaleKind::FP32;
  return s;
}

const char* gemm_class_name(const QuantSpec& a, const QuantSpec& b) {
  return hd::gemm_class_name(pair_class(a, b, "gemm"));
}

void grouped_fprop(const QuantizedTensor& x, const QuantizedTensor& w, std::span<const int64_t> m_splits, Tensor2f& y,
                   const GemmOptions& opt) {
  token_gemm("fprop", Src{&x, nullptr}, Src{&w, nullptr}, false, m_splits, y, opt);
}
void grouped_dgrad(const QuantizedTensor& dy, const QuantizedTensor& w, std::span<const int64_t> m_splits, Tensor2f& dx,
                   const GemmOptions& opt) {
  token_gemm("dgrad", Src{&dy, nullptr}, Src{&w, nullptr}, true, m_splits, dx, opt);
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
void token_gemm_hp(const char* gemm, const Tensor2f& a, const QuantSpec& as, const Tensor3f& w, const QuantSpec& ws,
                   bool w_contract_rows, std::span<const int64_t> m_splits, Tensor2f& out, const GemmOptions& opt) {
  const bool ab = as.elem == Format::BF16, wb = ws.elem == Format::BF16;
  QuantizedTensor qa, qw;
  Tensor3f fa, fw;
  if (ab) fa = as3_bf16(a); else qa = quantize(a, as, Axis::Cols);
  if (wb) fw = to_bf16_3(w); else qw = quantize(w, ws, w_contract_rows ? Axis::Rows : Axis::Cols);
  token_gemm(gemm, ab ? Src{nullptr, &fa} : Src{&qa, nullptr}, wb ? Src{nullptr, &fw} : Src{&qw, nullptr},
             w_contract_rows, m_splits, out, opt);
}
}  // namespace

void grouped_fprop(const Tensor2f& x, const QuantSpec& xs, const Tensor3f& w, const QuantSpec& ws,
                   std::span<const int64_t> m_splits, Tensor2f& y, const GemmOptions& opt) {
  token_gemm_hp("fprop", x, xs, w, ws, false, m_splits, y, opt);
}
void grouped_dgrad(const Tensor2f& dy, const QuantSpec& dys, const Tensor3f& w, const QuantSpec& ws,
                   std::span<const int64_t> m_splits, Tensor2f& dx, const GemmOptions& opt) {
  token_gemm_hp("dgrad", dy, dys, w, ws, true, m_splits, dx, opt);
}

std::vector<QuantizedTensor> quantize_grouped_colwise(const Tensor2f& x, std::span<const int64_t> m_splits,
                                                      const QuantSpec& spec) {
  check_splits(m_splits, x.shape(0), "wgrad operand quantization");
  std::vector<QuantizedTensor> out;
  size_t m0 = 0;
  const size_t C = x.shape(1);
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
    QuantSpec s = spec;  // SR words follow the element's index in the whole [M, C] tensor (§2.5)
    s.sr_index_base = spec.sr_index_base + uint64_t(m0) * C;
    out.push_back(quantize(slice, s, Axis::Rows));
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
