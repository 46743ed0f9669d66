// Hugging Face .safetensors files: an unsigned 64-bit little-endian header
// length N, N bytes of UTF-8 JSON (may end in padding spaces), then the byte
// buffer. The JSON maps each tensor name to
//   {"dtype": "BF16", "shape": [4, 32], "data_offsets": [begin, end]}
// with offsets relative to the start of the byte buffer, plus an optional
// "__metadata__" object of string -> string. Data are little-endian, C order.
// (Format as documented in the huggingface/safetensors README.)
//
// Validation on reading (each an IoError "<file>: <problem>", naming the
// tensor where there is one): file shorter than 8 bytes; header length beyond
// the file or above 100 MB (the reference implementation's limit); JSON that
// does not parse or is not an object; a key repeated within one object (a
// tensor named twice, a field or metadata key given twice); an entry that is not an object or lacks
// or has extra keys; unknown dtype (named); shape not a list of non-negative
// integers; data_offsets not two integers with begin <= end; end beyond the
// buffer; a shape whose byte count overflows size_t; shape * dtype size != end - begin; overlapping tensors; bytes of
// the buffer covered by no tensor (the reference implementation rejects
// these too); "__metadata__" not an object of strings.
#pragma once
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "mxsim/io/tensor_file.hpp"

namespace mxsim::io {

struct SafetensorsFile {
  std::vector<RawTensor> tensors;               ///< in order of data_offsets
  std::map<std::string, std::string> metadata;  ///< "__metadata__"

  /// Tensor by name, or nullptr.
  const RawTensor* find(const std::string& name) const;
};

SafetensorsFile read_safetensors(const std::filesystem::path& file);
/// Parse the bytes of a .safetensors file; `label` names it in error messages.
SafetensorsFile parse_safetensors(std::span<const uint8_t> bytes, const std::string& label);

/// The bytes of a .safetensors file: tensors back to back in the order given
/// (the format allows no gaps); the JSON header is padded with spaces to a
/// multiple of 8 bytes (as the reference writer does) so the buffer starts
/// 8-aligned.
/// Throws IoError for duplicate or empty names or a name "__metadata__".
std::vector<uint8_t> encode_safetensors(const std::vector<RawTensor>& tensors,
                                        const std::map<std::string, std::string>& metadata = {});

void write_safetensors(const std::filesystem::path& file, const std::vector<RawTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace mxsim::io
