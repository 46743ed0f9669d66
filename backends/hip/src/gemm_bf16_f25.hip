// Grouped GEMM, class bf16-f25 (numerics.md §5.2.4): unscaled BF16 operands.
// K in groups of 16, each a truncated fused group (F = 25) whose C is the
// running accumulator, RZ to FP32 (hd::bf16_f25_dot; the Hopper wgmma bf16
// group). Portable kernel: one warp (or, for short contractions, one thread) per output element (gemm_panel.hpp).
#include "gemm_panel.hpp"

namespace mxsim::hip::gemm {
namespace {
// hd::bf16_f25_dot with lane l of 16 taking product l of each 16-group (two
// output elements per warp).
struct Bf16F25Dot {
  static constexpr unsigned kLanes = 16;
  __device__ float operator()(float acc, const Row& a, const Row& b, size_t K) const {
    return hd::bf16_f25_dot(acc, K, a, b);
  }
  __device__ float operator()(float acc, const Row& a, const Row& b, size_t K, unsigned lane) const {
    const FormatSpec f = spec_of(Format::BF16);
    for (size_t q = 0; q < K; q += 16) {
      const bool has = q + lane < K;
      const hd::Term t = has ? term_at(f, f, a, b, q + lane) : hd::Term{};
      acc = fused_group_lanes<16>(has, t, acc, 25, false);
    }
    return acc;
  }
};
}  // namespace

void launch_bf16_f25(const Launch* L, size_t n, hipStream_t s) {
  if (n) launch(L, n, Bf16F25Dot{}, s, "launch of gemm_kernel<bf16-f25>");
}

}  // namespace mxsim::hip::gemm
