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
// Level 0 is one warp per chunk (tree_warps_kernel): per round the 32
// lanes build the records of 32 consecutive elements, each from the initial
// values (coalesced loads; the per-element work, often the costly part, in
// parallel), in shared memory, and lane d adds them into component d in
// element order. Equal to folding the chunk's elements in order: 0 + t = t
// for sums, and max / min are order-free. Many warps per SM keep many
// chunks' dependent adds in flight. (Earlier shapes, measured on an H200:
// one thread per chunk straight from the source ran 3 to 5 times below the
// copy's bandwidth, a warp's 32 chunks lying 1 KiB apart; every element's
// record in global memory, then the chunk folds, moved D x 8 bytes per
// element twice.)
//
// A Fold is a trivially copyable functor with
//   __device__ void operator()(size_t i, double* acc) const   // folds element i into acc[0..D)
// called once per element i in [0, n), each component given at most one
// term per element (a sum's one addend, a max's one candidate). A fold may
// also write element i's own state (osc_update's): the call is made once, by
// one lane, with the warp's neighbours on neighbouring elements.
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

/// Component d's initial value: 0, +inf for a min, -1 for an argmax.
__device__ inline double tree_start(int d, TreeOps ops) {
  return (ops.min_mask >> d & 1u) ? __longlong_as_double(0x7FF0000000000000LL) : (ops.argmax_mask >> d & 1u) ? -1.0 : 0.0;
}
template <int D>
__device__ inline void tree_init(double* acc, TreeOps ops) {
  for (int d = 0; d < D; ++d) acc[d] = tree_start(d, ops);
}

/// Component d of a chunk's running record `acc` (and, for an argmax component, the running
/// maximum `best` of component d - 1) after record `rec` (D values): the contract's combine step,
/// shared by level 0 and the upper levels.
__device__ inline void tree_combine(double& acc, double& best, const double* rec, int d, TreeOps ops) {
  const double v = rec[d];
  if (ops.argmax_mask >> d & 1u) {
    const double m = rec[d - 1];
    if (best < m) {
      best = m;
      acc = v;
    }
  } else if (ops.max_mask >> d & 1u) {
    acc = acc < v ? v : acc;
  } else if (ops.min_mask >> d & 1u) {
    acc = v < acc ? v : acc;
  } else {
    acc = acc + v;
  }
}

/// Warps per block of tree_warps_kernel, and its shared memory (each warp's 32 records).
constexpr unsigned kTreeWarps = 8;
/// Doubles between two lanes' records in shared memory: D rounded up to odd, so the 32 lanes'
/// stores of one component fall in distinct bank pairs (an even stride such as 12 made them
/// 4-way conflicts in each half-warp, which 8-byte stores go in). The padding is never read.
template <int D>
constexpr int tree_record_stride() { return D | 1; }
template <int D>
constexpr size_t tree_warps_smem() { return size_t(kTreeWarps) * 32 * size_t(tree_record_stride<D>()) * sizeof(double); }

// Level 0: warp w of the grid folds chunks w, w + W, ... (see the top of the file).
template <int D, class Fold>
__global__ void tree_warps_kernel(Fold fold, size_t n, TreeOps ops, double* __restrict__ out) {
  static_assert(D >= 1 && D <= 32, "one lane per component");
  extern __shared__ double tree_sh[];
  constexpr int S = tree_record_stride<D>();
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  double* rec = tree_sh + size_t(warp) * 32 * S;
  const size_t m = (n + kTreeChunk - 1) / kTreeChunk;
  const size_t stride = size_t(gridDim.x) * kTreeWarps;
  for (size_t j = size_t(blockIdx.x) * kTreeWarps + warp; j < m; j += stride) {
    const size_t base = j * kTreeChunk, end = n - base < kTreeChunk ? n : base + kTreeChunk;
    const int d = int(lane);
    double acc = lane < unsigned(D) ? tree_start(d, ops) : 0.0, best = 0.0;
    for (size_t r0 = base; r0 < end; r0 += 32) {
      double a[D];
      tree_init<D>(a, ops);
      if (r0 + lane < end) fold(r0 + lane, a);
      for (int c = 0; c < D; ++c) rec[size_t(lane) * S + c] = a[c];
      MXSIM_SYNCWARP();
      if (lane < unsigned(D)) {
        const unsigned cnt = end - r0 < 32 ? unsigned(end - r0) : 32u;
        if (cnt == 32) {  // a whole round, unrolled: the shared loads issue ahead of the dependent adds
#pragma unroll 8
          for (unsigned k = 0; k < 32; ++k) tree_combine(acc, best, rec + size_t(k) * S, d, ops);
        } else {
          for (unsigned k = 0; k < cnt; ++k) tree_combine(acc, best, rec + size_t(k) * S, d, ops);
        }
      }
      MXSIM_SYNCWARP();  // rec is rewritten by the next round
    }
    if (lane < unsigned(D)) out[j * D + size_t(d)] = acc;
  }
}

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
      double acc = tree_start(d, ops), best = 0.0;  // best: an argmax component's running maximum
      for (size_t i = 0; i < cnt; ++i) tree_combine(acc, best, sh + i * D, d, ops);
      out[j * D + size_t(d)] = acc;
    }
    __syncthreads();  // sh is reused by the next chunk
  }
}

/// Grid of a level over m chunks (the kernels loop over the rest).
inline unsigned tree_grid(size_t m) { return unsigned(m < (size_t(1) << 20) ? (m ? m : 1) : (size_t(1) << 20)); }

/// The D components over elements 0..n-1 (n >= 1) left in device memory, in
/// stream order: the buffer holds the final record (D doubles), for a kernel
/// that reads it on the device or a copy to the host.
template <int D, class Fold>
DeviceBuffer tree_reduce_device(HipBackend& be, const Fold& fold, size_t n, TreeOps ops) {
  size_t m = (n + kTreeChunk - 1) / kTreeChunk;
  DeviceBuffer a(m * D * sizeof(double), "tree reduction partials");
  DeviceBuffer b(((m + kTreeChunk - 1) / kTreeChunk) * D * sizeof(double), "tree reduction partials");
  const size_t warps_grid = (m + kTreeWarps - 1) / kTreeWarps;
  tree_warps_kernel<D><<<tree_grid(warps_grid), kTreeWarps * 32, tree_warps_smem<D>(), be.stream()>>>(fold, n, ops,
                                                                                                       a.as<double>());
  MXSIM_HIP_CHECK_LAUNCH("tree_warps_kernel");
  bool in_a = true;  // which buffer holds the current level
  while (m > 1) {
    const size_t next = (m + kTreeChunk - 1) / kTreeChunk;
    double* cur = (in_a ? a : b).template as<double>();
    double* nxt = (in_a ? b : a).template as<double>();
    tree_level_kernel<D><<<tree_grid(next), unsigned(kTreeChunk), 0, be.stream()>>>(cur, m, ops, nxt);
    MXSIM_HIP_CHECK_LAUNCH("tree_level_kernel");
    in_a = !in_a;
    m = next;
  }
  return std::move(in_a ? a : b);  // the other is freed: its kernels are queued before any later user's
}

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
  const DeviceBuffer rec = tree_reduce_device<D>(be, fold, n, ops);
  be.fetch_later(rec.get(), D * sizeof(double), [done = std::move(done)](const std::byte* h) {
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
