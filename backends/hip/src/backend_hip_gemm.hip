// HIP Backend ops: the grouped GEMMs (the contract kernels of gemm.hpp,
// docs/numerics.md §5) and the unfused main_grad bridge add. This file adds
// no GEMM arithmetic of its own: it turns handles into GemmOperands.
#include "backend_hip_impl.hpp"

#include "mxsim/bits.hpp"
#include "mxsim/hip/gemm.hpp"

namespace mxsim::hip {

namespace {

constexpr unsigned kThreads = 256;

GemmParams params_of(HipBackend& be, const GemmOptions& o) {
  GemmParams p;
  p.accumulate = o.accumulate;
  p.out_bf16 = o.out == Format::BF16;
  p.workspace = &be.gemm_workspace();
  return p;
}

/// A BF16 operand (rank 2 as one group): a bf16 tensor's own bit patterns, or for an f32 tensor
/// of BF16 values its codes in a temporary (round_bf16_code of a BF16 value is exact).
struct Bf16Operand {
  DeviceBuffer codes;
  GemmOperand op;
  Bf16Operand(HipBackend& be, const Tensor& t, const char* gemm, const char* what) {
    size_t g = 1, r, c;
    if (t.rank() == 3) g = t.dim(0), r = t.dim(1), c = t.dim(2);
    else if (t.rank() == 2) r = t.dim(0), c = t.dim(1);
    else throw std::invalid_argument(std::string(gemm) + ": " + what + " must have rank 2 or 3");
    if (t.dtype() == DType::bf16) {  // read as it is: no re-encode
      op = GemmOperand::from_bf16(static_cast<const uint16_t*>(be.raw(t, gemm, what)), g, r, c);
      return;
    }
    const float* p = be.f32(t, gemm, what);
    codes = DeviceBuffer(t.numel() * sizeof(uint16_t), std::string(what) + " BF16 codes");
    if (t.numel()) round_bf16_device(p, codes.as<uint16_t>(), t.numel(), be.stream_ptr());
    op = GemmOperand::from_bf16(codes.as<uint16_t>(), g, r, c);
  }
};

__global__ void accumulate_group_kernel(float* __restrict__ acc, const float* __restrict__ x, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    acc[i] = canonical_nan(acc[i] + x[i]);  // numerics.md §1 rule 6
}

}  // namespace

// Outputs must already have the GEMM's shape (as on the emulator).
void HipBackend::grouped_fprop_impl(const QTensor& x, const QTensor& w, std::span<const int64_t> ms, Tensor& y,
                               const GemmOptions& o) {
  ::mxsim::hip::grouped_fprop(GemmOperand::from_quantized(dev(x, "grouped_fprop", "x").t),
                              GemmOperand::from_quantized(dev(w, "grouped_fprop", "w").t), ms,
                              mat(y, "grouped_fprop", "y"), params_of(*this, o), stream_ptr());
}
void HipBackend::grouped_fprop_impl(const Tensor& x, const Tensor& w, std::span<const int64_t> ms, Tensor& y,
                               const GemmOptions& o) {
  const Bf16Operand a(*this, x, "grouped_fprop", "x"), b(*this, w, "grouped_fprop", "w");
  ::mxsim::hip::grouped_fprop(a.op, b.op, ms, mat(y, "grouped_fprop", "y"), params_of(*this, o), stream_ptr());
}
void HipBackend::grouped_dgrad_impl(const QTensor& dy, const QTensor& w, std::span<const int64_t> ms, Tensor& dx,
                               const GemmOptions& o) {
  ::mxsim::hip::grouped_dgrad(GemmOperand::from_quantized(dev(dy, "grouped_dgrad", "dy").t),
                              GemmOperand::from_quantized(dev(w, "grouped_dgrad", "w").t), ms,
                              mat(dx, "grouped_dgrad", "dx"), params_of(*this, o), stream_ptr());
}
void HipBackend::grouped_dgrad_impl(const Tensor& dy, const Tensor& w, std::span<const int64_t> ms, Tensor& dx,
                               const GemmOptions& o) {
  const Bf16Operand a(*this, dy, "grouped_dgrad", "dy"), b(*this, w, "grouped_dgrad", "w");
  ::mxsim::hip::grouped_dgrad(a.op, b.op, ms, mat(dx, "grouped_dgrad", "dx"), params_of(*this, o), stream_ptr());
}
void HipBackend::grouped_wgrad_impl(const GroupedQTensor& dy, const GroupedQTensor& x, std::span<const int64_t> ms,
                               Tensor& dw, const GemmOptions& o) {
  std::vector<GemmOperand> a, b;
  for (const DeviceQuantized& q : dev(dy, "grouped_wgrad", "dy")) a.push_back(GemmOperand::from_quantized(q.t));
  for (const DeviceQuantized& q : dev(x, "grouped_wgrad", "x")) b.push_back(GemmOperand::from_quantized(q.t));
  ::mxsim::hip::grouped_wgrad(a, b, ms, f32(dw, "grouped_wgrad", "dw"), params_of(*this, o), stream_ptr());
}
void HipBackend::grouped_wgrad_impl(const Tensor& dy, const Tensor& x, std::span<const int64_t> ms, Tensor& dw,
                               const GemmOptions& o) {
  // Per group g the row slice [m0, m0 + M_g) of dy and x, as BF16 operands
  // contracted along M (the emulator's BF16 wgrad, grouped_gemm.hpp).
  const Bf16Operand a(*this, dy, "grouped_wgrad", "dy"), b(*this, x, "grouped_wgrad", "x");
  const size_t N = dy.dim(1), K = x.dim(1);
  std::vector<GemmOperand> da, db;
  size_t m0 = 0;
  for (size_t g = 0; g < ms.size(); ++g) {
    const size_t mg = ms[g] > 0 ? size_t(ms[g]) : 0;
    da.push_back(GemmOperand::from_bf16(a.op.bf16 + m0 * N, 1, mg, N));
    db.push_back(GemmOperand::from_bf16(b.op.bf16 + m0 * K, 1, mg, K));
    m0 += mg;
  }
  ::mxsim::hip::grouped_wgrad(da, db, ms, f32(dw, "grouped_wgrad", "dw"), params_of(*this, o), stream_ptr());
}

void HipBackend::accumulate_groups_impl(Tensor& acc, const Tensor& x, std::span<const int64_t> ms) {
  float* a = f32(acc, "accumulate_groups", "acc");
  const float* b = f32(x, "accumulate_groups", "x");
  const size_t per = acc.dim(1) * acc.dim(2);
  // Consecutive non-empty groups form one launch.
  for (size_t g = 0; g < ms.size();) {
    if (ms[g] == 0) { ++g; continue; }
    size_t e = g;
    while (e < ms.size() && ms[e] != 0) ++e;
    const size_t n = (e - g) * per;
    if (n) {
      accumulate_group_kernel<<<detail::grid_for(n, kThreads), kThreads, 0, stream_>>>(a + g * per, b + g * per, n);
      MXSIM_HIP_CHECK_LAUNCH("accumulate_group_kernel");
    }
    g = e;
  }
}

}  // namespace mxsim::hip
