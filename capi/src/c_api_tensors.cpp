// DLTensors of the C interface: views, the caller's quantized buffers, and the
// CPU path's conversions (c_api_internal.hpp).
#include <cstring>
#include <string>

#include "c_api_internal.hpp"
#include "mxsim/hd/quant_block.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::capi {

namespace {

[[noreturn]] void fail(const char* op, const std::string& msg) { throw std::invalid_argument(std::string(op) + ": " + msg); }

std::string dtype_str(const DLDataType& d) {
  const char* code = d.code == kDLFloat ? "float" : d.code == kDLBfloat ? "bfloat" : d.code == kDLUInt ? "uint"
                     : d.code == kDLInt ? "int" : nullptr;
  std::string s = code ? code + std::to_string(d.bits)
                       : "dtype (DLPack code " + std::to_string(d.code) + ", " + std::to_string(d.bits) + " bits)";
  if (d.lanes != 1) s += " x " + std::to_string(d.lanes) + " lanes";
  return s;
}

std::string device_str(const DLDevice& d) {
  if (d.device_type == kDLCPU) return "cpu";
  if (d.device_type == kDLCUDA) return "cuda:" + std::to_string(d.device_id);
  return "device type " + std::to_string(int(d.device_type));
}

bool dtype_is(const DLTensor& t, uint8_t code, uint8_t bits) {
  return t.dtype.code == code && t.dtype.bits == bits && t.dtype.lanes == 1;
}

void check_device(const DLTensor& t, const char* op, const char* what) {
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDA)
    fail(op, std::string(what) + " is on " + device_str(t.device) + "; mxsim runs CPU and CUDA tensors");
}

/// A caller buffer of exactly n elements of one of the accepted dtypes.
void check_buffer(const DLTensor& t, size_t n, bool bytes, DLDevice device, const char* op, const char* what) {
  check_device(t, op, what);
  if (t.device.device_type != device.device_type || t.device.device_id != device.device_id)
    fail(op, std::string(what) + " is on " + device_str(t.device) + ", the call's other tensors on " + device_str(device));
  check_contiguous(t, op, what);
  if (bytes ? !is_byte(t) : !is_f32(t))
    fail(op, std::string(what) + " is " + dtype_str(t.dtype) + ", expected " + (bytes ? "a byte dtype (uint8)" : "float32"));
  if (numel(t, op, what) != n)
    fail(op, std::string(what) + " " + shape_str(t) + " holds " + std::to_string(numel(t, op, what)) +
                 " elements, the layout needs " + std::to_string(n));
  if (n && !t.data) fail(op, std::string(what) + " has no data");
}

}  // namespace

std::string shape_str(const DLTensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

size_t numel(const DLTensor& t, const char* op, const char* what) {
  size_t n = 1;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] < 0) fail(op, std::string(what) + " has a negative extent " + shape_str(t));
    n *= size_t(t.shape[i]);
  }
  return n;
}

void check_contiguous(const DLTensor& t, const char* op, const char* what) {
  if (!t.strides) return;
  for (int i = 0; i < t.ndim; ++i)
    if (t.shape[i] == 0) return;  // no elements: any strides describe the same (empty) storage
  int64_t want = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != want)
      fail(op, std::string(what) + " is not contiguous (shape " + shape_str(t) +
                   "); mxsim reads row-major storage in place: pass t.contiguous()");
    want *= t.shape[i];
  }
}

Extents3 extents3(const DLTensor& t, const char* op, const char* what) {
  check_device(t, op, what);
  if (t.ndim != 2 && t.ndim != 3)
    fail(op, std::string(what) + " must have rank 2 [rows, cols] or 3 [groups, rows, cols], has shape " + shape_str(t));
  (void)numel(t, op, what);
  check_contiguous(t, op, what);
  Extents3 e;
  if (t.ndim == 3) e.groups = size_t(t.shape[0]);
  e.rows = size_t(t.shape[t.ndim - 2]);
  e.cols = size_t(t.shape[t.ndim - 1]);
  return e;
}

void* data_of(const DLTensor& t) { return static_cast<char*>(t.data) + t.byte_offset; }
bool is_f32(const DLTensor& t) { return dtype_is(t, kDLFloat, 32); }
bool is_bf16(const DLTensor& t) { return dtype_is(t, kDLBfloat, 16); }
bool is_f16(const DLTensor& t) { return dtype_is(t, kDLFloat, 16); }
bool is_byte(const DLTensor& t) { return t.dtype.bits == 8 && t.dtype.lanes == 1; }

