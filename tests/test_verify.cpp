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

/// Forwards every virtual of Backend to `inner`; the handles it returns are
/// the inner backend's, so ops on them go straight back to it.
class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : in_(std::move(inner)) {}
  std::string name() const override { return "forwarding(" + in_->name() + ")"; }
  void set_threads(int n) override { in_->set_threads(n); }
  bool supports(Op op) const override { return in_->supports(op); }

  Tensor alloc(DType dtype, Shape shape) override { return in_->alloc(dtype, shape); }
  using Backend::download;
  using Backend::upload;
  void upload(Tensor& t, const void* src, size_t bytes) override { in_->upload(t, src, bytes); }
  void download(const Tensor& t, void* dst, size_t bytes) override { in_->download(t, dst, bytes); }
  void copy(const Tensor& src, Tensor& dst) override { in_->copy(src, dst); }
  void copy_into(const Tensor& src, Tensor& dst, size_t offset) override { in_->copy_into(src, dst, offset); }
  void fill_zero(Tensor& t) override { in_->fill_zero(t); }
  QuantizedTensor download(const QTensor& q) override { return in_->download(q); }
  QTensor upload(const QuantizedTensor& q) override { return in_->upload(q); }
  std::vector<QuantizedTensor> download(const GroupedQTensor& q) override { return in_->download(q); }

  QTensor quantize(const Tensor& x, const QuantSpec& spec, Axis axis) override { return in_->quantize(x, spec, axis); }
  GroupedQTensor quantize_grouped_colwise(const Tensor& x, std::span<const int64_t> ms, const QuantSpec& spec) override {
    return in_->quantize_grouped_colwise(x, ms, spec);
  }
  void dequantize(const QTensor& q, Tensor& out) override { in_->dequantize(q, out); }
  QuantStats quant_stats(const Tensor& x, const QTensor& q) override { return in_->quant_stats(x, q); }
  ScaleExpCounts scale_exp_histogram(const QTensor& q) override { return in_->scale_exp_histogram(q); }
  float amax(const Tensor& x) override { return in_->amax(x); }
  void round_bf16(Tensor& x) override { in_->round_bf16(x); }
  void round_bf16(const Tensor& src, Tensor& dst) override { in_->round_bf16(src, dst); }

  void grouped_fprop(const QTensor& x, const QTensor& w, std::span<const int64_t> ms, Tensor& y,
                     const GemmOptions& o) override { in_->grouped_fprop(x, w, ms, y, o); }
  void grouped_fprop(const Tensor& x, const Tensor& w, std::span<const int64_t> ms, Tensor& y,
                     const GemmOptions& o) override { in_->grouped_fprop(x, w, ms, y, o); }
  void grouped_dgrad(const QTensor& dy, const QTensor& w, std::span<const int64_t> ms, Tensor& dx,
                     const GemmOptions& o) override { in_->grouped_dgrad(dy, w, ms, dx, o); }
  void grouped_dgrad(const Tensor& dy, const Tensor& w, std::span<const int64_t> ms, Tensor& dx,
                     const GemmOptions& o) override { in_->grouped_dgrad(dy, w, ms, dx, o); }
  void grouped_wgrad(const GroupedQTensor& dy, const GroupedQTensor& x, std::span<const int64_t> ms, Tensor& dw,
                     const GemmOptions& o) override { in_->grouped_wgrad(dy, x, ms, dw, o); }
  void grouped_wgrad(const Tensor& dy, const Tensor& x, std::span<const int64_t> ms, Tensor& dw,
                     const GemmOptions& o) override { in_->grouped_wgrad(dy, x, ms, dw, o); }
  void accumulate_groups(Tensor& acc, const Tensor& x, std::span<const int64_t> ms) override {
    in_->accumulate_groups(acc, x, ms);
  }

  void softmax_rows(const Tensor& logits, Tensor& p) override { in_->softmax_rows(logits, p); }
  void topk_rows(const Tensor& p, int k, Tensor& top) override { in_->topk_rows(p, k, top); }
  void moe_route(const Tensor& top, size_t E, int64_t pad, Tensor& counts, Tensor& row_of) override {
    in_->moe_route(top, E, pad, counts, row_of);
  }
  void permute_rows(const Tensor& src, const Tensor& row_of, size_t k, Tensor& dst) override {
    in_->permute_rows(src, row_of, k, dst);
  }
  void unpermute_combine(const Tensor& yp, const Tensor& h0, const Tensor& p, const Tensor& top, const Tensor& row_of,
                         size_t k, Tensor& h1) override { in_->unpermute_combine(yp, h0, p, top, row_of, k, h1); }
  void combine_backward(const Tensor& dh1, const Tensor& yp, const Tensor& p, const Tensor& top, const Tensor& row_of,
                        size_t k, Tensor& dyp, Tensor& dgate) override {
    in_->combine_backward(dh1, yp, p, top, row_of, k, dyp, dgate);
  }
  double aux_loss(const Tensor& p, const Tensor& counts, size_t k, float coeff, Tensor& f) override {
    return in_->aux_loss(p, counts, k, coeff, f);
  }
  void router_backward(const Tensor& p, const Tensor& top, const Tensor& dgate, const Tensor& f, float aux_grad,
                       size_t k, Tensor& dlogits) override { in_->router_backward(p, top, dgate, f, aux_grad, k, dlogits); }
  void embed_grad_sum(const Tensor& dh1, const Tensor& dh0_router, const Tensor& dxp, const Tensor& row_of, size_t k,
                      Tensor& dh0) override { in_->embed_grad_sum(dh1, dh0_router, dxp, row_of, k, dh0); }
  void activation(Activation kind, const Tensor& u, Tensor& a) override { in_->activation(kind, u, a); }
  void activation_grad(Activation kind, const Tensor& u, const Tensor& da, Tensor& du) override {
    in_->activation_grad(kind, u, da, du);
  }

  double cross_entropy(const Tensor& logits, const Tensor& labels, float grad_scale, Tensor& dlogits) override {
    return in_->cross_entropy(logits, labels, grad_scale, dlogits);
  }
  void argmax_rows(const Tensor& logits, Tensor& pred) override { in_->argmax_rows(logits, pred); }
  int64_t count_correct(const Tensor& logits, const Tensor& labels) override { return in_->count_correct(logits, labels); }
  double l2_norm(const Tensor& x) override { return in_->l2_norm(x); }
  void adamw(Tensor& master, Tensor& m, Tensor& v, const Tensor& grad, const AdamW& h, Tensor& model) override {
    in_->adamw(master, m, v, grad, h, model);
  }
  int64_t deosc_update(Tensor& w, const Tensor& q, Tensor& prev, Tensor& prev_q, Tensor& dist_w, Tensor& dist_q,
                       bool window_end, float ratio, Tensor* snaps) override {
    return in_->deosc_update(w, q, prev, prev_q, dist_w, dist_q, window_end, ratio, snaps);
  }
  OscStep osc_update(const Tensor& w, const Tensor& q, OscState& s, float momentum, bool window_end) override {
    return in_->osc_update(w, q, s, momentum, window_end);
  }

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
  std::set<Op> unsupported;

  bool supports(Op op) const override { return !unsupported.count(op); }
  void softmax_rows(const Tensor& logits, Tensor& p) override {
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
  QTensor quantize(const Tensor& x, const QuantSpec& spec, Axis axis) override {
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
  double l2_norm(const Tensor& x) override {
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
      EXPECT_FALSE(r.unsupported) << r.op;
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

TEST(Verify, UnsupportedOpsGiveOneRowAndRunNothing) {
  auto ref = emu::make_emu_backend();
  OneBitOff bad;
  bad.unsupported = {Op::Softmax, Op::L2Norm};
  VerifyOptions o;
  o.cases = 3;
  o.op = "softmax";
  const auto rows = verify_backends(*ref, bad, o);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_TRUE(rows[0].unsupported);
  EXPECT_EQ(rows[0].op, "softmax");
  EXPECT_EQ(rows[0].mismatches, 0u);
  EXPECT_NE(rows[0].note.find("unsupported"), std::string::npos) << rows[0].note;
  EXPECT_TRUE(bad.softmax_flips.empty());
}

/// A backend whose softmax_rows throws: one side throwing is a mismatch with
/// the message.
class ThrowingSoftmax final : public ForwardingBackend {
 public:
  ThrowingSoftmax() : ForwardingBackend(emu::make_emu_backend()) {}
  void softmax_rows(const Tensor&, Tensor&) override { throw std::runtime_error("softmax kernel launch failed"); }
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
