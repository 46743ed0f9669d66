// The grouped GEMM's checks, once for every backend (gemm_plan.hpp).
#include "mxsim/gemm_plan.hpp"

#include <algorithm>
#include <stdexcept>

#include "mxsim/m_splits.hpp"
#include "mxsim/quantized_tensor.hpp"

namespace mxsim {

QuantSpec bf16_spec() {
  QuantSpec s;
  s.elem = Format::BF16;
  s.block_rows = 0;
  s.block_cols = 0;
  s.scale_kind = ScaleKind::FP32;
  return s;
}

GemmOperandDesc GemmOperandDesc::of(const QuantizedTensor& q) {
  GemmOperandDesc d;
  d.spec = q.spec;
  hd::QuantLayout& l = d.layout;  // the tensor's own storage (quantized_tensor.hpp), not re-derived
  l.groups = q.groups;
  l.rows = q.rows;
  l.cols = q.cols;
  l.transposed = q.transposed;
  l.srows = q.srows();
  l.scols = q.scols();
  l.br = q.block_rows();
  l.bc = q.block_cols();
  l.nbr = l.br ? (l.srows + l.br - 1) / l.br : 0;
  l.nbc = l.bc ? (l.scols + l.bc - 1) / l.bc : 0;
  l.rbytes = q.row_bytes();
  d.tensor_scale_inv = q.tensor_scale_inv;
  return d;
}

GemmOperandDesc GemmOperandDesc::of_bf16(size_t groups, size_t rows, size_t cols) {
  GemmOperandDesc d;
  d.spec = bf16_spec();
  d.layout.groups = groups;
  d.layout.rows = d.layout.srows = rows;
  d.layout.cols = d.layout.scols = cols;
  d.layout.rbytes = cols;  // elements per row: BF16 codes are read as 16-bit words
  return d;
}

const char* name_of(GemmForm f) {
  switch (f) {
    case GemmForm::Fprop: return "fprop";
    case GemmForm::Dgrad: return "dgrad";
    case GemmForm::Wgrad: return "wgrad";
  }
  return "?";
}

namespace {

[[noreturn]] void fail(GemmForm f, const std::string& msg) {
  throw std::invalid_argument(std::string("grouped ") + name_of(f) + ": " + msg);
}

std::string spec_name(const QuantSpec& s) { return s.elem == Format::BF16 ? std::string("bf16") : s.describe(); }

/// An operand the contract can contract along the given logical axis: its blocks lie along the
/// contraction with the lengths its class defines (numerics §5.2).
void check_operand(GemmForm f, const GemmOperandDesc& o, bool contract_rows, const char* what) {
  if (o.bf16()) return;
  const hd::QuantLayout& L = o.layout;
  const bool along_scols = contract_rows == L.transposed;
  const size_t bk = along_scols ? L.bc : L.br;
  const std::string w = what;
  const char* axis_need =
      contract_rows ? "along its rows (Axis::Rows or 2-D tiles)" : "along its cols (Axis::Cols or 2-D tiles)";
  switch (o.spec.scale_kind) {
    case ScaleKind::UE4M3:
      if (o.spec.elem != Format::E2M1) fail(f, w + ": UE4M3-scaled (NVFP4) elements must be E2M1, got " + short_name(o.spec.elem));
      if (bk != 16)
        fail(f, w + " (" + o.spec.describe() + ") must have blocks of 16 along the contraction, i.e. quantized " +
                    axis_need + "; its blocks along the contraction are " + std::to_string(bk) + " long");
      return;  // its tensor_scale_inv is the operand's S_dec
    case ScaleKind::E8M0:
      if (!has_role(o.spec.elem, kRoleOcpMx))
        fail(f, w + ": element format " + short_name(o.spec.elem) +
                    " is not defined for E8M0-scaled GEMM (E2M1, E2M3, E3M2, E4M3, E5M2)");
      if (bk != 32)
        fail(f, w + " (" + o.spec.describe() + ") must have blocks of 32 along the contraction, i.e. quantized " +
                    axis_need + "; its blocks along the contraction are " + std::to_string(bk) + " long");
      break;
    case ScaleKind::FP32:
      if (o.spec.elem != Format::E4M3 && o.spec.elem != Format::E5M2)
        fail(f, w + ": FP32-scaled operands must be E4M3 or E5M2, got " + short_name(o.spec.elem));
      if (!(bk == 128 || bk == (along_scols ? L.scols : L.srows)))
        fail(f, w + " (" + o.spec.describe() + ") needs one FP32 scale per 128-K chunk or per whole contraction " +
                    axis_need + "; its blocks along the contraction are " + std::to_string(bk) + " long");
      break;
  }
  if (o.tensor_scale_inv != 1.0f) fail(f, w + ": tensor_scale_inv must be 1 outside NVFP4");
}

void check_opt(GemmForm f, const GemmOptions& opt) {
  if (opt.out != Format::FP32 && opt.out != Format::BF16)
    fail(f, std::string("output format must be fp32 or bf16, got ") + short_name(opt.out));
}

GemmPanel panel(const GemmOperandDesc& o, size_t operand, size_t group, size_t r0, size_t R, size_t K,
                bool contract_rows) {
  return {operand, group, contract_rows ? 0 : r0, R, K, contract_rows, contract_rows == o.layout.transposed};
}

std::string dims(std::span<const size_t> e) {
  std::string s = "[";
  for (size_t i = 0; i < e.size(); ++i) s += (i ? ", " : "") + std::to_string(e[i]);
  return s + "]";
}

}  // namespace

hd::GemmClass gemm_pair_class(const QuantSpec& a, const QuantSpec& b, const std::string& gemm) {
  hd::GemmClass c{};
  std::string why;
  if (!hd::gemm_class_of(a, b, c, &why))
    throw std::invalid_argument(gemm + ": " + why + " (got " + spec_name(a) + " with " + spec_name(b) + ")");
  return c;
}

std::vector<size_t> GemmPlan::out_extents() const {
  if (form == GemmForm::Wgrad) return {groups, rows, cols};
  return {rows, cols};
}

void GemmPlan::check_out(std::span<const size_t> extents) const {
  const std::vector<size_t> want = out_extents();
  if (!std::equal(extents.begin(), extents.end(), want.begin(), want.end()))
    fail(form, std::string("accumulate: ") + (form == GemmForm::Wgrad ? "dW" : "output") + " has shape " +
                   dims(extents) + ", expected " + dims(want));
}

bool GemmPlan::all_runs(hd::GemmClass c) const {
  for (const Group& r : runs)
    if (r.cls != c) return false;
  return true;
}

GemmPlan plan_token_gemm(GemmForm form, const GemmOperandDesc& a, const GemmOperandDesc& w,
                         std::span<const int64_t> m_splits, const GemmOptions& opt) {
  const bool w_contract_rows = form == GemmForm::Dgrad;
  check_opt(form, opt);
  if (a.layout.groups != 1)
    fail(form, "the token operand must have groups = 1, has " + std::to_string(a.layout.groups));
  const size_t M = a.layout.rows;
  if (const std::string why = m_splits_error(m_splits, M); !why.empty()) fail(form, why);
  const size_t G = m_splits.size();
  if (w.layout.groups != G)
    fail(form, "W has " + std::to_string(w.layout.groups) + " groups but m_splits has " + std::to_string(G));
  const size_t Kc = w_contract_rows ? w.layout.rows : w.layout.cols;
  const size_t J = w_contract_rows ? w.layout.cols : w.layout.rows;
  if (a.layout.cols != Kc)
    fail(form, "contraction mismatch: token operand has " + std::to_string(a.layout.cols) + " columns, W has " +
                   std::to_string(Kc));
  const hd::GemmClass cls = gemm_pair_class(a.spec, w.spec, std::string("grouped ") + name_of(form));
  GemmPlan p;
  p.form = form;
  p.m_splits.assign(m_splits.begin(), m_splits.end());
  p.groups = G;
  p.rows = M;
  p.cols = J;
  p.opt = opt;
  size_t m0 = 0;
  for (size_t g = 0; g < G; ++g) {
    const size_t mg = size_t(m_splits[g]);
    if (mg) {
      if (p.runs.empty()) {  // operands are checked where a group reads them
        check_operand(form, a, false, "token operand");
        check_operand(form, w, w_contract_rows, "W");
      }
      p.runs.push_back({g, cls, panel(a, 0, 0, m0, mg, Kc, false), panel(w, 0, g, 0, J, Kc, w_contract_rows), m0 * J});
    }
    m0 += mg;
  }
  return p;
}

GemmPlan plan_wgrad(std::span<const GemmOperandDesc> dy, std::span<const GemmOperandDesc> x,
                    std::span<const int64_t> m_splits, const GemmOptions& opt) {
  const GemmForm form = GemmForm::Wgrad;
  check_opt(form, opt);
  const size_t G = m_splits.size();
  if (dy.size() != G || x.size() != G)
    fail(form, "m_splits has " + std::to_string(G) + " groups but dy has " + std::to_string(dy.size()) + " and x " +
                   std::to_string(x.size()));
  for (size_t g = 0; g < G; ++g)
    if (m_splits[g] < 0) fail(form, "m_splits[" + std::to_string(g) + "] = " + std::to_string(m_splits[g]) + " is negative");
  GemmPlan p;
  p.form = form;
  p.m_splits.assign(m_splits.begin(), m_splits.end());
  p.groups = G;
  p.opt = opt;
  if (G == 0) return p;
  const size_t N = dy[0].layout.cols, K = x[0].layout.cols;
  p.rows = N;
  p.cols = K;
  std::vector<hd::GemmClass> cls(G);
  for (size_t g = 0; g < G; ++g) {
    const std::string gs = "group " + std::to_string(g);
    const hd::QuantLayout &a = dy[g].layout, &b = x[g].layout;
    if (a.groups != 1 || b.groups != 1) fail(form, gs + ": per-group operands must have groups = 1");
    if (a.rows != size_t(m_splits[g]) || b.rows != size_t(m_splits[g]))
      fail(form, gs + ": dy has " + std::to_string(a.rows) + " rows and x " + std::to_string(b.rows) +
                     " but m_splits says " + std::to_string(m_splits[g]));
    if (a.cols != N || b.cols != K)
      fail(form, gs + ": operand widths differ between groups (dy " + std::to_string(a.cols) + " vs " +
                     std::to_string(N) + ", x " + std::to_string(b.cols) + " vs " + std::to_string(K) + ")");
    cls[g] = gemm_pair_class(dy[g].spec, x[g].spec, "grouped wgrad");
  }
  for (size_t g = 0; g < G; ++g) {
    const size_t mg = size_t(m_splits[g]);
    if (mg == 0) {
      p.empty.push_back(g);
      continue;
    }
    check_operand(form, dy[g], true, "dy");
    check_operand(form, x[g], true, "x");
    p.runs.push_back({g, cls[g], panel(dy[g], g, 0, 0, N, mg, true), panel(x[g], g, 0, 0, K, mg, true), g * N * K});
  }
  return p;
}

}  // namespace mxsim
