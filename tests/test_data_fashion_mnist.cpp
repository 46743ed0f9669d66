// Fashion-MNIST / IDX loader: hand-made IDX files (plain and gzip) incl. every error, and
// the real Debian files when installed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unistd.h>

#include <boost/iostreams/filter/gzip.hpp>
#include <boost/iostreams/filtering_stream.hpp>
#include <boost/iostreams/device/back_inserter.hpp>

#include "mxsim/data/fashion_mnist.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using mxsim::data::DataError;
using Bytes = std::vector<uint8_t>;

namespace {
fs::path temp_dir() { return mxsim::test::make_temp_dir("data"); }


void put32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}

Bytes idx(uint32_t magic, std::vector<uint32_t> dims, const Bytes& payload) {
  Bytes b;
  put32(b, magic);
  for (auto d : dims) put32(b, d);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

Bytes gzip(const Bytes& in) {
  std::string out;
  {
    boost::iostreams::filtering_ostream os;
    os.push(boost::iostreams::gzip_compressor());
    os.push(boost::iostreams::back_inserter(out));
    os.write(reinterpret_cast<const char*>(in.data()), std::streamsize(in.size()));
  }
  return Bytes(out.begin(), out.end());
}

void write(const fs::path& p, const Bytes& b) { mxsim::test::write_bytes(p, b); }

// 3 images of 2x2, pixel values chosen to include 0, 255 and values whose /255 is inexact.
const Bytes kPixels = {0, 1, 2, 3, 127, 128, 254, 255, 17, 51, 85, 170};
const Bytes kLabels = {9, 0, 3};

class IdxTest : public ::testing::Test {
 protected:
  fs::path dir = temp_dir();
  fs::path im = dir / "im", lb = dir / "lb";
  void TearDown() override { fs::remove_all(dir); }
  void expect_error(const fs::path& bad, const std::string& needle) {
    try {
      mxsim::data::load_idx(im, lb);
      FAIL() << "no exception, expected: " << needle;
    } catch (const DataError& e) {
      const std::string w = e.what();
      EXPECT_NE(w.find(bad.string()), std::string::npos) << w;
      EXPECT_NE(w.find(needle), std::string::npos) << w;
    }
  }
};

}  // namespace

TEST_F(IdxTest, PlainAndGzipGiveSameExactValues) {
  for (bool gz : {false, true}) {
    auto ib = idx(0x803, {3, 2, 2}, kPixels), lbb = idx(0x801, {3}, kLabels);
    write(im, gz ? gzip(ib) : ib);
    write(lb, gz ? gzip(lbb) : lbb);
    auto d = mxsim::data::load_idx(im, lb);
    ASSERT_EQ(d.count, 3u);
    EXPECT_EQ(d.rows, 2u);
    EXPECT_EQ(d.cols, 2u);
    EXPECT_EQ(d.labels, kLabels);
    ASSERT_EQ(d.images.size(), 12u);
    for (std::size_t i = 0; i < 12; ++i) {
      // Oracle: the correctly rounded quotient in double, rounded once more to float is the
      // RNE FP32 quotient (double has > 2*24+2 bits, so no double-rounding error).
      const float want = float(double(kPixels[i]) / 255.0);
      EXPECT_EQ(d.images[i], want) << i;
    }
    EXPECT_EQ(d.images[0], 0.0f);
    EXPECT_EQ(d.images[7], 1.0f);
  }
}

TEST_F(IdxTest, MissingFile) {
  write(lb, idx(0x801, {3}, kLabels));
  expect_error(im, "missing");
}

TEST_F(IdxTest, BadImageMagic) {
  write(im, idx(0x801, {3, 2, 2}, kPixels));
  write(lb, idx(0x801, {3}, kLabels));
  expect_error(im, "bad magic 0x00000801");
}

