// Grouped GEMM on Hopper's tensor cores (NVIDIA sm_90a), bit for bit the
// contract of docs/numerics.md §5.2 for the pairs whose block dot a tensor
// core computes exactly as the contract defines it:
//   mx-exact E2M1 x E2M1  an FP8 (E4M3 image) wgmma k32 with a zero
//                         accumulator: the 32 products of E2M1 values are
//                         multiples of 1/4 below 2^6 and their sum is below
//                         2^11, so the e8m13 group result is the exact dot
//                         (matrix-units-and-gpu.md §1); then
//                         acc = fmaf(dot, 2^(sa-127) * 2^(sb-127), acc);
//   mx-f13                the same k32 wgmma (E4M3/E5M2 images; E2M1, FP6
//                         enter as exact E4M3 values), which is the class's
//                         definition (MMA-Sim's Hopper FP8 model, F = 13);
//   fp8-chunk128          four chained k32 wgmmas per 128-K chunk, then
//                         acc = fmaf(chunk, fl32(sa * sb), acc);
//   bf16-f25              a BF16 wgmma k16 chain over the whole K with the
//                         FP32 accumulator as C (the class's definition).
// The fmaf promotion equals the contract's RNE(acc + dot * 2^(sa+sb-254))
// when 2^(sa-127) * 2^(sb-127) is exact (an FP32 number, not 0 or Inf); a
// launch whose scale bytes could leave that range (found while the images
// are built) promotes with the hd steps instead.
//
// Shape of the kernel (DeepGEMM's for FP8 on Hopper): persistent CTAs, one
// per SM, walking 128 x 128 output tiles (bf16-f25: 128 x 256); in each, one
// producer thread issuing bulk tensor copies (TMA) of 128-byte K slabs of A,
// B and their scales into kStages shared-memory stages, two consumer
// warpgroups of 64 rows each running wgmma and the promotion on the CUDA
// cores, mbarriers between them. The stages run on across tiles, so the
// next tile's loads overlap this tile's output stores. Each output's K walk
// stays ascending in one thread's registers: no split-K.
//
// Operands reach the kernel as K-major 8-bit (or BF16) images with FP32
// scale images, built by image kernels from the QuantizedTensor storage: the
// E2M1 nibbles, FP6 codes and contraction-along-rows operands (dgrad's W,
// wgrad's operands) become rows of 128-byte aligned K slabs, zero-padded to
// whole slabs and tiles, the form TMA and wgmma read. K-major BF16 operands
// whose groups lie one after another (fprop's X and W, dgrad's dY) are read
// in place, with no image.
#include "gemm_panel.hpp"

#include <atomic>
#include <map>
#include <mutex>
#include <utility>

#if defined(MXSIM_GPU_NVIDIA)
#include <cuda.h>  // CUtensorMap (types only: the driver entry point comes through the runtime)
#include <cudaTypedefs.h>
#endif

namespace mxsim::hip::gemm {

#if defined(MXSIM_GPU_NVIDIA)
namespace sm90 {

constexpr int kBM = 128;             // output tile rows (A rows)
constexpr int kSlabBytes = 128;      // K bytes per stage: one 128-byte swizzle row
constexpr int kConsumers = 2;        // warpgroups of 64 rows
constexpr int kThreads = 128 * (1 + kConsumers);

/// How a launch's K walk is rounded (the class's promotion).
enum class Mode : int { Block32, Chunk128, Bf16 };

/// Tile columns (B rows) and stage layout. Bf16 takes 256 columns (one
/// m64n256 accumulator per consumer, 128 registers): a 128 x 128 tile pulls
/// 32 KB through L2 per 2 MFLOP, which at the tensor cores' BF16 rate is
/// more than an H200's L2 delivers. (A 256-column Block32 tile would need
/// 128 accumulators plus two 64-value MMA results, 256 registers, above the
/// 232 setmaxnreg gives a consumer.)
template <Mode M>
struct Geo {
  static constexpr int kBN = M == Mode::Bf16 ? 256 : 128;
  static constexpr int kATile = kBM * kSlabBytes, kBTile = kBN * kSlabBytes;
  static constexpr int kASc = kBM * 4 * int(sizeof(float)), kBSc = kBN * 4 * int(sizeof(float));  // four 32-blocks
  static constexpr int kStageBytes = kATile + kBTile + (M == Mode::Bf16 ? 0 : kASc + kBSc);
  static constexpr int kStages = M == Mode::Bf16 ? 4 : 5;
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024 /* alignment */ + 2 * kStages * 8 /* mbarriers */;
  static_assert(kStageBytes % 1024 == 0 && kATile % 1024 == 0 && kBTile % 1024 == 0, "128-byte swizzle atoms");
  static_assert(kSmemBytes <= 227 * 1024, "an H200 CTA has 227 KiB of shared memory");
};
/// Element type of an 8-bit image (the wgmma operand type).
enum class Img : int { E4M3, E5M2, BF16 };


/// One group of a batch: its output tile grid and where its operands sit in
/// the images (rows; K in elements; scale columns in 32-blocks).
struct Tile {
  int ra = 0, rb = 0;          // output rows (A panel rows) and columns (B panel rows)
  int a_row = 0, b_row = 0;    // first image row of the A / B panel
  int k_col = 0;               // first image column (element) of the K range
  int nk = 0;                  // stages (128-byte K slabs)
  int nblk = 0;                // real 32-blocks (Block32) / 128-chunks (Chunk128) of K
  int tiles_n = 0, tile0 = 0;  // tiles along B, first tile index in the grid
  float* out = nullptr;
  long long ld = 0;
};
struct Batch {
  Tile t[kMaxBatch];
  int n = 0;
  int tiles = 0;                     // output tiles of every group (the CTAs loop over them)
  int out_pairs = 0;                 // every group's outputs 8-byte aligned with an even ld: float2 stores
  int accumulate = 0, out_bf16 = 0;
  const int* scale_range = nullptr;  // E8M0 bytes seen: min A, max A, min B, max B
  int mx_exact = 0;                  // Block32: the mx-exact class (else mx-f13)
};

static_assert(sizeof(Batch) + 4 * sizeof(CUtensorMap) <= 4000, "kernel parameters are limited to 4 KiB");

// ---- PTX wrappers ------------------------------------------------------------

#define MXSIM_WG_D64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define MXSIM_WG_D64_ARGS(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MXSIM_SM90A_DEVICE 1

__device__ inline uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ inline void mbar_init(uint64_t* b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(b)), "r"(count) : "memory");
}
__device__ inline void mbar_expect_tx(uint64_t* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(b)), "r"(bytes) : "memory");
}
__device__ inline void mbar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(b)) : "memory");
}
__device__ inline void mbar_wait(uint64_t* b, unsigned parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(b)), "r"(parity)
        : "memory");
  } while (!done);
}
/// A 2-D box of a tensor map into shared memory, completing on `bar`.
__device__ inline void tma_load(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          smem_addr(dst)),
      "l"(map), "r"(smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}

/// *p when ok, else +0, without a branch (so that the value has one
/// definition). No memory clobber: it reads the output before this CTA
/// writes any of it, and no other CTA writes these elements.
__device__ inline float load_or_zero(const float* p, bool ok) {
  float v;
  asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %2, 0;\n mov.b32 %0, 0;\n @q ld.global.f32 %0, [%1];\n}\n"
               : "=f"(v)
               : "l"(p), "r"(int(ok)));
  return v;
}

