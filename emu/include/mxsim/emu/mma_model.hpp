// Matrix-unit models: what specific tensor cores compute for one GEMM, as an
// emulator option. They never change the contract's results
// (docs/numerics.md §5.5); they answer "how far would this hardware be from
// the contract on this problem".
//
// Source: MMA-Sim (microsoft/MMA-Sim, arXiv:2511.10909) truncated fused
// dot-product model, summarized in shared/reference/matrix-units-and-gpu.md §1.
#pragma once
#include <array>
#include <cstdint>
#include <string_view>

#include "mxsim/quantized_tensor.hpp"
#include "mxsim/tensor.hpp"

namespace mxsim::emu {

enum class MmaModel : uint8_t {
  Contract,           ///< ideal "exact block, FP32 accumulate" = the contract (§5.2)
  HopperWgmmaFp8,     ///< k32 fused groups, F = 13, RZ e8m13, chained over all K, never promoted
  BlackwellMxf8f6f4,  ///< k32 fused groups with 2^(sa+sb), F = 25, RZ FP32, chained over all K
};
/// "contract", "hopper", "blackwell"; throws std::invalid_argument otherwise.
MmaModel mma_model_from_name(std::string_view);
const char* name_of(MmaModel);

/// C[M, N] = A[M, K] . B[N, K]^T for one group: a logical [M, K] and b logical
/// [N, K], both quantized along K (Axis::Cols or 2-D tiles), groups = 1.
/// E8M0 operands: each block's products carry 2^(sa+sb) inside the fused group
/// (exact). FP32 per-tensor / per-row scales (constant along K): the chain runs
/// on unscaled products and the result is fl32(acc * fl32(sa * sb)).
/// Accumulator starts at 0; FP32 output. Throws std::invalid_argument for
/// operands the model cannot take (blockwise FP32 scales, BF16, NVFP4).
Tensor2f mma_model_gemm(const QuantizedTensor& a, const QuantizedTensor& b, MmaModel model);

/// ULP distance histogram between two FP32 outputs of the same shape.
/// bucket 0: identical bits; bucket i (1..32): distance d in [2^(i-1), 2^i);
/// nan_mismatch: exactly one side NaN. Distance on the ordered integer line of
/// FP32 bit patterns with -0 and +0 the same point (distance 0, counted in
/// bucket 0 although the bits differ); docs/numerics.md §5.5.
struct UlpReport {
  std::array<uint64_t, 33> buckets{};
  uint64_t nan_mismatch = 0;
  uint64_t total = 0;
  uint64_t max_ulp = 0;
};
UlpReport ulp_report(const Tensor2f& model, const Tensor2f& contract);

}  // namespace mxsim::emu