TEST_F(IdxTest, BadLabelMagic) {
  write(im, idx(0x803, {3, 2, 2}, kPixels));
  write(lb, gzip(idx(0x803, {3}, kLabels)));
  expect_error(lb, "bad magic 0x00000803");
}

TEST_F(IdxTest, TruncatedPayload) {
  auto b = idx(0x803, {3, 2, 2}, kPixels);
  b.pop_back();
  write(im, gzip(b));
  write(lb, idx(0x801, {3}, kLabels));
  expect_error(im, "truncated payload");
}

TEST_F(IdxTest, DimensionMismatchTrailingBytes) {
  auto b = idx(0x803, {2, 2, 2}, kPixels);  // header says 8 bytes, 12 follow
  write(im, b);
  write(lb, idx(0x801, {2}, {1, 2}));
  expect_error(im, "size mismatch");
}

TEST_F(IdxTest, TruncatedHeader) {
  write(im, Bytes{0, 0, 8, 3, 0, 0});
  write(lb, idx(0x801, {3}, kLabels));
  expect_error(im, "truncated IDX header");
}

TEST_F(IdxTest, CountMismatch) {
  write(im, idx(0x803, {3, 2, 2}, kPixels));
  write(lb, idx(0x801, {2}, {1, 2}));
  expect_error(lb, "count mismatch");
}

TEST_F(IdxTest, LabelAboveNine) {
  write(im, idx(0x803, {3, 2, 2}, kPixels));
  write(lb, idx(0x801, {3}, {1, 10, 2}));
  expect_error(lb, "label 10 at index 1");
}

TEST_F(IdxTest, TruncatedGzipStream) {
  auto g = gzip(idx(0x803, {3, 2, 2}, kPixels));
  // Every cut point past the 10-byte gzip header must be detected (footer missing or short).
  for (std::size_t cut = 11; cut < g.size(); ++cut) {
    write(im, Bytes(g.begin(), g.begin() + std::ptrdiff_t(cut)));
    write(lb, idx(0x801, {3}, kLabels));
    SCOPED_TRACE(cut);
    expect_error(im, "gzip");
  }
}

TEST_F(IdxTest, CorruptGzipCrc) {
  auto g = gzip(idx(0x803, {3, 2, 2}, kPixels));
  g[g.size() - 8] ^= 0x01;  // first byte of the CRC32 in the gzip footer (RFC 1952)
  write(im, g);
  write(lb, idx(0x801, {3}, kLabels));
  expect_error(im, "gzip");
}

TEST(FashionMnist, MissingDirectoryNamesFile) {
  try {
    mxsim::data::load_fashion_mnist("/nonexistent-mxsim-dir", mxsim::data::Split::train);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-mxsim-dir/train-images-idx3-ubyte"), std::string::npos)
        << e.what();
  }
}

TEST(FashionMnist, WrongImageSizeRejected) {
  auto dir = temp_dir();
  write(dir / "t10k-images-idx3-ubyte", idx(0x803, {3, 2, 2}, kPixels));
  write(dir / "t10k-labels-idx1-ubyte.gz", gzip(idx(0x801, {3}, kLabels)));
  EXPECT_THROW(mxsim::data::load_fashion_mnist(dir, mxsim::data::Split::test), DataError);
  fs::remove_all(dir);
}