void check_same_device(const DLTensor& a, const DLTensor& b, const char* op, const char* what) {
  if (a.device.device_type != b.device.device_type || a.device.device_id != b.device.device_id)
    fail(op, std::string(what) + " is on " + device_str(b.device) + ", the call's other tensors on " + device_str(a.device));
}

int32_t c_scale_kind(ScaleKind k) {
  return k == ScaleKind::E8M0 ? MXSIM_SCALE_E8M0 : k == ScaleKind::FP32 ? MXSIM_SCALE_FP32 : MXSIM_SCALE_UE4M3;
}

mxsim_qlayout c_layout(const QuantSpec& s, int64_t groups, int64_t rows, int64_t cols, Axis axis) {
  if (groups < 0 || rows < 0 || cols < 0)
    throw std::invalid_argument("quantized layout: negative extent [" + std::to_string(groups) + ", " +
                                std::to_string(rows) + ", " + std::to_string(cols) + "]");
  const hd::QuantLayout L = hd::quant_layout(s, size_t(groups), size_t(rows), size_t(cols), axis);
  mxsim_qlayout c{};
  c.groups = groups;
  c.rows = rows;
  c.cols = cols;
  c.transposed = L.transposed;
  c.scale_kind = c_scale_kind(s.scale_kind);
  c.srows = int64_t(L.srows);
  c.scols = int64_t(L.scols);
  c.row_bytes = int64_t(L.rbytes);
  c.scale_rows = int64_t(L.nbr);
  c.scale_cols = int64_t(L.nbc);
  c.elem_bits = spec_of(s.elem).bits;
  c.has_tensor_scale = has_tensor_scale(s.scale_kind);
  return c;
}

void check_qtensor_buffers(const mxsim_qtensor& q, const mxsim_qlayout& want, DLDevice device, const char* op) {
  const size_t groups = size_t(want.groups);
  check_buffer(q.data, groups * size_t(want.srows) * size_t(want.row_bytes), true, device, op, "codes (data)");
  check_buffer(q.scale, groups * size_t(want.scale_rows) * size_t(want.scale_cols), want.scale_kind != MXSIM_SCALE_FP32,
               device, op, "scales (scale)");
  if (want.has_tensor_scale) {
    if (!q.tensor_scale) fail(op, "an NVFP4 tensor needs its float32 tensor scale (tensor_scale)");
    check_buffer(*q.tensor_scale, 1, false, device, op, "tensor_scale");
  }
}

const QuantSpec& spec_of(const mxsim_qtensor& q, const char* op, const char* what) {
  if (!q.spec) fail(op, std::string(what) + " has no spec");
  return q.spec->spec;
}

GemmOperandDesc desc_of(const mxsim_qtensor& q, const char* op, const char* what) {
  const QuantSpec& s = spec_of(q, op, what);
  const mxsim_qlayout& c = q.layout;
  // The layout the caller declares must be one the spec gives for its shape (either axis).
  const mxsim_qlayout cols = c_layout(s, c.groups, c.rows, c.cols, Axis::Cols);
  const mxsim_qlayout rows = c_layout(s, c.groups, c.rows, c.cols, Axis::Rows);
  const bool transposed = c.transposed != 0;
  const mxsim_qlayout& want = transposed == (cols.transposed != 0) ? cols : rows;
  if ((want.transposed != 0) != transposed)
    fail(op, std::string(what) + ": layout says transposed = " + std::to_string(c.transposed) + ", which " +
                 (s.elem == Format::BF16 ? std::string("bf16") : s.describe()) + " never stores");
  check_qtensor_buffers(q, want, q.data.device, op);
  GemmOperandDesc d;
  d.spec = s;
  d.layout = hd::quant_layout(s, size_t(c.groups), size_t(c.rows), size_t(c.cols), transposed ? Axis::Rows : Axis::Cols);
  return d;
}

