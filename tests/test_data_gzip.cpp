// gzip input of the data loaders, judged against `gzip -t` (GNU gzip, an independent
// implementation): every variant a .gz file can take here is accepted exactly when gzip -t
// accepts it, and then decompresses to the bytes that were compressed. Variants: zero padding
// after the stream (gzip -t accepts it; Boost.Iostreams failed it as "iostream error"), a
// second member, a length (ISIZE) footer that does not match (Boost accepted it), a CRC-32
// that does not match, non-zero trailing bytes, truncation.
#include <gtest/gtest.h>
#include <zlib.h>

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <vector>

#include "mxsim/data/fashion_mnist.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using mxsim::data::DataError;
using mxsim::data::read_maybe_gzip;

namespace {

std::string gz(const std::string& in) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, uLong(in.size())) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = uInt(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// gzip -t exit status: 0 OK, 1 error, 2 warning (e.g. "trailing garbage ignored").
int gzip_t(const fs::path& f) {
  const std::string cmd = "gzip -t '" + f.string() + "' 2>/dev/null";
  const int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

bool have_gzip() { return std::system("gzip --version >/dev/null 2>&1") == 0; }

std::string payload() {
  std::string p;
  for (int i = 0; i < 5000; ++i) p += char((i * 7 + i / 13) & 0xFF);
  return p;
}

struct Case {
  const char* name;
  std::string bytes;
  std::string want;       // decompressed bytes when accepted
  const char* message;    // substring of the error when refused
};

}  // namespace

TEST(DataGzip, AcceptsExactlyWhatGzipTestAccepts) {
  if (!have_gzip()) GTEST_SKIP() << "gzip not installed";
  mxsim::test::TempDir d("gzip");
  const std::string p = payload(), g = gz(p), g2 = gz("second member");
  std::string isize = g;
  isize[isize.size() - 4] ^= 0x01;  // ISIZE: last 4 bytes of the member (RFC 1952 section 2.3)
  std::string crc = g;
  crc[crc.size() - 8] ^= 0x01;  // CRC32: the 4 bytes before ISIZE
  const std::vector<Case> cases = {
      {"plain", g, p, nullptr},
      {"one_zero_byte_after", g + std::string(1, '\0'), p, nullptr},
      {"zero_padding_512", g + std::string(512, '\0'), p, nullptr},
      {"two_members", g + g2, p + "second member", nullptr},
      {"two_members_then_zeros", g + g2 + std::string(7, '\0'), p + "second member", nullptr},
      {"isize_mismatch", isize, "", "length footer ISIZE does not match"},
      {"crc_mismatch", crc, "", "CRC-32 footer does not match"},
      {"trailing_garbage", g + "xyz", "", "3 bytes after the end of the gzip data are neither zero padding"},
      {"zero_then_garbage", g + std::string("\0\0x", 3), "", "3 bytes after the end of the gzip data"},
      {"truncated_footer", g.substr(0, g.size() - 3), "", "truncated gzip stream"},
      {"truncated_data", g.substr(0, g.size() / 2), "", "truncated gzip stream"},
  };
  for (const auto& c : cases) {
    const fs::path f = d.put(std::string(c.name) + ".gz", c.bytes);
    const bool gzip_ok = gzip_t(f) == 0;
    EXPECT_EQ(gzip_ok, c.message == nullptr) << c.name << ": the case's expectation disagrees with gzip -t";
    try {
      const auto out = read_maybe_gzip(f);
      EXPECT_TRUE(gzip_ok) << c.name << ": accepted, gzip -t refuses it";
      EXPECT_EQ(std::string(out.begin(), out.end()), c.want) << c.name;
    } catch (const DataError& e) {
      EXPECT_FALSE(gzip_ok) << c.name << ": refused (" << e.what() << "), gzip -t accepts it";
      ASSERT_NE(c.message, nullptr) << c.name << ": " << e.what();
      const std::string m = e.what();
      EXPECT_EQ(m.rfind(f.string() + ": ", 0), 0u) << m;
      EXPECT_NE(m.find(c.message), std::string::npos) << c.name << ": " << m;
    }
  }
}

// Every cut of a member is refused (the footer is never optional), naming truncation or
// corruption, and never decompresses to a prefix silently.
TEST(DataGzip, EveryTruncationIsRefused) {
  mxsim::test::TempDir d("gzip");
  const std::string g = gz(payload().substr(0, 600));
  for (std::size_t cut = 2; cut < g.size(); ++cut) {
    const fs::path f = d.put("cut.gz", g.substr(0, cut));
    try {
      read_maybe_gzip(f);
      ADD_FAILURE() << "cut at " << cut << " of " << g.size() << " accepted";
    } catch (const DataError& e) {
      const std::string m = e.what();
      EXPECT_TRUE(m.find("truncated gzip stream") != std::string::npos || m.find("corrupt gzip stream") != std::string::npos)
          << cut << ": " << m;
    }
  }
}
