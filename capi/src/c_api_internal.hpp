// Internal: what the C interface's files share (DLTensor views, the caller's
// buffers checked against a quantized layout, the conversions the CPU path
// makes, the GPU path's entry points).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxsim/backend.hpp"
#include "mxsim/c_api.h"
#include "mxsim/gemm_plan.hpp"
#include "mxsim/quant_spec.hpp"
#include "mxsim/quantized_tensor.hpp"
#include "mxsim/sim/recipe.hpp"
#include "mxsim/tensor.hpp"

namespace mxsim::capi {

/// A CUDA tensor in a build without a GPU backend, or a device the build has no code for.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// A device allocation failed (the GPU backend's OutOfMemory, rethrown past the ABI).
struct DeviceOutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};
/// A GPU runtime call failed.
struct DeviceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Runs f; maps what it throws to a status and the caller's message.
template <class F>
mxsim_status guard(mxsim_error* err, F&& f) {
  auto say = [&](mxsim_status st, const char* what) {
    if (err) {
      std::strncpy(err->message, what, sizeof err->message - 1);
      err->message[sizeof err->message - 1] = '\0';
    }
    return st;
  };
  if (err) err->message[0] = '\0';
  try {
    f();
    return MXSIM_OK;
  } catch (const Unsupported& e) {
    return say(MXSIM_ERR_UNSUPPORTED, e.what());
  } catch (const DeviceOutOfMemory& e) {
    return say(MXSIM_ERR_OUT_OF_MEMORY, e.what());
  } catch (const DeviceError& e) {
    return say(MXSIM_ERR_DEVICE, e.what());
  } catch (const std::invalid_argument& e) {
    return say(MXSIM_ERR_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return say(MXSIM_ERR_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception& e) {
    return say(MXSIM_ERR_INTERNAL, e.what());
  } catch (...) {
    return say(MXSIM_ERR_INTERNAL, "unknown exception");
  }
}

/// A tensor's logical [groups, rows, cols]: rank 2 is one group.
struct Extents3 {
  size_t groups = 1, rows = 0, cols = 0;
};

// ---- contexts' backends (c_api_gpu.cpp)
/// The GPU backend on CUDA device `device` (Unsupported in a build without one or with no GPU).
std::unique_ptr<Backend> gpu_backend(int device);
/// f on CUDA device `device` (the caller's current device restored), the GPU backend's errors
/// mapped to the C layer's.
void gpu_call(int device, const char* op, const std::function<void()>& f);

/// bytes of t's memory (from its first byte) into host memory dst: a memcpy for a CPU tensor,
/// for a CUDA tensor a copy after the work queued on `stream` (which it waits for).
void copy_to_host(const DLTensor& t, void* dst, size_t bytes, void* stream);

// ---- DLTensor views (c_api_tensors.cpp)
std::string shape_str(const DLTensor& t);
/// Elements of t (the product of its extents; negative extents refused).
size_t numel(const DLTensor& t, const char* op, const char* what);
/// Refuses a tensor that is not C-contiguous (strides NULL or row-major), naming it.
void check_contiguous(const DLTensor& t, const char* op, const char* what);
/// Rank 2 or 3, C-contiguous, as [groups, rows, cols].
Extents3 extents3(const DLTensor& t, const char* op, const char* what);
/// The first byte of t's data.
void* data_of(const DLTensor& t);
bool is_f32(const DLTensor& t);
bool is_bf16(const DLTensor& t);
bool is_f16(const DLTensor& t);
/// One byte per element (uint8, int8, or a float8 / e8m0 byte view).
bool is_byte(const DLTensor& t);
/// Refuses b on another device than a, naming b.
void check_same_device(const DLTensor& a, const DLTensor& b, const char* op, const char* what);

// ---- quantized tensors in caller memory (c_api_tensors.cpp)
/// The C interface's code of a scale kind (mxsim_scale_kind).
int32_t c_scale_kind(ScaleKind k);
/// core's QuantStats as the C interface's mxsim_qstats, and back.
mxsim_qstats qstats_of(const QuantStats& s);
QuantStats quant_stats_of(const mxsim_qstats& s);

/// The storage layout of a quantized [groups, rows, cols] tensor (hd::quant_layout).
/// Negative extents are refused.
mxsim_qlayout c_layout(const QuantSpec& s, int64_t groups, int64_t rows, int64_t cols, Axis axis);
/// The caller's code, scale and tensor-scale buffers hold exactly `want`'s bytes, on `device`.
void check_qtensor_buffers(const mxsim_qtensor& q, const mxsim_qlayout& want, DLDevice device, const char* op);
/// The spec of a caller's quantized tensor.
const QuantSpec& spec_of(const mxsim_qtensor& q, const char* op, const char* what);
/// A host copy of a caller's (CPU) quantized tensor, checked against its spec's layout.
QuantizedTensor read_quantized(const mxsim_qtensor& q, const char* op, const char* what);
/// q's codes, scales and tensor scale into the caller's buffers (already checked).
void write_quantized(const QuantizedTensor& q, mxsim_qtensor& out);
/// The core description of a caller's quantized tensor (GemmPlan's operand).
GemmOperandDesc desc_of(const mxsim_qtensor& q, const char* op, const char* what);

// ---- host values (c_api_tensors.cpp)
/// A CPU tensor of float32, bfloat16 or float16 as float32 [groups, rows, cols] (exact widening).
Tensor3f host_f32(const DLTensor& t, const Extents3& e, const char* op, const char* what);
/// Values into a CPU float32 or bfloat16 tensor of the same element count (bfloat16: RNE; values
/// already BF16 are kept).
void write_f32(const float* v, size_t n, DLTensor& out, const char* op, const char* what);
void write_f32(const Tensor3f& v, DLTensor& out, const char* op, const char* what);

// ---- grouped GEMM (c_api_gemm.cpp)
struct GemmCall {
  GemmForm form = GemmForm::Fprop;
  std::vector<mxsim_gemm_operand> a, b;
  std::vector<int64_t> m_splits;
  DLTensor* out = nullptr;
  GemmOptions opt;
  GemmPlan plan;  ///< core's plan of the call (the output's shape is checked against it)
};
/// The call's arguments checked: what the C layer owns (counts, devices, the caller's buffers, the
/// output's dtype and shape), then core's plan (mxsim/gemm_plan.hpp). Nothing computed yet.
GemmCall gemm_call(int32_t form, const mxsim_gemm_operand* a, size_t na, const mxsim_gemm_operand* b, size_t nb,
                   const int64_t* m_splits, size_t groups, DLTensor* out, int32_t out_bf16, int32_t accumulate);
void cpu_grouped_gemm(const GemmCall& c);
/// A checked call with nothing to compute or write: every group empty, and no output element
/// (fprop / dgrad with M = 0) or dW left as it is (wgrad accumulating). Its backends return at once.
bool nothing_to_do(const GemmPlan& plan);
/// The output extents core's plan gives the call ({M, J} or {G, N, K}), the call checked as gemm_call does
/// but for its output.
std::vector<size_t> gemm_out_extents(int32_t form, const mxsim_gemm_operand* a, size_t na, const mxsim_gemm_operand* b,
                                     size_t nb, const int64_t* m_splits, size_t groups);

// ---- the GPU path (c_api_gpu.cpp; throws Unsupported in builds without a GPU backend)
bool gpu_built();
/// x: float32, or bfloat16 / float16 widened on the device first (exact). out's buffers are
/// checked against `layout` already; nothing is launched when x is refused.
void gpu_quantize(const DLTensor& x, const QuantSpec& s, Axis axis, const mxsim_qlayout& layout,
                  const mxsim_qtensor& out, void* stream);
/// out[g] already checked against layout[g] (mxsim_quantize_grouped_colwise).
void gpu_quantize_grouped_colwise(const DLTensor& x, const QuantSpec& s, const std::vector<int64_t>& m_splits,
                                  const std::vector<mxsim_qlayout>& layout, const mxsim_qtensor* out, void* stream);
void gpu_dequantize(const mxsim_qtensor& q, DLTensor& out, void* stream);
void gpu_grouped_gemm(const GemmCall& c, void* stream);

}  // namespace mxsim::capi

/// The opaque spec of the C interface.
struct mxsim_spec {
  mxsim::QuantSpec spec;
};
/// The opaque delayed-scaling state.
struct mxsim_delayed_scaling {
  mxsim::DelayedScaling state;
};
/// The opaque linear recipe.
struct mxsim_linear_recipe {
  mxsim::sim::LinearRecipe recipe;
};
