// The C interface (include/mxsim/c_api.h): each entry point turns its
// DLTensors into the library's operands, checks what is the C layer's own
// (devices, dtypes, contiguity, the caller's buffer sizes), and hands the op
// to the one implementation: the emulator's quantizer and grouped GEMM for CPU
// tensors (whose checks are core's: spec_args.hpp, gemm_plan.hpp), the GPU
// backend's for CUDA tensors (c_api_gpu.cpp). Exceptions stop here and become
// a status and a message.
#include "mxsim/c_api.h"

#include <cmath>
#include <cstring>
#include <variant>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>

#include "c_api_internal.hpp"
#include "mxsim/build_info.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/gemm_plan.hpp"
#include "mxsim/hd/quant_block.hpp"
#include "mxsim/m_splits.hpp"
#include "mxsim/quant_stats.hpp"
#include "mxsim/sim/maps.hpp"
#include "mxsim/sim/recipe.hpp"
#include "mxsim/spec_args.hpp"

using namespace mxsim;
using namespace mxsim::capi;

namespace {

const QuantSpec& spec_of(const mxsim_spec* s, const char* op) {
  if (!s) throw std::invalid_argument(std::string(op) + ": spec is NULL");
  return s->spec;
}

SpecArgs spec_args(const char* const* keys, const char* const* values, size_t n, const char* op) {
  SpecArgs a;
  for (size_t i = 0; i < n; ++i) {
    if (!keys || !values || !keys[i] || !values[i])
      throw std::invalid_argument(std::string(op) + ": key or value " + std::to_string(i) + " is NULL");
    set_spec_arg(a, keys[i], values[i]);
  }
  return a;
}

Axis axis_of(int32_t axis, const char* op) {
  if (axis != MXSIM_AXIS_COLS && axis != MXSIM_AXIS_ROWS)
    throw std::invalid_argument(std::string(op) + ": axis " + std::to_string(axis) + " is neither MXSIM_AXIS_COLS (0) nor MXSIM_AXIS_ROWS (1)");
  return axis == MXSIM_AXIS_ROWS ? Axis::Rows : Axis::Cols;
}

}  // namespace

extern "C" {

int mxsim_abi_version(void) { return MXSIM_C_ABI_VERSION; }

const char* mxsim_version(void) {
  static const std::string v = std::string(version()) + " (" + build_commit() + ")";
  return v.c_str();
}

int mxsim_has_gpu(void) { return gpu_built() ? 1 : 0; }

mxsim_status mxsim_spec_create(const char* const* keys, const char* const* values, size_t n, mxsim_spec** out,
                               mxsim_error* err) {
  return guard(err, [&] {
    if (!out) throw std::invalid_argument("mxsim_spec_create: out is NULL");
    *out = nullptr;
    *out = new mxsim_spec{make_spec(spec_args(keys, values, n, "mxsim_spec_create"))};
  });
}

void mxsim_spec_destroy(mxsim_spec* spec) { delete spec; }

mxsim_status mxsim_spec_describe(const mxsim_spec* spec, char* buf, size_t len, mxsim_error* err) {
  return guard(err, [&] {
    const std::string d = spec_of(spec, "mxsim_spec_describe").elem == Format::BF16 ? "bf16" : spec->spec.describe();
    if (!buf || len <= d.size())
      throw std::invalid_argument("mxsim_spec_describe: buffer of " + std::to_string(len) + " bytes is too small for " +
                                  std::to_string(d.size() + 1));
    std::memcpy(buf, d.c_str(), d.size() + 1);
  });
}

mxsim_status mxsim_spec_derive(const mxsim_spec* base, const char* const* keys, const char* const* values, size_t n,
                               mxsim_spec** out, mxsim_error* err) {
  return guard(err, [&] {
    const QuantSpec& b = spec_of(base, "mxsim_spec_derive");
    if (!out) throw std::invalid_argument("mxsim_spec_derive: out is NULL");
    *out = nullptr;
    *out = new mxsim_spec{make_spec(spec_args(keys, values, n, "mxsim_spec_derive"), &b)};
  });
}

mxsim_status mxsim_spec_with_amax(const mxsim_spec* spec, float amax, mxsim_spec** out, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_spec_with_amax";
    const QuantSpec& s = spec_of(spec, op);
    if (!out) throw std::invalid_argument(std::string(op) + ": out is NULL");
    *out = nullptr;
    std::optional<QuantSpec> c;
    try {
      c = with_current_scale(s, amax);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string(op) + ": " + e.what());
    }
    if (!c)
      throw std::invalid_argument(std::string(op) + ": amax " + std::to_string(amax) +
                                  " gives no finite scale (a NaN in the tensor?)");
    *out = new mxsim_spec{*c};
  });
}

