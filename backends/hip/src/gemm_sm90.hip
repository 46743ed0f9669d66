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

#if defined(MXSIM_GPU_NVIDIA)
// The rooms (one translation unit: the kernel templates are instantiated by the launchers here)
#include "gemm_sm90_images.hpp"
#include "gemm_sm90_kernel.hpp"
#endif

namespace mxsim::hip::gemm {

#if defined(MXSIM_GPU_NVIDIA)
namespace sm90 {

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

bool launch_sm90(hd::GemmClass cls, const Launch* L, size_t n, hipStream_t s, StreamWorkspace* ws) {
  using namespace sm90;
  if (n == 0 || !tensor_cores_usable()) return false;
  const GemmKernel want = L[0].kernel;
  if (want != GemmKernel::Auto && want != GemmKernel::Wgmma && want != GemmKernel::WgmmaHardware) return false;
  const Format ea = L[0].A.elem, eb = L[0].B.elem;
  Mode mode = Mode::Block32;
  Img ia = ea == Format::E5M2 ? Img::E5M2 : Img::E4M3, ib = eb == Format::E5M2 ? Img::E5M2 : Img::E4M3;
  switch (cls) {
    case hd::GemmClass::MxExact:
      if (!has_role(ea, kRoleFp8GroupExact) || !has_role(eb, kRoleFp8GroupExact)) return false;  // not E2M3
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
    // nvfp4-exact: no tensor-core kernel yet (the E4M3 block scales are not
    // powers of two: the Block32 promotion does not carry over as it is).
    case hd::GemmClass::Nvfp4Exact: return false;
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
  StreamWorkspace& w = ws ? *ws : stream_workspace(s);
  const std::lock_guard<std::mutex> lock(w.mutex());
  size_t need = 0;
  for (size_t i = 0; i < n; i += kMaxBatch)
    need = std::max(need, image_layout(mode, L + i, int(std::min<size_t>(kMaxBatch, n - i)), same_k).total());
  uint8_t* base = w.get(need, s, "grouped GEMM operand images (tensor-core kernels)");
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

bool launch_sm90(hd::GemmClass, const Launch*, size_t, hipStream_t, StreamWorkspace*) { return false; }
size_t sm90_exact_steps_runs() { return 0; }
void set_max_ctas(unsigned) {}

#endif

}  // namespace mxsim::hip::gemm
