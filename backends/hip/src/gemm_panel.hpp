// Internal: how the grouped-GEMM kernels of every block-dot class read their
// operands, and the one kernel skeleton they share (one warp per output
// element, its lanes splitting each block of the class's K walk).
//
// An operand panel is one group's operand seen as [R rows, K contraction]:
// C[i][j] (+)= sum_k A[i][k] B[j][k] (numerics.md §5.1). Element (r, k) sits
// at storage (roff + r, k) when the contraction runs along storage columns,
// else at storage (k, roff + r); codes and scales are read straight from the
// QuantizedTensor storage (quantize.hpp) or from BF16 codes.
#pragma once
#include "check.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "mxsim/hd/gemm_block.hpp"

namespace mxsim::hip::gemm {

struct PanelView {
  Format elem = Format::E2M1;
  bool bf16 = false;
  bool along_scols = true;
  size_t roff = 0;
  const uint8_t* data = nullptr;     // this group's codes
  const uint8_t* sbytes = nullptr;   // this group's E8M0 scales
  const float* sinv = nullptr;       // this group's FP32 scale_inv
  const uint16_t* codes16 = nullptr; // this group's BF16 codes
  size_t rbytes = 0;                 // bytes per storage row (BF16: elements per row)
  size_t br = 1, bc = 1, nbc = 1;    // scale grid
};

/// Row r of a panel, as the hd walks read it.
struct Row {
  const PanelView& p;
  size_t r;
  MXSIM_HD void at(size_t k, size_t& sr, size_t& sc) const {
    if (p.along_scols) sr = p.roff + r, sc = k;
    else sr = k, sc = p.roff + r;
  }
  MXSIM_HD uint32_t code(size_t k) const {
    size_t sr, sc;
    at(k, sr, sc);
    if (p.bf16) return p.codes16[sr * p.rbytes + sc];
    if (p.elem == Format::E2M1) {
      const uint8_t b = p.data[sr * p.rbytes + sc / 2];
      return (sc & 1) ? uint32_t(b >> 4) : uint32_t(b & 0xFu);
    }
    return p.data[sr * p.rbytes + sc];
  }
  MXSIM_HD size_t scale_at(size_t k) const {
    size_t sr, sc;
    at(k, sr, sc);
    return (sr / p.br) * p.nbc + sc / p.bc;
  }
  MXSIM_HD uint8_t e8m0(size_t b) const { return p.sbytes[scale_at(b * 32)]; }
  MXSIM_HD float sinv(size_t c) const { return p.sinv[scale_at(c * 128)]; }
};

/// One group's launch: out[i * ld + j] for i < RA (rows of A), j < RB (rows of B).
struct Launch {
  PanelView A, B;
  size_t RA = 0, RB = 0, K = 0;
  float* out = nullptr;
  size_t ld = 0;
  bool accumulate = false, out_bf16 = false;
};

// ---- one warp per output element -------------------------------------------
// The contract walks K in order per output element: each block's (or
// group's) rounding feeds the next, so the walk stays sequential. Inside one
// block the work is order-free: mx-exact's block dot is an exact integer sum;
// a fused group (numerics.md §5.3) needs the maximum alignment exponent and
// the exact integer sum of the truncated terms. So 32 lanes take one element
// of the block each and combine by shuffles; every lane then holds the same
// accumulator. The steps are hd/gemm_block.hpp's; only the two order-free
// folds are spread over lanes. (Warps are 32 lanes on NVIDIA; on AMD the
// shuffles have width 32, half a CDNA wavefront.)

// W: lanes per output element (32, or 16 for BF16's 16-groups): the xor
// shuffles below stay inside each aligned group of W lanes.
template <int W = 32>
__device__ inline int32_t warp_sum_i32(int32_t v) {
  for (int m = W / 2; m >= 1; m >>= 1) v += MXSIM_SHFL_XOR32(v, m);
  return v;
}
// Exact: int64 addition is associative (modulo 2^64 as well).
template <int W = 32>
__device__ inline int64_t warp_sum_i64(int64_t v) {
  for (int m = W / 2; m >= 1; m >>= 1) {
    const uint32_t lo = MXSIM_SHFL_XOR32(uint32_t(uint64_t(v)), m), hi = MXSIM_SHFL_XOR32(uint32_t(uint64_t(v) >> 32), m);
    v = int64_t(uint64_t(v) + ((uint64_t(hi) << 32) | lo));
  }
  return v;
}
template <int W = 32>
__device__ inline int warp_max_i32(int v) {
  for (int m = W / 2; m >= 1; m >>= 1) {
    const int o = MXSIM_SHFL_XOR32(v, m);
    v = o > v ? o : v;
  }
  return v;
}
template <int W = 32>
__device__ inline uint32_t warp_or_u32(uint32_t v) {
  for (int m = W / 2; m >= 1; m >>= 1) v |= MXSIM_SHFL_XOR32(v, m);
  return v;
}

/// hd::fused_group with its products spread over the lanes: lane l holds the
/// term of product l when `has`. Same specials, E, truncation and rounding.
template <int W = 32>
__device__ inline float fused_group_lanes(bool has, const hd::Term& t, float c, int F, bool e8m13) {
  const hd::ExactVal cx = hd::exact_of_float(c);
  uint32_t kinds = 0;
  if (has) kinds = t.v.kind == hd::ExKind::NaN ? 1u : t.v.kind == hd::ExKind::PosInf ? 2u : t.v.kind == hd::ExKind::NegInf ? 4u : 0u;
  kinds = warp_or_u32<W>(kinds);
  const bool nan = cx.kind == hd::ExKind::NaN || (kinds & 1u), pinf = cx.kind == hd::ExKind::PosInf || (kinds & 2u),
             ninf = cx.kind == hd::ExKind::NegInf || (kinds & 4u);
  int ek = -2147483647 - 1;  // no term: below every exponent (c may be subnormal, below -126)
  if (has && t.v.kind == hd::ExKind::Finite) ek = t.v.sig != 0 ? t.align : -126;
  const int ec = cx.kind == hd::ExKind::Finite ? hd::exact_log2(cx) : -126;
  const int et = warp_max_i32<W>(ek);
  const int E = et > ec ? et : ec;
  if (nan || (pinf && ninf)) return f32_from_bits(kCanonicalNan32);
  if (pinf) return f32_from_bits(0x7F800000u);
  if (ninf) return f32_from_bits(0xFF800000u);
  const int lsb = E - F;
  const int64_t S = hd::trunc_units(cx, lsb) + warp_sum_i64<W>(has ? hd::trunc_units(t.v, lsb) : 0);
  return hd::rz_to_frac(S, lsb, e8m13 ? 13 : 23);
}

/// The product term of contraction index k of rows a and b.
__device__ inline hd::Term term_at(const FormatSpec& fa, const FormatSpec& fb, const Row& a, const Row& b, size_t k) {
  return hd::product_term(hd::exact_elem(fa, a.code(k)), hd::exact_elem(fb, b.code(k)));
}

constexpr unsigned kWarpsPerBlock = 8;

/// Up to kMaxBatch groups' launches in one kernel launch (blockIdx.y picks
/// the group), passed by value: the groups run side by side instead of one
/// after another, and no launch table goes through memory.
constexpr int kMaxBatch = 16;
struct LaunchBatch {
  Launch g[kMaxBatch];
};
static_assert(sizeof(LaunchBatch) <= 4000, "kernel parameters are limited to 4 KiB");

/// Contractions up to this length take one thread per output element (the
/// hd walk as the emulator runs it); longer ones one warp per element. Short
/// contractions (wgrad over a few tokens per expert) would leave most lanes
/// of a warp idle; long ones need the lanes to reach full occupancy on small
/// outputs. Both give the contract's bits.
constexpr size_t kThreadMaxK = 64;

/// A Dot has both walks:
///   __device__ float operator()(float acc, const Row& a, const Row& b, size_t K) const                 // sequential
///   __device__ float operator()(float acc, const Row& a, const Row& b, size_t K, unsigned lane) const  // lanes
/// each returning the accumulator before gemm_output (the lane form: the same in every lane), and
///   static constexpr unsigned kLanes   // lanes per output element in the lane form: 32 or 16
template <class Dot>
__global__ void gemm_warp_kernel(LaunchBatch batch, Dot dot) {
  constexpr unsigned W = Dot::kLanes;  // lanes per output element: 32, or 16 (two elements per warp)
  const Launch& L = batch.g[blockIdx.y];
  const size_t n = L.RA * L.RB;
  const size_t w = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) / W;
  const unsigned lane = threadIdx.x % W;
  if ((w - w % (32 / W)) >= n) return;  // whole warps leave together; shuffles need every lane
  const bool active = w < n;            // a warp's last element slot may be past the end
  const size_t e = active ? w : n - 1;
  const size_t i = e / L.RB, j = e % L.RB;
  float* o = L.out + i * L.ld + j;
  const float acc0 = L.accumulate ? *o : 0.0f;
  const float acc = dot(acc0, Row{L.A, i}, Row{L.B, j}, L.K, lane);
  if (active && lane == 0) *o = hd::gemm_output(acc, L.out_bf16);
}
template <class Dot>
__global__ void gemm_thread_kernel(LaunchBatch batch, Dot dot) {
  const Launch& L = batch.g[blockIdx.y];
  const size_t w = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (w >= L.RA * L.RB) return;
  const size_t i = w / L.RB, j = w % L.RB;
  float* o = L.out + i * L.ld + j;
  const float acc0 = L.accumulate ? *o : 0.0f;
  *o = hd::gemm_output(dot(acc0, Row{L.A, i}, Row{L.B, j}, L.K), L.out_bf16);
}