mxsim_status mxsim_linear_recipe_create(const char* name, const char* const* keys, const char* const* values, size_t n,
                                        mxsim_linear_recipe** out, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_linear_recipe_create";
    if (!out || !name) throw std::invalid_argument(std::string(op) + ": name or out is NULL");
    *out = nullptr;
    sim::RecipeConfig rc;
    for (size_t i = 0; i < n; ++i) {
      if (!keys || !values || !keys[i] || !values[i])
        throw std::invalid_argument(std::string(op) + ": key or value " + std::to_string(i) + " is NULL");
      sim::set_recipe_option(rc, keys[i], values[i]);
    }
    *out = new mxsim_linear_recipe{sim::parse_linear_recipe(name, rc)};
  });
}

void mxsim_linear_recipe_destroy(mxsim_linear_recipe* recipe) { delete recipe; }

mxsim_status mxsim_linear_recipe_get_info(const mxsim_linear_recipe* recipe, mxsim_linear_recipe_info* out,
                                          mxsim_error* err) {
  return guard(err, [&] {
    if (!recipe || !out) throw std::invalid_argument("mxsim_linear_recipe_get_info: recipe or out is NULL");
    const sim::LinearRecipe& r = recipe->recipe;
    mxsim_linear_recipe_info i{};
    const std::string name = sim::linear_recipe_name(r);
    if (name.size() >= sizeof i.name)
      throw std::invalid_argument("mxsim_linear_recipe_get_info: the recipe's name '" + name + "' exceeds " +
                                  std::to_string(sizeof i.name - 1) + " characters");
    std::strncpy(i.name, name.c_str(), sizeof i.name - 1);
    i.quantized = r.quantized();
    for (GemmForm g : {GemmForm::Fprop, GemmForm::Dgrad, GemmForm::Wgrad}) i.gemm_quantized[size_t(g)] = r.quantized(g);
    i.fused_wgrad_accum = r.fused_wgrad_accum();
    i.transposed_cache_allowed = r.transposed_cache_allowed();
    i.deosc_eligible = r.deosc_eligible();
    i.dgrad_reuses_fprop_w = r.dgrad_reuses_fprop_w();
    const std::optional<GemmForm> wg = r.weight_gemm();
    i.weight_gemm = wg ? int32_t(*wg) : -1;
    for (sim::Role role : sim::kRoles) {
      i.records[size_t(role)] = r.records(role);
      i.two_level_scale[size_t(role)] = r.two_level_scale(role);
    }
    i.delayed_scaling = std::holds_alternative<sim::Fp8DelayedRecipe>(r.of(GemmForm::Fprop));
    *out = i;
  });
}

mxsim_status mxsim_linear_recipe_spec(const mxsim_linear_recipe* recipe, int32_t role, mxsim_spec** out,
                                      mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_linear_recipe_spec";
    if (!recipe || !out) throw std::invalid_argument(std::string(op) + ": recipe or out is NULL");
    *out = nullptr;
    if (role < MXSIM_ROLE_X_FPROP || role > MXSIM_ROLE_W_DGRAD)
      throw std::invalid_argument(std::string(op) + ": role " + std::to_string(role) + " is not an mxsim_operand_role");
    static constexpr GemmForm kGemmOf[] = {GemmForm::Fprop, GemmForm::Fprop, GemmForm::Dgrad,
                                           GemmForm::Wgrad, GemmForm::Wgrad, GemmForm::Dgrad};
    const GemmForm g = kGemmOf[role];
    const sim::LinearRecipe& r = recipe->recipe;
    if (!r.quantized(g))
      throw std::invalid_argument(std::string(op) + ": recipe " + sim::linear_recipe_name(r) + " runs " +
                                  sim::kGemmNames[size_t(g)] + " in BF16 (no operand specs)");
    const sim::OperandSpecs& s = r.specs(g);
    const QuantSpec* by_role[] = {&s.x_fprop, &s.w, &s.dy_dgrad, &s.dy_wgrad, &s.x_wgrad, &s.w};
    *out = new mxsim_spec{*by_role[role]};
  });
}

