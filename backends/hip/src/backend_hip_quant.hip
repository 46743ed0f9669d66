// HIP Backend ops: quantization (the kernels of quantize.hpp), dequantization,
// error statistics, scale-exponent histogram, amax, BF16 rounding
// (docs/numerics.md §2-§4, §6). Element arithmetic: hd/quant_block.hpp,
// hd/elementwise.hpp; sums: the fixed tree of tree_sum.hpp.
#include "tree_sum.hpp"

#include <climits>
#include <cmath>

#include "mxsim/hd/elementwise.hpp"
#include "mxsim/hip/gemm.hpp"
#include "mxsim/hd/quant_block.hpp"
#include "mxsim/quantized_tensor.hpp"
#include "mxsim/rounding.hpp"

namespace mxsim::hip {

using detail::grid_for;
using hd::QuantLayout;

namespace {

constexpr unsigned kThreads = 256;

// Logical [groups, rows, cols] of a dense source tensor: rank 2 is one group.
struct Dims3 {
  size_t g, r, c;
};
Dims3 dims3(const Tensor& x, const char* op) {
  if (x.rank() == 3) return {x.dim(0), x.dim(1), x.dim(2)};
  if (x.rank() == 2) return {1, x.dim(0), x.dim(1)};
  throw std::invalid_argument(std::string(op) + ": x must have rank 2 or 3, has shape " + x.shape().str());
}

// Storage coordinates of logical element i of q.
struct StorageAt {
  size_t g, r, c;
};
__device__ inline StorageAt storage_at(const QuantLayout& L, size_t i) {
  const size_t g = i / (L.rows * L.cols), lr = (i / L.cols) % L.rows, lc = i % L.cols;
  return L.transposed ? StorageAt{g, lc, lr} : StorageAt{g, lr, lc};
}
__device__ inline uint32_t code_at(const DeviceQTensor& q, const StorageAt& s) {
  const QuantLayout& L = q.layout;
  const bool e2m1 = q.spec.elem == Format::E2M1;
  const uint8_t b = q.data[(s.g * L.srows + s.r) * L.rbytes + (e2m1 ? s.c / 2 : s.c)];
  return e2m1 ? ((s.c & 1) ? b >> 4 : b & 0xFu) : b;
}
__device__ inline size_t block_at(const QuantLayout& L, const StorageAt& s) {
  return (s.g * L.nbr + s.r / L.br) * L.nbc + s.c / L.bc;
}
// The tensor scale: NVFP4's S_dec, 1 for every other kind (a caller's tensor, e.g. through the C
// interface, may have no tensor-scale buffer then).
__device__ inline float tensor_scale_of(const DeviceQTensor& q) { return q.tensor_scale_inv ? *q.tensor_scale_inv : 1.0f; }
// Value (exact) and representable maximum of logical element i.
__device__ inline float dequant_at(const DeviceQTensor& q, const StorageAt& s, float e) {
  const size_t b = block_at(q.layout, s);
  return hd::dequant_value(q.spec.scale_kind, e, q.scale_bytes ? q.scale_bytes[b] : uint8_t(0),
                           q.scale_inv ? q.scale_inv[b] : 0.0f, tensor_scale_of(q));
}
__device__ inline float block_max_at(const DeviceQTensor& q, const StorageAt& s, float emax) {
  const size_t b = block_at(q.layout, s);
  return hd::block_max_value(q.spec.scale_kind, emax, q.scale_bytes ? q.scale_bytes[b] : uint8_t(0),
                             q.scale_inv ? q.scale_inv[b] : 0.0f, tensor_scale_of(q));
}

__global__ void dequantize_kernel(DeviceQTensor q, float* __restrict__ out) {
  const QuantLayout& L = q.layout;
  const size_t n = L.groups * L.rows * L.cols;
  const FormatSpec ef = spec_of(q.spec.elem);
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const StorageAt s = storage_at(L, i);
    out[i] = dequant_at(q, s, decode(ef, code_at(q, s)));
  }
}

// H x along the storage rows in runs of 16 (the reference of a hadamard16
// spec's statistics, numerics.md §2.6): one thread per run.
__global__ void hadamard_source_kernel(const float* __restrict__ x, QuantLayout L, uint16_t signs, float* __restrict__ h) {
  const size_t runs = L.groups * L.srows * (L.scols / 16);
  for (size_t u = size_t(blockIdx.x) * blockDim.x + threadIdx.x; u < runs; u += size_t(gridDim.x) * blockDim.x) {
    const size_t per_row = L.scols / 16, g = u / (L.srows * per_row), r = (u / per_row) % L.srows,
                 c0 = (u % per_row) * 16;
    // Run element k sits at base + k * step of the logical array.
    const size_t base = L.transposed ? (g * L.rows + c0) * L.cols + r : (g * L.rows + r) * L.cols + c0;
    const size_t step = L.transposed ? L.cols : 1;
    float v[16];
    for (int k = 0; k < 16; ++k) v[k] = x[base + size_t(k) * step];
    hd::hadamard16(v, signs);
    for (int k = 0; k < 16; ++k) h[base + size_t(k) * step] = v[k];
  }
}

// The statistics of numerics.md §4.6 as one tree reduction: components
// 0 sum e^2, 1 sum x^2 (tree sums), 2 max |e| (max), 3 pairs compared,
// 4 nonfinite_in, 5 nan_out, 6 underflow, 7 saturated (exact counts),
// 8 sum (d - x) (tree sum), 9 rounded, 10 rounded_up (exact counts), 11 sum p_up
// (tree sum; hd::rounding_choice).
struct StatsFold {
  const float* x;
  DeviceQTensor q;
  float emax;
  __device__ void operator()(size_t i, double* acc) const {
    const StorageAt s = storage_at(q.layout, i);
    const float xv = x[i];
    const float dv = dequant_at(q, s, decode(spec_of(q.spec.elem), code_at(q, s)));
    const bool finite = isfinite(xv);
    if (!finite) acc[4] = acc[4] + 1.0;
    if (isnan(dv)) acc[5] = acc[5] + 1.0;
    if (finite && xv != 0.0f && dv == 0.0f) acc[6] = acc[6] + 1.0;
    if (finite && fabsf(xv) > block_max_at(q, s, emax)) acc[7] = acc[7] + 1.0;
    if (finite && !isnan(dv)) {
      const double e = double(xv) - double(dv);
      acc[0] = acc[0] + e * e;
      acc[1] = acc[1] + double(xv) * double(xv);
      const double ae = fabs(e);
      acc[2] = acc[2] < ae ? ae : acc[2];
      acc[3] = acc[3] + 1.0;
      acc[8] = acc[8] + (double(dv) - double(xv));
    }
    const size_t b = block_at(q.layout, s);
    const hd::RoundingChoice rc = hd::rounding_choice(q.spec.scale_kind, spec_of(q.spec.elem), xv, code_at(q, s),
                                                      q.scale_bytes ? q.scale_bytes[b] : uint8_t(0), tensor_scale_of(q));
    if (rc.between) {
      acc[9] = acc[9] + 1.0;
      if (rc.up) acc[10] = acc[10] + 1.0;
      acc[11] = acc[11] + rc.p_up;
    }
  }
};

// amax (hd::amax_step's fold, numerics.md §6): component 0 max |x| over the
// non-NaN elements, 1 the index of the first NaN (min).
struct AmaxFold {
  const float* x;
  __device__ void operator()(size_t i, double* acc) const {
    const float v = x[i];
    if (isnan(v)) {
      acc[1] = double(i) < acc[1] ? double(i) : acc[1];
    } else {
      const double a = double(fabsf(v));
      acc[0] = acc[0] < a ? a : acc[0];
    }
  }
};

__global__ void round_bf16_kernel(const float* __restrict__ src, float* __restrict__ dst, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = round_bf16(src[i]);
}

}  // namespace

