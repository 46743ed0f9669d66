// The front door (backend_ops.hpp, core/src/backend_checks.cpp): every public
// op checks its operands in core before any backend code runs. A backend whose
// every <name>_impl only counts its calls shows it: a bad call is refused with
// the op and the operand named and reaches no implementation; a good call
// reaches exactly one. A refusal by the emulator leaves its output as it was.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "mxsim/backend.hpp"
#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/quant_spec.hpp"

namespace mxsim {
namespace {

struct HandleOnly final : BackendBuffer {
  using BackendBuffer::BackendBuffer;
};

/// Every implementation counts its calls and returns a default value; handles
/// are made by the test (no storage).
class CountingBackend final : public Backend {
 public:
  std::map<std::string, int> reached;
  int total() const {
    int n = 0;
    for (const auto& [op, c] : reached) n += c;
    return n;
  }
  std::string name() const override { return "counting"; }
  void set_threads(int) override {}
  Tensor make(DType d, Shape s) { return Tensor(std::make_shared<HandleOnly>(this), d, s); }
  QTensor make_q(size_t g, size_t r, size_t c) {
    return QTensor(std::make_shared<HandleOnly>(this), tensor_recipe("mxfp8"), g, r, c, false);
  }

 protected:
#define MXSIM_X(Family, id, name, label, Ret, params, args) \
  auto name##_impl params -> Ret override {                 \
    (void)std::forward_as_tuple args;                         \
    ++reached[#id];                                         \
    return Ret();                                           \
  }
  MXSIM_BACKEND_OPS(MXSIM_X)
#undef MXSIM_X
};

/// f() throws std::invalid_argument whose message contains `words`.
void expect_refused(const std::function<void()>& f, const std::string& words) {
  try {
    f();
    ADD_FAILURE() << "accepted; expected a refusal with '" << words << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(BackendFrontDoor, BadCallsAreRefusedByNameAndReachNoImplementation) {
  CountingBackend be;
  const Tensor x23 = be.make(DType::f32, {2, 3});
  Tensor p24 = be.make(DType::f32, {2, 4}), top_i64 = be.make(DType::i64, {2, 1}), empty;
  expect_refused([&] { be.softmax_rows(x23, p24); }, "softmax_rows: p has shape [2, 4], expected [2, 3]");
  expect_refused([&] { be.topk_rows(x23, 4, top_i64); }, "topk_rows: k = 4 outside [1, 3]");
  expect_refused([&] { be.topk_rows(x23, 1, top_i64); }, "topk_rows: top is i64, expected i32");
  expect_refused([&] { be.amax(empty); }, "amax: x is an empty tensor handle");
  expect_refused([&] { be.amax(top_i64); }, "amax: x is i64, expected f32");
  std::vector<float> host(5);
  expect_refused([&] { be.upload(p24, host.data(), 20); }, "upload: 20 bytes for a tensor of 32");
  // m_splits that do not sum to the token rows; an output of the wrong shape.
  Tensor x = be.make(DType::f32, {6, 8}), w = be.make(DType::f32, {2, 4, 8}), y = be.make(DType::f32, {6, 4});
  const std::vector<int64_t> bad_splits = {3, 2}, splits = {3, 3};
  expect_refused([&] { be.grouped_fprop(x, w, bad_splits, y, GemmOptions{}); },
                 "grouped_fprop: m_splits sum to 5 but the token operand has M = 6 rows");
  Tensor y_bad = be.make(DType::f32, {6, 8});
  expect_refused([&] { be.grouped_fprop(x, w, splits, y_bad, GemmOptions{}); },
                 "grouped_fprop: y has shape [6, 8], expected [6, 4]");
  const QTensor q = be.make_q(1, 4, 32);
  Backend::QuantElements qe;
  const std::vector<int64_t> far = {128};
  expect_refused([&] { be.quant_elements_deferred(q, far, &qe); }, "quant_elements: index 128 lies outside");
  Tensor out_bad = be.make(DType::f32, {4, 16});
  expect_refused([&] { be.dequantize(q, out_bad); }, "dequantize: out has shape [4, 16], expected [4, 32]");
  // Routing, optimizer and oscillation state, statistics, the main_grad bridge, a host quantized
  // tensor whose storage does not fit its spec.
  Tensor top = be.make(DType::i32, {2, 2}), counts = be.make(DType::i64, {3}), row_of = be.make(DType::i64, {4});
  expect_refused([&] { be.moe_route(top, 3, 0, counts, row_of); }, "moe_route: pad = 0 must be >= 1");
  Tensor yp = be.make(DType::f32, {8, 5}), h0 = be.make(DType::f32, {2, 5}), h1 = be.make(DType::f32, {2, 5});
  Tensor top_short = be.make(DType::i32, {2, 1});
  expect_refused([&] { be.unpermute_combine(yp, h0, x23, top_short, row_of, 2, h1); },
                 "unpermute_combine: top has 2 elements, expected 4");
  Tensor w23 = be.make(DType::f32, {2, 3}), snaps_f32 = be.make(DType::f32, {2, 3}), m_bad = be.make(DType::f32, {2, 4});
  expect_refused([&] { be.adamw(w23, m_bad, w23, w23, Backend::AdamW{}, w23); }, "adamw: m has shape [2, 4], expected [2, 3]");
  expect_refused([&] { be.deosc_update(w23, w23, w23, w23, w23, w23, true, 4.0f, &snaps_f32); },
                 "deosc_update: snaps is f32, expected u32");
  Backend::OscState st{w23, w23, w23, w23, w23, be.make(DType::u8, {6}), be.make(DType::f32, {6})};
  expect_refused([&] { be.osc_update(w23, w23, st, 0.1f, false); }, "osc_update: flips is f32, expected u32");
  const QTensor q24 = be.make_q(1, 2, 4);
  expect_refused([&] { be.quant_stats(x23, q24); }, "quant_stats: source x [2, 3] and the quantized tensor");
  Tensor acc = be.make(DType::f32, {3, 4, 8}), add = be.make(DType::f32, {3, 4, 8});
  expect_refused([&] { be.accumulate_groups(acc, add, splits); }, "accumulate_groups: acc [3, 4, 8] needs one group per m_splits entry (2)");
  Tensor dy = be.make(DType::f32, {6, 4}), x5 = be.make(DType::f32, {5, 8}), dw = be.make(DType::f32, {2, 4, 8});
  expect_refused([&] { be.grouped_wgrad(dy, x5, splits, dw, GemmOptions{}); }, "grouped_wgrad: dy [6, 4] and x [5, 8] differ in their token rows");
  QuantizedTensor hq;
  hq.spec = tensor_recipe("mxfp8");
  hq.rows = 2;
  hq.cols = 64;
  hq.data = Bytes3::from_shape({1, 2, 63});  // one code byte short
  hq.scale_bytes = Bytes3::from_shape({1, 2, 2});
  expect_refused([&] { (void)be.upload(hq); }, "upload: quantized tensor storage (126 code bytes) does not match its spec and shape (128 code bytes)");
  hq.data = Bytes3::from_shape({1, 2, 64});
  hq.scale_bytes = Bytes3::from_shape({1, 2, 1});
  expect_refused([&] { (void)be.upload(hq); }, "upload: scale bytes do not match the spec (2 for 4 blocks)");
  EXPECT_EQ(be.total(), 0) << "a refused call reached an implementation";
}

TEST(BackendFrontDoor, GoodCallsReachTheirImplementationOnce) {
  CountingBackend be;
  const Tensor x23 = be.make(DType::f32, {2, 3});
  Tensor p = be.make(DType::f32, {2, 3}), top = be.make(DType::i32, {2, 2});
  be.softmax_rows(x23, p);
  be.topk_rows(p, 2, top);
  Tensor x = be.make(DType::f32, {6, 8}), w = be.make(DType::f32, {2, 4, 8}), y = be.make(DType::f32, {6, 4});
  const std::vector<int64_t> splits = {0, 6};
  be.grouped_fprop(x, w, splits, y, GemmOptions{});
  EXPECT_EQ(be.reached["softmax_rows"], 1);
  EXPECT_EQ(be.reached["topk_rows"], 1);
  EXPECT_EQ(be.reached["fprop_bf16"], 1);
  EXPECT_EQ(be.total(), 3);
  // A deferred op without its own implementation reaches the immediate one through Backend's default.
  double v = 0;
  be.l2_norm_deferred(x23, &v);
  EXPECT_EQ(be.reached["l2_norm"], 1);
}

// A refused call loses nothing: the emulator's output keeps every bit it had.
TEST(BackendFrontDoor, TheEmulatorRefusesBeforeTouchingAnOutput) {
  auto be = emu::make_emu_backend();
  Tensor x = be->alloc(DType::f32, {6, 8}), w = be->alloc(DType::f32, {2, 4, 8}), y = be->alloc(DType::f32, {6, 4});
  std::vector<float> before(24);
  for (size_t i = 0; i < before.size(); ++i) before[i] = 0.5f * float(i) - 3.0f;
  be->upload(y, std::span<const float>(before));
  be->fill_zero(x);
  be->fill_zero(w);
  const std::vector<int64_t> bad_splits = {3, 2};
  expect_refused([&] { be->grouped_fprop(x, w, bad_splits, y, GemmOptions{}); },
                 "grouped_fprop: m_splits sum to 5 but the token operand has M = 6 rows");
  const GemmOptions acc{.accumulate = true};
  expect_refused([&] { be->grouped_fprop(x, w, bad_splits, y, acc); }, "grouped_fprop: m_splits sum to 5");
  EXPECT_EQ(be->download<float>(y), before);
}

}  // namespace
}  // namespace mxsim