/// Launches the non-empty launches of `ls` (all of one class and element
/// pair, so one Dot serves them), kMaxBatch groups per kernel launch, each
/// group on the kernel its contraction length picks.
template <class Dot>
void launch(const Launch* ls, size_t n, Dot dot, hipStream_t s, const char* name) {
  constexpr unsigned kThreads = kWarpsPerBlock * 32;
  struct Pending {
    LaunchBatch batch{};
    int nb = 0;
    size_t blocks = 0;
  } warp, thread;
  auto flush = [&](Pending& p, bool lanes) {
    if (p.nb == 0) return;
    if (p.blocks > 0x7FFFFFFFu) throw std::invalid_argument(std::string(name) + ": output exceeds the grid");
    const dim3 grid{unsigned(p.blocks), unsigned(p.nb)};
    if (lanes) gemm_warp_kernel<Dot><<<grid, kThreads, 0, s>>>(p.batch, dot);
    else gemm_thread_kernel<Dot><<<grid, kThreads, 0, s>>>(p.batch, dot);
    const hipError_t e = hipGetLastError();
    if (e != hipSuccess) detail::fail(e, name, __FILE__, __LINE__);
    p.nb = 0;
    p.blocks = 0;
  };
  for (size_t k = 0; k < n; ++k) {
    const Launch& L = ls[k];
    if (L.RA == 0 || L.RB == 0) continue;
    const bool lanes = L.K > kThreadMaxK;
    Pending& p = lanes ? warp : thread;
    p.batch.g[p.nb++] = L;
    const size_t per_block = lanes ? kWarpsPerBlock * (32 / Dot::kLanes) : kThreads;
    const size_t b = (L.RA * L.RB + per_block - 1) / per_block;
    p.blocks = b > p.blocks ? b : p.blocks;
    if (p.nb == kMaxBatch) flush(p, lanes);
  }
  flush(warp, true);
  flush(thread, false);
}

// One entry point per block-dot class (gemm_<class>.hip): n launches of
// groups of one element pair.
void launch_mx_exact(const Launch* L, size_t n, hipStream_t s);
void launch_mx_f13(const Launch* L, size_t n, hipStream_t s);
void launch_fp8_chunk128(const Launch* L, size_t n, hipStream_t s);
void launch_bf16_f25(const Launch* L, size_t n, hipStream_t s);

}  // namespace mxsim::hip::gemm
