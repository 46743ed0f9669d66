// The Hopper grouped GEMM's launch shape: tile sizes, the K walk's modes,
// the per-launch tile table the kernel reads (Batch, passed by value).
// Internal to gemm_sm90.hip (the one file that includes it, inside its
// MXSIM_GPU_NVIDIA build): one room of the Hopper grouped GEMM.
#pragma once
#include <cuda.h>  // CUtensorMap

#include "gemm_panel.hpp"

namespace mxsim::hip::gemm::sm90 {

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

}  // namespace mxsim::hip::gemm::sm90
