// Host tensors as read from / written to files (.npy, .safetensors).
//
// A RawTensor is the bytes of one C-order (row-major), little-endian array
// plus its dtype and shape: what a file holds, before any conversion. The
// readers in npy.hpp and safetensors.hpp produce it, the writers take it.
//
// Errors: every reader and writer throws mxsim::io::IoError whose what() is
// "<file>: <problem>" (and names the tensor where there is one), e.g.
//   "w.npy: truncated data: header says shape [4, 32] <f4 = 512 bytes, the file has 500 after the header"
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mxsim::io {

/// Element types. Names as safetensors spells them (the Hugging Face
/// safetensors format, "dtype" field, the 22 of its reference implementation's
/// Dtype enum), so a file holding, say, I64 position ids, FP8 weights or
/// complex buffers can be read (and skipped) rather than rejected.
///
/// Sub-byte dtypes (F4: 4 bits, F6_E2M3 / F6_E3M2: 6 bits) are bit-packed in
/// safetensors: a tensor of n elements takes n * bits / 8 bytes, and n * bits
/// must be a multiple of 8 (safetensors rejects it otherwise). F4 is the dtype
/// safetensors maps to PyTorch's float4_e2m1fn_x2: one byte holds two E2M1
/// codes, element 2i in the low nibble, so an F4 tensor of shape [.., 2B] is
/// the same bytes as a float4_e2m1fn_x2 / uint8 tensor of shape [.., B].
/// C64 is complex64 (two F32, real first).
enum class DType : uint8_t {
  BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64,
  F8_E4M3, F8_E5M2, F8_E8M0,
  F4, F6_E2M3, F6_E3M2, F8_E4M3FNUZ, F8_E5M2FNUZ, C64,
};

/// "F32", "BF16", ... (safetensors spelling).
const char* name_of(DType);
/// Bits per element (4 for F4, 6 for F6_*, 8 .. 64 for the others).
unsigned bits_of(DType);
/// Bytes per element; 0 for the sub-byte dtypes F4 and F6_* (use byte_count).
size_t size_of(DType);
/// Bytes of `numel` elements: numel * bits_of(d) / 8. Throws IoError when that
/// is not a whole number of bytes (sub-byte dtypes), std::overflow_error when
/// it overflows size_t.
size_t byte_count(DType d, size_t numel);
/// Parse a safetensors dtype name; false when unknown.
bool dtype_from_name(std::string_view name, DType& out);
/// F32, F16 and BF16: the dtypes the quantizer takes as they are.
inline bool is_quantizable(DType d) { return d == DType::F32 || d == DType::F16 || d == DType::BF16; }
/// F64: taken too, with a note; the quantizer rounds MX elements once from
/// FP64 and takes amax (and every other recipe's elements) from the FP32
/// rounding (emu::quantize_f64, docs/numerics.md §4.7).
inline bool is_quantizable_after_rounding(DType d) { return d == DType::F64; }

/// Error reading or writing a tensor file; what() names the file and the problem.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One array: raw little-endian bytes in C order.
struct RawTensor {
  std::string name;            ///< tensor name (safetensors key; file stem for .npy)
  DType dtype = DType::F32;
  std::vector<size_t> shape;   ///< empty = scalar (one element)
  std::vector<uint8_t> bytes;  ///< byte_count(dtype, numel()) bytes

  size_t numel() const;
  /// The shape as "[4, 32]" (io::shape_str(shape)).
  std::string shape_str() const;
};

/// A shape as "[4, 32]" ("[]" for a scalar): how every message and metadata
/// field of the tensor-file code writes a shape.
std::string shape_str(const std::vector<size_t>& shape);

/// Number of elements of a shape (1 for the empty shape); throws
/// std::overflow_error when the product of its non-zero extents does not fit
/// size_t (so no product of some of its axes wraps, even in a shape with a 0).
size_t numel_of(const std::vector<size_t>& shape);

/// Values of an F32, F16 or BF16 tensor as FP32, exactly (every BF16 and FP16
/// value is an FP32 value; FP16 is decoded by mxsim::decode, BF16 is its bits
/// shifted left by 16). F64 is rounded once to FP32, round to nearest even
/// (IEEE 754 convertFormat; beyond FP32's range to +-Inf, below it to a
/// subnormal or +-0, NaN stays NaN); `rounded`, when given, receives the
/// number of F64 values that changed (inexact conversions, overflows to Inf
/// included). Throws IoError naming the tensor for other dtypes, and
/// "tensor '<name>': needs N GiB of memory" when the values cannot be allocated.
std::vector<float> to_f32(const RawTensor& t, size_t* rounded = nullptr);

/// A RawTensor of dtype F32 / U8 from host values.
RawTensor from_f32(std::string name, std::vector<size_t> shape, const float* v);
RawTensor from_u8(std::string name, std::vector<size_t> shape, const uint8_t* v);

/// File kind by extension (".npy", ".safetensors"), or, when the extension is
/// neither, by the first bytes ("\x93NUMPY" -> npy). Throws IoError when the
/// file cannot be opened or its kind cannot be told.
enum class FileKind { Npy, Safetensors };
FileKind detect_kind(const std::filesystem::path& file);

/// IoError "<what>: needs N.N GiB of memory" (never a bare std::bad_alloc).
IoError out_of_memory(const std::string& what, uint64_t bytes);

/// Whole file into memory; IoError "<file>: cannot open: <reason>" on failure,
/// "<file>: needs N GiB of memory" when it does not fit.
std::vector<uint8_t> read_all(const std::filesystem::path& file);
/// The first min(n, file size) bytes of `file`, and its size in *size: for
/// parsers that read a header only. The same IoErrors as read_all.
std::vector<uint8_t> read_prefix(const std::filesystem::path& file, uint64_t n, uint64_t* size);

/// Create or truncate `file` and write `size` bytes from `data` (POSIX
/// open/write/close). With `durable`, fsync(2) the file before closing, so the
/// bytes are on the device when this returns (the folder entry is not synced:
/// for an all-or-nothing, durable replace use AtomicOutputs). Not atomic by
/// itself. Throws IoError "<file>: cannot create|write error|...: <strerror>";
/// a file that could not be written completely is removed.
void write_file(const std::filesystem::path& file, const void* data, size_t size, bool durable = false);
inline void write_file(const std::filesystem::path& file, const std::vector<uint8_t>& bytes, bool durable = false) {
  write_file(file, bytes.data(), bytes.size(), durable);
}
inline void write_file(const std::filesystem::path& file, std::string_view text, bool durable = false) {
  write_file(file, text.data(), text.size(), durable);
}

/// A file created (or truncated) for writing in pieces (POSIX open/write):
/// for an output too large to assemble in memory first. close() finishes it
/// (with `durable`, fsync(2) first); a writer destroyed without close(), or
/// whose write or close failed, removes the file, so a half-written file is
/// never left under its name. Throws IoError "<file>: cannot create|write
/// error|...: <strerror>".
class FileWriter {
 public:
  explicit FileWriter(const std::filesystem::path& file);
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;
  ~FileWriter();
  void write(const void* data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  void close(bool durable = false);

 private:
  [[noreturn]] void fail(const char* what);
  std::filesystem::path file_;
  int fd_ = -1;
};

/// A file opened for reading at 64-bit offsets (pread(2)): a tensor, or a
/// range of its rows, at the offset its file's header gives. Throws IoError
/// "<file>: cannot open: <strerror>"; read() throws "<file>: read error at
/// byte <offset>: <strerror>" or "<file>: ends before byte <offset + size>".
class FileReader {
 public:
  explicit FileReader(const std::filesystem::path& file);
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;
  ~FileReader();
  void read(uint64_t offset, void* data, size_t size) const;

 private:
  std::filesystem::path file_;
  int fd_ = -1;
};

/// fsync(2) an existing file, or with `dir` a folder (to make a rename or a
/// new entry in it durable). Throws IoError naming the path on failure.
void sync_path(const std::filesystem::path& path, bool dir = false);

}  // namespace mxsim::io
