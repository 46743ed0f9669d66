// The C interface's grouped GEMM: the call's own checks (operand counts,
// devices, the output buffer), then the emulator's grouped GEMM for CPU
// tensors. Shapes, m_splits, axes and recipe pairs are core's GemmPlan's to
// check (the emulator asks it), so the C layer refuses them in its words.
#include <cstring>
#include <string>

#include "c_api_internal.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/rounding.hpp"

#include <xtensor/xview.hpp>

namespace mxsim::capi {

namespace {

constexpr const char* kOp = "mxsim_grouped_gemm";

[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument(std::string(kOp) + ": " + msg); }

/// The operand's one tensor (for device checks).
const DLTensor& tensor_of(const mxsim_gemm_operand& o, const std::string& what) {
  if ((o.q == nullptr) == (o.bf16 == nullptr)) fail(what + " must set exactly one of q and bf16");
  return o.q ? o.q->data : *o.bf16;
}

std::string name(const char* side, size_t i, size_t n) {
  return n == 1 ? std::string(side) : std::string(side) + "[" + std::to_string(i) + "]";
}

/// A BF16 operand as float32 BF16 values [groups, rows, cols] (float32 inputs rounded RNE, as the
/// emulator's high-precision overloads round them).
Tensor3f bf16_values(const DLTensor& t, const std::string& what) {
  Tensor3f v = host_f32(t, extents3(t, kOp, what.c_str()), kOp, what.c_str());
  if (!is_bf16(t))
    for (float& x : v) x = round_bf16(x);
  return v;
}

GemmOperandDesc desc_of(const mxsim_gemm_operand& o, const std::string& what) {
  if (o.q) return capi::desc_of(*o.q, kOp, what.c_str());
  const Extents3 e = extents3(*o.bf16, kOp, what.c_str());
  return GemmOperandDesc::of_bf16(e.groups, e.rows, e.cols);
}

/// The output's extents as the plan wants them ({M, J} or {G, N, K}).
void check_out(const GemmPlan& plan, const DLTensor& out) {
  const std::vector<size_t> want = plan.out_extents();
  bool same = out.ndim == int(want.size());
  for (int i = 0; same && i < out.ndim; ++i) same = out.shape[i] >= 0 && size_t(out.shape[i]) == want[size_t(i)];
  if (!same) {
    std::string w = "[";
    for (size_t i = 0; i < want.size(); ++i) w += (i ? ", " : "") + std::to_string(want[i]);
    fail("out has shape " + shape_str(out) + ", expected " + w + "]");
  }
}

/// The plan the emulator will make, made first so that a refused call touches nothing and the
/// output's shape is checked against it.
GemmPlan plan_of(const GemmCall& c) {
  std::vector<GemmOperandDesc> a, b;
  for (size_t i = 0; i < c.a.size(); ++i) a.push_back(desc_of(c.a[i], name("a", i, c.a.size())));
  for (size_t i = 0; i < c.b.size(); ++i) b.push_back(desc_of(c.b[i], name("b", i, c.b.size())));
  if (c.form == GemmForm::Wgrad) return plan_wgrad(a, b, c.m_splits, c.opt);
  return plan_token_gemm(c.form, a[0], b[0], c.m_splits, c.opt);
}

}  // namespace

namespace {
/// The call's form and operands checked as far as the C layer owns them (form, pointers, counts of
/// fprop / dgrad, each operand one tensor); the output is the caller's business.
GemmCall operands_of(int32_t form, const mxsim_gemm_operand* a, size_t na, const mxsim_gemm_operand* b, size_t nb,
                     const int64_t* m_splits, size_t groups) {
  GemmCall c;
  if (form < MXSIM_FPROP || form > MXSIM_WGRAD) fail("form " + std::to_string(form) + " is not FPROP, DGRAD or WGRAD");
  c.form = GemmForm(form);
  if ((na && !a) || (nb && !b) || (groups && !m_splits)) fail("a, b or m_splits is NULL");
  // wgrad's counts (one operand per group on each side) are core's plan_wgrad's to check
  if (c.form != GemmForm::Wgrad && (na != 1 || nb != 1)) {
    fail(std::string(name_of(c.form)) + " takes one operand on each side, got " + std::to_string(na) + " and " +
         std::to_string(nb));
  }
  c.a.assign(a, a + na);
  c.b.assign(b, b + nb);
  for (size_t i = 0; i < na; ++i) (void)tensor_of(a[i], name("a", i, na));
  for (size_t i = 0; i < nb; ++i) (void)tensor_of(b[i], name("b", i, nb));
  c.m_splits.assign(m_splits, m_splits + groups);
  return c;
}
}  // namespace

GemmCall gemm_call(int32_t form, const mxsim_gemm_operand* a, size_t na, const mxsim_gemm_operand* b, size_t nb,
                   const int64_t* m_splits, size_t groups, DLTensor* out, int32_t out_bf16, int32_t accumulate) {
  GemmCall c = operands_of(form, a, na, b, nb, m_splits, groups);
  if (!out) fail("out is NULL");
  c.out = out;
  for (size_t i = 0; i < na; ++i) check_same_device(*out, tensor_of(a[i], name("a", i, na)), kOp, name("a", i, na).c_str());
  for (size_t i = 0; i < nb; ++i) check_same_device(*out, tensor_of(b[i], name("b", i, nb)), kOp, name("b", i, nb).c_str());
  check_contiguous(*out, kOp, "out");
  if (!is_f32(*out) && !is_bf16(*out)) fail("out must be float32 or bfloat16");
  if (accumulate && !is_f32(*out)) fail("accumulate adds into a float32 output (an FP32 main_grad); out is bfloat16");
  c.opt.out = (out_bf16 || is_bf16(*out)) ? Format::BF16 : Format::FP32;
  c.opt.accumulate = accumulate != 0;
  c.plan = plan_of(c);
  check_out(c.plan, *out);
  return c;
}

std::vector<size_t> gemm_out_extents(int32_t form, const mxsim_gemm_operand* a, size_t na, const mxsim_gemm_operand* b,
                                     size_t nb, const int64_t* m_splits, size_t groups) {
  return plan_of(operands_of(form, a, na, b, nb, m_splits, groups)).out_extents();
}

bool nothing_to_do(const GemmPlan& plan) {
  return plan.runs.empty() && (plan.out_elems() == 0 || plan.opt.accumulate);
}

void cpu_grouped_gemm(const GemmCall& c) {
  const GemmPlan& plan = c.plan;
  if (nothing_to_do(plan)) return;
  const bool quantized = !c.a.empty() && c.a[0].q;
  const size_t n = plan.out_elems();
  if (c.form == GemmForm::Wgrad) {
    Tensor3f dw = Tensor3f::from_shape({plan.groups, plan.rows, plan.cols});
    if (c.opt.accumulate && n) std::memcpy(dw.data(), data_of(*c.out), n * 4);
    if (plan.groups == 0) return;
    if (quantized) {
      std::vector<QuantizedTensor> dy, x;
      for (size_t g = 0; g < plan.groups; ++g) {
        dy.push_back(read_quantized(*c.a[g].q, kOp, name("a", g, plan.groups).c_str()));
        x.push_back(read_quantized(*c.b[g].q, kOp, name("b", g, plan.groups).c_str()));
      }
      emu::grouped_wgrad(dy, x, c.m_splits, dw, c.opt);
    } else {  // BF16: the groups' rows one after another, as the emulator's BF16 wgrad takes them
      size_t M = 0;
      for (int64_t m : c.m_splits) M += size_t(m);  // the plan has checked the sum
      Tensor2f dy = Tensor2f::from_shape({M, plan.rows}), x = Tensor2f::from_shape({M, plan.cols});
      size_t m0 = 0;
      for (size_t g = 0; g < plan.groups; ++g) {
        const Tensor3f a = bf16_values(*c.a[g].bf16, name("a", g, plan.groups));
        const Tensor3f b = bf16_values(*c.b[g].bf16, name("b", g, plan.groups));
        std::copy(a.begin(), a.end(), dy.data() + m0 * plan.rows);
        std::copy(b.begin(), b.end(), x.data() + m0 * plan.cols);
        m0 += size_t(c.m_splits[g]);
      }
      emu::grouped_wgrad(dy, bf16_spec(), x, bf16_spec(), c.m_splits, dw, c.opt);
    }
    write_f32(dw, *c.out, kOp, "out");
    return;
  }
  Tensor2f y = Tensor2f::from_shape({plan.rows, plan.cols});
  if (c.opt.accumulate && n) std::memcpy(y.data(), data_of(*c.out), n * 4);
  if (quantized) {
    const QuantizedTensor a = read_quantized(*c.a[0].q, kOp, "a"), b = read_quantized(*c.b[0].q, kOp, "b");
    if (c.form == GemmForm::Fprop) emu::grouped_fprop(a, b, c.m_splits, y, c.opt);
    else emu::grouped_dgrad(a, b, c.m_splits, y, c.opt);
  } else {
    const Tensor3f a3 = bf16_values(*c.a[0].bf16, "a"), b = bf16_values(*c.b[0].bf16, "b");
    const Tensor2f a = Tensor2f(xt::view(a3, 0, xt::all(), xt::all()));
    if (c.form == GemmForm::Fprop) emu::grouped_fprop(a, bf16_spec(), b, bf16_spec(), c.m_splits, y, c.opt);
    else emu::grouped_dgrad(a, bf16_spec(), b, bf16_spec(), c.m_splits, y, c.opt);
  }
  write_f32(y.data(), y.size(), *c.out, kOp, "out");
}

}  // namespace mxsim::capi
