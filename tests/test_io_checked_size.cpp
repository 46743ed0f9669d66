// io/checked_size.hpp: sums, products and ceilings of sizes from a user or a file, at the
// boundaries where the unchecked arithmetic wrapped (issue 34).
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "mxsim/io/checked_size.hpp"

using namespace mxsim::io;

TEST(IoCheckedSize, SumAndProductRefuseWhatDoesNotFit) {
  uint64_t r = 0;
  EXPECT_TRUE(add_size(UINT64_MAX - 1, 1, r));
  EXPECT_EQ(r, UINT64_MAX);
  EXPECT_FALSE(add_size(UINT64_MAX, 1, r));
  EXPECT_FALSE(add_size(INT64_MAX, 1, r, INT64_MAX));
  EXPECT_TRUE(mul_size(uint64_t(1) << 32, (uint64_t(1) << 32) - 1, r));
  EXPECT_FALSE(mul_size(uint64_t(1) << 32, uint64_t(1) << 32, r));
  // four times 2^62 - 1 and 7: 2^64 + 3, which wrapped to 3
  const std::vector<uint64_t> splits{(uint64_t(1) << 62) - 1, (uint64_t(1) << 62) - 1, (uint64_t(1) << 62) - 1,
                                     (uint64_t(1) << 62) - 1, 7};
  EXPECT_THROW(checked_sum(splits, "--m-splits"), std::overflow_error);
  EXPECT_EQ(checked_sum(std::vector<uint64_t>{3, 0, 5}, "x"), 8u);
  try {
    checked_sum(std::vector<uint64_t>{uint64_t(INT64_MAX), 1}, "--m-splits", INT64_MAX);
    ADD_FAILURE();
  } catch (const std::overflow_error& e) {
    EXPECT_STREQ(e.what(), "--m-splits: the sizes sum to more than 9223372036854775807");
  }
  // a zero extent does not hide the product of the others
  EXPECT_THROW(checked_nonzero_product(std::vector<uint64_t>{0, uint64_t(1) << 40, uint64_t(1) << 40}, "s"),
               std::overflow_error);
  EXPECT_EQ(checked_nonzero_product(std::vector<uint64_t>{0, 3, 5}, "s"), 15u);
}

TEST(IoCheckedSize, CeilDivNeverWraps) {
  EXPECT_EQ(ceil_div(0, 32), 0u);
  EXPECT_EQ(ceil_div(1, 32), 1u);
  EXPECT_EQ(ceil_div(64, 32), 2u);
  EXPECT_EQ(ceil_div(65, 32), 3u);
  EXPECT_EQ(ceil_div(UINT64_MAX, 32), uint64_t(1) << 59);  // (a + 31) / 32 gave 0
  EXPECT_EQ(ceil_div(UINT64_MAX, 1), UINT64_MAX);
}
