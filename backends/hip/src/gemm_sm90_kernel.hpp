// The Hopper grouped GEMM kernel: persistent CTAs over 128-row output tiles,
// a TMA producer thread and two wgmma consumer warpgroups per CTA, the
// class's promotion on the CUDA cores (see gemm_sm90.hip's header).
// Internal to gemm_sm90.hip (the one file that includes it, inside its
// MXSIM_GPU_NVIDIA build): one room of the Hopper grouped GEMM.
#pragma once
#include "gemm_sm90_ptx.hpp"

namespace mxsim::hip::gemm::sm90 {
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

}  // namespace mxsim::hip::gemm::sm90
