// The GPU's mxsim::Backend (mxsim::hip::make_backend) against the emulator,
// op by op and bit for bit, through verify_backends (core/include/mxsim/verify.hpp,
// the checker behind `mxsim verify`): one TEST per op family so a failure
// names its op. Built only when the GPU Backend exists (tests/CMakeLists.txt,
// MXSIM_HAVE_HIP_BACKEND); skips with the runtime's reason without a usable
// GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/hip/backend_hip.hpp"
#include "mxsim/hip/device.hpp"
#include "mxsim/verify.hpp"

namespace {
using namespace mxsim;

/// Runs verify_backends(emu, gpu) for each op, several seeds, and fails with
/// the first mismatching rows.
void verify_ops(std::initializer_list<const char*> ops, int cases = 6) {
  std::string why;
  if (!hip::available(&why)) GTEST_SKIP() << "no GPU: " << why;
  auto ref = emu::make_emu_backend();
  auto gpu = hip::make_backend();
  ASSERT_TRUE(gpu) << "hip::make_backend returned nothing";
  for (const char* op : ops) {
    ASSERT_TRUE(verify_op_from_name(op)) << op;
    for (uint64_t seed : {1ull, 20261201ull}) {
      VerifyOptions opt;
      opt.cases = cases;
      opt.seed = seed;
      opt.op = op;
      const std::vector<VerifyRow> rows = verify_backends(*ref, *gpu, opt);
      uint64_t compared = 0, mismatches = 0;
      int shown = 0;
      for (const VerifyRow& r : rows) {
        compared += r.compared;
        mismatches += r.mismatches;
        if (r.mismatches && shown++ < 10)
          ADD_FAILURE() << r.op << " " << r.shape << " " << r.recipe << ": " << r.mismatches << " of " << r.compared
                        << " elements differ, max ULP " << r.max_ulp << ", first at " << r.first_mismatch
                        << (r.note.empty() ? "" : " (" + r.note + ")");
      }
      std::printf("[gpu-verify] op=%s seed=%llu rows=%zu compared=%llu mismatches=%llu\n", op,
                  (unsigned long long)seed, rows.size(), (unsigned long long)compared, (unsigned long long)mismatches);
      EXPECT_EQ(mismatches, 0u) << op << " seed " << seed;
      EXPECT_GT(compared, 0u) << op << " seed " << seed;
    }
  }
}

TEST(GpuBackend, Memory) { verify_ops({"memory"}); }
TEST(GpuBackend, Quantize) { verify_ops({"quantize"}); }
TEST(GpuBackend, QuantizeGrouped) { verify_ops({"quantize_grouped"}); }
TEST(GpuBackend, Dequantize) { verify_ops({"dequantize"}); }
TEST(GpuBackend, QuantStatsAndScaleHistogram) { verify_ops({"quant_stats", "scale_exp_histogram"}); }
TEST(GpuBackend, AmaxAndRoundBf16) { verify_ops({"amax", "round_bf16"}); }
TEST(GpuBackend, GemmQuantized) { verify_ops({"gemm_quantized"}, 4); }
TEST(GpuBackend, GemmBf16) { verify_ops({"gemm_bf16"}, 4); }
TEST(GpuBackend, AccumulateGroups) { verify_ops({"accumulate_groups"}); }
TEST(GpuBackend, SoftmaxAndTopk) { verify_ops({"softmax", "topk"}); }
TEST(GpuBackend, RouteAndPermute) { verify_ops({"route", "permute"}); }
TEST(GpuBackend, CombineAndBackward) { verify_ops({"combine", "combine_backward"}); }
TEST(GpuBackend, AuxLossAndRouterBackward) { verify_ops({"aux_loss", "router_backward"}); }
TEST(GpuBackend, EmbedGradSum) { verify_ops({"embed_grad_sum"}); }
TEST(GpuBackend, Activations) { verify_ops({"activation", "activation_grad"}); }
TEST(GpuBackend, LossAndMetrics) { verify_ops({"cross_entropy", "argmax_rows", "count_correct", "l2_norm"}); }
TEST(GpuBackend, AdamW) { verify_ops({"adamw"}); }
TEST(GpuBackend, DeOscAndOscMetrics) { verify_ops({"deosc", "osc_metrics"}); }
TEST(GpuBackend, OutputError) { verify_ops({"output_error"}); }

// Every op has a test above.
TEST(GpuBackend, EveryOpIsCovered) {
  EXPECT_EQ(verify_op_names().size(), 30u) << "a new Backend::Op needs a TEST here";
}

}  // namespace
