// Reference grouped GEMM: the contract of docs/numerics.md §5 followed
// literally, one output element at a time, K ascending. The per-element walks
// and per-block steps are the shared ones of core/include/mxsim/hd/gemm_block.hpp
// (the GPU kernels call the same); tests/test_gemm_block.cpp proves those
// against arbitrary-precision arithmetic, tests/test_gemm_exact.cpp this
// reference against an independent rational oracle and the fast paths.
#include "gemm_internal.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/hd/gemm_block.hpp"

namespace mxsim::emu::gemm {

namespace {
/// Row r of an operand panel, as the hd walks read it.
struct PanelRow {
  const Panel* p;
  size_t r;
  uint32_t code(size_t k) const { return p->c(r, k); }
  uint8_t e8m0(size_t b) const { return p->sbyte[r * p->kb() + b]; }
  uint8_t ue4m3(size_t b) const { return p->sbyte[r * p->kb() + b]; }
  float sinv(size_t c) const { return p->sinv[r * p->kc() + c]; }
};
}  // namespace

void run_reference(GemmClass kind, const Panel& A, const Panel& B, Out out, bool accumulate, Format out_fmt) {
  const FormatSpec fa = spec_of(A.elem), fb = spec_of(B.elem);
  const size_t K = A.K;
  for (size_t i = 0; i < A.R; ++i)
    for (size_t j = 0; j < B.R; ++j) {
      float& o = out.p[i * out.ld + j];
      const float acc0 = accumulate ? o : 0.0f;
      const PanelRow a{&A, i}, b{&B, j};
      float acc = acc0;
      switch (kind) {
        case GemmClass::MxExact:
          acc = hd::mx_exact_dot(acc0, K, fa, fb, hd::int_shift(A.elem), hd::int_shift(B.elem), a, b);
          break;
        case GemmClass::MxF13: acc = hd::mx_f13_dot(acc0, K, fa, fb, a, b); break;
        case GemmClass::Fp8Chunk128: acc = hd::fp8_chunk128_dot(acc0, K, fa, fb, a, b); break;
        case GemmClass::Bf16F25: acc = hd::bf16_f25_dot(acc0, K, a, b); break;
        case GemmClass::Nvfp4Exact: acc = hd::nvfp4_exact_dot(acc0, K, A.tsi, B.tsi, a, b); break;
      }
      o = hd::gemm_output(acc, out_fmt == Format::BF16);
    }
}

}  // namespace mxsim::emu::gemm
