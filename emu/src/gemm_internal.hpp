// Internal: operand panels shared by the reference and the fast grouped GEMM.
// An operand panel is one group's operand seen as [R rows, K contraction]:
// C[i][j] (+)= sum_k A[i][k] * B[j][k] (docs/numerics.md §5).
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "mxsim/format.hpp"
#include "mxsim/hd/gemm_block.hpp"
#include "mxsim/quant_spec.hpp"

namespace mxsim::emu::gemm {

/// Block-dot class of an operand pair (docs/numerics.md §5.2): core's, hd::gemm_class_of decides it.
using hd::GemmClass;

struct Panel {
  Format elem = Format::E2M1;
  size_t R = 0, K = 0;
  std::vector<uint32_t> code;   ///< [R][K] element codes (BF16: the 16-bit pattern)
  std::vector<uint8_t> sbyte;   ///< MX: [R][ceil(K/32)] E8M0 bytes; NVFP4: [R][ceil(K/16)] UE4M3 bytes
  std::vector<float> sinv;      ///< FP8 FP32-scaled: [R][ceil(K/128)] scale_inv
  size_t bk = 32;               ///< K per sbyte entry: 32 (E8M0) or 16 (UE4M3)
  float tsi = 1.0f;             ///< NVFP4's tensor_scale_inv (S_dec)
  size_t kb() const { return (K + bk - 1) / bk; }
  size_t kc() const { return (K + 127) / 128; }
  uint32_t c(size_t r, size_t k) const { return code[r * K + k]; }
};

/// out[i * ld + j] for i < A.R, j < B.R.
struct Out {
  float* p;
  size_t ld;
};

void run_reference(GemmClass kind, const Panel& A, const Panel& B, Out out, bool accumulate, Format out_fmt);
void run_fast(GemmClass kind, const Panel& A, const Panel& B, Out out, bool accumulate, Format out_fmt);
/// nvfp4-exact on the CPU path's kernel (gemm_nvfp4.cpp).
void run_nvfp4(const Panel& A, const Panel& B, Out out, bool accumulate, Format out_fmt);

}  // namespace mxsim::emu::gemm

namespace mxsim {
struct QuantizedTensor;
}
namespace mxsim::emu::gemm {
/// The panels of y = a . b^T (a [M, K], b [N, K], one group each, contracted along their cols),
/// checked as the fprop of one group (gemm_plan.hpp); empty panels when M is 0.
std::pair<Panel, Panel> model_panels(const QuantizedTensor& a, const QuantizedTensor& b);
}  // namespace mxsim::emu::gemm
