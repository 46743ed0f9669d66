// HIP Backend ops: the grouped GEMMs (the contract kernels of gemm.hpp,
// docs/numerics.md §5) and the unfused main_grad bridge add. This file adds
// no GEMM arithmetic of its own: it turns handles into GemmOperands.
#include "backend_hip_impl.hpp"

#include "mxsim/bits.hpp"
#include "mxsim/hip/gemm.hpp"

namespace mxsim::hip {

namespace {

constexpr unsigned kThreads = 256;

GemmParams params_of(const GemmOptions& o) {
  GemmParams p;
  p.accumulate = o.accumulate;
  p.out_bf16 = o.out == Format::BF16;
  return p;
}

/// A BF16 operand from an f32 tensor of BF16 values (rank 2 as one group):
/// its codes in a temporary (round_bf16_code of a BF16 value is exact).
struct Bf16Operand {
  DeviceBuffer codes;
  GemmOperand op;
  Bf16Operand(HipBackend& be, const Tensor& t, const char* gemm, const char* what) {
    const float* p = be.f32(t, gemm, what);
    size_t g = 1, r, c;
    if (t.rank() == 3) g = t.dim(0), r = t.dim(1), c = t.dim(2);
    else if (t.rank() == 2) r = t.dim(0), c = t.dim(1);
    else throw std::invalid_argument(std::string(gemm) + ": " + what + " must have rank 2 or 3");
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
void HipBackend::grouped_fprop(const QTensor& x, const QTensor& w, std::span<const int64_t> ms, Tensor& y,
                               const GemmOptions& o) {
  expect_shape(y, {x.rows(), w.rows()}, "grouped_fprop", "y");
  ::mxsim::hip::grouped_fprop(GemmOperand::from_quantized(dev(x, "grouped_fprop", "x").t),
                              GemmOperand::from_quantized(dev(w, "grouped_fprop", "w").t), ms,
                              mat(y, "grouped_fprop", "y"), params_of(o), stream_ptr());
}
void HipBackend::grouped_fprop(const Tensor& x, const Tensor& w, std::span<const int64_t> ms, Tensor& y,
                               const GemmOptions& o) {
  expect_shape(y, {x.dim(0), w.dim(1)}, "grouped_fprop", "y");
  const Bf16Operand a(*this, x, "grouped_fprop", "x"), b(*this, w, "grouped_fprop", "w");
  ::mxsim::hip::grouped_fprop(a.op, b.op, ms, mat(y, "grouped_fprop", "y"), params_of(o), stream_ptr());
}
void HipBackend::grouped_dgrad(const QTensor& dy, const QTensor& w, std::span<const int64_t> ms, Tensor& dx,
                               const GemmOptions& o) {
  expect_shape(dx, {dy.rows(), w.cols()}, "grouped_dgrad", "dx");
  ::mxsim::hip::grouped_dgrad(GemmOperand::from_quantized(dev(dy, "grouped_dgrad", "dy").t),
                              GemmOperand::from_quantized(dev(w, "grouped_dgrad", "w").t), ms,
                              mat(dx, "grouped_dgrad", "dx"), params_of(o), stream_ptr());
}
void HipBackend::grouped_dgrad(const Tensor& dy, const Tensor& w, std::span<const int64_t> ms, Tensor& dx,
                               const GemmOptions& o) {
  expect_shape(dx, {dy.dim(0), w.dim(2)}, "grouped_dgrad", "dx");
  const Bf16Operand a(*this, dy, "grouped_dgrad", "dy"), b(*this, w, "grouped_dgrad", "w");
  ::mxsim::hip::grouped_dgrad(a.op, b.op, ms, mat(dx, "grouped_dgrad", "dx"), params_of(o), stream_ptr());
}
void HipBackend::grouped_wgrad(const GroupedQTensor& dy, const GroupedQTensor& x, std::span<const int64_t> ms,
                               Tensor& dw, const GemmOptions& o) {
  expect_shape(dw, {ms.size(), dy.cols(), x.cols()}, "grouped_wgrad", "dw");
  std::vector<GemmOperand> a, b;
  for (const DeviceQuantized& q : dev(dy, "grouped_wgrad", "dy")) a.push_back(GemmOperand::from_quantized(q.t));
  for (const DeviceQuantized& q : dev(x, "grouped_wgrad", "x")) b.push_back(GemmOperand::from_quantized(q.t));
  ::mxsim::hip::grouped_wgrad(a, b, ms, f32(dw, "grouped_wgrad", "dw"), params_of(o), stream_ptr());
}
void HipBackend::grouped_wgrad(const Tensor& dy, const Tensor& x, std::span<const int64_t> ms, Tensor& dw,
                               const GemmOptions& o) {
  if (dy.rank() != 2 || x.rank() != 2) throw std::invalid_argument("grouped_wgrad: dy and x must have rank 2");
  expect_shape(dw, {ms.size(), dy.dim(1), x.dim(1)}, "grouped_wgrad", "dw");
  // Per group g the row slice [m0, m0 + M_g) of dy and x, as BF16 operands
  // contracted along M (the emulator's BF16 wgrad, grouped_gemm.hpp).
  int64_t total = 0;
  for (size_t g = 0; g < ms.size(); ++g) {
    if (ms[g] < 0)
      throw std::invalid_argument("grouped wgrad (GPU): m_splits[" + std::to_string(g) + "] = " + std::to_string(ms[g]) +
                                  " is negative");
    total += ms[g];
  }
  if (size_t(total) != dy.dim(0) || size_t(total) != x.dim(0))
    throw std::invalid_argument("grouped wgrad (GPU): m_splits sum to " + std::to_string(total) + " but dy has " +
                                std::to_string(dy.dim(0)) + " rows and x " + std::to_string(x.dim(0)));
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
  ::mxsim::hip::grouped_wgrad(da, db, ms, f32(dw, "grouped_wgrad", "dw"), params_of(o), stream_ptr());
}

void HipBackend::accumulate_groups(Tensor& acc, const Tensor& x, std::span<const int64_t> ms) {
  expect_shape(x, acc.shape(), "accumulate_groups", "x");
  if (acc.rank() != 3 || acc.dim(0) != ms.size())
    throw std::invalid_argument("accumulate_groups: acc " + acc.shape().str() + " needs one group per m_splits entry (" +
                                std::to_string(ms.size()) + ")");
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