mxsim_status mxsim_linear_recipe_delayed_scaling(const mxsim_linear_recipe* recipe, int32_t role,
                                                 mxsim_delayed_scaling** out, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_linear_recipe_delayed_scaling";
    if (!recipe || !out) throw std::invalid_argument(std::string(op) + ": recipe or out is NULL");
    *out = nullptr;
    sim::Role r;
    if (role == MXSIM_ROLE_W) r = sim::Role::W;
    else if (role == MXSIM_ROLE_X_FPROP) r = sim::Role::X;
    else if (role == MXSIM_ROLE_DY_DGRAD) r = sim::Role::Dy;
    else throw std::invalid_argument(std::string(op) + ": role " + std::to_string(role) + " is not W, X_FPROP or DY_DGRAD");
    std::optional<DelayedScaling> d = sim::delayed_scaling_of(recipe->recipe.of(GemmForm::Fprop), r);
    if (!d)
      throw std::invalid_argument(std::string(op) + ": recipe " + sim::linear_recipe_name(recipe->recipe) +
                                  " has no delayed scaling (only fp8_delayed)");
    *out = new mxsim_delayed_scaling{std::move(*d)};
  });
}

void mxsim_delayed_scaling_destroy(mxsim_delayed_scaling* state) { delete state; }

mxsim_status mxsim_delayed_scaling_record(mxsim_delayed_scaling* state, float amax, mxsim_error* err) {
  return guard(err, [&] {
    if (!state) throw std::invalid_argument("mxsim_delayed_scaling_record: state is NULL");
    state->state.record(amax);
  });
}

mxsim_status mxsim_delayed_scaling_update(mxsim_delayed_scaling* state, mxsim_error* err) {
  return guard(err, [&] {
    if (!state) throw std::invalid_argument("mxsim_delayed_scaling_update: state is NULL");
    state->state.update();
  });
}

mxsim_status mxsim_delayed_scaling_spec(const mxsim_delayed_scaling* state, const mxsim_spec* base, mxsim_spec** out,
                                        mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_delayed_scaling_spec";
    const QuantSpec& b = spec_of(base, op);
    if (!state || !out) throw std::invalid_argument(std::string(op) + ": state or out is NULL");
    *out = nullptr;
    *out = new mxsim_spec{state->state.spec(b)};
  });
}

mxsim_status mxsim_delayed_scaling_scale(const mxsim_delayed_scaling* state, float* scale, mxsim_error* err) {
  return guard(err, [&] {
    if (!state || !scale) throw std::invalid_argument("mxsim_delayed_scaling_scale: state or scale is NULL");
    *scale = state->state.scale();
  });
}

mxsim_status mxsim_spec_get_info(const mxsim_spec* spec, mxsim_spec_info* out, mxsim_error* err) {
  return guard(err, [&] {
    const QuantSpec& s = spec_of(spec, "mxsim_spec_get_info");
    if (!out) throw std::invalid_argument("mxsim_spec_get_info: out is NULL");
    mxsim_spec_info i{};
    std::strncpy(i.elem, short_name(s.elem), sizeof i.elem - 1);
    i.elem_bits = spec_of(s.elem).bits;
    i.block_rows = s.block_rows;
    i.block_cols = s.block_cols;
    i.scale_kind = c_scale_kind(s.scale_kind);
    i.stochastic = s.round == RoundMode::Stochastic;
    i.hadamard = s.hadamard16;
    i.current_scaling = s.per_tensor() && s.scale_kind == ScaleKind::FP32;
    i.hadamard_signs = s.hadamard16_signs;
    *out = i;
  });
}

mxsim_status mxsim_quant_layout(const mxsim_spec* spec, int64_t groups, int64_t rows, int64_t cols, int32_t axis,
                                mxsim_qlayout* out, mxsim_error* err) {
  return guard(err, [&] {
    if (!out) throw std::invalid_argument("mxsim_quant_layout: out is NULL");
    *out = c_layout(spec_of(spec, "mxsim_quant_layout"), groups, rows, cols, axis_of(axis, "mxsim_quant_layout"));
  });
}

