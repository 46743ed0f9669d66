#include "mxsim/quantized_tensor.hpp"

#include "mxsim/hd/quant_block.hpp"

#include <cstring>
#include <stdexcept>
#include <utility>

namespace mxsim {

QuantizedTensor transpose_logical(QuantizedTensor q) {
  std::swap(q.rows, q.cols);
  q.transposed = !q.transposed;
  return q;
}

QuantizedTensor slice_rows(const QuantizedTensor& q, size_t r0, size_t n, const std::string& what) {
  if (q.groups != 1) throw std::invalid_argument(what + ": a slice of rows needs groups = 1, has " + std::to_string(q.groups));
  if (r0 > q.rows || n > q.rows - r0)
    throw std::invalid_argument(what + ": rows [" + std::to_string(r0) + ", " + std::to_string(r0 + n) + ") pass its " +
                                std::to_string(q.rows) + " rows");
  QuantizedTensor s;
  s.spec = q.spec;
  s.groups = 1;
  s.rows = n;
  s.cols = q.cols;
  s.transposed = q.transposed;
  s.tensor_scale_inv = q.tensor_scale_inv;
  s.fp32_scale_use = q.fp32_scale_use;
  if (n == 0) return s;  // no elements, so no block to cut
  // Logical rows are storage rows, or storage cols when transposed.
  const int spec_ext = q.transposed ? q.spec.block_cols : q.spec.block_rows;
  const size_t ext = q.transposed ? q.block_cols() : q.block_rows();
  const bool shared = spec_ext == 0;  // one block along the whole axis
  if (!shared && (r0 % ext != 0 || ((r0 + n) % ext != 0 && r0 + n != q.rows)))
    throw std::invalid_argument(what + ": rows [" + std::to_string(r0) + ", " + std::to_string(r0 + n) +
                                ") do not consist of whole blocks: its blocks run " + std::to_string(ext) +
                                " rows along that axis, so a block crosses the slice's boundary");
  const size_t b0 = shared ? 0 : r0 / ext, nb = shared ? 1 : (n + ext - 1) / ext;
  const bool fp32 = q.spec.scale_kind == ScaleKind::FP32;
  s.data = Bytes3::from_shape({1, s.srows(), s.row_bytes()});
  std::fill(s.data.begin(), s.data.end(), uint8_t(0));  // an odd E2M1 row's padding nibble stays 0
  if (!q.transposed) {
    std::memcpy(s.data.data(), q.data.data() + r0 * q.row_bytes(), n * q.row_bytes());
    const size_t sc = fp32 ? q.scale_inv.shape(2) : q.scale_bytes.shape(2);
    if (fp32) {
      s.scale_inv = Tensor3f::from_shape({1, nb, sc});
      std::memcpy(s.scale_inv.data(), q.scale_inv.data() + b0 * sc, nb * sc * sizeof(float));
    } else {
      s.scale_bytes = Bytes3::from_shape({1, nb, sc});
      std::memcpy(s.scale_bytes.data(), q.scale_bytes.data() + b0 * sc, nb * sc);
    }
    return s;
  }
  for (size_t r = 0; r < s.srows(); ++r)
    for (size_t c = 0; c < n; ++c) s.set_code(0, r, c, q.code(0, r, r0 + c));
  const size_t sr = fp32 ? q.scale_inv.shape(1) : q.scale_bytes.shape(1);
  if (fp32) s.scale_inv = Tensor3f::from_shape({1, sr, nb});
  else s.scale_bytes = Bytes3::from_shape({1, sr, nb});
  for (size_t r = 0; r < sr; ++r)
    for (size_t b = 0; b < nb; ++b) {
      if (fp32) s.scale_inv(0, r, b) = q.scale_inv(0, r, b0 + b);
      else s.scale_bytes(0, r, b) = q.scale_bytes(0, r, b0 + b);
    }
  return s;
}

QuantizedTensor allocate_quantized(const QuantSpec& s, const hd::QuantLayout& L) {
  QuantizedTensor q;
  q.spec = s;
  q.groups = L.groups;
  q.rows = L.rows;
  q.cols = L.cols;
  q.transposed = L.transposed;
  q.data = Bytes3::from_shape({L.groups, L.srows, L.rbytes});
  if (s.scale_kind == ScaleKind::FP32) q.scale_inv = Tensor3f::from_shape({L.groups, L.nbr, L.nbc});
  else q.scale_bytes = Bytes3::from_shape({L.groups, L.nbr, L.nbc});
  return q;
}

}  // namespace mxsim
