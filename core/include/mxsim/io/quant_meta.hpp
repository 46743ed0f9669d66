// The metadata `mxsim quantize` records beside its codes (docs/cli.md
// "Output"): a <stem>.meta.json object, or the "<name>.<key>" entries of a
// safetensors __metadata__. Read back by the mxsim layout of `mxsim
// dequantize` / `mxsim gemm --a/--b` (layout::from_mxsim).
#pragma once
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "mxsim/io/tensor_file.hpp"
#include "mxsim/quant_spec.hpp"

namespace mxsim::io {

/// JSON nesting accepted in a .meta.json (a written one nests 2: the object
/// and its shape lists); deeper input is refused before any value is built.
inline constexpr int kMaxMetaJsonDepth = 16;

/// key -> value of a .meta.json object: JSON strings as they are, any other
/// value as its compact JSON text ("[1, 32]" -> "[1,32]", true -> "true").
/// Throws IoError "<label>: ..." for text that is not JSON, a top level that
/// is not an object, nesting deeper than kMaxMetaJsonDepth, or a key given twice.
std::map<std::string, std::string> parse_meta_json(std::span<const uint8_t> bytes, const std::string& label);

/// What the mxsim layout takes from that metadata.
struct QuantMeta {
  QuantSpec spec;                   ///< elem (elem_format), block (block), scale_kind
  size_t groups = 1, rows = 0, cols = 0;  ///< logical_shape [G, rows, cols]
  bool transposed = false;          ///< storage is the per-group transpose
  std::vector<size_t> shape;        ///< the source tensor's shape (the dequantized output's)
};

/// A list of sizes: JSON "[1, 32]" or the older "1x32" / "1, 32" forms; each
/// size at most 2^48. Throws IoError naming `what` otherwise.
std::vector<size_t> parse_dims(const std::string& text, const std::string& what);

/// Interpret the keys elem_format, scale_kind (e8m0 | fp32 | ue4m3), block
/// (2 sizes, each <= INT32_MAX), logical_shape (3 sizes), shape (1 to 3 sizes
/// holding as many elements as logical_shape) and transposed ("true" or
/// absent/"false"). Throws IoError "<label>: ..." naming the key that is
/// missing or malformed.
QuantMeta quant_meta(const std::map<std::string, std::string>& kv, const std::string& label);

}  // namespace mxsim::io