QTensor HipBackend::quantize_impl(const Tensor& x, const QuantSpec& spec, Axis axis) {
  const Dims3 d = dims3(x, "quantize");
  const float* px = f32(x, "quantize", "x");
  DeviceQuantized q = alloc_quantized(spec, d.g, d.r, d.c, axis, "quantized " + x.shape().str());
  quantize_device(px, q.t, stream_ptr());
  const bool tr = q.t.layout.transposed;
  return QTensor(std::make_shared<HipQBuffer>(this, std::move(q)), spec, d.g, d.r, d.c, tr);
}

GroupedQTensor HipBackend::quantize_grouped_colwise_impl(const Tensor& x, std::span<const int64_t> ms,
                                                    const QuantSpec& spec) {
  const float* px = mat(x, "quantize_grouped_colwise", "x");
  const size_t M = x.dim(0), C = x.dim(1);
  std::vector<DeviceQuantized> qs = alloc_grouped_colwise(spec, C, ms, "wgrad operand");
  std::vector<DeviceQTensor> views;
  for (const DeviceQuantized& q : qs) views.push_back(q.t);
  quantize_grouped_colwise_device(px, M, C, ms, views, stream_ptr());
  return GroupedQTensor(std::make_shared<HipGroupedQBuffer>(this, std::move(qs)), spec,
                        std::vector<int64_t>(ms.begin(), ms.end()), C);
}

