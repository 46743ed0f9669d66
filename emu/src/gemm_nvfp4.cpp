// nvfp4-exact on the CPU (docs/numerics.md §5.2.5, §5.6): the reference's
// steps (hd::nvfp4_block, hd::nvfp4_tensor_step) on operands decoded once
// per call: E2M1 codes as their int8 images 2x (in [-12, 12]) and UE4M3
// block scales as hd::Nvfp4Scale. A block's dot is 16 int8 products summed
// in int32 (exact, order free), which the compiler vectorises for the
// path's features; the accumulator steps are the hd ones, so every path
// gives the reference's bits.
//
// One row body compiled for each CPU path (function target attributes, as
// quantize_fast.cpp does), so a forced path (MXSIM_CPU_PATH) is the code
// that runs; OpenMP spreads rows of A over threads, each output element is
// one sequential K walk (results do not depend on the thread count).
#include <cstdint>
#include <vector>

#include "cpu_dispatch.hpp"
#include "gemm_internal.hpp"
#include "mxsim/hd/gemm_block.hpp"

namespace mxsim::emu::gemm {

namespace {

/// A panel decoded for the kernel: [R][KB * 16] int8 images (the ragged last
/// block padded with zeros, which add nothing) and [R][KB] block scales.
struct Nvfp4Panel {
  size_t R = 0, KB = 0;
  std::vector<int8_t> v;
  std::vector<hd::Nvfp4Scale> s;
};

Nvfp4Panel decode(const Panel& p) {
  Nvfp4Panel d;
  d.R = p.R;
  d.KB = p.kb();
  d.v.assign(d.R * d.KB * 16, 0);
  d.s.resize(d.R * d.KB);
  const FormatSpec f = spec_of(Format::E2M1);
  int8_t lut[16];
  for (uint32_t c = 0; c < 16; ++c) lut[c] = int8_t(hd::mx_int_value(f, 1, c));
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < d.R; ++r) {
    for (size_t k = 0; k < p.K; ++k) d.v[r * d.KB * 16 + k] = lut[p.c(r, k) & 0xFu];
    for (size_t b = 0; b < d.KB; ++b) d.s[r * d.KB + b] = hd::nvfp4_scale_of(p.sbyte[r * d.KB + b]);
  }
  return d;
}

struct RowJob {
  const Nvfp4Panel* a;
  const Nvfp4Panel* b;
  float ta, tb;
  float* out;  // row i of the output
  bool accumulate, out_bf16;
};

/// Row i of the output: every j, blocks in K order.
#define MXSIM_NVFP4_PATH(NAME, TARGET)                                                 \
  TARGET void NAME(const RowJob& job, size_t i) {                                      \
    const Nvfp4Panel &A = *job.a, &B = *job.b;                                         \
    const size_t KB = A.KB;                                                            \
    const int8_t* ai = A.v.data() + i * KB * 16;                                       \
    for (size_t j = 0; j < B.R; ++j) {                                                 \
      const int8_t* bj = B.v.data() + j * KB * 16;                                     \
      float acc = 0.0f;                                                                \
      for (size_t b = 0; b < KB; ++b) {                                                \
        int32_t d = 0;                                                                 \
        for (int k = 0; k < 16; ++k) d += int32_t(ai[b * 16 + k]) * int32_t(bj[b * 16 + k]); \
        acc = hd::nvfp4_block(acc, d, A.s[i * KB + b], B.s[j * KB + b]);               \
      }                                                                                \
      float& o = job.out[j];                                                           \
      o = hd::gemm_output(hd::nvfp4_tensor_step(acc, KB, job.ta, job.tb, job.accumulate ? o : 0.0f), job.out_bf16); \
    }                                                                                  \
  }
MXSIM_NVFP4_PATH(row_avx512, __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"))))
MXSIM_NVFP4_PATH(row_avx2, __attribute__((target("avx2,fma"))))
MXSIM_NVFP4_PATH(row_scalar, )
#undef MXSIM_NVFP4_PATH

}  // namespace

void run_nvfp4(const Panel& A, const Panel& B, Out out, bool accumulate, Format out_fmt) {
  const CpuPath path = cpu_path();
  const Nvfp4Panel da = decode(A), db = decode(B);
  void (*row)(const RowJob&, size_t) =
      path == CpuPath::Avx512 ? row_avx512 : path == CpuPath::Avx2 ? row_avx2 : row_scalar;
#pragma omp parallel for schedule(dynamic, 4)
  for (size_t i = 0; i < A.R; ++i) {
    const RowJob job{&da, &db, A.tsi, B.tsi, out.p + i * out.ld, accumulate, out_fmt == Format::BF16};
    row(job, i);
  }
  note_kernel(KernelSlot::Nvfp4, kernel_name(KernelSlot::Nvfp4, path));
}

}  // namespace mxsim::emu::gemm
