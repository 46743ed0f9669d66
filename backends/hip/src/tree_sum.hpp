// Internal: reductions with a host result in the fixed order of
// docs/numerics.md (hd/reduce.hpp's tree sum), so a GPU sum has the
// emulator's bits whatever the launch shape.
//
// A reduction produces D FP64 components per element (an op's "fold"). Each
// component is a sum or, where the mask says so, a max or a min (exact in any
// order). Level 0 folds elements [j C, (j + 1) C) in ascending order from
// +0.0 (C = kTreeChunk); every further level folds C consecutive partial
// records the same way, until one record is left: exactly the tree of the
// contract. Integer counts travel as FP64 sums: exact below 2^53.
//
// Level 0 has two shapes with the same bits. Many chunks: one thread folds
// one chunk straight from the source (tree_chunks_kernel; no per-element
// records, so the traffic is the fold's own reads). Few chunks, where one
// thread per chunk would leave the GPU idle behind 256 dependent steps: every
// element's record in parallel, then per chunk one thread per component
// adding the records in order (tree_terms_kernel + tree_level_kernel).
//
// A Fold is a trivially copyable functor with
//   __device__ void operator()(size_t i, double* acc) const   // folds element i into acc[0..D)
// called once per element i in [0, n). (Folds only read: a fold that also
// wrote element i's state, osc_update's, measured 31 ms per call on an 8 x
// 4096 x 2048 weight in the one-thread-per-chunk shape, whose stores lie
// 1 KiB apart across a warp, against 2.9 ms for the elementwise kernel and
// its records.)
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
  /// bit d: component d is the index of the first maximum of component d - 1 (a max component
  /// starting at 0): it starts at -1 and takes a record's index only where that record's maximum
  /// exceeds the running one, so the earliest index of the largest value wins, as a sequential scan.
  uint32_t argmax_mask = 0;
};

template <int D>
__device__ inline void tree_init(double* acc, TreeOps ops) {
  for (int d = 0; d < D; ++d)
    acc[d] = (ops.min_mask >> d & 1u) ? __longlong_as_double(0x7FF0000000000000LL) : (ops.argmax_mask >> d & 1u) ? -1.0 : 0.0;
}

// Level 0 in two passes, so that the (often costly) per-element fold runs
// on every element in parallel: records[i] = fold of element i alone from the
// initial values, then tree_level_kernel folds each chunk of C records in
// order. Equal to folding the chunk's elements in order: 0 + (0 + t) = 0 + t
// for sums, and max / min are order-free.
template <int D, class Fold>
__global__ void tree_terms_kernel(Fold fold, size_t n, TreeOps ops, double* __restrict__ rec) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    double acc[D];
    tree_init<D>(acc, ops);
    fold(i, acc);
    for (int d = 0; d < D; ++d) rec[i * D + d] = acc[d];
  }
}

// Level 0 in one pass: thread j folds chunk j's elements in ascending order
// from the initial values, the contract's order itself. A warp's 32 chunks
// lie C elements apart, so each load touches 32 lines; the next loads of a
// thread hit the same lines (L1), which keeps DRAM traffic at one read.
template <int D, class Fold>
__global__ void tree_chunks_kernel(Fold fold, size_t n, TreeOps ops, double* __restrict__ out) {
  const size_t m = (n + kTreeChunk - 1) / kTreeChunk;
  for (size_t j = size_t(blockIdx.x) * blockDim.x + threadIdx.x; j < m; j += size_t(gridDim.x) * blockDim.x) {
    double acc[D];
    tree_init<D>(acc, ops);
    const size_t base = j * kTreeChunk, end = n - base < kTreeChunk ? n : base + kTreeChunk;
#pragma unroll 4
    for (size_t i = base; i < end; ++i) fold(i, acc);
    for (int d = 0; d < D; ++d) out[j * D + size_t(d)] = acc[d];
  }
}

/// Chunks from which level 0 takes tree_chunks_kernel (n > 1,048,320). Below
/// it the two passes' records stay within D x 8 MiB, and their parallel
/// element step beats 256 dependent steps per thread on a near-idle GPU.
constexpr size_t kTreeChunksMin = 4096;

