// Internal: how the grouped-GEMM kernels of every block-dot class read their
// operands, and the one tiled kernel skeleton they share (one thread per
// output element's K walk, operands staged per tile in shared memory).
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
#include "mxsim/hd/gemm_packed.hpp"
#include "mxsim/hip/gemm.hpp"

namespace mxsim::hip::gemm {

struct PanelView {
  Format elem = Format::E2M1;
  bool bf16 = false;
  bool along_scols = true;
  size_t roff = 0;
  const uint8_t* data = nullptr;     // this group's codes
  const uint8_t* sbytes = nullptr;   // this group's E8M0 / UE4M3 scales
  const float* sinv = nullptr;       // this group's FP32 scale_inv
  const uint16_t* codes16 = nullptr; // this group's BF16 codes
  size_t rbytes = 0;                 // bytes per storage row (BF16: elements per row)
  size_t br = 1, bc = 1, nbc = 1;    // scale grid
  const float* tsi = nullptr;        // NVFP4's tensor_scale_inv (one float on the device)
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
  MXSIM_HD uint8_t ue4m3(size_t b) const { return p.sbytes[scale_at(b * 16)]; }
  MXSIM_HD float sinv(size_t c) const { return p.sinv[scale_at(c * 128)]; }
};

/// One group's launch: out[i * ld + j] for i < RA (rows of A), j < RB (rows of B).
struct Launch {
  PanelView A, B;
  size_t RA = 0, RB = 0, K = 0;
  float* out = nullptr;
  size_t ld = 0;
  bool accumulate = false, out_bf16 = false;
  GemmKernel kernel = GemmKernel::Auto;  // GemmParams::kernel
};

// ---- the tiled kernel -------------------------------------------------------
// The contract walks K in order per output element: each block's (or
// group's) rounding feeds the next, so an element's walk stays sequential and
// one thread runs it. What a tile shares is the operands: a block of
// kTileThreads threads computes kTile x kTile outputs (kPerThread per thread)
// and walks K in slabs of kSlab, staging each slab's kTile rows of A and of B
// in shared memory in a form decoded once per element (Cls::Elem: integer
// images for mx-exact, hd::PackedVal for the fused-group classes) with their
// scales. Every element's walk is then the hd steps over shared memory.
//
// kSlab is a multiple of every class's K unit (16, 32, 128): a slab ends on a
// block, group and chunk boundary, so only the FP32 accumulator carries from
// one slab to the next.

constexpr unsigned kTile = 32;          // rows of B per block, and the most rows of A
constexpr unsigned kTileThreads = 256;  // thread t: B row t % kTile, A rows t / kTile + 8 q
constexpr unsigned kSmallTA = 8;        // rows of A of the small tile: one output per thread
constexpr unsigned kLanesTB = 4;        // rows of B of a lanes block (x 256 / W / 4 rows of A)
constexpr unsigned kSlab = 128;
/// Words per k of a slab: one more than kTile, so that threads writing
/// neighbouring k (staging along K) hit different shared-memory banks.
constexpr unsigned kSlabStride = kTile + 1;

/// Up to kMaxBatch groups' launches in one kernel launch (blockIdx.z picks
/// the group), passed by value: the groups run side by side instead of one
/// after another, and no launch table goes through memory.
constexpr int kMaxBatch = 16;
struct LaunchBatch {
  Launch g[kMaxBatch];
};
static_assert(sizeof(LaunchBatch) <= 4000, "kernel parameters are limited to 4 KiB");

/// Calls f(rl, kl, row, k) for the elements of rows r0 + rl (rl < rows, r0 + rl <
/// R) and contraction indices k0 + kl (kl < ks) of panel p, spread over the
/// block's threads so that neighbouring threads read neighbouring bytes;
/// z(rl, kl) for rows past R and for kl in [ks, ks_fill) (zero padding).
template <class F, class Z>
__device__ inline void stage_elements(const PanelView& p, size_t r0, size_t R, unsigned rows, size_t k0, unsigned ks,
                                      unsigned ks_fill, F&& f, Z&& z) {
  const unsigned n = rows * ks_fill;
  for (unsigned idx = threadIdx.x; idx < n; idx += kTileThreads) {
    unsigned rl, kl;
    if (p.along_scols) rl = idx / ks_fill, kl = idx % ks_fill;  // k runs along storage rows
    else kl = idx / rows, rl = idx % rows;                      // rows run along storage rows
    const size_t r = r0 + rl;
    if (r < R && kl < ks) f(rl, kl, Row{p, r}, k0 + kl);
    else z(rl, kl);
  }
}

/// A class policy Cls has
///   struct Slab;                                      shared memory of one operand's slab (kTile rows)
///   __device__ void stage_a(Slab&, const PanelView&, size_t r0, size_t R, unsigned rows, size_t k0, unsigned ks) const;
///   (and stage_b) staging rows r0 .. r0 + rows - 1 of the panel (those below R),
///   __device__ float walk(float acc, const Slab& a, unsigned ia, const Slab& b, unsigned jb, unsigned ks) const;
/// walk runs the class's hd steps over the slab's ks contraction indices for
/// the output of A row ia and B row jb (tile-local) and returns the accumulator.
/// A class with a tensor-level step (nvfp4-exact) also has
///   __device__ float tensor_step(float acc, const Launch&, float c) const;
/// its walks then sum from +0, and the output is tensor_step(acc, L, c) with c
/// the existing output (accumulate) or +0; every other class starts its walk
/// at c.
/// TA: rows of A per block (kTile: four outputs per thread; 8: one, for
/// launches too small to fill the GPU with the larger tile).
template <class Cls>
constexpr bool has_tensor_step = requires(const Cls& c, const Launch& L) { c.tensor_step(0.0f, L, 0.0f); };

template <class Cls, unsigned TA>
__global__ void __launch_bounds__(kTileThreads) gemm_tile_kernel(LaunchBatch batch, Cls cls) {
  constexpr unsigned kPerThread = TA * kTile / kTileThreads, kRowStep = kTileThreads / kTile;
  static_assert(TA <= kTile && kPerThread >= 1 && TA % kRowStep == 0, "a block covers TA x kTile outputs, all of them");
  const Launch& L = batch.g[blockIdx.z];
  const size_t jb0 = size_t(blockIdx.x) * kTile;
  if (jb0 >= L.RB) return;  // the whole block leaves together, before any barrier
  __shared__ typename Cls::Slab sa, sb;
  const unsigned jl = threadIdx.x % kTile, il0 = threadIdx.x / kTile;
  const size_t j = jb0 + jl;
  for (size_t ia0 = size_t(blockIdx.y) * TA; ia0 < L.RA; ia0 += size_t(gridDim.y) * TA) {
    float acc[kPerThread];
#pragma unroll
    for (unsigned q = 0; q < kPerThread; ++q) {
      const size_t i = ia0 + il0 + q * kRowStep;
      acc[q] = !has_tensor_step<Cls> && L.accumulate && i < L.RA && j < L.RB ? L.out[i * L.ld + j] : 0.0f;
    }
    for (size_t k0 = 0; k0 < L.K; k0 += kSlab) {
      const unsigned ks = unsigned(L.K - k0 < kSlab ? L.K - k0 : kSlab);
      __syncthreads();  // the previous slab's walks are done with sa, sb
      cls.stage_a(sa, L.A, ia0, L.RA, TA, k0, ks);
      cls.stage_b(sb, L.B, jb0, L.RB, kTile, k0, ks);
      __syncthreads();
#pragma unroll
      for (unsigned q = 0; q < kPerThread; ++q) acc[q] = cls.walk(acc[q], sa, il0 + q * kRowStep, sb, jl, ks);
    }
#pragma unroll
    for (unsigned q = 0; q < kPerThread; ++q) {
      const size_t i = ia0 + il0 + q * kRowStep;
      if (i < L.RA && j < L.RB) {
        float v = acc[q];
        if constexpr (has_tensor_step<Cls>) v = cls.tensor_step(v, L, L.accumulate ? L.out[i * L.ld + j] : 0.0f);
        L.out[i * L.ld + j] = hd::gemm_output(v, L.out_bf16);
      }
    }
  }
}

// ---- lanes per output, for long contractions of few outputs ------------------
// A launch with few outputs and a long K (the embedding's fprop: 64 x 128
// outputs over K = 784) leaves a thread-per-output kernel a handful of blocks
// with long sequential walks. There W lanes (the class's group length) share
// one output's walk: lane l takes product l of each fused group, and the
// group's order-free parts (any special, the largest alignment exponent, the
// exact sum of the truncated terms) are lane reductions. The walk stays the
// contract's.

/// Reductions over aligned groups of W lanes (xor shuffles stay inside them).
template <unsigned W>
__device__ inline int lanes_max_i32(int v) {
  for (unsigned m = W / 2; m >= 1; m >>= 1) {
    const int o = MXSIM_SHFL_XOR32(v, m);
    v = o > v ? o : v;
  }
  return v;
}
template <unsigned W>
__device__ inline int32_t lanes_sum_i32(int32_t v) {
  for (unsigned m = W / 2; m >= 1; m >>= 1) v += MXSIM_SHFL_XOR32(v, m);
  return v;
}

/// hd::fused_group_packed(n, a, b, c, F, e8m13, x) with lane l < n holding
/// product l. Terms truncated to 2^(E - F) are below 2^(F + 2) <= 2^27
/// (gemm_block.hpp), so W <= 16 of them (F = 25) or 32 (F = 13) sum exactly
/// in int32. A group with a special anywhere in the warp takes the
/// sequential form in every lane (the same value in all of them), so the
/// shuffles below always see all 32 lanes.
template <unsigned W, int F, class A, class B>
__device__ inline float fused_group_packed_lanes(int n, unsigned lane, const A& a, const B& b, float c, bool e8m13,
                                                 hd::FusedEdges x = hd::mma_sim_edges()) {
  static_assert(W == 16 || W == 32, "a group is 16 or 32 products");
  static_assert((uint64_t(W) << (F + 2)) <= (uint64_t(1) << 31), "W terms below 2^(F + 2) must sum in int32");
  const bool has = int(lane) < n;
  const hd::PackedVal pa = has ? a(int(lane)) : hd::PackedVal{0, 0}, pb = has ? b(int(lane)) : hd::PackedVal{0, 0};
  const hd::ExactVal cx = hd::exact_of_float(c);
  const bool special =
      cx.kind != hd::ExKind::Finite || (has && (pa.exp == hd::kPackedSpecial || pb.exp == hd::kPackedSpecial));
  if (lanes_max_i32<32>(special ? 1 : 0)) return hd::fused_group_packed(n, a, b, c, F, e8m13, x);
  const int32_t prod = int32_t(pa.sig) * int32_t(pb.sig);
  const int ek = has ? hd::packed_align(pa, pb, prod, x) : hd::kNoTerm;
  const int et = lanes_max_i32<W>(ek), ec = hd::c_align(cx, x);
  const int E = et > ec ? et : ec;
  // No early return where every term is zero (E == kNoTerm): E is reduced
  // over W lanes, so with W = 16 the two half-warps may differ, and every
  // lane must reach the full-warp shuffles below. The sum is then 0: +0.
  const int lsb = E == hd::kNoTerm ? -F : hd::group_lsb(E, F, x);
  const int32_t u = has ? int32_t(hd::packed_trunc(prod, pa.exp + pb.exp, lsb)) : 0;
  return hd::rz_to_frac(hd::trunc_units(cx, lsb) + lanes_sum_i32<W>(u), lsb, e8m13 ? 13 : 23, x.overflow_inf,
                        x.underflow_pos);
}

/// Cls::kLanes lanes per output (a class policy with kLanes > 0 also has
///   __device__ float walk_lanes(float acc, const Slab& a, unsigned ia, const Slab& b, unsigned jb,
///                               unsigned ks, unsigned lane) const;
/// returning the same accumulator in every lane). A block covers TA x 4
/// outputs, one per group of kLanes lanes.
template <class Cls>
__global__ void __launch_bounds__(kTileThreads) gemm_lanes_kernel(LaunchBatch batch, Cls cls) {
  constexpr unsigned W = Cls::kLanes, TB = kLanesTB, TA = kTileThreads / W / TB;
  static_assert(TA * TB * W == kTileThreads && TA >= 1, "one group of W lanes per output of the block");
  const Launch& L = batch.g[blockIdx.z];
  const size_t jb0 = size_t(blockIdx.x) * TB;
  if (jb0 >= L.RB) return;  // the whole block leaves together, before any barrier
  __shared__ typename Cls::Slab sa, sb;
  const unsigned o = threadIdx.x / W, lane = threadIdx.x % W, il = o / TB, jl = o % TB;
  const size_t j = jb0 + jl;
  for (size_t ia0 = size_t(blockIdx.y) * TA; ia0 < L.RA; ia0 += size_t(gridDim.y) * TA) {
    const size_t i = ia0 + il;
    const bool mine = i < L.RA && j < L.RB;
    float acc = L.accumulate && mine ? L.out[i * L.ld + j] : 0.0f;
    for (size_t k0 = 0; k0 < L.K; k0 += kSlab) {
      const unsigned ks = unsigned(L.K - k0 < kSlab ? L.K - k0 : kSlab);
      __syncthreads();
      cls.stage_a(sa, L.A, ia0, L.RA, TA, k0, ks);
      cls.stage_b(sb, L.B, jb0, L.RB, TB, k0, ks);
      __syncthreads();
      acc = cls.walk_lanes(acc, sa, il, sb, jl, ks, lane);
    }
    if (mine && lane == 0) L.out[i * L.ld + j] = hd::gemm_output(acc, L.out_bf16);
  }
}

/// Counts a grouped-GEMM kernel launch (hip::gemm_launch_counts).
void count_launch(bool wgmma);
/// Counts a bf16-f25 operand side read in place (hip::gemm_launch_counts).
void count_in_place_side();

/// Outputs of a launch below which it takes the small tile (one output per
/// thread): about two blocks of the large tile per multiprocessor of an H200
/// (132) or an MI250X GCD (110).
constexpr size_t kSmallLaunchOutputs = 256 * kTile * kTile;
/// Contractions from this length take lanes per output when the launch is small.
constexpr size_t kLanesMinK = 256;

/// The kernel a launch takes (L.kernel, or by its size).
enum class TileKind { Large, Small, Lanes };

template <class Cls>
inline TileKind tile_kind(const Launch& L) {
  switch (L.kernel) {
    case GemmKernel::LargeTile: return TileKind::Large;
    case GemmKernel::SmallTile: return TileKind::Small;
    case GemmKernel::Lanes: return Cls::kLanes > 0 ? TileKind::Lanes : TileKind::Small;
    case GemmKernel::Auto:
    case GemmKernel::Wgmma:
    case GemmKernel::WgmmaHardware: break;  // (a pair the tensor-core kernels do not take: by size)
  }
  if (L.RA * L.RB >= kSmallLaunchOutputs) return TileKind::Large;
  if constexpr (Cls::kLanes > 0)
    if (L.K >= kLanesMinK) return TileKind::Lanes;
  return TileKind::Small;
}

/// Launches the non-empty launches of `ls` (all of one class and element
/// pair, so one Cls serves them), up to kMaxBatch groups of one kernel kind
/// per kernel launch.
template <class Cls>
void launch(const Launch* ls, size_t n, Cls cls, hipStream_t s, const char* name) {
  struct Pending {
    LaunchBatch batch{};
    int nb = 0;
    size_t rows_a = 0, rows_b = 0;
  } pend[3];
  constexpr unsigned kLanesTA = Cls::kLanes ? kTileThreads / kLanesTB / Cls::kLanes : 1;
  auto flush = [&](TileKind kind) {
    Pending& p = pend[int(kind)];
    if (p.nb == 0) return;
    const unsigned ta = kind == TileKind::Large ? kTile : kind == TileKind::Small ? kSmallTA : kLanesTA;
    const unsigned tb = kind == TileKind::Lanes ? kLanesTB : kTile;
    const size_t tiles_a = (p.rows_a + ta - 1) / ta, tiles_b = (p.rows_b + tb - 1) / tb;
    if (tiles_b > 0x7FFFFFFFu) throw std::invalid_argument(std::string(name) + ": output exceeds the grid");
    // Rows of A beyond 65535 tiles are walked by the blocks' own loop.
    const dim3 grid{unsigned(tiles_b), unsigned(tiles_a < 65535 ? tiles_a : 65535), unsigned(p.nb)};
    switch (kind) {
      case TileKind::Large: gemm_tile_kernel<Cls, kTile><<<grid, kTileThreads, 0, s>>>(p.batch, cls); break;
      case TileKind::Small: gemm_tile_kernel<Cls, kSmallTA><<<grid, kTileThreads, 0, s>>>(p.batch, cls); break;
      case TileKind::Lanes:
        if constexpr (Cls::kLanes > 0) gemm_lanes_kernel<Cls><<<grid, kTileThreads, 0, s>>>(p.batch, cls);
        break;
    }
    const hipError_t e = hipGetLastError();
    if (e != hipSuccess) detail::fail(e, name, __FILE__, __LINE__);
    count_launch(false);
    p.nb = 0;
    p.rows_a = p.rows_b = 0;
  };
  for (size_t k = 0; k < n; ++k) {
    const Launch& L = ls[k];
    if (L.RA == 0 || L.RB == 0) continue;
    const TileKind kind = tile_kind<Cls>(L);
    Pending& p = pend[int(kind)];
    p.batch.g[p.nb++] = L;
    p.rows_a = L.RA > p.rows_a ? L.RA : p.rows_a;
    p.rows_b = L.RB > p.rows_b ? L.RB : p.rows_b;
    if (p.nb == kMaxBatch) flush(kind);
  }
  for (TileKind kind : {TileKind::Large, TileKind::Small, TileKind::Lanes}) flush(kind);
}

/// The sum of the four int8 products of words a and b, plus c (exact): the
/// integer block dots of mx-exact and nvfp4-exact.
__device__ inline int32_t dot4_i8(int32_t a, int32_t b, int32_t c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, c);
#else
  for (int i = 0; i < 4; ++i) c += int32_t(int8_t(a >> (8 * i))) * int32_t(int8_t(b >> (8 * i)));
  return c;
#endif
}

