// verify_backends (core/include/mxsim/verify.hpp): emu against emu agrees on
// every op for several seeds (so the generators make inputs every op's
// contract accepts), and a backend that flips one bit of one output is
// caught: exactly that op, the right first index, ULP distance 1.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/verify.hpp"

namespace {
using namespace mxsim;
using Op = Backend::Op;

/// Forwards every op of the first list (backend_ops.hpp) to `inner`; the
/// handles it returns are the inner backend's, so ops on them go straight back
/// to it. The second list keeps Backend's defaults, which call this
/// backend's ops (l2_norm_deferred reaches l2_norm_impl below).
class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}
  std::string name() const override { return "forwarding(" + in_->name() + ")"; }
  void set_threads(int n) override { in_->set_threads(n); }

 protected:
#define MXSIM_X(Family, id, name, label, Ret, params, args) \
  auto name##_impl params -> Ret override { return in_->name args; }
  MXSIM_BACKEND_OPS(MXSIM_X)
#undef MXSIM_X

 protected:
  Backend& inner() { return *in_; }

 private:
  std::unique_ptr<Backend> in_;
};

/// Flips the lowest bit of one element of three ops' outputs: the last
/// element of softmax_rows' p, one code byte of quantize's data, and the
/// double l2_norm returns. Records each flipped index, in call order.
class OneBitOff final : public ForwardingBackend {
 public:
  OneBitOff() : ForwardingBackend(emu::make_emu_backend()) {}
  std::vector<int64_t> softmax_flips, quantize_flips;
  int l2_calls = 0;

 protected:
  void softmax_rows_impl(const Tensor& logits, Tensor& p) override {
    inner().softmax_rows(logits, p);
    std::vector<float> h = inner().download<float>(p);
    if (h.empty()) return;
    uint32_t b;
    std::memcpy(&b, &h.back(), 4);
    b ^= 1u;
    std::memcpy(&h.back(), &b, 4);
    inner().upload(p, std::span<const float>(h));
    softmax_flips.push_back(int64_t(h.size() - 1));
  }
  QTensor quantize_impl(const Tensor& x, const QuantSpec& spec, Axis axis) override {
    QuantizedTensor q = inner().download(inner().quantize(x, spec, axis));
    if (q.data.size()) {
      const size_t i = q.data.size() / 2;  // a code byte in the middle
      q.data.data()[i] ^= 1u;
      quantize_flips.push_back(int64_t(i));
    } else {
      quantize_flips.push_back(-1);
    }
    return inner().upload(q);
  }
  double l2_norm_impl(const Tensor& x) override {
    ++l2_calls;
    const double v = inner().l2_norm(x);
    uint64_t b;
    std::memcpy(&b, &v, 8);
    b ^= 1u;
    double w;
    std::memcpy(&w, &b, 8);
    return w;
  }
};

uint64_t total_mismatches(const std::vector<VerifyRow>& rows) {
  uint64_t m = 0;
  for (const auto& r : rows) m += r.mismatches;
  return m;
}

TEST(Verify, EmuAgreesWithEmuOnEveryOp) {
  for (uint64_t seed : {1ull, 2ull, 20261201ull}) {
    auto a = emu::make_emu_backend(), b = emu::make_emu_backend();
    a->set_threads(1);  // results never depend on it; a shared CI machine runs suites side by side
    VerifyOptions o;
    o.cases = 4;  // every special-value / spread setting of the generators
    o.seed = seed;
    const std::vector<VerifyRow> rows = verify_backends(*a, *b, o);
    std::map<std::string, size_t> per_op;
    std::map<std::string, uint64_t> compared;  // a row may compare nothing (every group empty), an op not
    for (const VerifyRow& r : rows) {
      ++per_op[r.op];
      compared[r.op] += r.compared;
      EXPECT_EQ(r.mismatches, 0u) << r.op << " " << r.shape << " " << r.recipe << ": " << r.note;
      // Generators make valid inputs: nothing is refused.
      EXPECT_TRUE(r.note.empty()) << r.op << " " << r.shape << " " << r.recipe << ": " << r.note;
      EXPECT_EQ(r.first_mismatch, -1);
    }
    for (const std::string& op : verify_op_names()) {
      EXPECT_GE(per_op[op], 4u) << op << " seed " << seed;
      EXPECT_GT(compared[op], 0u) << op << " seed " << seed;
    }
  }
}

TEST(Verify, SameSeedSameRowsAndOpFilterReproducesThem) {
  auto a = emu::make_emu_backend(), b = emu::make_emu_backend();
  a->set_threads(1);
  VerifyOptions o;
  o.cases = 2;
  o.seed = 7;
  const auto all = verify_backends(*a, *b, o);
  o.op = "gemm_quantized";
  const auto only = verify_backends(*a, *b, o);
  std::vector<std::string> want;
  for (const auto& r : all)
    if (r.op == "gemm_quantized") want.push_back(r.shape + "|" + r.recipe + "|" + std::to_string(r.compared));
  std::vector<std::string> got;
  for (const auto& r : only) got.push_back(r.shape + "|" + r.recipe + "|" + std::to_string(r.compared));
  EXPECT_EQ(got, want);
  // The recipes of the contract's four block-dot classes are all there.
  std::string joined;
  for (const auto& s : got) joined += s + "\n";
  for (const char* cls : {"(mx-exact)", "(mx-f13)", "(fp8-chunk128)"}) EXPECT_NE(joined.find(cls), std::string::npos) << cls;
  for (const char* form : {" fprop", " dgrad", " wgrad"}) EXPECT_NE(joined.find(form), std::string::npos) << form;
  for (const char* mode : {"accumulate bf16-out", "overwrite fp32-out"}) EXPECT_NE(joined.find(mode), std::string::npos);
  o.op = "gemm_bf16";
  const auto bf = verify_backends(*a, *b, o);
  ASSERT_FALSE(bf.empty());
  EXPECT_NE(bf[0].recipe.find("(bf16-f25)"), std::string::npos) << bf[0].recipe;
}

