// NumPy .npy files (format versions 1.0, 2.0 and 3.0, as numpy.lib.format
// documents them: "\x93NUMPY", major, minor, a little-endian header length of
// 2 bytes (1.0) or 4 bytes (2.0, 3.0), then a Python dict literal with exactly
// the keys 'descr', 'fortran_order', 'shape', then the raw data).
//
// Dtypes read and written (descr -> DType):
//   '<f4' F32, '<f2' F16, '<f8' F64, '|u1' / '<u1' U8, '|i1' I8, '<u2' U16,
//   '<i2' I16, '<u4' U32, '<i4' I32, '<u8' U64, '<i8' I64, '|b1' BOOL, '<c8' C64,
//   '<V2' and 'bfloat16' BF16: NumPy has no bfloat16; ml_dtypes' bfloat16 has
//       kind 'V', so np.save writes '<V2' for it (ml_dtypes issue #41);
//       a header written by hand from str(dtype) says 'bfloat16'. A bare
//       two-byte void ('|V2') is not taken as BF16.
// Other descrs (big-endian, '<f16', structured, ...) are rejected by name.
// Fortran order is rejected. Extra bytes after the data are rejected (the
// file does not say what they are).
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "mxsim/io/tensor_file.hpp"

namespace mxsim::io {

/// Read a .npy file. The tensor's name is the file's stem.
/// Throws IoError "<file>: <problem>": cannot open, bad magic, unsupported
/// format version, truncated header, malformed header dict (a key given
/// twice included), a shape whose byte count overflows size_t, unsupported dtype
/// '<descr>', Fortran order, truncated data (expected vs present bytes),
/// trailing bytes.
RawTensor read_npy(const std::filesystem::path& file);

/// The header only (name, dtype, shape; bytes left empty), validated against
/// the file's size exactly as read_npy does. Reads the header bytes only.
RawTensor read_npy_header(const std::filesystem::path& file);

/// Parse the bytes of a .npy file; `label` names it in error messages.
RawTensor parse_npy(std::span<const uint8_t> bytes, const std::string& label);

/// The bytes of a .npy file holding t (version 1.0 when the header fits in
/// 65535 bytes, else 2.0). Header as numpy writes it:
/// "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 32), }", padded with
/// spaces and a final '\n' so the data starts at a multiple of 64.
/// BF16 is written as '<V2' (what np.save writes for ml_dtypes.bfloat16).
/// Throws IoError for a dtype without a descr here.
std::vector<uint8_t> encode_npy(const RawTensor& t);

/// The header part of encode_npy (magic, version, length, padded dict) of
/// an array of `dtype` and `shape`: the data follow it. Throws IoError for a
/// dtype without a descr here.
std::vector<uint8_t> npy_header(DType dtype, const std::vector<size_t>& shape);

/// Write encode_npy(t) to file, the header and then t.bytes in place (no
/// copy of the data; not atomic by itself: see atomic_output.hpp).
void write_npy(const std::filesystem::path& file, const RawTensor& t);

/// The descr string of a dtype ('<f4', ...); throws IoError for others.
std::string npy_descr(DType d);

}  // namespace mxsim::io