void dequantize_device(const DeviceQTensor& q, float* d_out, void* stream) {
  const QuantLayout& L = q.layout;
  const size_t n = L.groups * L.rows * L.cols;
  if (n == 0) return;
  dequantize_kernel<<<grid_for(n, kThreads), kThreads, 0, detail::stream_of(stream)>>>(q, d_out);
  MXSIM_HIP_CHECK_LAUNCH("dequantize_kernel");
}

void HipBackend::dequantize_impl(const QTensor& qh, Tensor& out) {
  const DeviceQuantized& q = dev(qh, "dequantize", "q");
  dequantize_device(q.t, f32(out, "dequantize", "out"), stream_ptr());
}

void HipBackend::quant_stats_deferred_impl(const Tensor& x, const QTensor& qh, QuantStats* dst) {
  const DeviceQuantized& q = dev(qh, "quant_stats", "q");
  const QuantLayout& L = q.t.layout;
  const Dims3 d = dims3(x, "quant_stats");
  const float* px = f32(x, "quant_stats", "x");
  const size_t n = x.numel();
  DeviceBuffer h;
  if (q.t.spec.hadamard16 && n) {  // the statistics' reference is H x (numerics.md §2.6)
    h = DeviceBuffer(n * sizeof(float), "Hadamard statistics source");
    MXSIM_HIP_CHECK(hipMemcpyAsync(h.get(), px, n * sizeof(float), hipMemcpyDeviceToDevice, stream_));
    const size_t runs = L.groups * L.srows * (L.scols / 16);
    if (runs) {
      hadamard_source_kernel<<<grid_for(runs, kThreads), kThreads, 0, stream_>>>(px, L, q.t.spec.hadamard16_signs, h.as<float>());
      MXSIM_HIP_CHECK_LAUNCH("hadamard_source_kernel");
    }
    px = h.as<float>();
  }
  const StatsFold fold{px, q.t, hd::elem_max(spec_of(q.t.spec.elem))};
  detail::tree_reduce_later<12>(*this, fold, n, detail::TreeOps{1u << 2, 0}, [dst, n](const std::array<double, 12>& r) {
    QuantStats s;
    s.count = n;
    s.nonfinite_in = size_t(r[4]);
    s.nan_out = size_t(r[5]);
    s.underflow = size_t(r[6]);
    s.saturated = size_t(r[7]);
    set_error_stats(s, size_t(r[3]), r[0], r[1], r[2], r[8]);  // r[3]: pairs compared (exact count)
    s.rounded = size_t(r[9]);
    s.rounded_up = size_t(r[10]);
    s.expected_up = r[11];
    *dst = s;
  });
  // The second level of the scale rides along, copied (its callback runs after the sums'):
  fetch_later(q.t.tensor_scale_inv, sizeof(float),
              [dst](const std::byte* h) { std::memcpy(&dst->tensor_scale_inv, h, sizeof(float)); });
}
QuantStats HipBackend::quant_stats_impl(const Tensor& x, const QTensor& q) {
  return now<QuantStats>([&](QuantStats* d) { quant_stats_deferred_impl(x, q, d); });
}

