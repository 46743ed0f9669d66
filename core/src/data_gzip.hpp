// gzip decompression for the data loaders (internal, not installed).
#pragma once
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace mxsim::data::detail {

/// Decompresses a gzip file's bytes (RFC 1952) with zlib, as `gzip -t` judges them: every member
/// of a multi-member file, each member's CRC-32 and ISIZE (length mod 2^32) footer checked;
/// zero bytes after the last member are padding and ignored. Throws DataError "<file>: ..."
/// for a truncated stream (no complete footer), corrupt data, a CRC or length footer that does
/// not match the data, non-zero bytes after the last member, or an output above max_bytes.
std::vector<uint8_t> gunzip(std::span<const uint8_t> gz, const std::filesystem::path& file,
                            uint64_t max_bytes = uint64_t(4) << 30);

}  // namespace mxsim::data::detail
