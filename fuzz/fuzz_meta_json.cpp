// libFuzzer harness: the .meta.json reader of the mxsim layout (io::parse_meta_json +
// io::quant_meta, what `mxsim dequantize` and `mxsim gemm --a/--b` read beside
// <stem>.data.npy), then layout::from_mxsim with codes and scales of the sizes the metadata
// implies (when small), as the CLI calls it. Any exception but IoError (parse, interpret) or
// std::invalid_argument (from_mxsim's shape checks), any sanitizer report, or a
// QuantizedTensor whose buffers disagree with its metadata is a finding.
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "mxsim/io/quant_meta.hpp"
#include "mxsim/layouts.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace mxsim;
  io::QuantMeta m;
  try {
    m = io::quant_meta(io::parse_meta_json(std::span<const uint8_t>(data, size), "fuzz.meta.json"), "fuzz.meta.json");
  } catch (const io::IoError&) {
    return 0;
  }
  if (m.shape.empty() || m.shape.size() > 3 || m.spec.block_rows < 0 || m.spec.block_cols < 0) std::abort();
  // Buffers of the sizes the layout documents (quantized_tensor.hpp), for small tensors only.
  const size_t n = m.groups * m.rows * m.cols;
  if (m.groups == 0 || m.rows == 0 || m.cols == 0 || n > (1u << 16) || m.groups > (1u << 16) || m.rows > (1u << 16) ||
      m.cols > (1u << 16))
    return 0;
  QuantizedTensor shape_of;
  shape_of.spec = m.spec;
  shape_of.rows = m.rows;
  shape_of.cols = m.cols;
  shape_of.transposed = m.transposed;
  const size_t rb = shape_of.row_bytes(), br = shape_of.block_rows(), bc = shape_of.block_cols();
  if (br == 0 || bc == 0) return 0;
  const size_t nb = m.groups * ((shape_of.srows() + br - 1) / br) * ((shape_of.scols() + bc - 1) / bc);
  const std::vector<uint8_t> codes(m.groups * shape_of.srows() * rb, 0);
  const std::vector<uint8_t> scales(m.spec.scale_kind == ScaleKind::FP32 ? 0 : nb, 0x7F);
  const std::vector<float> scale_inv(m.spec.scale_kind == ScaleKind::FP32 ? nb : 0, 1.0f);
  try {
    const QuantizedTensor q =
        layout::from_mxsim(m.spec, m.groups, m.rows, m.cols, m.transposed, codes, scales, scale_inv, 1.0f);
    if (q.data.size() != codes.size() || q.scale_bytes.size() + q.scale_inv.size() != nb) std::abort();
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
