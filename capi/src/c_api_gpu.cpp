// The C interface on CUDA tensors: the GPU backend's quantizer and grouped
// GEMM (backends/hip) on the caller's device memory and stream, nothing
// copied to the host. Built only with the GPU backend (MXSIM_C_HAVE_GPU);
// without it every entry point refuses a CUDA tensor as Unsupported.
#include <cstring>
#include <string>

#include "c_api_internal.hpp"

#ifdef MXSIM_C_HAVE_GPU
#include "mxsim/hip/backend_hip.hpp"
#include "mxsim/hip/codec.hpp"
#include "mxsim/hip/device.hpp"
#include "mxsim/hip/gemm.hpp"
#include "mxsim/hip/quantize.hpp"
#endif

namespace mxsim::capi {

#ifndef MXSIM_C_HAVE_GPU

namespace {
[[noreturn]] void no_gpu(const char* op) {
  throw Unsupported(std::string(op) + ": a CUDA tensor, but this build of mxsim has no GPU backend "
                                      "(configure with -DMXSIM_GPU=nvidia or amd); CPU tensors run on the emulator");
}
}  // namespace

bool gpu_built() { return false; }
std::unique_ptr<Backend> gpu_backend(int) { no_gpu("mxsim_context_create"); }
void copy_to_host(const DLTensor& t, void* dst, size_t bytes, void*) {
  if (t.device.device_type == kDLCUDA) no_gpu("a copy to the host");
  if (bytes) std::memcpy(dst, data_of(t), bytes);
}
void gpu_call(int, const char* op, const std::function<void()>&) { no_gpu(op); }
void gpu_quantize(const DLTensor&, const QuantSpec&, Axis, const mxsim_qlayout&, const mxsim_qtensor&, void*) {
  no_gpu("mxsim_quantize");
}
void gpu_quantize_grouped_colwise(const DLTensor&, const QuantSpec&, const std::vector<int64_t>&,
                                  const std::vector<mxsim_qlayout>&, const mxsim_qtensor*, void*) {
  no_gpu("mxsim_quantize_grouped_colwise");
}
void gpu_dequantize(const mxsim_qtensor&, DLTensor&, void*) { no_gpu("mxsim_dequantize"); }
void gpu_grouped_gemm(const GemmCall&, void*) { no_gpu("mxsim_grouped_gemm"); }

#else

namespace {

/// Runs f on the tensor's device, with the GPU backend's exceptions mapped to the C layer's.
template <class F>
void on_device(const DLTensor& t, const char* op, F&& f) {
  std::string why;
  if (!hip::available(&why)) throw Unsupported(std::string(op) + ": a CUDA tensor, but no usable GPU: " + why);
  try {
    const hip::DeviceGuard on(t.device.device_id);  // the caller's current device is restored after
    f();
  } catch (const hip::OutOfMemory& e) {
    throw DeviceOutOfMemory(std::string(op) + ": " + e.what());
  } catch (const hip::Error& e) {
    throw DeviceError(std::string(op) + ": " + e.what());
  }
}

/// A caller's quantized tensor (already checked against its layout) as the GPU backend's view.
hip::DeviceQTensor device_view(const mxsim_qtensor& q, const GemmOperandDesc& d) {
  hip::DeviceQTensor t;
  t.spec = d.spec;
  t.layout = d.layout;
  t.data = static_cast<uint8_t*>(data_of(q.data));
  if (d.spec.scale_kind == ScaleKind::FP32) t.scale_inv = static_cast<float*>(data_of(q.scale));
  else t.scale_bytes = static_cast<uint8_t*>(data_of(q.scale));
  if (q.tensor_scale) t.tensor_scale_inv = static_cast<float*>(data_of(*q.tensor_scale));
  return t;
}

/// The float32 values of a CUDA tensor for the GPU quantizer (which reads FP32): x itself, or
/// nullptr for a bfloat16 / float16 x, which widen_on_device copies (exact; decode_device of its
/// codes). Refuses other dtypes before anything is launched.
const float* device_f32(const DLTensor& t, const char* op, const char* what) {
  if (is_f32(t)) return static_cast<const float*>(data_of(t));
  if (!is_bf16(t) && !is_f16(t))
    throw std::invalid_argument(std::string(op) + ": " + what + " on CUDA must be float32, bfloat16 or float16");
  return nullptr;  // widened inside on_device (widen_on_device), after the device is selected
}
/// The float32 copy of a 16-bit input in the stream's staging workspace: reused in stream order,
/// so the call returns without waiting and no other stream can be handed the memory while this
/// call's kernels read it (a DeviceBuffer freed on return could be: the block cache does not know
/// the caller's stream). `lock` holds the workspace until the caller's last launch.
const float* widen_on_device(const DLTensor& t, std::unique_lock<std::mutex>& lock, void* stream) {
  size_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= size_t(t.shape[i]);
  hip::StreamWorkspace& w = hip::stream_workspace(stream, hip::WorkspaceSlot::Staging);
  lock = std::unique_lock<std::mutex>(w.mutex());
  auto* p = reinterpret_cast<float*>(w.get(n * sizeof(float), stream, "float32 copy of a 16-bit input"));
  hip::decode_device(data_of(t), is_bf16(t) ? Format::BF16 : Format::FP16, p, n, stream);
  return p;
}

}  // namespace

bool gpu_built() { return true; }

void gpu_call(int device, const char* op, const std::function<void()>& f) {
  DLTensor where{};
  where.device = {kDLCUDA, device};
  on_device(where, op, f);
}

void copy_to_host(const DLTensor& t, void* dst, size_t bytes, void* stream) {
  if (t.device.device_type != kDLCUDA) {
    if (bytes) std::memcpy(dst, data_of(t), bytes);
    return;
  }
  gpu_call(t.device.device_id, "a copy to the host", [&] {
    hip::copy_to_host(dst, data_of(t), bytes, stream);  // waits for the stream
  });
}

std::unique_ptr<Backend> gpu_backend(int device) {
  std::unique_ptr<Backend> be;
  gpu_call(device, "mxsim_context_create", [&] { be = hip::make_backend(); });  // its stream on that device
  return be;
}

void gpu_quantize(const DLTensor& x, const QuantSpec& s, Axis axis, const mxsim_qlayout& layout,
                  const mxsim_qtensor& out, void* stream) {
  const char* op = "mxsim_quantize";
  std::unique_lock<std::mutex> staging;
  const float* px = device_f32(x, op, "x");
  GemmOperandDesc d;
  d.spec = s;
  d.layout = hd::quant_layout(s, size_t(layout.groups), size_t(layout.rows), size_t(layout.cols), axis);
  on_device(x, op, [&] {
    if (!px) px = widen_on_device(x, staging, stream);
    hip::quantize_device(px, device_view(out, d), stream);
  });
}

void gpu_quantize_grouped_colwise(const DLTensor& x, const QuantSpec& s, const std::vector<int64_t>& m_splits,
                                  const std::vector<mxsim_qlayout>& layout, const mxsim_qtensor* out, void* stream) {
  const char* op = "mxsim_quantize_grouped_colwise";
  std::unique_lock<std::mutex> staging;
  const float* px = device_f32(x, op, "x");
  std::vector<hip::DeviceQTensor> views;
  uint64_t m0 = 0;
  const size_t C = size_t(x.shape[1]);
  for (size_t g = 0; g < m_splits.size(); ++g) {
    GemmOperandDesc d;
    d.spec = row_slice_spec(s, m0, uint64_t(m_splits[g]), C);  // SR words by the elements' indices in x
    d.layout = hd::quant_layout(s, 1, size_t(layout[g].rows), C, Axis::Rows);
    views.push_back(device_view(out[g], d));
    m0 += uint64_t(m_splits[g]);
  }
  on_device(x, op, [&] {
    if (!px) px = widen_on_device(x, staging, stream);
    hip::quantize_grouped_colwise_device(px, size_t(x.shape[0]), C, m_splits, views, stream);
  });
}

void gpu_dequantize(const mxsim_qtensor& q, DLTensor& out, void* stream) {
  const char* op = "mxsim_dequantize";
  const GemmOperandDesc d = desc_of(q, op, "q");
  if (!is_f32(out)) throw std::invalid_argument(std::string(op) + ": out on CUDA must be float32");
  on_device(out, op, [&] { hip::dequantize_device(device_view(q, d), static_cast<float*>(data_of(out)), stream); });
}

void gpu_grouped_gemm(const GemmCall& c, void* stream) {
  const char* op = "mxsim_grouped_gemm";
  if (!is_f32(*c.out)) throw std::invalid_argument(std::string(op) + ": out on CUDA must be float32 (out_bf16 rounds it)");
  // BF16 operands on CUDA are read in place as bfloat16 codes: checked before anything else, so
  // that an empty call is refused as a full one is.
  for (const auto& [side, what] : {std::pair{&c.a, "a"}, std::pair{&c.b, "b"}})
    for (const mxsim_gemm_operand& o : *side)
      if (!o.q && !is_bf16(*o.bf16))
        throw std::invalid_argument(std::string(op) + ": " + what + ": a BF16 operand on CUDA must be bfloat16 "
                                    "(its codes are read in place); pass t.bfloat16()");
  if (nothing_to_do(c.plan)) return;  // checked: no device work, no device call
  auto operand = [&](const mxsim_gemm_operand& o, const char* what) {
    if (o.q) return hip::GemmOperand::from_quantized(device_view(*o.q, desc_of(*o.q, op, what)));
    const Extents3 e = extents3(*o.bf16, op, what);
    return hip::GemmOperand::from_bf16(static_cast<const uint16_t*>(data_of(*o.bf16)), e.groups, e.rows, e.cols);
  };
  std::vector<hip::GemmOperand> a, b;
  for (const mxsim_gemm_operand& o : c.a) a.push_back(operand(o, "a"));
  for (const mxsim_gemm_operand& o : c.b) b.push_back(operand(o, "b"));
  hip::GemmParams p;
  p.accumulate = c.opt.accumulate;
  p.out_bf16 = c.opt.out == Format::BF16;
  auto* y = static_cast<float*>(data_of(*c.out));
  on_device(*c.out, op, [&] {
    if (c.form == GemmForm::Fprop) hip::grouped_fprop(a[0], b[0], c.m_splits, y, p, stream);
    else if (c.form == GemmForm::Dgrad) hip::grouped_dgrad(a[0], b[0], c.m_splits, y, p, stream);
    else hip::grouped_wgrad(a, b, c.m_splits, y, p, stream);
  });
}

#endif

}  // namespace mxsim::capi