namespace {
/// The extents of t, which must be q's logical shape ([rows, cols] for one group).
Extents3 extents_of_q(const DLTensor& t, const mxsim_qtensor& q, const char* op, const char* what) {
  const Extents3 e = extents3(t, op, what);
  const mxsim_qlayout& L = q.layout;
  if (e.groups != size_t(L.groups) || e.rows != size_t(L.rows) || e.cols != size_t(L.cols))
    throw std::invalid_argument(std::string(op) + ": " + what + " " + shape_str(t) + " is not q's shape [" +
                                std::to_string(L.groups) + ", " + std::to_string(L.rows) + ", " +
                                std::to_string(L.cols) + "]");
  return e;
}

/// The dtype of x as a format (float32 / bfloat16 / float16; others are refused where x is read).
Format input_format(const DLTensor& x) { return is_bf16(x) ? Format::BF16 : is_f16(x) ? Format::FP16 : Format::FP32; }

/// The spec x is quantized with (torchao's Float8Tensor computes a 16-bit tensor's scale in its
/// dtype: core's spec_for_input), checked against x's values where that rule asks for it (on the
/// CPU; on the GPU only an x of the spec's hp_dtype itself is taken, which needs no check).
QuantSpec spec_for(const DLTensor& x, const QuantSpec& s, const Tensor3f* host, const char* op) {
  const QuantSpec sx = spec_for_input(s, input_format(x));
  if (host) check_hp_values(sx, host->data(), host->size(), op);
  else if (needs_hp_value_check(sx, input_format(x)))
    throw std::invalid_argument(std::string(op) + ": hp_dtype " + spec_of(sx.hp_dtype).name +
                                " with a CUDA tensor of another dtype: its values are checked on the CPU only; "
                                "pass the CUDA tensor in " + spec_of(sx.hp_dtype).name);
  return sx;
}
}  // namespace

mxsim_status mxsim_quantize(const DLTensor* x, const mxsim_spec* spec, int32_t axis, mxsim_qtensor* out, void* stream,
                            mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_quantize";
    const QuantSpec& s = spec_of(spec, op);
    const Axis ax = axis_of(axis, op);
    if (!x || !out) throw std::invalid_argument(std::string(op) + ": x or out is NULL");
    const Extents3 e = extents3(*x, op, "x");
    if (s.elem == Format::BF16) throw std::invalid_argument(std::string(op) + ": bf16 is not a quantized format");
    const mxsim_qlayout want = c_layout(s, int64_t(e.groups), int64_t(e.rows), int64_t(e.cols), ax);
    check_qtensor_buffers(*out, want, x->device, op);
    if (x->device.device_type == kDLCUDA) {
      gpu_quantize(*x, spec_for(*x, s, nullptr, op), ax, want, *out, stream);
    } else {
      const Tensor3f h = host_f32(*x, e, op, "x");
      write_quantized(emu::quantize(h, spec_for(*x, s, &h, op), ax), *out);
    }
    out->spec = spec;  // the caller's struct describes its buffers once they hold the result
    out->layout = want;
  });
}

