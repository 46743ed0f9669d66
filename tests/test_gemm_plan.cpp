// core's GemmPlan (mxsim/gemm_plan.hpp): the one place a grouped GEMM's
// operands are checked and its per-group panels laid out. The expected panels
// below are worked by hand from numerics §5.1's forms; the messages are the
// words both backends give (the emulator's are checked here through its API,
// the GPU's by tests/test_gpu_gemm.cpp on the device).
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/gemm_plan.hpp"
#include "mxsim/quant_spec.hpp"

namespace mxsim {
namespace {

GemmOperandDesc desc(const QuantSpec& s, size_t groups, size_t rows, size_t cols, Axis axis) {
  GemmOperandDesc d;
  d.spec = s;
  d.layout = hd::quant_layout(s, groups, rows, cols, axis);
  return d;
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GemmPlan, FpropPanelsFollowTheTokenRowsOfEachNonEmptyGroup) {
  const QuantSpec mx = named_spec("mxfp8");
  // X [M = 7, K = 64]; W [G = 3, N = 5, K = 64]; m_splits {3, 0, 4}.
  const GemmOperandDesc x = desc(mx, 1, 7, 64, Axis::Cols), w = desc(mx, 3, 5, 64, Axis::Cols);
  const int64_t ms[] = {3, 0, 4};
  const GemmPlan p = plan_token_gemm(GemmForm::Fprop, x, w, ms, {});
  EXPECT_EQ(p.out_extents(), (std::vector<size_t>{7, 5}));
  ASSERT_EQ(p.runs.size(), 2u);  // the empty group 1 is not run
  EXPECT_TRUE(p.empty.empty());
  const GemmPlan::Group& g2 = p.runs[1];
  EXPECT_EQ(g2.g, 2u);
  EXPECT_EQ(g2.cls, hd::GemmClass::MxF13);  // E4M3 x E4M3 with E8M0 scales
  // A: token rows 3..6 of X, contracted along its cols, which are storage cols.
  EXPECT_EQ(g2.a.operand, 0u);
  EXPECT_EQ(g2.a.group, 0u);
  EXPECT_EQ(g2.a.r0, 3u);
  EXPECT_EQ(g2.a.R, 4u);
  EXPECT_EQ(g2.a.K, 64u);
  EXPECT_FALSE(g2.a.contract_rows);
  EXPECT_TRUE(g2.a.along_scols);
  // B: all N = 5 rows of W[2].
  EXPECT_EQ(g2.b.group, 2u);
  EXPECT_EQ(g2.b.r0, 0u);
  EXPECT_EQ(g2.b.R, 5u);
  EXPECT_EQ(g2.out_offset, 3u * 5u);  // row 3 of Y [7, 5]
  EXPECT_EQ(p.ld(), 5u);
}

TEST(GemmPlan, DgradContractsWAlongItsRowsWhichAColumnwiseWStoresAsColumns) {
  const QuantSpec mx = named_spec("mxfp4");
  // dY [M = 4, N = 64]; W [G = 1, N = 64, K = 6] quantized along N (Axis::Rows: stored transposed).
  const GemmOperandDesc dy = desc(mx, 1, 4, 64, Axis::Cols), w = desc(mx, 1, 64, 6, Axis::Rows);
  const int64_t ms[] = {4};
  const GemmPlan p = plan_token_gemm(GemmForm::Dgrad, dy, w, ms, {});
  EXPECT_EQ(p.out_extents(), (std::vector<size_t>{4, 6}));
  ASSERT_EQ(p.runs.size(), 1u);
  EXPECT_EQ(p.runs[0].cls, hd::GemmClass::MxExact);
  EXPECT_TRUE(p.runs[0].b.contract_rows);
  EXPECT_TRUE(p.runs[0].b.along_scols);  // contraction along logical rows = storage cols of the transpose
  EXPECT_EQ(p.runs[0].b.R, 6u);
  EXPECT_EQ(p.runs[0].b.K, 64u);
}

TEST(GemmPlan, WgradListsEmptyGroupsApartAndReadsOperandGOfEachGroup) {
  const QuantSpec fp8 = named_spec("fp8_tensor");
  std::vector<GemmOperandDesc> dy, x;
  const int64_t ms[] = {0, 5};
  for (int64_t m : ms) {
    dy.push_back(desc(fp8, 1, size_t(m), 3, Axis::Rows));
    x.push_back(desc(fp8, 1, size_t(m), 2, Axis::Rows));
  }
  const GemmPlan p = plan_wgrad(dy, x, ms, {});
  EXPECT_EQ(p.out_extents(), (std::vector<size_t>{2, 3, 2}));
  EXPECT_EQ(p.empty, (std::vector<size_t>{0}));
  ASSERT_EQ(p.runs.size(), 1u);
  EXPECT_EQ(p.runs[0].cls, hd::GemmClass::Fp8Chunk128);
  EXPECT_EQ(p.runs[0].a.operand, 1u);
  EXPECT_EQ(p.runs[0].a.R, 3u);
  EXPECT_EQ(p.runs[0].b.R, 2u);
  EXPECT_EQ(p.runs[0].a.K, 5u);
  EXPECT_EQ(p.runs[0].out_offset, 1u * 3u * 2u);
}

TEST(GemmPlan, RefusalsNameTheFormTheOperandAndTheProblem) {
  const QuantSpec mx = named_spec("mxfp4");
  const GemmOperandDesc x = desc(mx, 1, 4, 64, Axis::Cols);
  const int64_t ms[] = {4};
  // W quantized along N is not contracted along K by fprop.
  EXPECT_EQ(refusal([&] { plan_token_gemm(GemmForm::Fprop, x, desc(mx, 1, 8, 64, Axis::Rows), ms, {}); }),
            "grouped fprop: W (" + mx.describe() +
                ") must have blocks of 32 along the contraction, i.e. quantized along its cols (Axis::Cols or 2-D "
                "tiles); its blocks along the contraction are 1 long");
  const int64_t bad[] = {3};
  EXPECT_EQ(refusal([&] { plan_token_gemm(GemmForm::Fprop, x, desc(mx, 1, 8, 64, Axis::Cols), bad, {}); }),
            "grouped fprop: m_splits sum to 3 but the token operand has M = 4 rows");
  EXPECT_EQ(refusal([&] {
              plan_token_gemm(GemmForm::Fprop, x, GemmOperandDesc::of_bf16(1, 8, 64), ms, {});
            }),
            "grouped fprop: BF16 operands pair only with BF16 operands (got " + mx.describe() + " with bf16)");
  GemmOptions o;
  o.out = Format::E4M3;
  EXPECT_EQ(refusal([&] { plan_token_gemm(GemmForm::Dgrad, x, desc(mx, 1, 64, 8, Axis::Rows), ms, o); }),
            "grouped dgrad: output format must be fp32 or bf16, got e4m3");
  const GemmPlan p = plan_token_gemm(GemmForm::Fprop, x, desc(mx, 1, 8, 64, Axis::Cols), ms, {});
  const size_t wrong[] = {4, 9};
  EXPECT_EQ(refusal([&] { p.check_out(wrong); }), "grouped fprop: accumulate: output has shape [4, 9], expected [4, 8]");
}

TEST(GemmPlan, TheEmulatorRefusesWithThePlansWordsAndLeavesTheOutput) {
  const QuantSpec mx = named_spec("mxfp4");
  const Tensor2f a = xt::ones<float>({4, 64});
  const Tensor3f w = xt::ones<float>({1, 8, 64});
  const QuantizedTensor qa = emu::quantize(a, mx, Axis::Cols), qw = emu::quantize(w, mx, Axis::Rows);
  Tensor2f y = Tensor2f::from_shape({4, 8});
  y.fill(7.0f);
  const int64_t ms[] = {4};
  const std::string msg = refusal([&] { emu::grouped_fprop(qa, qw, ms, y); });
  EXPECT_EQ(msg, refusal([&] {
              plan_token_gemm(GemmForm::Fprop, GemmOperandDesc::of(qa), GemmOperandDesc::of(qw), ms, {});
            }));
  EXPECT_NE(msg, "(no error)");
  ASSERT_EQ(y.size(), 32u);
  for (float v : y) EXPECT_EQ(v, 7.0f);
}

TEST(GemmPlan, WgradGroupsOfDifferentPairClassesEachRunTheirOwnClass) {
  // Group 0 in per-tensor FP8 (fp8-chunk128), group 1 in MXFP8 (mx-f13): the grouped call must
  // equal each group computed alone (the emulator once ran every group with the last one's class).
  const QuantSpec fp8 = named_spec("fp8_tensor"), mx = named_spec("mxfp8");
  const size_t N = 3, K = 5;
  const int64_t ms[] = {32, 32};
  std::vector<QuantizedTensor> dy, x;
  for (size_t g = 0; g < 2; ++g) {
    Tensor2f a = Tensor2f::from_shape({32, N}), b = Tensor2f::from_shape({32, K});
    for (size_t i = 0; i < a.size(); ++i) a.data()[i] = float(int(i * 7 + g) % 13) - 6.0f;
    for (size_t i = 0; i < b.size(); ++i) b.data()[i] = float(int(i * 5 + 3 * g) % 11) * 0.25f - 1.0f;
    const QuantSpec& s = g == 0 ? fp8 : mx;
    dy.push_back(emu::quantize(a, s, Axis::Rows));
    x.push_back(emu::quantize(b, s, Axis::Rows));
  }
  Tensor3f both;
  emu::grouped_wgrad(dy, x, ms, both);
  for (size_t g = 0; g < 2; ++g) {
    Tensor3f alone;
    const int64_t one[] = {32};
    emu::grouped_wgrad(std::span(&dy[g], 1), std::span(&x[g], 1), one, alone);
    for (size_t i = 0; i < N * K; ++i)
      EXPECT_EQ(f32_bits(both.data()[g * N * K + i]), f32_bits(alone.data()[i])) << "group " << g << " element " << i;
  }
}

}  // namespace
}  // namespace mxsim
