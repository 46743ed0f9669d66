// Grouped GEMM, class bf16-f25 (numerics.md §5.2.4): unscaled BF16 operands.
// K in groups of 16, each a truncated fused group (F = 25) whose C is the
// running accumulator, RZ to FP32 (hd::bf16_f25_dot; the Hopper wgmma bf16
// group). Simple kernel: one thread per output element.
#include "gemm_panel.hpp"

namespace mxsim::hip::gemm {
namespace {
struct Bf16F25Dot {
  __device__ float operator()(float acc, const Row& a, const Row& b, size_t K) const {
    return hd::bf16_f25_dot(acc, K, a, b);
  }
};
}  // namespace

void launch_bf16_f25(const Launch& L, hipStream_t s) { launch(L, Bf16F25Dot{}, s, "launch of gemm_kernel<bf16-f25>"); }

}  // namespace mxsim::hip::gemm