// Real data. Expected values read from the Debian files with Python's gzip module
// (python3 -c "import gzip; b=gzip.open('train-labels-idx1-ubyte.gz').read(); print(list(b[8:18]))"):
// train labels start 9 0 0 3 0 2 7 2 5 5 and end 5 1 3 0 5; t10k labels start 9 2 1 1 6 1 4 6 5 7;
// the first training image sums to 76247 with max 255 and first non-zero pixels (96,1),(99,13),(100,73).
// The first training label 9 = "Ankle boot" matches the Fashion-MNIST README's sample.
TEST(FashionMnist, RealDebianFiles) {
  const auto dir = mxsim::data::default_fashion_mnist_dir();
  if (!fs::exists(dir / "train-labels-idx1-ubyte.gz")) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  auto tr = mxsim::data::load_fashion_mnist(dir, mxsim::data::Split::train);
  EXPECT_EQ(tr.count, 60000u);
  EXPECT_EQ(tr.rows, 28u);
  EXPECT_EQ(tr.cols, 28u);
  ASSERT_EQ(tr.images.size(), 60000u * 784u);
  EXPECT_EQ(Bytes(tr.labels.begin(), tr.labels.begin() + 10), (Bytes{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));
  EXPECT_EQ(Bytes(tr.labels.end() - 5, tr.labels.end()), (Bytes{5, 1, 3, 0, 5}));
  EXPECT_STREQ(mxsim::data::fashion_mnist_class_name(tr.labels[0]), "Ankle boot");
  double sum = 0;
  float mx = 0;
  for (int i = 0; i < 784; ++i) {
    sum += double(std::lround(tr.images[i] * 255.0f));
    mx = std::max(mx, tr.images[i]);
  }
  EXPECT_EQ(sum, 76247.0);
  EXPECT_EQ(mx, 1.0f);
  EXPECT_EQ(tr.images[95], 0.0f);
  EXPECT_EQ(tr.images[96], float(1.0 / 255.0));
  EXPECT_EQ(tr.images[99], float(13.0 / 255.0));
  EXPECT_EQ(tr.images[100], float(73.0 / 255.0));
  auto te = mxsim::data::load_fashion_mnist(dir, mxsim::data::Split::test);
  EXPECT_EQ(te.count, 10000u);
  EXPECT_EQ(Bytes(te.labels.begin(), te.labels.begin() + 10), (Bytes{9, 2, 1, 1, 6, 1, 4, 6, 5, 7}));
}

// A limit returns the first examples only, with the same values as the whole
// load; the files are read once per process, and again once they change
// (size or mtime): a rewritten label file is seen, and an error in it too.
TEST(FashionMnist, LimitDecodesPrefixAndRereadsChangedFiles) {
  auto dir = temp_dir();
  Bytes px(5 * 28 * 28);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(i * 7 + 3);
  write(dir / "train-images-idx3-ubyte.gz", gzip(idx(0x803, {5, 28, 28}, px)));
  write(dir / "train-labels-idx1-ubyte", idx(0x801, {5}, {1, 2, 3, 4, 5}));
  const auto all = mxsim::data::load_fashion_mnist(dir, mxsim::data::Split::train);
  const auto two = mxsim::data::load_fashion_mnist(dir, mxsim::data::Split::train, 2);
  const auto many = mxsim::data::load_fashion_mnist(dir, mxsim::data::Split::train, 99);
  ASSERT_EQ(all.count, 5u);
  ASSERT_EQ(two.count, 2u);
  EXPECT_EQ(many.count, 5u);
  EXPECT_EQ(two.labels, (Bytes{1, 2}));
  ASSERT_EQ(two.images.size(), 2u * 784u);
  for (std::size_t i = 0; i < two.images.size(); ++i) {
    EXPECT_EQ(two.images[i], all.images[i]) << i;
    EXPECT_EQ(two.images[i], float(double(px[i]) / 255.0)) << i;
  }
  // Rewritten with other labels (different size): read again.
  write(dir / "train-labels-idx1-ubyte", gzip(idx(0x801, {5}, {9, 8, 7, 6, 5})));
  EXPECT_EQ(mxsim::data::load_fashion_mnist(dir, mxsim::data::Split::train, 1).labels, (Bytes{9}));
  write(dir / "train-labels-idx1-ubyte", idx(0x801, {5}, {1, 2, 3, 4, 10}));
  fs::remove(dir / "train-labels-idx1-ubyte.gz");
  try {
    mxsim::data::load_fashion_mnist(dir, mxsim::data::Split::train, 1);
    FAIL() << "label 10 beyond the limit must still be reported";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("label 10 at index 4"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}
