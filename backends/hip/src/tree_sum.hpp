// Internal: reductions with a host result in the fixed order of
// docs/numerics.md (hd/reduce.hpp's tree sum), so a GPU sum has the
// emulator's bits whatever the launch shape.
//
// A reduction produces D FP64 components per element (an op's "fold"). Each
// component is a sum or, where the mask says so, a max or a min (exact in any
// order). Level 0: thread j folds elements [j C, (j + 1) C) in ascending
// order from +0.0 (C = kTreeChunk); every further level folds C consecutive
// partial records the same way, until one record is left: exactly the tree
// of the contract. Integer counts travel as FP64 sums: exact below 2^53.
//
// A Fold is a trivially copyable functor with
//   __device__ void operator()(size_t i, double* acc) const   // folds element i into acc[0..D)
#pragma once
#include "backend_hip_impl.hpp"

#include <array>
#include <cstdint>

#include "mxsim/hd/reduce.hpp"

namespace mxsim::hip::detail {

/// Terms per chunk of the contract's tree (hd/reduce.hpp).
constexpr size_t kTreeChunk = hd::kTreeSumChunk;

/// Component kinds of a reduction record.
struct TreeOps {
  uint32_t max_mask = 0;  ///< bit d: component d is a max
  uint32_t min_mask = 0;  ///< bit d: component d is a min (starts at +inf)
};

template <int D>
__device__ inline void tree_init(double* acc, TreeOps ops) {
  for (int d = 0; d < D; ++d) acc[d] = (ops.min_mask >> d & 1u) ? __longlong_as_double(0x7FF0000000000000LL) : 0.0;
}

template <int D, class Fold>
__global__ void tree_level0_kernel(Fold fold, size_t n, TreeOps ops, double* __restrict__ out) {
  const size_t m = (n + kTreeChunk - 1) / kTreeChunk;
  for (size_t j = size_t(blockIdx.x) * blockDim.x + threadIdx.x; j < m; j += size_t(gridDim.x) * blockDim.x) {
    double acc[D];
    tree_init<D>(acc, ops);
    const size_t e = (j + 1) * kTreeChunk < n ? (j + 1) * kTreeChunk : n;
    for (size_t i = j * kTreeChunk; i < e; ++i) fold(i, acc);
    for (int d = 0; d < D; ++d) out[j * D + d] = acc[d];
  }
}

template <int D>
__global__ void tree_level_kernel(const double* __restrict__ in, size_t n, TreeOps ops, double* __restrict__ out) {
  const size_t m = (n + kTreeChunk - 1) / kTreeChunk;
  for (size_t j = size_t(blockIdx.x) * blockDim.x + threadIdx.x; j < m; j += size_t(gridDim.x) * blockDim.x) {
    double acc[D];
    tree_init<D>(acc, ops);
    const size_t e = (j + 1) * kTreeChunk < n ? (j + 1) * kTreeChunk : n;
    for (size_t i = j * kTreeChunk; i < e; ++i)
      for (int d = 0; d < D; ++d) {
        const double v = in[i * D + d];
        if (ops.max_mask >> d & 1u) acc[d] = acc[d] < v ? v : acc[d];
        else if (ops.min_mask >> d & 1u) acc[d] = v < acc[d] ? v : acc[d];
        else acc[d] = acc[d] + v;
      }
    for (int d = 0; d < D; ++d) out[j * D + d] = acc[d];
  }
}

/// The D components over elements 0..n-1 (synchronises the backend's stream).
/// n = 0 gives the initial values (0, or +inf for min components).
template <int D, class Fold>
std::array<double, D> tree_reduce(HipBackend& be, const Fold& fold, size_t n, TreeOps ops = {}) {
  std::array<double, D> r{};
  for (int d = 0; d < D; ++d) r[size_t(d)] = (ops.min_mask >> d & 1u) ? __builtin_inf() : 0.0;
  if (n == 0) return r;
  constexpr unsigned kThreads = 128;
  size_t m = (n + kTreeChunk - 1) / kTreeChunk;
  DeviceBuffer a(m * D * sizeof(double), "tree reduction partials");
  DeviceBuffer b(((m + kTreeChunk - 1) / kTreeChunk) * D * sizeof(double), "tree reduction partials");
  tree_level0_kernel<D><<<grid_for(m, kThreads), kThreads, 0, be.stream()>>>(fold, n, ops, a.as<double>());
  MXSIM_HIP_CHECK_LAUNCH("tree_level0_kernel");
  double* cur = a.as<double>();
  double* nxt = b.as<double>();
  while (m > 1) {
    const size_t next = (m + kTreeChunk - 1) / kTreeChunk;
    tree_level_kernel<D><<<grid_for(next, kThreads), kThreads, 0, be.stream()>>>(cur, m, ops, nxt);
    MXSIM_HIP_CHECK_LAUNCH("tree_level_kernel");
    std::swap(cur, nxt);
    m = next;
  }
  be.fetch(r.data(), cur, D * sizeof(double));
  return r;
}

}  // namespace mxsim::hip::detail
