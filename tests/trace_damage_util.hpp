// Damaging a trace on purpose for the tests of issue 34: one bit of a dataset's stored data
// chunk flipped, where HDF5 keeps it (the file offset comes from HDF5's own chunk index, so the
// flip lands in that dataset's data and nowhere else). Header only; shared by the CLI and the
// inspector's Qt suites.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace mxsim::test {

/// The file offset and stored size of chunk `index` of `dataset` in `file`; {0, 0} on failure.
inline std::pair<uint64_t, uint64_t> chunk_location(const std::string& file, const std::string& dataset, hsize_t index = 0) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return {0, 0};
  std::pair<uint64_t, uint64_t> at{0, 0};
  if (const hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT); d >= 0) {
    hsize_t offset[8];
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    const hid_t space = H5Dget_space(d);  // HDF5 1.10 takes no H5S_ALL here
    if (space >= 0 && H5Dget_chunk_info(d, space, index, offset, &mask, &addr, &size) >= 0 && addr != HADDR_UNDEF)
      at = {uint64_t(addr), uint64_t(size)};
    if (space >= 0) H5Sclose(space);
    H5Dclose(d);
  }
  H5Fclose(f);
  return at;
}

/// Flips bit `bit` of the first byte of chunk 0 of `dataset` (inside what its Fletcher-32
/// checksum covers); false when the chunk cannot be found or the file not written.
inline bool flip_chunk_bit(const std::string& file, const std::string& dataset, int bit = 0) {
  const auto [addr, size] = chunk_location(file, dataset);
  if (size <= 4) return false;  // the last 4 bytes are the checksum itself
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  char c = 0;
  io.seekg(std::streamoff(addr));
  if (!io.get(c)) return false;
  c = char(c ^ (1 << bit));
  io.seekp(std::streamoff(addr));
  io.put(c);
  return bool(io.flush());
}

}  // namespace mxsim::test