TEST(Verify, OneFlippedBitIsFoundInExactlyThatOp) {
  auto ref = emu::make_emu_backend();
  ref->set_threads(1);
  OneBitOff bad;
  VerifyOptions o;
  o.cases = 2;
  o.seed = 3;
  const std::vector<VerifyRow> rows = verify_backends(*ref, bad, o);
  size_t softmax_rows = 0, quantize_rows = 0, l2_rows = 0;
  for (const VerifyRow& r : rows) {
    const std::string what = r.op + " " + r.shape + " " + r.recipe + ": " + r.note;
    if (r.op == "softmax") {
      ASSERT_LT(softmax_rows, bad.softmax_flips.size()) << what;
      EXPECT_EQ(r.mismatches, 1u) << what;
      EXPECT_EQ(r.first_mismatch, bad.softmax_flips[softmax_rows]) << what;
      EXPECT_EQ(r.max_ulp, 1u) << what;  // lowest bit of an f32: one step on the ordered line
      ++softmax_rows;
    } else if (r.op == "quantize") {
      ASSERT_LT(quantize_rows, bad.quantize_flips.size()) << what;
      const int64_t flipped = bad.quantize_flips[quantize_rows++];
      if (flipped < 0) continue;  // an empty tensor: nothing to flip
      EXPECT_EQ(r.mismatches, 1u) << what;
      EXPECT_EQ(r.first_mismatch, flipped) << what;  // data bytes come first in a quantize row
      EXPECT_EQ(r.max_ulp, 1u) << what;
    } else if (r.op == "l2_norm") {
      EXPECT_EQ(r.mismatches, 1u) << what;
      EXPECT_EQ(r.first_mismatch, 0) << what;
      EXPECT_EQ(r.max_ulp, 1u) << what;
      ++l2_rows;
    } else if (r.op == "gemm_quantized" || r.op == "memory" || r.op == "dequantize" || r.op == "quant_stats" ||
               r.op == "scale_exp_histogram") {
      // Their quantized inputs come from the reference's quantizer, so the
      // candidate's faulty quantize does not reach them (wgrad aside: there
      // each backend quantizes its operands with quantize_grouped_colwise,
      // which OneBitOff leaves alone).
      EXPECT_EQ(r.mismatches, 0u) << what;
    } else {
      EXPECT_EQ(r.mismatches, 0u) << what;
    }
  }
  EXPECT_EQ(softmax_rows, bad.softmax_flips.size());
  EXPECT_EQ(quantize_rows, bad.quantize_flips.size());
  EXPECT_GE(softmax_rows, 2u);
  EXPECT_GE(quantize_rows, 2u);
  EXPECT_EQ(l2_rows, size_t(bad.l2_calls));
  EXPECT_GE(l2_rows, 2u);
  EXPECT_GE(total_mismatches(rows), softmax_rows + l2_rows);
}

/// A backend whose softmax_rows throws: one side throwing is a mismatch with
/// the message.
class ThrowingSoftmax final : public ForwardingBackend {
 public:
  ThrowingSoftmax() : ForwardingBackend(emu::make_emu_backend()) {}

 protected:
  void softmax_rows_impl(const Tensor&, Tensor&) override { throw std::runtime_error("softmax kernel launch failed"); }
};

TEST(Verify, OneBackendThrowingIsAMismatchWithTheMessage) {
  auto ref = emu::make_emu_backend();
  ThrowingSoftmax bad;
  VerifyOptions o;
  o.cases = 2;
  o.op = "softmax";
  const auto rows = verify_backends(*ref, bad, o);
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& r : rows) {
    EXPECT_EQ(r.mismatches, 1u);
    EXPECT_NE(r.note.find("candidate (forwarding(emu)) threw: softmax kernel launch failed"), std::string::npos) << r.note;
  }
}

TEST(Verify, BadOptionsThrow) {
  auto a = emu::make_emu_backend(), b = emu::make_emu_backend();
  VerifyOptions o;
  o.op = "no_such_op";
  EXPECT_THROW(verify_backends(*a, *b, o), std::invalid_argument);
  o.op = "";
  o.cases = 0;
  EXPECT_THROW(verify_backends(*a, *b, o), std::invalid_argument);
  EXPECT_EQ(verify_op_names().size(), size_t(Op::kCount));
  for (int i = 0; i < int(Op::kCount); ++i) EXPECT_EQ(verify_op_from_name(verify_op_name(Op(i))), Op(i));
}

}  // namespace
