// Grouped GEMM entry points (include/mxsim/hip/gemm.hpp): core's plan
// (mxsim/gemm_plan.hpp: shapes, m_splits, operand axes and recipe pairs,
// checked once for every backend), then the block-dot class's kernel
// (gemm_<class>.hip) over the plan's groups, up to 16 groups per kernel
// launch. Everything is checked before anything is launched.
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
  o.tensor_scale_inv = q.tensor_scale_inv;
  return o;
}

GemmOperand GemmOperand::from_bf16(const uint16_t* codes, size_t groups, size_t rows, size_t cols) {
  GemmOperand o;
  const GemmOperandDesc d = GemmOperandDesc::of_bf16(groups, rows, cols);
  o.spec = d.spec;
  o.layout = d.layout;
  o.bf16 = codes;
  return o;
}

namespace {

[[noreturn]] void fail(GemmForm form, const std::string& msg) {
  throw std::invalid_argument(std::string("grouped ") + name_of(form) + ": " + msg);
}

/// The plan's panel of one operand in device memory. The plan has checked the
/// operand (core/src/gemm_plan.cpp); what is the GPU's own is that its
/// pointers are there.
PanelView make_panel(const GemmOperand& o, const GemmPanel& gp, GemmForm form, const char* what) {
  PanelView p;
  const hd::QuantLayout& L = o.layout;
  const size_t g = gp.group;
  p.along_scols = gp.along_scols;
  p.roff = gp.r0;
  if (o.spec.elem == Format::BF16) {
    if (!o.bf16 && L.rows * L.cols) fail(form, std::string(what) + ": BF16 operand without codes");
    p.bf16 = true;
    p.elem = Format::BF16;
    p.codes16 = o.bf16 + g * L.rows * L.cols;
    p.rbytes = L.cols;
    return p;
  }
  p.elem = o.spec.elem;
  if (L.data_bytes() && !o.data) fail(form, std::string(what) + ": no codes");
  if (L.scale_count() && (o.spec.scale_kind == ScaleKind::FP32 ? !o.scale_inv : !o.scale_bytes))
    fail(form, std::string(what) + ": no scales");
  p.data = o.data + g * L.srows * L.rbytes;
  if (o.scale_bytes) p.sbytes = o.scale_bytes + g * L.nbr * L.nbc;
  if (o.scale_inv) p.sinv = o.scale_inv + g * L.nbr * L.nbc;
  if (has_tensor_scale(o.spec.scale_kind)) {
    if (!o.tensor_scale_inv) fail(form, std::string(what) + ": an NVFP4 operand without its tensor scale");
    p.tsi = o.tensor_scale_inv;
  }
  p.rbytes = L.rbytes;
  p.br = L.br;
  p.bc = L.bc;
  p.nbc = L.nbc;
  return p;
}

/// Launches of one class whose groups share the element pair (every group of
/// a grouped GEMM does: its specs are one tensor's, or the same per group).
void run(hd::GemmClass c, const Launch* L, size_t n, hipStream_t s, StreamWorkspace* ws) {
  if (gemm::launch_sm90(c, L, n, s, ws)) return;
  switch (c) {
    case hd::GemmClass::MxExact: gemm::launch_mx_exact(L, n, s); break;
    case hd::GemmClass::MxF13: gemm::launch_mx_f13(L, n, s); break;
    case hd::GemmClass::Fp8Chunk128: gemm::launch_fp8_chunk128(L, n, s); break;
    case hd::GemmClass::Bf16F25: gemm::launch_bf16_f25(L, n, s); break;
    case hd::GemmClass::Nvfp4Exact: gemm::launch_nvfp4_exact(L, n, s); break;
  }
}
/// Consecutive launches with the same class and element pair go out together.
void run_all(const std::vector<hd::GemmClass>& cls, const std::vector<Launch>& ls, hipStream_t s, StreamWorkspace* ws) {
  for (size_t a = 0; a < ls.size();) {
    size_t b = a + 1;
    while (b < ls.size() && cls[b] == cls[a] && ls[b].A.elem == ls[a].A.elem && ls[b].B.elem == ls[a].B.elem) ++b;
    run(cls[a], ls.data() + a, b - a, s, ws);
    a = b;
  }
}

/// Launches what a plan lists into d_out (row stride plan.ld()). A panel's
/// operand index picks its source from A (first panels) or B (second).
void run_plan(const GemmPlan& plan, std::span<const GemmOperand> A, std::span<const GemmOperand> B, float* d_out,
              const GemmParams& p, hipStream_t s) {
  const char* what_a = plan.form == GemmForm::Wgrad ? "dy" : "token operand";
  const char* what_b = plan.form == GemmForm::Wgrad ? "x" : "W";
  if (plan.out_elems() && !d_out) fail(plan.form, "no output buffer");
  std::vector<hd::GemmClass> cls;
  std::vector<Launch> launches;
  const bool empty_out = plan.cols == 0 || (plan.form == GemmForm::Wgrad && plan.rows == 0);
  for (const GemmPlan::Group& r : plan.runs) {
    Launch L;
    L.A = make_panel(A[r.a.operand], r.a, plan.form, what_a);
    L.B = make_panel(B[r.b.operand], r.b, plan.form, what_b);
    if (empty_out) continue;
    L.RA = r.a.R;
    L.RB = r.b.R;
    L.K = r.a.K;
    L.out = d_out + r.out_offset;
    L.ld = plan.ld();
    L.accumulate = p.accumulate;
    L.out_bf16 = p.out_bf16;
    L.kernel = p.kernel;
    cls.push_back(r.cls);
    launches.push_back(L);
  }
  if (empty_out) return;
  if (!p.accumulate)  // wgrad's groups without tokens: the sum over no tokens is +0
    for (size_t g : plan.empty)
      MXSIM_HIP_CHECK(hipMemsetAsync(d_out + g * plan.rows * plan.cols, 0, plan.rows * plan.cols * sizeof(float), s));
  run_all(cls, launches, s, p.workspace);
}

GemmOptions options_of(const GemmParams& p) {
  GemmOptions o;
  o.accumulate = p.accumulate;
  o.out = p.out_bf16 ? Format::BF16 : Format::FP32;
  return o;
}

}  // namespace

void grouped_fprop(const GemmOperand& x, const GemmOperand& w, std::span<const int64_t> m_splits, float* d_y,
                   const GemmParams& p, void* stream) {
  const GemmPlan plan = plan_token_gemm(GemmForm::Fprop, x.desc(), w.desc(), m_splits, options_of(p));
  run_plan(plan, std::span(&x, 1), std::span(&w, 1), d_y, p, stream_of(stream));
}

void grouped_dgrad(const GemmOperand& dy, const GemmOperand& w, std::span<const int64_t> m_splits, float* d_dx,
                   const GemmParams& p, void* stream) {
  const GemmPlan plan = plan_token_gemm(GemmForm::Dgrad, dy.desc(), w.desc(), m_splits, options_of(p));
  run_plan(plan, std::span(&dy, 1), std::span(&w, 1), d_dx, p, stream_of(stream));
}

void grouped_wgrad(std::span<const GemmOperand> dy, std::span<const GemmOperand> x, std::span<const int64_t> m_splits,
                   float* d_dw, const GemmParams& p, void* stream) {
  std::vector<GemmOperandDesc> da, db;
  for (const GemmOperand& o : dy) da.push_back(o.desc());
  for (const GemmOperand& o : x) db.push_back(o.desc());
  const GemmPlan plan = plan_wgrad(da, db, m_splits, options_of(p));
  run_plan(plan, dy, x, d_dw, p, stream_of(stream));
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
