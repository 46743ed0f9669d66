// Grouped GEMM entry points (include/mxsim/hip/gemm.hpp): validation of
// shapes, m_splits, operand axes and recipe pairs (the emulator's rules and
// messages, emu/src/gemm_api.cpp), then the block-dot class's kernel
// (gemm_<class>.hip) over the non-empty groups, up to 16 groups per kernel
// launch. Everything is validated before anything is launched.
#include "gemm_panel.hpp"

#include <atomic>
#include <string>
#include <vector>

#include "mxsim/hip/gemm.hpp"
#include "mxsim/hip/gemm_testing.hpp"
#include "mxsim/m_splits.hpp"

namespace mxsim::hip {

namespace {
std::atomic<size_t> g_tiled_launches{0}, g_wgmma_launches{0}, g_in_place_sides{0};
}  // namespace

void gemm::count_launch(bool wgmma) { (wgmma ? g_wgmma_launches : g_tiled_launches)++; }
void gemm::count_in_place_side() { g_in_place_sides++; }

void set_wgmma_max_ctas(unsigned n) { gemm::set_max_ctas(n); }

GemmLaunchCounts gemm_launch_counts() {
  return {g_tiled_launches.load(), g_wgmma_launches.load(), gemm::sm90_exact_steps_runs(), g_in_place_sides.load()};
}

using gemm::Launch;
using gemm::PanelView;
using detail::stream_of;

GemmOperand GemmOperand::from_quantized(const DeviceQTensor& q) {
  GemmOperand o;
  o.spec = q.spec;
  o.layout = q.layout;
  o.data = q.data;
  o.scale_bytes = q.scale_bytes;
  o.scale_inv = q.scale_inv;
  return o;
}

GemmOperand GemmOperand::from_bf16(const uint16_t* codes, size_t groups, size_t rows, size_t cols) {
  GemmOperand o;
  o.spec.elem = Format::BF16;  // as emu::bf16_spec(): unscaled, one "block"
  o.spec.block_rows = 0;
  o.spec.block_cols = 0;
  o.spec.scale_kind = ScaleKind::FP32;
  o.layout.groups = groups;
  o.layout.rows = o.layout.srows = rows;
  o.layout.cols = o.layout.scols = cols;
  o.bf16 = codes;
  return o;
}

namespace {

[[noreturn]] void fail(const std::string& gemm, const std::string& msg) {
  throw std::invalid_argument("grouped " + gemm + " (GPU): " + msg);
}

std::string spec_name(const GemmOperand& o) { return o.spec.elem == Format::BF16 ? "bf16" : o.spec.describe(); }

/// One group's operand as a panel [R, K] (contraction along logical cols, or
/// along logical rows when contract_rows), validated as the emulator does.
PanelView make_panel(const GemmOperand& o, size_t g, bool contract_rows, size_t roff, const std::string& gemm,
                     const char* what) {
  PanelView p;
  const hd::QuantLayout& L = o.layout;
  if (o.spec.elem == Format::BF16) {
    if (!o.bf16 && L.rows * L.cols) fail(gemm, std::string(what) + ": BF16 operand without codes");
    p.bf16 = true;
    p.elem = Format::BF16;
    p.along_scols = !contract_rows;
    p.roff = contract_rows ? 0 : roff;
    p.codes16 = o.bf16 + g * L.rows * L.cols;
    p.rbytes = L.cols;
    return p;
  }
  p.elem = o.spec.elem;
  p.along_scols = contract_rows == L.transposed;
  p.roff = contract_rows ? 0 : roff;
  const size_t bk = p.along_scols ? L.bc : L.br;
  const char* axis_need =
      contract_rows ? "along its rows (Axis::Rows or 2-D tiles)" : "along its cols (Axis::Cols or 2-D tiles)";
  switch (o.spec.scale_kind) {
    case ScaleKind::UE4M3:
      fail(gemm, std::string(what) + ": NVFP4 (UE4M3 scales) is not defined by the GEMM contract yet");
    case ScaleKind::E8M0:
      if (!has_role(o.spec.elem, kRoleOcpMx))
        fail(gemm, std::string(what) + ": element format " + short_name(o.spec.elem) +
                       " is not defined for E8M0-scaled GEMM (E2M1, E2M3, E3M2, E4M3, E5M2)");
      if (bk != 32)
        fail(gemm, std::string(what) + " (" + o.spec.describe() + ") must have blocks of 32 along the contraction, i.e. quantized " +
                       axis_need + "; its blocks along the contraction are " + std::to_string(bk) + " long");
      break;
    case ScaleKind::FP32:
      if (o.spec.elem != Format::E4M3 && o.spec.elem != Format::E5M2)
        fail(gemm, std::string(what) + ": FP32-scaled operands must be E4M3 or E5M2, got " + short_name(o.spec.elem));
      if (!(bk == 128 || bk == (p.along_scols ? L.scols : L.srows)))
        fail(gemm, std::string(what) + " (" + o.spec.describe() + ") needs one FP32 scale per 128-K chunk or per whole contraction " +
                       axis_need + "; its blocks along the contraction are " + std::to_string(bk) + " long");
      break;
  }
  if (L.data_bytes() && !o.data) fail(gemm, std::string(what) + ": no codes");
  if (L.scale_count() && (o.spec.scale_kind == ScaleKind::FP32 ? !o.scale_inv : !o.scale_bytes))
    fail(gemm, std::string(what) + ": no scales");
  p.data = o.data + g * L.srows * L.rbytes;
  if (o.scale_bytes) p.sbytes = o.scale_bytes + g * L.nbr * L.nbc;
  if (o.scale_inv) p.sinv = o.scale_inv + g * L.nbr * L.nbc;
  p.rbytes = L.rbytes;
  p.br = L.br;
  p.bc = L.bc;
  p.nbc = L.nbc;
  return p;
}

hd::GemmClass pair_class(const GemmOperand& a, const GemmOperand& b, const std::string& gemm) {
  hd::GemmClass c;
  std::string why;
  if (!hd::gemm_class_of(a.spec, b.spec, c, &why)) fail(gemm, why + " (got " + spec_name(a) + " with " + spec_name(b) + ")");
  return c;
}

size_t check_splits(std::span<const int64_t> m_splits, size_t M, const std::string& gemm) {
  if (const std::string why = m_splits_error(m_splits, M); !why.empty()) fail(gemm, why);
  return m_splits.size();
}

/// Launches of one class whose groups share the element pair (every group of
/// a grouped GEMM does: its specs are one tensor's, or the same per group).
void run(hd::GemmClass c, const Launch* L, size_t n, hipStream_t s) {
  if (gemm::launch_sm90(c, L, n, s)) return;
  switch (c) {
    case hd::GemmClass::MxExact: gemm::launch_mx_exact(L, n, s); break;
    case hd::GemmClass::MxF13: gemm::launch_mx_f13(L, n, s); break;
    case hd::GemmClass::Fp8Chunk128: gemm::launch_fp8_chunk128(L, n, s); break;
    case hd::GemmClass::Bf16F25: gemm::launch_bf16_f25(L, n, s); break;
  }
}
/// Consecutive launches with the same class and element pair go out together.
void run_all(const std::vector<hd::GemmClass>& cls, const std::vector<Launch>& ls, hipStream_t s) {
  for (size_t a = 0; a < ls.size();) {
    size_t b = a + 1;
    while (b < ls.size() && cls[b] == cls[a] && ls[b].A.elem == ls[a].A.elem && ls[b].B.elem == ls[a].B.elem) ++b;
    run(cls[a], ls.data() + a, b - a, s);
    a = b;
  }
}

// fprop / dgrad share the token-major form: out[M, J] = A_tokens . B[g]^T.
void token_gemm(const std::string& gemm, const GemmOperand& a, const GemmOperand& w, bool w_contract_rows,
                std::span<const int64_t> m_splits, float* out, const GemmParams& p, void* stream) {
  if (a.layout.groups != 1) fail(gemm, "the token operand must have groups = 1, has " + std::to_string(a.layout.groups));
  const size_t M = a.layout.rows;
  const size_t G = check_splits(m_splits, M, gemm);
  if (w.layout.groups != G)
    fail(gemm, "W has " + std::to_string(w.layout.groups) + " groups but m_splits has " + std::to_string(G));
  const size_t Kc = w_contract_rows ? w.layout.rows : w.layout.cols;
  const size_t J = w_contract_rows ? w.layout.cols : w.layout.rows;
  if (a.layout.cols != Kc)
    fail(gemm, "contraction mismatch: token operand has " + std::to_string(a.layout.cols) + " columns, W has " +
                   std::to_string(Kc));
  const hd::GemmClass cls = pair_class(a, w, gemm);
  if (M * J && !out) fail(gemm, "no output buffer");
  std::vector<Launch> launches;
  size_t m0 = 0;
  for (size_t g = 0; g < G; ++g) {
    const size_t mg = size_t(m_splits[g]);
    if (mg && J) {
      Launch L;
      L.A = make_panel(a, 0, false, m0, gemm, "token operand");
      L.B = make_panel(w, g, w_contract_rows, 0, gemm, "W");
      L.RA = mg;
      L.RB = J;
      L.K = Kc;
      L.out = out + m0 * J;
      L.ld = J;
      L.accumulate = p.accumulate;
      L.out_bf16 = p.out_bf16;
      L.kernel = p.kernel;
      launches.push_back(L);
    }
    m0 += mg;
  }
  run_all(std::vector<hd::GemmClass>(launches.size(), cls), launches, stream_of(stream));
}

}  // namespace

void grouped_fprop(const GemmOperand& x, const GemmOperand& w, std::span<const int64_t> m_splits, float* d_y,
                   const GemmParams& p, void* stream) {
  token_gemm("fprop", x, w, false, m_splits, d_y, p, stream);
}

void grouped_dgrad(const GemmOperand& dy, const GemmOperand& w, std::span<const int64_t> m_splits, float* d_dx,
                   const GemmParams& p, void* stream) {
  token_gemm("dgrad", dy, w, true, m_splits, d_dx, p, stream);
}

void grouped_wgrad(std::span<const GemmOperand> dy, std::span<const GemmOperand> x, std::span<const int64_t> m_splits,
                   float* d_dw, const GemmParams& p, void* stream) {
  const std::string gemm = "wgrad";
  const size_t G = m_splits.size();
  if (dy.size() != G || x.size() != G)
    fail(gemm, "m_splits has " + std::to_string(G) + " groups but dy has " + std::to_string(dy.size()) + " and x " +
                   std::to_string(x.size()));
  for (size_t g = 0; g < G; ++g)
    if (m_splits[g] < 0) fail(gemm, "m_splits[" + std::to_string(g) + "] = " + std::to_string(m_splits[g]) + " is negative");
  if (G == 0) return;
  const size_t N = dy[0].layout.cols, K = x[0].layout.cols;
  std::vector<hd::GemmClass> cls(G);
  for (size_t g = 0; g < G; ++g) {
    const std::string gs = "group " + std::to_string(g);
    const hd::QuantLayout &a = dy[g].layout, &b = x[g].layout;
    if (a.groups != 1 || b.groups != 1) fail(gemm, gs + ": per-group operands must have groups = 1");
    if (a.rows != size_t(m_splits[g]) || b.rows != size_t(m_splits[g]))
      fail(gemm, gs + ": dy has " + std::to_string(a.rows) + " rows and x " + std::to_string(b.rows) +
                     " but m_splits says " + std::to_string(m_splits[g]));
    if (a.cols != N || b.cols != K)
      fail(gemm, gs + ": operand widths differ between groups (dy " + std::to_string(a.cols) + " vs " + std::to_string(N) +
                     ", x " + std::to_string(b.cols) + " vs " + std::to_string(K) + ")");
    cls[g] = pair_class(dy[g], x[g], gemm);
  }
  if (G * N * K && !d_dw) fail(gemm, "no output buffer");
  std::vector<Launch> launches(G);
  for (size_t g = 0; g < G; ++g) {
    if (m_splits[g] == 0 || N * K == 0) continue;
    Launch& L = launches[g];
    L.A = make_panel(dy[g], 0, true, 0, gemm, "dy");
    L.B = make_panel(x[g], 0, true, 0, gemm, "x");
    L.RA = N;
    L.RB = K;
    L.K = size_t(m_splits[g]);
    L.out = d_dw + g * N * K;
    L.ld = K;
    L.accumulate = p.accumulate;
    L.out_bf16 = p.out_bf16;
    L.kernel = p.kernel;
  }
  const hipStream_t s = stream_of(stream);
  if (N * K == 0) return;
  std::vector<hd::GemmClass> run_cls;
  std::vector<Launch> run_ls;
  for (size_t g = 0; g < G; ++g) {
    if (m_splits[g] == 0) {  // the sum over no tokens: +0, or dW[g] unchanged when accumulating
      if (!p.accumulate) MXSIM_HIP_CHECK(hipMemsetAsync(d_dw + g * N * K, 0, N * K * sizeof(float), s));
      continue;
    }
    run_cls.push_back(cls[g]);
    run_ls.push_back(launches[g]);
  }
  run_all(run_cls, run_ls, s);
}

namespace {
__global__ void round_bf16_kernel(const float* __restrict__ x, uint16_t* __restrict__ codes, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    codes[i] = uint16_t(round_bf16_code(f32_bits(x[i])));
}
}  // namespace

void round_bf16_device(const float* d_x, uint16_t* d_codes, size_t n, void* stream) {
  if (n == 0) return;
  round_bf16_kernel<<<detail::grid_for(n, 256), 256, 0, stream_of(stream)>>>(d_x, d_codes, n);
  MXSIM_HIP_CHECK_LAUNCH("round_bf16_kernel");
}

}  // namespace mxsim::hip
