// The HDF5 bounds shim of the sanitizer build (core/src/sanitize_hdf5_bounds.cpp) reports what
// AddressSanitizer cannot see inside the uninstrumented libhdf5: a rank-2 extent written into one
// hsize_t (the reader did this on every compare), a 10-element attribute read into one uint64_t.
// Skipped in builds without AddressSanitizer (the shim is linked only with it).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstdint>
#include <vector>

#include "test_asan.hpp"

TEST(Hdf5BoundsShim, ReportsHdf5WritesPastOurBuffers) {
#ifndef MXSIM_TEST_ASAN
  GTEST_SKIP() << "sanitizer build (preset asan) only";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const hsize_t dims[2] = {3, 4};
  const hid_t sp = H5Screate_simple(2, dims, nullptr);
  ASSERT_GE(sp, 0);
  hsize_t ok[2] = {0, 0};
  EXPECT_EQ(H5Sget_simple_extent_dims(sp, ok, nullptr), 2);  // a right-sized buffer passes
  EXPECT_DEATH(
      {
        hsize_t one = 0;
        H5Sget_simple_extent_dims(sp, &one, nullptr);
      },
      "AddressSanitizer: stack-buffer-overflow");
  const hsize_t ten = 10;
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_core(fapl, 1 << 16, 0);  // in memory, nothing on disk
  const hid_t f = H5Fcreate("shim.h5", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  const hid_t asp = H5Screate_simple(1, &ten, nullptr);
  const hid_t a = H5Acreate2(f, "x", H5T_STD_U64LE, asp, H5P_DEFAULT, H5P_DEFAULT);
  std::vector<uint64_t> v(10, 7);
  ASSERT_GE(H5Awrite(a, H5T_NATIVE_UINT64, v.data()), 0);
  EXPECT_DEATH(
      {
        std::vector<uint64_t> one(1);
        H5Aread(a, H5T_NATIVE_UINT64, one.data());
      },
      "AddressSanitizer: heap-buffer-overflow");
  H5Aclose(a);
  H5Sclose(asp);
  H5Fclose(f);
  H5Pclose(fapl);
  H5Sclose(sp);
#endif
}