mxsim_status mxsim_quantize_grouped_colwise(const DLTensor* x, const int64_t* m_splits, size_t groups,
                                             const mxsim_spec* spec, mxsim_qtensor* out, void* stream,
                                             mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_quantize_grouped_colwise";
    const QuantSpec& s = spec_of(spec, op);
    if (!x || (groups && (!m_splits || !out))) throw std::invalid_argument(std::string(op) + ": x, m_splits or out is NULL");
    if (x->ndim != 2) throw std::invalid_argument(std::string(op) + ": x must be 2-D [M, C], has shape " + shape_str(*x));
    const Extents3 e = extents3(*x, op, "x");
    if (s.elem == Format::BF16) throw std::invalid_argument(std::string(op) + ": bf16 is not a quantized format");
    const std::vector<int64_t> splits(m_splits, m_splits + groups);
    if (const std::string why = m_splits_error(splits, e.rows); !why.empty())
      throw std::invalid_argument(std::string(op) + ": " + why);
    std::vector<mxsim_qlayout> want(groups);
    for (size_t g = 0; g < groups; ++g) {
      want[g] = c_layout(s, 1, splits[g], int64_t(e.cols), Axis::Rows);
      check_qtensor_buffers(out[g], want[g], x->device, (std::string(op) + ": out[" + std::to_string(g) + "]").c_str());
    }
    if (x->device.device_type == kDLCUDA) {
      gpu_quantize_grouped_colwise(*x, spec_for(*x, s, nullptr, op), splits, want, out, stream);
    } else {
      const Tensor3f h = host_f32(*x, e, op, "x");
      const QuantSpec sx = spec_for(*x, s, &h, op);
      Tensor2f x2 = Tensor2f::from_shape({e.rows, e.cols});
      std::copy(h.begin(), h.end(), x2.begin());
      const std::vector<QuantizedTensor> q = emu::quantize_grouped_colwise(x2, splits, sx);
      for (size_t g = 0; g < groups; ++g) write_quantized(q[g], out[g]);
    }
    for (size_t g = 0; g < groups; ++g) {
      out[g].spec = spec;
      out[g].layout = want[g];
    }
  });
}

mxsim_status mxsim_dequantize(const mxsim_qtensor* q, DLTensor* out, void* stream, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_dequantize";
    if (!q || !out) throw std::invalid_argument(std::string(op) + ": q or out is NULL");
    check_same_device(q->data, *out, op, "out");
    (void)extents_of_q(*out, *q, op, "out");
    if (out->device.device_type == kDLCUDA) return gpu_dequantize(*q, *out, stream);
    write_f32(emu::dequantize3(read_quantized(*q, op, "q")), *out, op, "out");
  });
}

namespace {
/// x and q of a statistics call, both on the CPU, x of q's logical shape, as host tensors.
std::pair<Tensor3f, QuantizedTensor> stats_operands(const DLTensor* x, const mxsim_qtensor* q, const char* op) {
  if (!x || !q) throw std::invalid_argument(std::string(op) + ": x or q is NULL");
  if (x->device.device_type == kDLCUDA || q->data.device.device_type == kDLCUDA)
    throw Unsupported(std::string(op) + ": statistics of CUDA tensors are not computed on the device yet; "
                                        "pass host copies (mxsim.torch does, documented in docs/torch.md)");
  return {host_f32(*x, extents_of_q(*x, *q, op, "x"), op, "x"), read_quantized(*q, op, "q")};
}
}  // namespace

mxsim_status mxsim_quant_stats(const DLTensor* x, const mxsim_qtensor* q, mxsim_qstats* out, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_quant_stats";
    if (!out) throw std::invalid_argument(std::string(op) + ": out is NULL");
    const auto [h, hq] = stats_operands(x, q, op);
    const QuantStats s = emu::quant_stats(h, hq);
    *out = qstats_of(s);
  });
}

mxsim_status mxsim_scale_exp_histogram(const mxsim_qtensor* q, void* stream, uint64_t* out, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_scale_exp_histogram";
    if (!q || !out) throw std::invalid_argument(std::string(op) + ": q or out is NULL");
    const GemmOperandDesc d = desc_of(*q, op, "q");
    // Only the scales are read (on CUDA copied to the host: a block's scale per 16 or 32 elements).
    QuantizedTensor h;
    h.spec = d.spec;
    const hd::QuantLayout& L = d.layout;
    const bool fp32 = d.spec.scale_kind == ScaleKind::FP32;
    if (fp32) {
      h.scale_inv = Tensor3f::from_shape({L.groups, L.nbr, L.nbc});
      copy_to_host(q->scale, h.scale_inv.data(), h.scale_inv.size() * sizeof(float), stream);
      if (d.spec.scale_convention == ScaleConvention::TorchaoTraining) h.fp32_scale_use = Fp32ScaleUse::DivideByScale;
    } else {
      h.scale_bytes = Bytes3::from_shape({L.groups, L.nbr, L.nbc});
      copy_to_host(q->scale, h.scale_bytes.data(), h.scale_bytes.size(), stream);
    }
    if (has_tensor_scale(d.spec.scale_kind)) copy_to_host(*q->tensor_scale, &h.tensor_scale_inv, 4, stream);
    const ScaleExpCounts c = scale_exp_counts(h);
    std::copy(c.begin(), c.end(), out);
  });
}