/// The E8M0 scales of a slab's 32-blocks (ceil(ks / 32) of them) for rows
/// r0 .. r0 + rows - 1 of panel p; rows past R get the neutral 127 (their
/// outputs are never written). The MX classes' slabs share this.
using SlabE8m0 = uint8_t[kSlab / 32][kTile];
__device__ inline void stage_e8m0(SlabE8m0& s, const PanelView& p, size_t r0, size_t R, unsigned rows, size_t k0,
                                  unsigned ks) {
  const unsigned nb = (ks + 31) / 32;
  for (unsigned idx = threadIdx.x; idx < rows * nb; idx += kTileThreads) {
    const unsigned rl = idx % rows, b = idx / rows;
    s[b][rl] = r0 + rl < R ? Row{p, r0 + rl}.e8m0(k0 / 32 + b) : uint8_t(127);
  }
}

/// The fused-group classes' slab: every element as hd::PackedVal, k-major
/// (element (r, k) at v[k][r]: the tile's threads read neighbouring words),
/// with the E8M0 scale of each 32-block (mx-f13) or the FP32 scale_inv of the
/// slab's 128-chunk (fp8-chunk128).
struct PackedSlab {
  hd::PackedVal v[kSlab][kSlabStride];
  SlabE8m0 e8m0;
  float sinv[kTile];
};