__device__ inline void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ inline void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ inline void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
__device__ inline void wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory"); }
/// Keeps the compiler from moving register reads across the asynchronous MMA.
template <int N>
__device__ inline void reg_fence(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/// wgmma shared-memory descriptor of a K-major tile in the 128-byte swizzle
/// that TMA wrote (PTX "Matrix Descriptor Format"): rows of 128 bytes, eight
/// rows (1024 bytes) per swizzle atom; stepping K inside a row moves the
/// start address (the stages are 1024-byte aligned, so the base offset is 0).
__device__ inline uint64_t kmajor_desc(const void* tile) {
  const uint32_t a = smem_addr(tile);
  return uint64_t((a & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

/// One k32 FP8 step on a 64 x 128 block: D = A B (+ D when scale_d): with
/// scale_d 0 the exact dot of one MX block (Block32), chained over a
/// 128-K chunk for Chunk128.
template <Img A, Img B>
struct Fp8Mma;
#define MXSIM_FP8_MMA(TA, TB, NAME)                                                                         \
  template <>                                                                                              \
  struct Fp8Mma<Img::TA, Img::TB> {                                                                        \
    __device__ static void run(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {                    \
      asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"                                         \
                   " wgmma.mma_async.sync.aligned.m64n128k32.f32." NAME " " MXSIM_WG_D64                   \
                   ", %64, %65, p, 1, 1;\n}\n"                                                             \
                   : MXSIM_WG_D64_ARGS(d)                                                                  \
                   : "l"(da), "l"(db), "r"(scale_d));                                                      \
    }                                                                                                      \
  };
MXSIM_FP8_MMA(E4M3, E4M3, "e4m3.e4m3")
MXSIM_FP8_MMA(E4M3, E5M2, "e4m3.e5m2")
MXSIM_FP8_MMA(E5M2, E4M3, "e5m2.e4m3")
MXSIM_FP8_MMA(E5M2, E5M2, "e5m2.e5m2")
#undef MXSIM_FP8_MMA

#define MXSIM_WG_D128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define MXSIM_WG_D128_ARGS(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

/// One k16 step of the BF16 chain on a 64 x 256 block: D = A B + D.
__device__ inline void bf16_mma256(float (&d)[128], uint64_t da, uint64_t db) {
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
               " wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " MXSIM_WG_D128 ", %128, %129, p, 1, 1, 0, 0;\n}\n"
               : MXSIM_WG_D128_ARGS(d)
               : "l"(da), "l"(db), "r"(1));
}

/// The E8M0 byte of a scale image value 2^(s - 127) (NaN for 0xFF).
__device__ inline uint8_t e8m0_of(float s) {
  const uint32_t b = f32_bits(s);
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return 0xFF;
  return (b >> 23) ? uint8_t(b >> 23) : uint8_t(0);  // 2^-127 is the one subnormal scale
}
#endif  // sm_90a device code

/// A tile of the batch: its group and its place in the group's tile grid.
struct TileAt {
  const Tile* t;
  int tm, tn;
};
__device__ inline TileAt tile_at(const Batch& b, int tile) {
  int li = 0;
  while (li + 1 < b.n && tile >= b.t[li + 1].tile0) ++li;
  const Tile& T = b.t[li];
  const int local = tile - T.tile0;
  // (Tried: bands of 8 tile columns walked row by row, for L2 reuse;
  // within the run-to-run noise on an H200, docs/gpu.md.)
  return {&T, local / T.tiles_n, local % T.tiles_n};
}

/// Block32 launches (mx-exact, and mx-f13 under WgmmaHardware) whose
/// exact-steps twin did the work (the scale range fell outside the fmaf
/// range): tests assert which twin ran.
__device__ unsigned long long g_exact_steps_runs = 0;

/// The kernel: see the file comment. Value i of a consumer thread's kAcc
/// (kBN / 2) is the wgmma D fragment's (PTX "Register Fragments", m64nNk32 /
/// m64nNk16): row 16 w + g + 8 ((i >> 1) & 1), column 8 (i >> 2) + 2 t +
/// (i & 1) of the warpgroup's 64 x kBN block (w its warp, g = lane / 4,
/// t = lane % 4).
template <Mode M, Img TA, Img TB, bool kTileB, bool kExact>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_sm90_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                     const __grid_constant__ CUtensorMap map_sa, const __grid_constant__ CUtensorMap map_sb,
                     const __grid_constant__ Batch batch) {
#if defined(MXSIM_SM90A_DEVICE)
  using G = Geo<M>;
  constexpr int kBN = G::kBN, kStages = G::kStages, kStageBytes = G::kStageBytes, kAcc = kBN / 2;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
  uint64_t* empty = full + kStages;
  const auto stage_a = [&](int s) { return smem + s * kStageBytes; };
  const auto stage_b = [&](int s) { return smem + s * kStageBytes + G::kATile; };
  const auto stage_sa = [&](int s) {
    return reinterpret_cast<const float*>(smem + s * kStageBytes + G::kATile + G::kBTile);
  };
  const auto stage_sb = [&](int s) {
    return reinterpret_cast<const float*>(smem + s * kStageBytes + G::kATile + G::kBTile + G::kASc);
  };

  // Block32: the scale bytes the images saw. Inside this range every
  // 2^(sa-127) * 2^(sb-127) is an exact FP32 value and fmaf is the
  // contract's add; outside it the kExact twin, launched beside this one,
  // takes the contract's steps. The one that does not apply leaves at once.
  if constexpr (M == Mode::Block32) {
    const int* r = batch.scale_range;
    // (>= 2^-147, not 2^-149: then every dot (a multiple of 1/4) times the
    // scale is a multiple of 2^-149, so no add rounds to a -0 mid-walk.)
    const bool plain = r[0] + r[2] >= 254 - 147 && r[1] + r[3] <= 254 + 127;
    if (plain == kExact) return;
    if constexpr (kExact)  // counted per launch (hip::gemm_launch_counts().wgmma_exact_steps)
      if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(&g_exact_steps_runs, 1ull);
  }

  constexpr bool kScaled = M != Mode::Bf16;
  constexpr int kKElems = M == Mode::Bf16 ? kSlabBytes / 2 : kSlabBytes;  // K elements per stage
  constexpr unsigned kTx = unsigned(kStageBytes);  // every byte of a stage arrives by TMA

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumers * 4);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const int wg = int(threadIdx.x) / 128;
  if (wg == 0) {  // producer: one thread issues every copy
    // Registers move to the consumers (ptxas allocates the consumer branch
    // to 232: Bf16's 128 accumulators, or 64 accumulators and two 64-value
    // MMA results).
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      int it0 = 0;  // stages this CTA has filled before this tile
      for (int tile = int(blockIdx.x); tile < batch.tiles; tile += int(gridDim.x)) {
      const TileAt at = tile_at(batch, tile);
      const Tile& T = *at.t;
      const int tm = at.tm, tn = at.tn;
      for (int kb = 0; kb < T.nk; ++kb) {
        const int s = (it0 + kb) % kStages, round = (it0 + kb) / kStages;
        if (round > 0) mbar_wait(&empty[s], unsigned(round - 1) & 1u);
        mbar_expect_tx(&full[s], kTx);
        const int kc = T.k_col + kb * kKElems;
        tma_load(stage_a(s), &map_a, &full[s], kc, T.a_row + tm * kBM);
        tma_load(stage_b(s), &map_b, &full[s], kc, T.b_row + tn * kBN);
        if constexpr (kScaled) {
          tma_load(const_cast<float*>(stage_sa(s)), &map_sa, &full[s], kc / 32, T.a_row + tm * kBM);
          tma_load(const_cast<float*>(stage_sb(s)), &map_sb, &full[s], T.b_row + tn * kBN, kc / 32);
        }
      }
      it0 += T.nk;
      }
    }
  } else {  // consumers (one branch each, so that setmaxnreg takes effect)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");

  const int cw = wg - 1, w = (int(threadIdx.x) / 32) % 4, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int lr0 = cw * 64 + 16 * w + g;  // tile-local rows of values 4j + {0,1} and 4j + {2,3}: lr0, lr0 + 8
  int it0 = 0;  // stages this CTA has consumed before this tile
  for (int tile = int(blockIdx.x); tile < batch.tiles; tile += int(gridDim.x)) {
  const TileAt at = tile_at(batch, tile);
  const Tile& T = *at.t;
  const int tm = at.tm, tn = at.tn;
  const int row0 = tm * kBM + lr0, row1 = row0 + 8, col_base = tn * kBN + 2 * t;
  // The output's C: one predicated load per value, at an immediate offset
  // from its row (rows past the output read a valid row, then drop it).
  // Values defined on paths of their own, or clamped addresses computed
  // per value, cost ptxas registers and the wgmma pipeline (C7515).
  float acc[kAcc];
  if (batch.accumulate) {
    const int last_r = T.ra - 1;
    const float* out0 = T.out + size_t(min(row0, last_r)) * size_t(T.ld) + col_base;
    const float* out1 = T.out + size_t(min(row1, last_r)) * size_t(T.ld) + col_base;
    const bool ok0 = row0 <= last_r, ok1 = row1 <= last_r;
#pragma unroll
    for (int i = 0; i < kAcc; ++i) {
      const bool hi = (i >> 1) & 1;
      const int dc = 8 * (i >> 2) + (i & 1);
      acc[i] = load_or_zero((hi ? out1 : out0) + dc, (hi ? ok1 : ok0) && col_base + dc < T.rb);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
  }
  // Block32: the first block's exact add turns a -0 accumulator into +0
  // whatever the block's value (numerics.md §5.4); doing it here keeps a
  // zero wgmma result of either sign from reaching the fmaf with -0.
  if (M == Mode::Block32 && T.nblk > 0) {
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = acc[i] == 0.0f ? 0.0f : acc[i];
  }

  if constexpr (M == Mode::Bf16) {
    // The chain is the accumulator itself, so nothing runs on the CUDA cores
    // between stages: a stage's four k16 steps stay in flight while the
    // next stage's are issued, and a stage goes back to the producer once
    // the steps after it are issued and its own have completed (wait_group
    // 1). The first stage completes on its own (wait_group 0): while acc
    // still holds the values loaded above, ptxas would otherwise serialise
    // every wgmma of the loop (C7515).
    static_assert(kAcc == 128, "one m64n256 accumulator");
    const auto issue = [&](int kb) {
      const int s = (it0 + kb) % kStages;
      mbar_wait(&full[s], unsigned((it0 + kb) / kStages) & 1u);
      const uint64_t da = kmajor_desc(stage_a(s) + cw * 64 * kSlabBytes), db = kmajor_desc(stage_b(s));
      wg_fence();
#pragma unroll
      for (int q = 0; q < 4; ++q) bf16_mma256(acc, da + 2 * q, db + 2 * q);  // 32 bytes = 16 BF16 per k16
      wg_commit();
    };
    const auto release = [&](int kb) {
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[(it0 + kb) % kStages]);
    };
    {  // (nk >= 1: launch_sm90 takes no K = 0 launch)
      issue(0);
      wg_wait0();
      release(0);
    }
    for (int kb = 1; kb < T.nk; ++kb) {
      issue(kb);
      wg_wait1();
      if (kb > 1) release(kb - 1);
    }
    wg_wait0();
    if (T.nk > 1) release(T.nk - 1);
    reg_fence(acc);
  } else if constexpr (M == Mode::Block32) {
    // Each 32-block is one m64nNk32 per kPartN columns with a zero
    // accumulator (the block's exact dot), promoted on the CUDA cores. In a
    // stage, one MMA is in flight on the tensor cores while the CUDA cores
    // promote the one before it; the stage ends with no MMA in flight and
    // goes back to the producer (the other consumer's MMAs fill the gap).
    // (Keeping MMAs in flight across stages made ptxas serialise them all,
    // C7514: it does not follow which result registers are in flight around
    // a loop. kPartN 128: B is read from shared memory once per 64 rows of A
    // for twice the FLOPs of a 64-column part; on an H200, m64n128k32 parts
    // gave 388 / 194 / 315 TFLOP/s on the benchmark's fprop shapes against
    // 350 / 183 / 290 for m64n64k32.)
    constexpr int kPartN = 128, kPer = 4, kVals = kPartN / 2;  // one part per 32-block: kPer steps per stage
    static_assert(kPartN == kBN, "one m64n128 part covers the tile's columns");
    float dd[2][kVals];
    const auto issue = [&](int step) {
      const int kb = step / kPer, s = (it0 + kb) % kStages, blk = step % kPer;
      if (step % kPer == 0) mbar_wait(&full[s], unsigned((it0 + kb) / kStages) & 1u);
      const uint64_t da = kmajor_desc(stage_a(s) + cw * 64 * kSlabBytes), db = kmajor_desc(stage_b(s));
      wg_fence();
      Fp8Mma<TA, TB>::run(dd[step & 1], da + 2 * blk, db + 2 * blk, 0);
      wg_commit();
    };
    for (int kb = 0; kb < T.nk; ++kb) {
      const int s = (it0 + kb) % kStages;
      issue(kb * kPer);
      issue(kb * kPer + 1);  // (kPer >= 4 steps per stage)
      const float* sa = stage_sa(s);
      const float* sb = stage_sb(s);
#pragma unroll(kExact ? 1 : kPer)
      for (int u = 0; u < kPer; ++u) {
        const int step = kb * kPer + u;
        if (u + 1 < kPer) wg_wait1();
        else wg_wait0();
        float(&d)[kVals] = dd[u & 1];
        reg_fence(d);
        const int blk = u;
        float* a = acc;  // value i: column 8 (i >> 2) + 2 t + (i & 1)
        if (kb * 4 + blk < T.nblk) {  // blocks past K are zero padding: the walk has ended
          const float a0 = sa[lr0 * 4 + blk], a1 = sa[(lr0 + 8) * 4 + blk];
          const float* sbh = sb + blk * kBN;
          if constexpr (kExact) {  // scales near the FP32 range ends: the contract's exact steps
#pragma unroll 1
            for (int i = 0; i < kVals; ++i) {
              const uint8_t ea = e8m0_of((i >> 1) & 1 ? a1 : a0);
              const uint8_t eb = e8m0_of(sbh[8 * (i >> 2) + 2 * t + (i & 1)]);
              a[i] = batch.mx_exact ? hd::mx_exact_block(a[i], int32_t(d[i] * 4.0f), ea, eb, 2)
                                    : hd::mx_f13_block(a[i], d[i], ea, eb);
            }
          } else if constexpr (kTileB) {  // B's scale is one per 32 columns (32 x 32 weight tiles)
            float s0[kPartN / 32], s1[kPartN / 32];
#pragma unroll
            for (int q = 0; q < kPartN / 32; ++q) s0[q] = a0 * sbh[32 * q], s1[q] = a1 * sbh[32 * q];
#pragma unroll
            for (int j = 0; j < kVals / 4; ++j) {  // values 4j..4j+3 lie in columns 8j..8j+7: tile j / 4
              a[4 * j + 0] = fmaf(d[4 * j + 0], s0[j / 4], a[4 * j + 0]);
              a[4 * j + 1] = fmaf(d[4 * j + 1], s0[j / 4], a[4 * j + 1]);
              a[4 * j + 2] = fmaf(d[4 * j + 2], s1[j / 4], a[4 * j + 2]);
              a[4 * j + 3] = fmaf(d[4 * j + 3], s1[j / 4], a[4 * j + 3]);
            }
          } else {
#pragma unroll
            for (int j = 0; j < kVals / 4; ++j) {
              const float2 b = *reinterpret_cast<const float2*>(sbh + 8 * j + 2 * t);
              a[4 * j + 0] = fmaf(d[4 * j + 0], a0 * b.x, a[4 * j + 0]);
              a[4 * j + 1] = fmaf(d[4 * j + 1], a0 * b.y, a[4 * j + 1]);
              a[4 * j + 2] = fmaf(d[4 * j + 2], a1 * b.x, a[4 * j + 2]);
              a[4 * j + 3] = fmaf(d[4 * j + 3], a1 * b.y, a[4 * j + 3]);
            }
          }
        }
        if (u == kPer - 1) {  // the stage's last block is promoted
          __syncwarp();
          if (lane == 0) mbar_arrive(&empty[s]);
        }
        if (u + 2 < kPer) issue(step + 2);
      }
    }
  } else {
  for (int kb = 0; kb < T.nk; ++kb) {
    const int s = (it0 + kb) % kStages;
    mbar_wait(&full[s], unsigned((it0 + kb) / kStages) & 1u);
    const uint64_t da = kmajor_desc(stage_a(s) + cw * 64 * kSlabBytes), db = kmajor_desc(stage_b(s));
    const float* sa = stage_sa(s);
    const float* sb = stage_sb(s);
    {
      static_assert(kAcc == 64, "one m64n128 accumulator");
      float d[64];
      wg_fence();
#pragma unroll
      for (int q = 0; q < 4; ++q) Fp8Mma<TA, TB>::run(d, da + 2 * q, db + 2 * q, q > 0);
      wg_commit();
      wg_wait0();
      reg_fence(d);
      {  // (every stage is a real chunk: nk = ceil(K / 128))
        const float a0 = sa[lr0 * 4], a1 = sa[(lr0 + 8) * 4];  // the chunk's scale_inv (replicated per 32)
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          const float2 b = *reinterpret_cast<const float2*>(sb + 8 * j + 2 * t);
          acc[4 * j + 0] = fmaf(d[4 * j + 0], a0 * b.x, acc[4 * j + 0]);
          acc[4 * j + 1] = fmaf(d[4 * j + 1], a0 * b.y, acc[4 * j + 1]);
          acc[4 * j + 2] = fmaf(d[4 * j + 2], a1 * b.x, acc[4 * j + 2]);
          acc[4 * j + 3] = fmaf(d[4 * j + 3], a1 * b.y, acc[4 * j + 3]);
        }
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[s]);
  }
  }  // Chunk128

  {
    float* const out0 = T.out + size_t(row0) * size_t(T.ld);
    float* const out1 = out0 + 8 * size_t(T.ld);
    const bool ok0 = row0 < T.ra, ok1 = row1 < T.ra, bf16_out = batch.out_bf16;
#pragma unroll
    for (int i = 0; i < kAcc; i += 2) {  // values i, i + 1: neighbouring columns of one row
      const bool hi = (i >> 1) & 1;
      const int c = col_base + 8 * (i >> 2);
      float* const o = (hi ? out1 : out0) + c;
      const float v0 = hd::gemm_output(acc[i], bf16_out), v1 = hd::gemm_output(acc[i + 1], bf16_out);
      if ((hi ? ok1 : ok0) && c + 1 < T.rb && batch.out_pairs) {
        *reinterpret_cast<float2*>(o) = make_float2(v0, v1);
        continue;
      }
      if ((hi ? ok1 : ok0) && c < T.rb) o[0] = v0;
      if ((hi ? ok1 : ok0) && c + 1 < T.rb) o[1] = v1;
    }
  }
  it0 += T.nk;
  }  // tiles
  }  // consumers
#else
  __trap();  // built without sm_90a code: tensor_cores_usable() keeps launch_sm90 from launching it
#endif
}

// ---- operand images ------------------------------------------------------------

/// One launch's operand panel and where its image goes: rows [row0, row0 +
/// rows_pad) and K elements [col0, col0 + kp) of the image, zeros past R and K.
struct ImgJob {
  PanelView p;
  int R = 0, K = 0, row0 = 0, col0 = 0, rows_pad = 0, kp = 0;
};
struct ImgBatch {
  ImgJob j[kMaxBatch];
  int n = 0;
  Img kind = Img::E4M3;
  Format elem = Format::E4M3;  // the panels' element format
  uint8_t* img = nullptr;
  long long pitch = 0;  // bytes per image row
  // scales (Mode::Block32 / Chunk128): one FP32 value per 32-block of K,
  // [rows][K / 32] for A, transposed [K / 32][rows] for B
  float* scales = nullptr;
  long long spitch = 0;  // floats per scale-image row
  int transposed = 0, fp32_scales = 0, with_scales = 0;
  int* range = nullptr;  // min and max E8M0 byte seen (NaN 0xFF left out)
};

/// The E4M3 code of an E2M1 code's value: magnitudes 0, 0.5, 1, 1.5, 2, 3,
/// 4, 6 are E4M3 0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C; the sign
/// bit moves from bit 3 to bit 7 (-0 stays -0, as encode_f32 gives it).
__device__ inline uint32_t e2m1_as_e4m3(uint32_t c) {
  return (c & 8u ? 0x80u : 0u) | uint32_t((0x4C4844403C383000ull >> (8 * (c & 7u))) & 0xFFu);
}

/// Four E2M1 codes (the nibbles of q, lowest first) as four E4M3 bytes: the
/// magnitudes through one byte permute of the table above, then the signs.
__device__ inline uint32_t e2m1x4_as_e4m3(uint32_t q) {
  const uint32_t sel = (q & 0x7u) | ((q >> 4) & 0x7u) << 4 | ((q >> 8) & 0x7u) << 8 | ((q >> 12) & 0x7u) << 12;
  const uint32_t mag = __byte_perm(0x3C383000u, 0x4C484440u, sel);
  const uint32_t sign = (q & 0x8u) << 4 | (q & 0x80u) << 8 | (q & 0x800u) << 12 | (q & 0x8000u) << 16;
  return mag | sign;
}

/// The image code of storage code `code`: E2M1 through its E4M3 table,
/// E4M3 / E5M2 as they are, FP6 re-encoded exactly as E4M3, BF16 as is.
__device__ inline uint32_t image_code(Img kind, Format elem, const FormatSpec& fs, uint32_t code) {
  if (kind == Img::BF16 || kind == Img::E5M2 || elem == Format::E4M3) return code;
  if (elem == Format::E2M1) return e2m1_as_e4m3(code);
  return encode_f32(Format::E4M3, decode(fs, code));  // E2M3 / E3M2 values are E4M3 values
}

/// Grid of the image kernels: x walks the index that runs along storage rows
/// (neighbouring threads read neighbouring bytes), y the other, z the job.
__global__ void image_codes_kernel(const __grid_constant__ ImgBatch b) {
  const ImgJob& J = b.j[blockIdx.z];
  const FormatSpec fs = spec_of(b.elem);
  const bool bf16 = b.kind == Img::BF16, kmajor = J.p.along_scols;
  const unsigned per = bf16 ? 8 : 16;  // elements per 16-byte store
  const unsigned chunks = unsigned(J.kp) / per, rows = unsigned(J.rows_pad);
  const unsigned nfast = kmajor ? chunks : rows, nslow = kmajor ? rows : chunks;
  for (unsigned sl = blockIdx.y; sl < nslow; sl += gridDim.y)
    for (unsigned f = blockIdx.x * blockDim.x + threadIdx.x; f < nfast; f += gridDim.x * blockDim.x) {
      const unsigned r = kmajor ? sl : f, c = kmajor ? f : sl;
      uint32_t w[4] = {0, 0, 0, 0};
      if (r < unsigned(J.R)) {
        if (kmajor && b.elem == Format::E2M1) {  // each storage byte is two neighbouring elements
          const uint8_t* src = J.p.data + (J.p.roff + r) * J.p.rbytes + c * 8;
          if (c * 16 + 16 <= unsigned(J.K) && (reinterpret_cast<uintptr_t>(src) & 7) == 0) {
            const uint2 v = *reinterpret_cast<const uint2*>(src);  // 16 codes, low nibble first
            w[0] = e2m1x4_as_e4m3(v.x & 0xFFFFu), w[1] = e2m1x4_as_e4m3(v.x >> 16);
            w[2] = e2m1x4_as_e4m3(v.y & 0xFFFFu), w[3] = e2m1x4_as_e4m3(v.y >> 16);
          } else {
            for (unsigned e = 0; e < 8; ++e) {
              const unsigned k = c * 16 + 2 * e;
              if (k >= unsigned(J.K)) break;
              const uint32_t byte = src[e];
              const uint32_t lo = e2m1_as_e4m3(byte & 0xFu), hi = k + 1 < unsigned(J.K) ? e2m1_as_e4m3(byte >> 4) : 0u;
              w[e / 2] |= (lo | hi << 8) << (16 * (e % 2));
            }
          }
        } else {
          for (unsigned e = 0; e < per; ++e) {
            const unsigned k = c * per + e;
            if (k >= unsigned(J.K)) break;
            const uint32_t code = image_code(b.kind, b.elem, fs, Row{J.p, r}.code(k));
            if (bf16) w[e / 2] |= (code & 0xFFFFu) << (16 * (e % 2));
            else w[e / 4] |= code << (8 * (e % 4));
          }
        }
      }
      uint8_t* dst = b.img + size_t(J.row0 + r) * size_t(b.pitch) + size_t(J.col0 + c * per) * (bf16 ? 2 : 1);
      *reinterpret_cast<uint4*>(dst) = make_uint4(w[0], w[1], w[2], w[3]);
    }
}

__device__ inline float pow2_of_e8m0(uint8_t e) {
  if (e == 0xFF) return f32_from_bits(kCanonicalNan32);
  return f32_from_bits(e ? uint32_t(e) << 23 : 0x00400000u);  // 0x00: 2^-127, a subnormal
}

/// True when every element of row r's 32-block starting at K index k (up to
/// K) is +0 or -0.
__device__ inline bool block_is_zero(const PanelView& p, unsigned r, unsigned k, unsigned K) {
  const uint32_t mag = spec_of(p.elem).sign_bit() - 1u;
  const Row row{p, r};
  for (unsigned i = k; i < k + 32 && i < K; ++i)
    if (row.code(i) & mag) return false;
  return true;
}

/// Scale image: A [rows][K / 32] (x walks the blocks), B transposed
/// [K / 32][rows] (x walks the rows), so that neighbouring threads write
/// neighbouring words.
__global__ void image_scales_kernel(const __grid_constant__ ImgBatch b) {
  const ImgJob& J = b.j[blockIdx.z];
  const unsigned nbp = unsigned(J.kp) / 32, nreal = (unsigned(J.K) + 31) / 32, rows = unsigned(J.rows_pad);
  const unsigned nfast = b.transposed ? rows : nbp, nslow = b.transposed ? nbp : rows;
  const PanelView& p = J.p;
  unsigned lo = 255, hi = 0;
  for (unsigned sl = blockIdx.y; sl < nslow; sl += gridDim.y)
    for (unsigned f = blockIdx.x * blockDim.x + threadIdx.x; f < nfast; f += gridDim.x * blockDim.x) {
      const unsigned r = b.transposed ? f : sl, blk = b.transposed ? sl : f;
      float v = 1.0f;  // padding: a finite neutral scale (its blocks are never promoted)
      if (r < unsigned(J.R) && blk < nreal) {
        // the scale grid entry of element (r, 32 blk) (Row::scale_at, in 32-bit steps)
        const unsigned k = blk * 32, sr = p.along_scols ? unsigned(p.roff) + r : k,
                       sc = p.along_scols ? k : unsigned(p.roff) + r;
        const size_t at = size_t(sr / unsigned(p.br)) * p.nbc + sc / unsigned(p.bc);
        if (b.fp32_scales) {
          v = p.sinv[at];
        } else {
          const uint8_t e = p.sbytes[at];
          v = pow2_of_e8m0(e);
          if (e != 0xFF) {
            // The smallest byte counts only rows whose block has a nonzero
            // element: a block of zeros dots to +-0 with anything, and
            // fmaf(+-0, s, acc) is acc for any finite s, however small (acc is
            // never -0 inside the range: see the kernel), which is the
            // contract's exact add of a zero product. Zero blocks (dead ReLU
            // features, masked gradients) sat at byte 0x00 and sent whole
            // training-step wgrads to the exact-steps twin (H200: 12.2 ms per
            // launch against the fmaf kernel's 0.71).
            // The largest byte counts every block: an Inf s would make 0 * s NaN.
            if (e < lo && !block_is_zero(p, r, k, unsigned(J.K))) lo = e;
            hi = e > hi ? e : hi;
          }
        }
      }
      const size_t col = size_t(J.col0 / 32) + blk, row_i = size_t(J.row0) + r;
      b.scales[b.transposed ? col * size_t(b.spitch) + row_i : row_i * size_t(b.spitch) + col] = v;
    }
  if (!b.fp32_scales) {
    lo = __reduce_min_sync(0xFFFFFFFFu, lo);
    hi = __reduce_max_sync(0xFFFFFFFFu, hi);
    if (threadIdx.x % 32 == 0) {
      atomicMin(&b.range[0], int(lo));
      atomicMax(&b.range[1], int(hi));
    }
  }
}

static_assert(sizeof(ImgBatch) <= 4000, "kernel parameters are limited to 4 KiB");

/// 1 where this binary holds sm_90a code for the device (a build for other
/// arches runs PTX of another target on an H100/H200, without wgmma).
__global__ void sm90a_probe_kernel(int* out) {
#if defined(MXSIM_SM90A_DEVICE)
  *out = 1;
#else
  *out = 0;
#endif
}

__global__ void range_init_kernel(int* r) {
  if (threadIdx.x < 4) r[threadIdx.x] = threadIdx.x % 2 ? 0 : 255;
}

// ---- host ------------------------------------------------------------------------

/// The tensor-core kernels can run: an sm_90 device (H100/H200) and sm_90a
/// code for it in this binary (asked of the device once, by a probe kernel).
bool tensor_cores_usable() {
  static const bool yes = [] {
    const DeviceInfo d = device_info();
    if (d.cc_major != 9 || d.cc_minor != 0) return false;
    DeviceBuffer flag(sizeof(int), "sm_90a probe");
    sm90a_probe_kernel<<<1, 1>>>(flag.as<int>());
    MXSIM_HIP_CHECK_LAUNCH("sm90a_probe_kernel");
    int v = 0;
    flag.download(&v, sizeof v);
    return v == 1;
  }();
  return yes;
}

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    MXSIM_HIP_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !p)
      throw Error("mxsim::hip: the driver has no cuTensorMapEncodeTiled (needed by the sm_90 GEMM kernels)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

/// A 2-D tensor map over a row-major image [outer][inner] of `dt` elements,
/// rows `ld` elements apart (0: inner).
CUtensorMap tensor_map(const void* base, CUtensorMapDataType dt, size_t elem_bytes, uint64_t inner, uint64_t outer,
                       uint32_t box_inner, uint32_t box_outer, bool swizzle128, uint64_t ld = 0) {
  CUtensorMap m;
  const cuuint64_t dims[2] = {inner, outer};
  const cuuint64_t strides[1] = {(ld ? ld : inner) * elem_bytes};
  const cuuint32_t box[2] = {box_inner, box_outer};
  const cuuint32_t estr[2] = {1, 1};
  const CUresult r = encode_fn()(&m, dt, 2, const_cast<void*>(base), dims, strides, box, estr,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw Error("mxsim::hip: cuTensorMapEncodeTiled failed (" + std::to_string(int(r)) + ") for an image of " +
                std::to_string(outer) + " x " + std::to_string(inner));
  return m;
}

/// The images' device memory, one per (device, stream), grown as needed and
/// kept: calls on one stream reuse it in stream order, and growing waits for
/// that stream only (its earlier launches may still read the old images).
struct Workspace {
  DeviceBuffer buf;
  uint8_t* get(size_t bytes, hipStream_t s) {
    if (bytes > buf.size()) {
      MXSIM_HIP_CHECK(hipStreamSynchronize(s));
      buf = DeviceBuffer();
      buf = DeviceBuffer(bytes + bytes / 4, "grouped GEMM operand images (tensor-core kernels)");
    }
    return buf.as<uint8_t>();
  }
};
std::mutex g_workspace_mu;
Workspace& workspace(hipStream_t s) {
  static std::map<std::pair<int, hipStream_t>, Workspace> all;  // guarded by g_workspace_mu
  int dev = 0;
  MXSIM_HIP_CHECK(hipGetDevice(&dev));
  return all[{dev, s}];
}

size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }

/// hip::set_wgmma_max_ctas (0: one CTA per SM).
std::atomic<unsigned> g_max_ctas{0};

template <Mode M, Img TA, Img TB, bool kTileB, bool kExact>
void launch_one(const CUtensorMap& ma, const CUtensorMap& mb, const CUtensorMap& msa, const CUtensorMap& msb,
                const Batch& batch, unsigned tiles, hipStream_t s) {
  constexpr int smem = Geo<M>::kSmemBytes;
  static std::once_flag once;
  std::call_once(once, [] {
    MXSIM_HIP_CHECK(cudaFuncSetAttribute(gemm_sm90_kernel<M, TA, TB, kTileB, kExact>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  });
  // Persistent CTAs, one per SM (a CTA takes most of an SM's shared
  // memory): the producer fills the next tile's stages while the consumers
  // store the last tile's outputs.
  // (The first device's SM count: all sm_90 parts of one host are alike.)
  static const unsigned sms = unsigned(std::max(1, device_info().multiprocessors));
  const unsigned cap = g_max_ctas.load();
  const unsigned ctas = std::min(tiles, cap ? std::min(cap, sms) : sms);
  gemm_sm90_kernel<M, TA, TB, kTileB, kExact><<<ctas, kThreads, smem, s>>>(ma, mb, msa, msb, batch);
  MXSIM_HIP_CHECK_LAUNCH("gemm_sm90_kernel");
}

/// Whether any Block32 launch happened (before one, the counter is not read).
std::atomic<bool> g_block32_launched{false};

/// Block32 launches the fmaf kernel and its exact-steps twin (the one whose
/// scale range does not apply returns at once: the range is on the device).

template <Mode M, Img TA, Img TB, bool kTileB>
void launch_kernel(const CUtensorMap& ma, const CUtensorMap& mb, const CUtensorMap& msa, const CUtensorMap& msb,
                   const Batch& batch, unsigned tiles, hipStream_t s) {
  launch_one<M, TA, TB, kTileB, false>(ma, mb, msa, msb, batch, tiles, s);
  if constexpr (M == Mode::Block32) {
    launch_one<M, TA, TB, false, true>(ma, mb, msa, msb, batch, tiles, s);
    g_block32_launched = true;
  }
  count_launch(true);
}

template <Mode M, bool kTileB>
void dispatch(Img ia, Img ib, const CUtensorMap& ma, const CUtensorMap& mb, const CUtensorMap& msa,
              const CUtensorMap& msb, const Batch& batch, unsigned tiles, hipStream_t s) {
  if constexpr (M == Mode::Bf16) {
    launch_kernel<M, Img::BF16, Img::BF16, false>(ma, mb, msa, msb, batch, tiles, s);
  } else {
    if (ia == Img::E4M3 && ib == Img::E4M3) launch_kernel<M, Img::E4M3, Img::E4M3, kTileB>(ma, mb, msa, msb, batch, tiles, s);
    else if (ia == Img::E4M3) launch_kernel<M, Img::E4M3, Img::E5M2, kTileB>(ma, mb, msa, msb, batch, tiles, s);
    else if (ib == Img::E4M3) launch_kernel<M, Img::E5M2, Img::E4M3, kTileB>(ma, mb, msa, msb, batch, tiles, s);
    else launch_kernel<M, Img::E5M2, Img::E5M2, kTileB>(ma, mb, msa, msb, batch, tiles, s);
  }
}

/// Where a batch's groups sit in the images: stacked along rows (one K for
/// all: fprop, dgrad) or side by side along K (one R for all: wgrad); the
/// bytes of the A / B images and of their scale images.
struct ImageLayout {
  std::vector<size_t> a_row, b_row, k_col, kp;
  size_t rows_a = 0, rows_b = 0, cols = 0, nsc = 0;
  size_t bytes_a = 0, bytes_b = 0, bytes_sa = 0, bytes_sb = 0;
  // bf16-f25: a side whose panels TMA reads where they are (no image);
  // then its rows are the storage's rows from in_place_base on, and the
  // tensor map covers rows_a / rows_b of them, K wide, ld elements apart.
  bool in_place[2] = {false, false};
  const uint16_t* in_place_base[2] = {nullptr, nullptr};
  size_t in_place_ld[2] = {0, 0};
  size_t total() const { return bytes_a + bytes_b + bytes_sa + bytes_sb + 1024; /* + the scale range words */ }
};

/// The first storage row of a BF16 panel whose K runs along its rows.
const uint16_t* bf16_row0(const PanelView& p) { return p.codes16 + p.roff * p.rbytes; }

/// Whether one side's BF16 panels can be read in place by TMA: K along the
/// storage rows (K-major), one stride, 16-byte aligned rows (TMA's rule),
/// and the groups' rows one after another in memory, as the rows of one
/// token tensor split by m_splits and the experts of one weight tensor are.
/// Tile rows past a group then read the next group's rows (or TMA's zero
/// fill past the last), and only outputs the kernel does not store depend
/// on them: an output row reads one A row, an output column one B row.
bool bf16_in_place(const Launch* L, int n, bool side_b) {
  const PanelView& p0 = side_b ? L[0].B : L[0].A;
  size_t rows = 0;
  for (int i = 0; i < n; ++i) {
    const PanelView& p = side_b ? L[i].B : L[i].A;
    if (!p.bf16 || !p.along_scols || p.rbytes != p0.rbytes || L[i].K != L[0].K || L[i].K > p.rbytes) return false;
    if (bf16_row0(p) != bf16_row0(p0) + rows * p0.rbytes) return false;
    rows += side_b ? L[i].RB : L[i].RA;
  }
  return (reinterpret_cast<uintptr_t>(bf16_row0(p0)) % 16) == 0 && (p0.rbytes * 2) % 16 == 0 &&
         p0.rbytes * 2 < (size_t(1) << 40);
}

/// Output tile columns of a mode (Geo<M>::kBN on the host).
size_t tile_cols(Mode m) {
  switch (m) {
    case Mode::Block32: return Geo<Mode::Block32>::kBN;
    case Mode::Chunk128: return Geo<Mode::Chunk128>::kBN;
    case Mode::Bf16: return Geo<Mode::Bf16>::kBN;
  }
  return 0;
}

ImageLayout image_layout(Mode mode, const Launch* L, int n, bool stacked_rows) {
  const bool bf16 = mode == Mode::Bf16;
  const size_t eb = bf16 ? 2 : 1, kel = kSlabBytes / eb, bn = tile_cols(mode);
  ImageLayout g;
  for (int side = 0; side < 2 && bf16 && stacked_rows; ++side)
    if ((g.in_place[side] = bf16_in_place(L, n, side == 1))) {
      const PanelView& p = side ? L[0].B : L[0].A;
      g.in_place_base[side] = bf16_row0(p), g.in_place_ld[side] = p.rbytes;
    }
  g.a_row.resize(n), g.b_row.resize(n), g.k_col.resize(n), g.kp.resize(n);
  for (int i = 0; i < n; ++i) {
    g.kp[i] = round_up(L[i].K, kel);
    if (stacked_rows) {
      g.a_row[i] = g.rows_a, g.b_row[i] = g.rows_b, g.k_col[i] = 0;
      g.rows_a += g.in_place[0] ? L[i].RA : round_up(L[i].RA, kBM);
      g.rows_b += g.in_place[1] ? L[i].RB : round_up(L[i].RB, bn);
      g.cols = g.kp[i];
    } else {
      g.a_row[i] = g.b_row[i] = 0, g.k_col[i] = g.cols;
      g.rows_a = round_up(L[i].RA, kBM);
      g.rows_b = round_up(L[i].RB, bn);
      g.cols += g.kp[i];
    }
  }
  g.nsc = g.cols / 32;
  g.bytes_a = g.in_place[0] ? 0 : round_up(g.rows_a * g.cols * eb, 1024);
  g.bytes_b = g.in_place[1] ? 0 : round_up(g.rows_b * g.cols * eb, 1024);
  g.bytes_sa = bf16 ? 0 : round_up(g.rows_a * g.nsc * 4, 1024);
  g.bytes_sb = bf16 ? 0 : round_up(g.rows_b * g.nsc * 4, 1024);
  return g;
}

/// Up to kMaxBatch launches sharing one element pair: images, then one GEMM
/// launch, in `base` (at least image_layout(...).total() bytes).
void run_batch(Mode mode, Img ia, Img ib, bool mx_exact, const Launch* L, int n, bool stacked_rows, uint8_t* base,
               hipStream_t s) {
  const bool bf16 = mode == Mode::Bf16;
  const size_t eb = bf16 ? 2 : 1, kel = kSlabBytes / eb;
  const int bn = int(tile_cols(mode));
  const ImageLayout g = image_layout(mode, L, n, stacked_rows);
  const std::vector<size_t>&a_row = g.a_row, &b_row = g.b_row, &k_col = g.k_col, &kp = g.kp;
  const size_t rows_a = g.rows_a, rows_b = g.rows_b, cols = g.cols, nsc = g.nsc;
  uint8_t *img_a = base, *img_b = base + g.bytes_a;
  float* sc_a = reinterpret_cast<float*>(base + g.bytes_a + g.bytes_b);
  float* sc_b = reinterpret_cast<float*>(base + g.bytes_a + g.bytes_b + g.bytes_sa);
  int* range = reinterpret_cast<int*>(base + g.bytes_a + g.bytes_b + g.bytes_sa + g.bytes_sb);
  if (!bf16) {
    range_init_kernel<<<1, 32, 0, s>>>(range);
    MXSIM_HIP_CHECK_LAUNCH("range_init_kernel");
  }

  for (int side = 0; side < 2; ++side) {
    if (g.in_place[side]) {
      count_in_place_side();
      continue;
    }
    ImgBatch img{};
    img.n = n;
    img.kind = side ? ib : ia;
    img.elem = side ? L[0].B.elem : L[0].A.elem;
    img.img = side ? img_b : img_a;
    img.pitch = (long long)(cols * eb);
    img.scales = side ? sc_b : sc_a;
    img.transposed = side;
    img.spitch = side ? (long long)rows_b : (long long)nsc;
    img.fp32_scales = mode == Mode::Chunk128;
    img.range = range + 2 * side;
    unsigned fast = 1, slow = 1, sfast = 1, sslow = 1;
    for (int i = 0; i < n; ++i) {
      ImgJob& J = img.j[i];
      J.p = side ? L[i].B : L[i].A;
      J.R = int(side ? L[i].RB : L[i].RA);
      J.K = int(L[i].K);
      J.row0 = int(side ? b_row[i] : a_row[i]);
      J.col0 = int(k_col[i]);
      J.rows_pad = int(round_up(J.R, side ? size_t(bn) : size_t(kBM)));
      J.kp = int(kp[i]);
      const unsigned chunks = unsigned(J.kp) / (bf16 ? 8 : 16), nb = unsigned(J.kp) / 32, rows = unsigned(J.rows_pad);
      fast = std::max(fast, J.p.along_scols ? chunks : rows);
      slow = std::max(slow, J.p.along_scols ? rows : chunks);
      sfast = std::max(sfast, side ? rows : nb);
      sslow = std::max(sslow, side ? nb : rows);
    }
    const auto grid = [&](unsigned f, unsigned sl, unsigned max_slow) {
      return dim3(std::min((f + 255) / 256, 1024u), std::min(sl, max_slow), unsigned(n));
    };
    image_codes_kernel<<<grid(fast, slow, 65535u), 256, 0, s>>>(img);
    MXSIM_HIP_CHECK_LAUNCH("image_codes_kernel");
    if (!bf16) {
      // Few blocks that loop: each warp ends with two atomics on the same
      // range words, which one block per scale row would serialise.
      image_scales_kernel<<<grid(sfast, sslow, 128u), 256, 0, s>>>(img);
      MXSIM_HIP_CHECK_LAUNCH("image_scales_kernel");
    }
  }

  const CUtensorMapDataType dt = bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  // (In place: K wide, so TMA fills the last slab past K with zeros, as
  // the image's padding is.)
  const CUtensorMap ma = g.in_place[0] ? tensor_map(g.in_place_base[0], dt, eb, L[0].K, rows_a, uint32_t(kel), kBM, true,
                                                    g.in_place_ld[0])
                                       : tensor_map(img_a, dt, eb, cols, rows_a, uint32_t(kel), kBM, true);
  const CUtensorMap mb = g.in_place[1] ? tensor_map(g.in_place_base[1], dt, eb, L[0].K, rows_b, uint32_t(kel), bn, true,
                                                    g.in_place_ld[1])
                                       : tensor_map(img_b, dt, eb, cols, rows_b, uint32_t(kel), bn, true);
  const CUtensorMap msa = bf16 ? ma : tensor_map(sc_a, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, nsc, rows_a, 4, kBM, false);
  const CUtensorMap msb = bf16 ? mb : tensor_map(sc_b, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, rows_b, nsc, bn, 4, false);

  Batch batch{};
  batch.n = n;
  batch.accumulate = L[0].accumulate;
  batch.out_bf16 = L[0].out_bf16;
  batch.scale_range = range;
  batch.mx_exact = mx_exact;
  unsigned tiles = 0;
  for (int i = 0; i < n; ++i) {
    Tile& T = batch.t[i];
    T.ra = int(L[i].RA);
    T.rb = int(L[i].RB);
    T.a_row = int(a_row[i]);
    T.b_row = int(b_row[i]);
    T.k_col = int(k_col[i]);
    T.nk = int(kp[i] / kel);
    T.nblk = mode == Mode::Block32 ? int((L[i].K + 31) / 32) : mode == Mode::Chunk128 ? int((L[i].K + 127) / 128) : 0;
    T.tiles_n = int((L[i].RB + bn - 1) / bn);
    T.tile0 = int(tiles);
    T.out = L[i].out;
    T.ld = (long long)L[i].ld;
    tiles += unsigned(T.tiles_n * ((L[i].RA + kBM - 1) / kBM));
  }
  batch.tiles = int(tiles);  // (>= 1: launch_sm90 takes no launch without output rows or columns)
  batch.out_pairs = 1;
  for (int i = 0; i < n; ++i)
    batch.out_pairs &= int(reinterpret_cast<uintptr_t>(L[i].out) % 8 == 0 && L[i].ld % 2 == 0);
  // B's scales are one per 32 rows of its panel when it is 32 x 32 tiled
  // (the weights of fprop and dgrad); the kernel then reads one per tile.
  const bool tile_b = L[0].B.br == 32 && L[0].B.bc == 32;
  switch (mode) {
    case Mode::Block32:
      if (tile_b) dispatch<Mode::Block32, true>(ia, ib, ma, mb, msa, msb, batch, tiles, s);
      else dispatch<Mode::Block32, false>(ia, ib, ma, mb, msa, msb, batch, tiles, s);
      break;
    case Mode::Chunk128: dispatch<Mode::Chunk128, false>(ia, ib, ma, mb, msa, msb, batch, tiles, s); break;
    case Mode::Bf16: dispatch<Mode::Bf16, false>(ia, ib, ma, mb, msa, msb, batch, tiles, s); break;
  }
}

}  // namespace sm90

/// Launches of one class and element pair whose work is large enough for the
/// tensor-core kernels (or forced: GemmKernel::Wgmma). mx-exact: 2^30
/// multiply-adds. bf16-f25: 2^20, since its CUDA-core kernels emulate every
/// group's alignment (about 0.15 TFLOP/s for the lanes kernel on the large
/// config's 2048 -> 10 head, 1.1 ms per call on an H200), so even a call
/// padded from 10 to 128 output columns is faster on the tensor cores.
constexpr double kSm90MinMacs = double(1u << 30), kSm90MinMacsBf16 = double(1u << 20);

bool launch_sm90(hd::GemmClass cls, const Launch* L, size_t n, hipStream_t s) {
  using namespace sm90;
  if (n == 0 || !tensor_cores_usable()) return false;
  const GemmKernel want = L[0].kernel;
  if (want != GemmKernel::Auto && want != GemmKernel::Wgmma && want != GemmKernel::WgmmaHardware) return false;
  const Format ea = L[0].A.elem, eb = L[0].B.elem;
  Mode mode = Mode::Block32;
  Img ia = ea == Format::E5M2 ? Img::E5M2 : Img::E4M3, ib = eb == Format::E5M2 ? Img::E5M2 : Img::E4M3;
  switch (cls) {
    case hd::GemmClass::MxExact:
      if (ea != Format::E2M1 || eb != Format::E2M1) return false;  // E2M3 dots are not exact in an FP8 group
      break;
    // The tensor cores' own FP8 arithmetic agrees with these classes'
    // definitions on ordinary data but not on every input (docs/gpu.md):
    // only on request, never for Auto or Wgmma.
    case hd::GemmClass::MxF13:
      if (want != GemmKernel::WgmmaHardware) return false;
      break;
    case hd::GemmClass::Fp8Chunk128:
      if (want != GemmKernel::WgmmaHardware) return false;
      mode = Mode::Chunk128;
      break;
    // bf16-f25 is the Hopper BF16 group with its measured edges
    // (hd::hopper_bf16_edges): the k16 wgmma chain is the contract.
    case hd::GemmClass::Bf16F25:
      mode = Mode::Bf16, ia = ib = Img::BF16;
      break;
  }
  bool same_k = true, same_r = true;
  double macs = 0;
  for (size_t i = 0; i < n; ++i) {
    if (L[i].K == 0 || L[i].RA == 0 || L[i].RB == 0 || L[i].K > (size_t(1) << 30) || L[i].RA > (size_t(1) << 30) ||
        L[i].RB > (size_t(1) << 30))
      return false;
    same_k = same_k && L[i].K == L[0].K;
    same_r = same_r && L[i].RA == L[0].RA && L[i].RB == L[0].RB;
    macs += double(L[i].RA) * double(L[i].RB) * double(L[i].K);
  }
  if (!same_k && !same_r) return false;
  if (want == GemmKernel::Auto && macs < (mode == Mode::Bf16 ? kSm90MinMacsBf16 : kSm90MinMacs)) return false;
  // The workspace is sized for the largest batch before anything is
  // launched: an allocation failure leaves every output untouched.
  std::lock_guard<std::mutex> lock(g_workspace_mu);
  size_t need = 0;
  for (size_t i = 0; i < n; i += kMaxBatch)
    need = std::max(need, image_layout(mode, L + i, int(std::min<size_t>(kMaxBatch, n - i)), same_k).total());
  uint8_t* base = workspace(s).get(need, s);
  for (size_t i = 0; i < n; i += kMaxBatch)
    run_batch(mode, ia, ib, cls == hd::GemmClass::MxExact, L + i, int(std::min<size_t>(kMaxBatch, n - i)), same_k,
              base, s);
  return true;
}

void set_max_ctas(unsigned n) { sm90::g_max_ctas = n; }

size_t sm90_exact_steps_runs() {
  if (!sm90::g_block32_launched) return 0;  // no device call before any Block32 launch
  unsigned long long v = 0;
  MXSIM_HIP_CHECK(cudaMemcpyFromSymbol(&v, sm90::g_exact_steps_runs, sizeof v));  // waits for the device
  return size_t(v);
}

#else  // AMD: no sm_90 kernels

bool launch_sm90(hd::GemmClass, const Launch*, size_t, hipStream_t) { return false; }
size_t sm90_exact_steps_runs() { return 0; }
void set_max_ctas(unsigned) {}

#endif

}  // namespace mxsim::hip::gemm
