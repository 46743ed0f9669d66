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
// or has extra keys; shape not a list of non-negative
// integers; data_offsets not two integers with begin <= end; end beyond the
// buffer; a shape whose byte count overflows size_t; shape * dtype size != end - begin; overlapping tensors; bytes of
// the buffer covered by no tensor (the reference implementation rejects
// these too); "__metadata__" not an object of strings; a sub-byte dtype (F4,
// F6_*) whose element count is not a whole number of bytes.
//
// A dtype this reader does not know (a future addition to the format) is not
// an error: the tensor is listed in SafetensorsFile::unknown with its dtype
// string, its bytes still count for the coverage checks, and callers skip it
// with a note.
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
  /// File offset (bytes from the start of the file) of each tensors[i]'s
  /// first data byte: 8 + header length + data_offsets[0]. With the header
  /// only (read_safetensors_header) a caller reads a tensor, or a range of its
  /// rows, from there.
  std::vector<uint64_t> file_offsets;
  std::map<std::string, std::string> metadata;  ///< "__metadata__"
  /// Tensors whose dtype is not one of io::DType (not read; their bytes are skipped).
  struct Unknown {
    std::string name, dtype;
    std::vector<size_t> shape;
  };
  std::vector<Unknown> unknown;

  /// Tensor by name, or nullptr.
  const RawTensor* find(const std::string& name) const;
};

SafetensorsFile read_safetensors(const std::filesystem::path& file);
/// The header only: names, dtypes, shapes and metadata, validated against the
/// file's size exactly as read_safetensors does, with every RawTensor::bytes
/// left empty. Reads 8 + header-length bytes, so listing a large checkpoint is cheap.
SafetensorsFile read_safetensors_header(const std::filesystem::path& file);
/// Parse the bytes of a .safetensors file; `label` names it in error messages.
SafetensorsFile parse_safetensors(std::span<const uint8_t> bytes, const std::string& label);

/// The bytes of a .safetensors file: tensors back to back in the order given
/// (the format allows no gaps); the JSON header is padded with spaces to a
/// multiple of 8 bytes (as the reference writer does) so the buffer starts
/// 8-aligned.
/// Throws IoError for duplicate or empty names or a name "__metadata__", and
/// for two tensor names (or metadata keys) that are one key as written: keys
/// are JSON (UTF-8) strings, bytes that are not UTF-8 become U+FFFD, so names
/// differing only in such bytes collide; the message names both.
std::vector<uint8_t> encode_safetensors(const std::vector<RawTensor>& tensors,
                                        const std::map<std::string, std::string>& metadata = {});

/// encode_safetensors written to `file`; its errors are prefixed with `label`
/// (default: the file), e.g. the final name of a file written to a temporary.
void write_safetensors(const std::filesystem::path& file, const std::vector<RawTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {}, const std::string& label = "");

/// The index of a sharded checkpoint ("model.safetensors.index.json", as
/// transformers' save_pretrained and huggingface_hub write it):
///   {"metadata": {...}, "weight_map": {"<tensor>": "<shard file>", ...}}
/// Shard names are relative to the index's folder. Validation (IoError
/// "<file>: <problem>"): not JSON, not an object, no "weight_map" object, a
/// value that is not a string, a tensor named twice, and a shard name that is
/// absolute, empty, or has a ".." component or a NUL byte (names come from the
/// file: they must stay inside its folder).
struct SafetensorsIndex {
  std::filesystem::path file;                      ///< the index itself
  std::vector<std::pair<std::string, std::string>> weight_map;  ///< tensor -> shard, in file order
  std::vector<std::filesystem::path> shards;       ///< distinct shard paths (folder / name), first-use order

  /// Tensors the index places in `shard` (one of `shards`).
  std::vector<std::string> tensors_in(const std::filesystem::path& shard) const;
  /// The shard holding `tensor`, or an empty path.
  std::filesystem::path shard_of(const std::string& tensor) const;
};
SafetensorsIndex read_safetensors_index(const std::filesystem::path& file);
/// True for a file name ending in ".index.json" (how sharded checkpoints name their index).
bool is_safetensors_index(const std::filesystem::path& file);

}  // namespace mxsim::io