/// Stages panel p's slab as packed exact values of format f (Row::code is the
/// storage's code; BF16 panels hold 16-bit patterns).
__device__ inline void stage_packed(PackedSlab& s, const PanelView& p, Format f, size_t r0, size_t R, unsigned rows,
                                    size_t k0, unsigned ks, bool e8m0, bool sinv) {
  const FormatSpec fs = spec_of(f);
  stage_elements(
      p, r0, R, rows, k0, ks, ks, [&](unsigned rl, unsigned kl, const Row& row, size_t k) { s.v[kl][rl] = hd::pack_value(hd::exact_elem(fs, row.code(k))); },
      [&](unsigned rl, unsigned kl) { s.v[kl][rl] = hd::PackedVal{0, 0}; });
  if (e8m0) stage_e8m0(s.e8m0, p, r0, R, rows, k0, ks);
  if (sinv)
    for (unsigned rl = threadIdx.x; rl < rows; rl += kTileThreads)
      s.sinv[rl] = r0 + rl < R ? Row{p, r0 + rl}.sinv(k0 / 128) : 1.0f;
}

// One entry point per block-dot class (gemm_<class>.hip): n launches of
// groups of one element pair.
void launch_mx_exact(const Launch* L, size_t n, hipStream_t s);
void launch_mx_f13(const Launch* L, size_t n, hipStream_t s);
void launch_fp8_chunk128(const Launch* L, size_t n, hipStream_t s);
void launch_bf16_f25(const Launch* L, size_t n, hipStream_t s);
void launch_nvfp4_exact(const Launch* L, size_t n, hipStream_t s);

/// The tensor-core kernels (gemm_sm90.hip, NVIDIA sm_90 only): runs the n
/// launches and returns true when the device, the class's element pair and
/// the work qualify (L[0].kernel Auto and large enough, or Wgmma); returns
/// false, having launched nothing, otherwise.
bool launch_sm90(hd::GemmClass cls, const Launch* L, size_t n, hipStream_t s, StreamWorkspace* ws);

/// E8M0 tensor-core launches whose exact-steps twin did the work, read from
/// the current device (synchronises it; 0 before any such launch and on AMD).
size_t sm90_exact_steps_runs();
/// Caps the Hopper kernels' persistent CTAs (hip::set_wgmma_max_ctas).
void set_max_ctas(unsigned n);

}  // namespace mxsim::hip::gemm