// The scale exponent histogram on the device: hd::scale_exp_bin of every block (the host's
// scale_exp_counts bins with it), counted in shared memory, then added into 256 global counts
// (integer atomics: the counts do not depend on the order), and only those 2 KiB reach the host.
__global__ void scale_exp_histogram_kernel(DeviceQTensor q, size_t nblocks, unsigned long long* __restrict__ counts) {
  __shared__ unsigned int bins[256];
  for (unsigned i = threadIdx.x; i < 256; i += blockDim.x) bins[i] = 0;
  __syncthreads();
  const ScaleKind kind = q.spec.scale_kind;
  const float ts = has_tensor_scale(kind) ? *q.tensor_scale_inv : 1.0f;
  for (size_t b = size_t(blockIdx.x) * blockDim.x + threadIdx.x; b < nblocks; b += size_t(gridDim.x) * blockDim.x) {
    const unsigned bin = kind == ScaleKind::FP32 ? hd::scale_exp_bin(kind, 0, q.scale_inv[b], 1.0f)
                                                 : hd::scale_exp_bin(kind, q.scale_bytes[b], 0.0f, ts);
    atomicAdd(&bins[bin], 1u);
  }
  __syncthreads();
  for (unsigned i = threadIdx.x; i < 256; i += blockDim.x)
    if (bins[i]) atomicAdd(&counts[i], (unsigned long long)bins[i]);
}

void HipBackend::scale_exp_histogram_deferred_impl(const QTensor& qh, ScaleExpCounts* dst) {
  const DeviceQuantized& d = dev(qh, "scale_exp_histogram", "q");
  const size_t nb = d.t.layout.scale_count();
  *dst = ScaleExpCounts{};
  if (nb == 0) return;
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t));
  DeviceBuffer counts(256 * sizeof(uint64_t), "scale exponent histogram");
  MXSIM_HIP_CHECK(hipMemsetAsync(counts.get(), 0, counts.size(), stream_));
  const unsigned grid = unsigned(std::min<size_t>((nb + kThreads - 1) / kThreads, 1024));
  scale_exp_histogram_kernel<<<grid, kThreads, 0, stream_>>>(d.t, nb, counts.as<unsigned long long>());
  MXSIM_HIP_CHECK_LAUNCH("scale_exp_histogram_kernel");
  fetch_later(counts.get(), 256 * sizeof(uint64_t),
              [dst](const std::byte* h) { std::memcpy(dst->data(), h, 256 * sizeof(uint64_t)); });
}
ScaleExpCounts HipBackend::scale_exp_histogram_impl(const QTensor& q) {
  return now<ScaleExpCounts>([&](ScaleExpCounts* d) { scale_exp_histogram_deferred_impl(q, d); });
}

// One kernel reads each element's code and its block's scale into a small
// record array, one copy brings it (and the tensor scale) to the host, and
// the values are computed there by the same hd::dequant_value.
struct QuantElementRec {
  float scale_inv;
  uint8_t code, scale_byte;
};
__global__ void quant_elements_kernel(DeviceQTensor q, const int64_t* __restrict__ idx, size_t n,
                                      QuantElementRec* __restrict__ out) {
  for (size_t j = size_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += size_t(gridDim.x) * blockDim.x) {
    const StorageAt s = storage_at(q.layout, size_t(idx[j]));
    const size_t b = block_at(q.layout, s);
    out[j] = {q.scale_inv ? q.scale_inv[b] : 0.0f, uint8_t(code_at(q, s)), q.scale_bytes ? q.scale_bytes[b] : uint8_t(0)};
  }
}