// One thread block (kTreeChunk threads) per chunk of C records: the records
// are staged in shared memory by all threads (coalesced), then thread d folds
// component d over them in order.
template <int D>
__global__ void tree_level_kernel(const double* __restrict__ in, size_t n, TreeOps ops, double* __restrict__ out) {
  __shared__ double sh[kTreeChunk * D];
  const size_t m = (n + kTreeChunk - 1) / kTreeChunk;
  for (size_t j = blockIdx.x; j < m; j += gridDim.x) {
    const size_t base = j * kTreeChunk, cnt = n - base < kTreeChunk ? n - base : kTreeChunk;
    for (size_t t = threadIdx.x; t < cnt * D; t += blockDim.x) sh[t] = in[base * D + t];
    __syncthreads();
    if (threadIdx.x < unsigned(D)) {
      const int d = int(threadIdx.x);
      const bool is_max = ops.max_mask >> d & 1u, is_min = ops.min_mask >> d & 1u, is_arg = ops.argmax_mask >> d & 1u;
      double acc = is_min ? __longlong_as_double(0x7FF0000000000000LL) : is_arg ? -1.0 : 0.0;
      double best = 0.0;  // is_arg: the running maximum of component d - 1
      for (size_t i = 0; i < cnt; ++i) {
        const double v = sh[i * D + size_t(d)];
        if (is_arg) {
          const double m = sh[i * D + size_t(d) - 1];
          if (best < m) {
            best = m;
            acc = v;
          }
        } else if (is_max) {
          acc = acc < v ? v : acc;
        } else if (is_min) {
          acc = v < acc ? v : acc;
        } else {
          acc = acc + v;
        }
      }
      out[j * D + size_t(d)] = acc;
    }
    __syncthreads();  // sh is reused by the next chunk
  }
}

/// Grid of a level over m chunks (the kernels loop over the rest).
inline unsigned tree_grid(size_t m) { return unsigned(m < (size_t(1) << 20) ? (m ? m : 1) : (size_t(1) << 20)); }

/// The D components over elements 0..n-1, delivered to done(result) at the
/// backend's next synchronisation (HipBackend::fetch_later). n = 0 gives the
/// initial values (0, or +inf for min components) at once.
template <int D, class Fold, class Done>
void tree_reduce_later(HipBackend& be, const Fold& fold, size_t n, TreeOps ops, Done done) {
  std::array<double, D> r{};
  for (int d = 0; d < D; ++d)
    r[size_t(d)] = (ops.min_mask >> d & 1u) ? __builtin_inf() : (ops.argmax_mask >> d & 1u) ? -1.0 : 0.0;
  if (n == 0) {
    done(r);
    return;
  }
  constexpr unsigned kThreads = 256;
  size_t m = (n + kTreeChunk - 1) / kTreeChunk;
  DeviceBuffer a(m * D * sizeof(double), "tree reduction partials");
  DeviceBuffer b(((m + kTreeChunk - 1) / kTreeChunk) * D * sizeof(double), "tree reduction partials");
  if (m >= kTreeChunksMin) {
    tree_chunks_kernel<D><<<grid_for(m, kThreads), kThreads, 0, be.stream()>>>(fold, n, ops, a.as<double>());
    MXSIM_HIP_CHECK_LAUNCH("tree_chunks_kernel");
  } else {
    DeviceBuffer rec(n * D * sizeof(double), "tree reduction element records");  // at most 1,048,320 elements here
    tree_terms_kernel<D><<<grid_for(n, kThreads), kThreads, 0, be.stream()>>>(fold, n, ops, rec.as<double>());
    MXSIM_HIP_CHECK_LAUNCH("tree_terms_kernel");
    tree_level_kernel<D><<<tree_grid(m), unsigned(kTreeChunk), 0, be.stream()>>>(rec.as<double>(), n, ops, a.as<double>());
    MXSIM_HIP_CHECK_LAUNCH("tree_level_kernel");
  }
  double* cur = a.as<double>();
  double* nxt = b.as<double>();
  while (m > 1) {
    const size_t next = (m + kTreeChunk - 1) / kTreeChunk;
    tree_level_kernel<D><<<tree_grid(next), unsigned(kTreeChunk), 0, be.stream()>>>(cur, m, ops, nxt);
    MXSIM_HIP_CHECK_LAUNCH("tree_level_kernel");
    std::swap(cur, nxt);
    m = next;
  }
  be.fetch_later(cur, D * sizeof(double), [done = std::move(done)](const std::byte* h) {
    std::array<double, D> v;
    std::memcpy(v.data(), h, D * sizeof(double));
    done(v);
  });
}

/// The same, now (synchronises the backend's stream).
template <int D, class Fold>
std::array<double, D> tree_reduce(HipBackend& be, const Fold& fold, size_t n, TreeOps ops = {}) {
  std::array<double, D> r{};
  tree_reduce_later<D>(be, fold, n, ops, [&r](const std::array<double, D>& v) { r = v; });
  if (n) be.sync();  // n = 0: delivered at once, nothing queued to wait for
  return r;
}

}  // namespace mxsim::hip::detail