mxsim_status mxsim_block_maps(const DLTensor* x, const mxsim_qtensor* q, float* mse, float* sqnr_db, float* amax,
                              void* scale, size_t n_blocks, uint8_t* codes, size_t n_codes, mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_block_maps";
    if (!mse || !sqnr_db || !amax || !scale || !codes) throw std::invalid_argument(std::string(op) + ": an output is NULL");
    const auto [h, hq] = stats_operands(x, q, op);
    const sim::BlockMaps b = sim::block_maps(h.data(), hq);
    const size_t nb = b.G * b.BR * b.BC;
    if (n_blocks != nb || n_codes != b.codes.size())
      throw std::invalid_argument(std::string(op) + ": outputs of " + std::to_string(n_blocks) + " blocks and " +
                                  std::to_string(n_codes) + " codes for " + std::to_string(nb) + " and " +
                                  std::to_string(b.codes.size()));
    std::copy(b.mse.begin(), b.mse.end(), mse);
    std::copy(b.sqnr_db.begin(), b.sqnr_db.end(), sqnr_db);
    std::copy(b.amax.begin(), b.amax.end(), amax);
    if (!b.scale_inv.empty()) std::memcpy(scale, b.scale_inv.data(), nb * sizeof(float));
    else std::memcpy(scale, b.scale_bytes.data(), nb);
    std::copy(b.codes.begin(), b.codes.end(), codes);
  });
}

mxsim_status mxsim_block_stats(const DLTensor* x, const mxsim_qtensor* q, mxsim_block_stat* out, size_t n,
                               mxsim_error* err) {
  return guard(err, [&] {
    const char* op = "mxsim_block_stats";
    const auto [h, hq] = stats_operands(x, q, op);
    const std::vector<emu::BlockStat> b = emu::block_stats(h, hq);
    if (n != b.size() || (n && !out))
      throw std::invalid_argument(std::string(op) + ": out holds " + std::to_string(n) + " entries, q has " +
                                  std::to_string(b.size()) + " blocks");
    for (size_t i = 0; i < n; ++i)
      out[i] = mxsim_block_stat{b[i].amax, int32_t(b[i].scale_exp), b[i].sq_err, b[i].sq_src, b[i].count,
                                b[i].saturated, b[i].underflow};
  });
}

mxsim_status mxsim_grouped_gemm(int32_t form, const mxsim_gemm_operand* a, size_t na, const mxsim_gemm_operand* b,
                                size_t nb, const int64_t* m_splits, size_t groups, DLTensor* out, int32_t out_bf16,
                                int32_t accumulate, void* stream, mxsim_error* err) {
  return guard(err, [&] {
    GemmCall c = gemm_call(form, a, na, b, nb, m_splits, groups, out, out_bf16, accumulate);
    if (out->device.device_type == kDLCUDA) return gpu_grouped_gemm(c, stream);
    cpu_grouped_gemm(c);
  });
}

mxsim_status mxsim_nvfp4_decode_scale(float amax, float* s_dec, mxsim_error* err) {
  return guard(err, [&] {
    if (!s_dec) throw std::invalid_argument("mxsim_nvfp4_decode_scale: s_dec is NULL");
    *s_dec = hd::nvfp4_tensor_scale(f32_bits(amax)).s_dec;
  });
}

mxsim_status mxsim_grouped_gemm_out_shape(int32_t form, const mxsim_gemm_operand* a, size_t na,
                                          const mxsim_gemm_operand* b, size_t nb, const int64_t* m_splits,
                                          size_t groups, int64_t* shape, int32_t* ndim, mxsim_error* err) {
  return guard(err, [&] {
    if (!shape || !ndim) throw std::invalid_argument("mxsim_grouped_gemm_out_shape: shape or ndim is NULL");
    const std::vector<size_t> e = gemm_out_extents(form, a, na, b, nb, m_splits, groups);
    for (size_t i = 0; i < e.size(); ++i) shape[i] = int64_t(e[i]);
    *ndim = int32_t(e.size());
  });
}

}  // extern "C"
