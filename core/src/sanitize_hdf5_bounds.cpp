// HDF5 bounds shim for the sanitizer build (cmake/sanitize.cmake; linked with ld --wrap).
//
// Debian's libhdf5 is not instrumented, so AddressSanitizer cannot see it write past a buffer
// we pass it: reading a rank-3 extent into one hsize_t, or a 1000-element attribute into one
// uint64_t, corrupts memory silently. Each wrapper computes, from the ids' own types and
// dataspaces (as HDF5 itself will), the byte range the call reads or writes in caller memory,
// has ASan check that range, and only then calls the library. A range that is not addressable
// is reported like any ASan error (heap/stack-buffer-overflow, READ/WRITE of N bytes, stack of
// the caller) and ends the process.
#include <hdf5.h>
#include <sanitizer/asan_interface.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace {

void check(const void* p, std::size_t n, bool write) {
  if (!p || n == 0) return;
  if (void* bad = __asan_region_is_poisoned(const_cast<void*>(p), n))
    __asan_report_error(__builtin_return_address(0), __builtin_frame_address(0), __builtin_frame_address(0), bad,
                        write ? 1 : 0, n);
}

// Elements of a dataspace's extent (the size HDF5 requires a buffer for that space to have).
std::size_t extent_points(hid_t space) {
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  return n > 0 ? std::size_t(n) : 0;
}

// Bytes of memory HDF5 touches for a dataset transfer with these spaces.
std::size_t transfer_bytes(hid_t dset, hid_t mem_type, hid_t mem_space, hid_t file_space) {
  std::size_t pts;
  if (mem_space != H5S_ALL) {
    pts = extent_points(mem_space);
  } else if (file_space != H5S_ALL) {
    pts = extent_points(file_space);
  } else {
    const hid_t s = H5Dget_space(dset);
    pts = s >= 0 ? extent_points(s) : 0;
    if (s >= 0) H5Sclose(s);
  }
  return pts * H5Tget_size(mem_type);
}

int space_rank(hid_t space) {
  const int r = H5Sget_simple_extent_ndims(space);
  return r > 0 ? r : 0;
}

}  // namespace

extern "C" {

herr_t __real_H5Dread(hid_t, hid_t, hid_t, hid_t, hid_t, void*);
herr_t __real_H5Dwrite(hid_t, hid_t, hid_t, hid_t, hid_t, const void*);
herr_t __real_H5Aread(hid_t, hid_t, void*);
herr_t __real_H5Awrite(hid_t, hid_t, const void*);
int __real_H5Sget_simple_extent_dims(hid_t, hsize_t*, hsize_t*);
hid_t __real_H5Screate_simple(int, const hsize_t*, const hsize_t*);
herr_t __real_H5Sselect_hyperslab(hid_t, H5S_seloper_t, const hsize_t*, const hsize_t*, const hsize_t*, const hsize_t*);
herr_t __real_H5Dset_extent(hid_t, const hsize_t*);
herr_t __real_H5Pset_chunk(hid_t, int, const hsize_t*);
ssize_t __real_H5Iget_name(hid_t, char*, size_t);
H5Z_filter_t __real_H5Pget_filter2(hid_t, unsigned, unsigned int*, size_t*, unsigned[], size_t, char[], unsigned int*);

herr_t __wrap_H5Dread(hid_t d, hid_t mt, hid_t ms, hid_t fs, hid_t dxpl, void* buf) {
  check(buf, transfer_bytes(d, mt, ms, fs), true);
  return __real_H5Dread(d, mt, ms, fs, dxpl, buf);
}
herr_t __wrap_H5Dwrite(hid_t d, hid_t mt, hid_t ms, hid_t fs, hid_t dxpl, const void* buf) {
  check(buf, transfer_bytes(d, mt, ms, fs), false);
  return __real_H5Dwrite(d, mt, ms, fs, dxpl, buf);
}
herr_t __wrap_H5Aread(hid_t a, hid_t mt, void* buf) {
  const hid_t s = H5Aget_space(a);
  if (s >= 0) {
    check(buf, extent_points(s) * H5Tget_size(mt), true);
    H5Sclose(s);
  }
  return __real_H5Aread(a, mt, buf);
}
herr_t __wrap_H5Awrite(hid_t a, hid_t mt, const void* buf) {
  const hid_t s = H5Aget_space(a);
  if (s >= 0) {
    check(buf, extent_points(s) * H5Tget_size(mt), false);
    H5Sclose(s);
  }
  return __real_H5Awrite(a, mt, buf);
}
int __wrap_H5Sget_simple_extent_dims(hid_t space, hsize_t* dims, hsize_t* maxdims) {
  const std::size_t n = std::size_t(space_rank(space)) * sizeof(hsize_t);
  check(dims, n, true);
  check(maxdims, n, true);
  return __real_H5Sget_simple_extent_dims(space, dims, maxdims);
}
hid_t __wrap_H5Screate_simple(int rank, const hsize_t* dims, const hsize_t* maxdims) {
  const std::size_t n = rank > 0 ? std::size_t(rank) * sizeof(hsize_t) : 0;
  check(dims, n, false);
  check(maxdims, n, false);
  return __real_H5Screate_simple(rank, dims, maxdims);
}
herr_t __wrap_H5Sselect_hyperslab(hid_t space, H5S_seloper_t op, const hsize_t* start, const hsize_t* stride,
                                  const hsize_t* count, const hsize_t* block) {
  const std::size_t n = std::size_t(space_rank(space)) * sizeof(hsize_t);
  for (const hsize_t* p : {start, stride, count, block}) check(p, n, false);
  return __real_H5Sselect_hyperslab(space, op, start, stride, count, block);
}
herr_t __wrap_H5Dset_extent(hid_t d, const hsize_t* size) {
  const hid_t s = H5Dget_space(d);
  if (s >= 0) {
    check(size, std::size_t(space_rank(s)) * sizeof(hsize_t), false);
    H5Sclose(s);
  }
  return __real_H5Dset_extent(d, size);
}
herr_t __wrap_H5Pset_chunk(hid_t plist, int ndims, const hsize_t* dims) {
  check(dims, ndims > 0 ? std::size_t(ndims) * sizeof(hsize_t) : 0, false);
  return __real_H5Pset_chunk(plist, ndims, dims);
}
ssize_t __wrap_H5Iget_name(hid_t id, char* name, size_t size) {
  check(name, size, true);
  return __real_H5Iget_name(id, name, size);
}
H5Z_filter_t __wrap_H5Pget_filter2(hid_t plist, unsigned idx, unsigned int* flags, size_t* cd_nelmts,
                                   unsigned cd_values[], size_t namelen, char name[], unsigned int* filter_config) {
  check(flags, sizeof *flags, true);
  check(cd_nelmts, sizeof *cd_nelmts, true);
  if (cd_nelmts) check(cd_values, *cd_nelmts * sizeof(unsigned), true);
  check(name, namelen, true);
  check(filter_config, sizeof *filter_config, true);
  return __real_H5Pget_filter2(plist, idx, flags, cd_nelmts, cd_values, namelen, name, filter_config);
}

}  // extern "C"