void HipBackend::quant_elements_deferred_impl(const QTensor& qh, std::span<const int64_t> idx, QuantElements* dst) {
  const DeviceQTensor& q = dev(qh, "quant_elements", "q").t;
  const size_t n = idx.size();
  *dst = QuantElements{};
  if (n == 0) return;
  const Tensor di = device_indices(idx);
  DeviceBuffer recs(n * sizeof(QuantElementRec) + sizeof(float), "watched element records");
  auto* pr = reinterpret_cast<QuantElementRec*>(recs.get());
  quant_elements_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_>>>(q, data<int64_t>(di, "quant_elements", "indices"),
                                                                        n, pr);
  MXSIM_HIP_CHECK_LAUNCH("quant_elements_kernel");
  MXSIM_HIP_CHECK(hipMemcpyAsync(pr + n, q.tensor_scale_inv, sizeof(float), hipMemcpyDeviceToDevice, stream_));
  fetch_later(recs.get(), n * sizeof(QuantElementRec) + sizeof(float),
              [dst, n, kind = q.spec.scale_kind, elem = q.spec.elem](const std::byte* h) {
                std::vector<QuantElementRec> r(n);
                std::memcpy(r.data(), h, n * sizeof(QuantElementRec));
                float ts;
                std::memcpy(&ts, h + n * sizeof(QuantElementRec), sizeof ts);
                const FormatSpec ef = spec_of(elem);
                QuantElements o;
                for (const QuantElementRec& e : r) {
                  o.code.push_back(e.code);
                  o.scale_bytes.push_back(e.scale_byte);
                  o.scale_inv.push_back(e.scale_inv);
                  o.value.push_back(hd::dequant_value(kind, decode(ef, e.code), e.scale_byte, e.scale_inv, ts));
                }
                *dst = std::move(o);
              });
}

// amax's result from the reduction's record, on the device while x is still there (in stream
// order): the first NaN as it is (rec[1], its index; +inf when none), else the largest magnitude
// (rec[0], an FP32 value, exact in FP64).
__global__ void amax_from_record_kernel(const double* __restrict__ rec, const float* __restrict__ x,
                                        float* __restrict__ out) {
  *out = isinf(rec[1]) ? float(rec[0]) : x[size_t(rec[1])];
}

void HipBackend::amax_deferred_impl(const Tensor& x, float* dst) {
  const float* px = f32(x, "amax", "x");
  const size_t n = x.numel();
  if (n == 0) {  // the fold's start, as the emulator's
    *dst = 0.0f;
    return;
  }
  const DeviceBuffer rec = detail::tree_reduce_device<2>(*this, AmaxFold{px}, n, detail::TreeOps{1u << 0, 1u << 1});
  DeviceBuffer out(sizeof(float), "amax");
  amax_from_record_kernel<<<1, 1, 0, stream_>>>(rec.as<double>(), px, out.as<float>());
  MXSIM_HIP_CHECK_LAUNCH("amax_from_record_kernel");
  fetch_later(out.get(), sizeof(float), [dst](const std::byte* h) { std::memcpy(dst, h, sizeof(float)); });
}
float HipBackend::amax_impl(const Tensor& x) {
  return now<float>([&](float* d) { amax_deferred_impl(x, d); });
}

void HipBackend::round_bf16_impl(Tensor& x) { round_bf16(x, x); }
void HipBackend::round_bf16_impl(const Tensor& src, Tensor& dst) {
  const float* s = f32(src, "round_bf16", "src");
  const size_t n = src.numel();
  if (dst.dtype() == DType::bf16) {  // the bit patterns (the codec's BF16 encoder: the same RNE)
    if (n) round_bf16_device(s, static_cast<uint16_t*>(raw(dst, "round_bf16", "dst")), n, stream_ptr());
    return;
  }
  float* d = f32(dst, "round_bf16", "dst");
  if (n == 0) return;
  round_bf16_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_>>>(s, d, n);
  MXSIM_HIP_CHECK_LAUNCH("round_bf16_kernel");
}

}  // namespace mxsim::hip
