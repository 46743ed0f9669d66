// Helpers of the GPU tests: moving QuantizedTensors between the emulator's
// host containers and the GPU's device layout (the same bytes), seeded
// adversarial inputs, and bit-for-bit comparison with counts.
#pragma once
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "mxsim/quantized_tensor.hpp"
#include "mxsim/tensor.hpp"

#ifdef MXSIM_HAVE_GPU
#include "mxsim/hip/device.hpp"
#include "mxsim/hip/quantize.hpp"

#define REQUIRE_GPU()                                                \
  do {                                                               \
    std::string why_;                                                \
    if (!::mxsim::hip::available(&why_)) GTEST_SKIP() << "no GPU: " << why_; \
  } while (0)

namespace gputest {
using namespace mxsim;

/// Device copy of a host QuantizedTensor (the layouts are the same bytes).
inline hip::DeviceQuantized upload(const QuantizedTensor& q, const std::string& name) {
  hip::DeviceQuantized d =
      hip::alloc_quantized(q.spec, q.groups, q.rows, q.cols, q.transposed ? Axis::Rows : Axis::Cols, name);
  const hd::QuantLayout& L = d.t.layout;
  // An empty tensor's layout flag carries nothing (emu marks every empty
  // wgrad group transposed, per-tensor specs included).
  if (q.groups * q.rows * q.cols != 0) {
    EXPECT_EQ(L.transposed, q.transposed) << name;
  }
  if (L.data_bytes()) {
    EXPECT_EQ(q.data.size(), L.data_bytes()) << name;
    d.data.upload(q.data.data(), L.data_bytes());
  }
  if (L.scale_count()) {
    if (q.spec.scale_kind == ScaleKind::FP32) d.scales.upload(q.scale_inv.data(), L.scale_count() * sizeof(float));
    else d.scales.upload(q.scale_bytes.data(), L.scale_count());
  }
  d.tensor_scale.upload(&q.tensor_scale_inv, sizeof(float));
  return d;
}

/// Host copy of a device tensor, as a QuantizedTensor of the same layout.
inline QuantizedTensor download(const hip::DeviceQTensor& t) {
  const hd::QuantLayout& L = t.layout;
  QuantizedTensor q = allocate_quantized(t.spec, L);
  if (L.data_bytes()) hip::copy_to_host(q.data.data(), t.data, L.data_bytes());
  if (t.spec.scale_kind == ScaleKind::FP32) {
    if (L.scale_count()) hip::copy_to_host(q.scale_inv.data(), t.scale_inv, L.scale_count() * sizeof(float));
  } else if (L.scale_count()) {
    hip::copy_to_host(q.scale_bytes.data(), t.scale_bytes, L.scale_count());
  }
  hip::copy_to_host(&q.tensor_scale_inv, t.tensor_scale_inv, sizeof(float));
  return q;
}

inline hip::DeviceBuffer upload_floats(const float* p, size_t n, const std::string& name) {
  hip::DeviceBuffer b(n * sizeof(float), name);
  b.upload(p, n * sizeof(float));
  return b;
}

/// Bits that differ between two arrays, with up to `report` examples.
inline size_t count_bit_diffs(const float* a, const float* b, size_t n, const std::string& what, int report = 5) {
  size_t d = 0;
  for (size_t i = 0; i < n; ++i)
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i]) && d++ < size_t(report))
      ADD_FAILURE() << what << " element " << i << ": want 0x" << std::hex << std::bit_cast<uint32_t>(a[i]) << " got 0x"
                    << std::bit_cast<uint32_t>(b[i]) << std::dec;
  return d;
}

/// Seeded adversarial FP32 source: rows of very different magnitudes
/// (2^-40 .. 2^40), and at the given rate zeros, NaN, +-Inf, subnormals,
/// FP32's largest values, exact element ties (odd multiples of 2^k / 4).
inline Tensor3f adversarial(std::mt19937& g, size_t groups, size_t rows, size_t cols, int special_pct, int spread = 40) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-spread, spread);
  Tensor3f x = Tensor3f::from_shape({groups, rows, cols});
  for (size_t gg = 0; gg < groups; ++gg)
    for (size_t r = 0; r < rows; ++r) {
      const int rs = ex(g);
      for (size_t c = 0; c < cols; ++c) {
        float v = std::ldexp(nd(g), rs);
        if (int(g() % 100) < special_pct) {
          switch (g() % 8) {
            case 0: v = 0.0f; break;
            case 1: v = -0.0f; break;
            case 2: v = NAN; break;
            case 3: v = (g() & 1) ? INFINITY : -INFINITY; break;
            case 4: v = std::bit_cast<float>(uint32_t(1 + g() % 0x7FFFFF)); break;
            case 5: v = (g() & 1) ? 3.0e38f : -3.4028235e38f; break;
            case 6: v = std::ldexp(float(2 * (g() % 8) + 1), rs - 2); break;  // halfway points of coarse grids
            default: v = std::ldexp(1.0f, rs); break;
          }
        }
        x(gg, r, c) = v;
      }
    }
  return x;
}

}  // namespace gputest
#endif