QuantizedTensor read_quantized(const mxsim_qtensor& q, const char* op, const char* what) {
  const GemmOperandDesc d = desc_of(q, op, what);
  QuantizedTensor h = allocate_quantized(d.spec, d.layout);
  if (h.data.size()) std::memcpy(h.data.data(), data_of(q.data), h.data.size());
  if (d.spec.scale_kind == ScaleKind::FP32) {
    if (h.scale_inv.size()) std::memcpy(h.scale_inv.data(), data_of(q.scale), h.scale_inv.size() * 4);
    if (d.spec.scale_convention == ScaleConvention::TorchaoTraining) h.fp32_scale_use = Fp32ScaleUse::DivideByScale;
  } else if (h.scale_bytes.size()) {
    std::memcpy(h.scale_bytes.data(), data_of(q.scale), h.scale_bytes.size());
  }
  if (has_tensor_scale(d.spec.scale_kind)) std::memcpy(&h.tensor_scale_inv, data_of(*q.tensor_scale), 4);
  return h;
}

void write_quantized(const QuantizedTensor& q, mxsim_qtensor& out) {
  if (q.data.size()) std::memcpy(data_of(out.data), q.data.data(), q.data.size());
  if (q.spec.scale_kind == ScaleKind::FP32) {
    if (q.scale_inv.size()) std::memcpy(data_of(out.scale), q.scale_inv.data(), q.scale_inv.size() * 4);
  } else if (q.scale_bytes.size()) {
    std::memcpy(data_of(out.scale), q.scale_bytes.data(), q.scale_bytes.size());
  }
  if (has_tensor_scale(q.spec.scale_kind)) std::memcpy(data_of(*out.tensor_scale), &q.tensor_scale_inv, 4);
}

Tensor3f host_f32(const DLTensor& t, const Extents3& e, const char* op, const char* what) {
  if (t.device.device_type != kDLCPU) fail(op, std::string(what) + " is not a CPU tensor");
  Tensor3f x = Tensor3f::from_shape({e.groups, e.rows, e.cols});
  const size_t n = x.size();
  if (n && !t.data) fail(op, std::string(what) + " has no data");
  float* dst = x.data();
  if (is_f32(t)) {
    if (n) std::memcpy(dst, data_of(t), n * 4);
  } else if (is_bf16(t)) {
    const auto* src = static_cast<const uint16_t*>(data_of(t));
    for (size_t i = 0; i < n; ++i) dst[i] = f32_from_bits(uint32_t(src[i]) << 16);
  } else if (is_f16(t)) {
    const auto* src = static_cast<const uint16_t*>(data_of(t));
    for (size_t i = 0; i < n; ++i) dst[i] = decode(spec_of(Format::FP16), src[i]);
  } else {
    fail(op, std::string(what) + " is " + dtype_str(t.dtype) + ", expected float32, bfloat16 or float16");
  }
  return x;
}

void write_f32(const float* v, size_t n, DLTensor& out, const char* op, const char* what) {
  if (n && !out.data) fail(op, std::string(what) + " has no data");
  if (is_f32(out)) {
    if (n) std::memcpy(data_of(out), v, n * 4);
  } else if (is_bf16(out)) {
    auto* dst = static_cast<uint16_t*>(data_of(out));
    for (size_t i = 0; i < n; ++i) dst[i] = uint16_t(round_bf16_code(f32_bits(v[i])));
  } else {
    fail(op, std::string(what) + " is " + dtype_str(out.dtype) + ", expected float32 or bfloat16");
  }
}

void write_f32(const Tensor3f& v, DLTensor& out, const char* op, const char* what) {
  write_f32(v.data(), v.size(), out, op, what);
}

// The two spellings of a QuantStats (core's and the C interface's): the only place fields map.
QuantStats quant_stats_of(const mxsim_qstats& s) {
  QuantStats q;
  q.count = s.count, q.nonfinite_in = s.nonfinite_in, q.nan_out = s.nan_out;
  q.underflow = s.underflow, q.saturated = s.saturated;
  q.mse = s.mse, q.max_abs_err = s.max_abs_err, q.signal_power = s.signal_power, q.sqnr_db = s.sqnr_db;
  q.mean_err = s.mean_err, q.rounded = s.rounded, q.rounded_up = s.rounded_up, q.expected_up = s.expected_up;
  q.tensor_scale_inv = s.tensor_scale_inv;
  return q;
}

mxsim_qstats qstats_of(const QuantStats& s) {
  return mxsim_qstats{s.count,   s.nonfinite_in, s.nan_out,      s.underflow, s.saturated, s.mse,
                      s.max_abs_err, s.signal_power, s.sqnr_db, s.mean_err, s.rounded,   s.rounded_up,
                      s.expected_up, s.tensor_scale_inv};
}

}  // namespace mxsim::capi
