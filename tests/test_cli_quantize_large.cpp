// Tensors of more than 2^31 elements, without allocating them: `mxsim quantize` refuses an input
// whose quantization would not fit under the memory limit, streamed or read whole, before reading
// any data (a sparse file whose header claims 2^31 + 2^16 F32 elements), naming the size and the
// limit; truncated and overflowing headers are clear errors; the index arithmetic of the
// quantizer (logical index, Philox counter) is 64-bit. (Such tensors quantized end to end, where
// the memory is there: test_cli_quantize_2to31.cpp.)
#include <gtest/gtest.h>

#include <Random123/philox.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "cli_test_util.hpp"
#include "test_asan.hpp"
#include "mxsim/hd/quant_block.hpp"
#include "mxsim/philox.hpp"

using mxsim::test::CliSandbox;
using mxsim::test::npy_bytes;
namespace fs = std::filesystem;

using mxsim::test::EnvVar;

TEST(CliQuantizeLarge, SparseFileAbove2To31ElementsOverTheMemoryLimitIsRefusedNamingSizeAndLimit) {
  CliSandbox s;
  const uint64_t rows = 65536, cols = 32769, n = rows * cols;  // 2^31 + 2^16 elements, 8 GiB of F32
  ASSERT_GT(n, uint64_t(1) << 31);
  const std::string h = npy_bytes("<f4", "(" + std::to_string(rows) + ", " + std::to_string(cols) + ")", "");
  const fs::path f = s.put("big.npy", h);
  fs::resize_file(f, h.size() + 4 * n);  // sparse: no data blocks are written
  // Streamed (rowwise mxfp8): the codes (1 byte per element) and E8M0 scales (one per 32), one slice of
  // 256 MiB of source (2047 rows) with 4 + 17 bytes per element, the tree-sum partials (64 bytes per 256).
  const uint64_t slice = (uint64_t(256) << 20) / 4 / cols * cols;
  const uint64_t stream = n + rows * 1025 + slice * 21 + (n / 256 + 1) * 64;
  {
    const EnvVar lim("MXSIM_MEMORY_LIMIT", "2G");
    const auto r = s.mxsim("quantize --recipe mxfp8 big.npy -o q");
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_NE(r.err.find("big.npy: tensor 'big' [65536, 32769] F32 (2147549184 elements) needs " +
                         std::string("3.9 GiB (") + std::to_string(stream) + " bytes) of memory to quantize streamed"),
              std::string::npos) << r.err;
    EXPECT_NE(r.err.find("above the limit of 2.0 GiB (2147483648 bytes) (MXSIM_MEMORY_LIMIT)"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(s.p / "q.data.npy"));
  }
  // Columnwise blocks stream too, in bands of whole 32-row blocks: 2016 rows (63 blocks) per slice of
  // 256 MiB; scales [32769, 2048]. The message names the streamed estimate, not a whole-tensor one.
  {
    const EnvVar lim("MXSIM_MEMORY_LIMIT", "2G");
    const uint64_t band = 2016 * cols, col = n + cols * 2048 + band * 21 + (n / 256 + 1) * 64;
    const auto r = s.mxsim("quantize --recipe mxfp8 --axis rows big.npy -o q");
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_NE(r.err.find("big.npy: tensor 'big' [65536, 32769] F32 (2147549184 elements) needs 3.9 GiB (" +
                         std::to_string(col) + " bytes) of memory to quantize streamed"),
              std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("holds this input whole"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(s.p / "q.data.npy"));
  }
  // What is read whole is only a tensor of at most one slice; under a tiny limit it is refused with
  // its own size: [256, 1024] F32 = 1 MiB of source + 17 bytes per element, codes + scales 256 KiB + 8 KiB.
  {
    s.put("small.npy", npy_bytes("<f4", "(256, 1024)", std::string(4 * 256 * 1024, '\0')));
    const EnvVar lim("MXSIM_MEMORY_LIMIT", "1M");
    const uint64_t m = 256 * 1024, need = m + 256 * 32 + m * 21 + (m / 256 + 1) * 64;
    const auto r = s.mxsim("quantize --recipe mxfp8 small.npy -o q");
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_NE(r.err.find("small.npy: tensor 'small' [256, 1024] F32 (262144 elements) needs 5.6 MiB (" +
                         std::to_string(need) + " bytes) of memory to quantize (its codes and scales, held until "
                         "written, and its 1.0 MiB (1048576 bytes) of source with its working set)"),
              std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(s.p / "q.data.npy"));
  }
  // A sharded-style .safetensors file of two such tensors (sparse, 16 GiB): each streams, and the codes
  // of the first are held while the second is quantized, so under 5 GiB the second is refused, naming it.
  {
    const uint64_t b = 4 * n;
    std::string j = "{\"a\":{\"dtype\":\"F32\",\"shape\":[65536,32769],\"data_offsets\":[0," + std::to_string(b) +
                    "]},\"b\":{\"dtype\":\"F32\",\"shape\":[65536,32769],\"data_offsets\":[" + std::to_string(b) +
                    "," + std::to_string(2 * b) + "]}}";
    while (j.size() % 8) j += ' ';
    std::string head(8, '\0');
    for (int k = 0; k < 8; ++k) head[size_t(k)] = char((uint64_t(j.size()) >> (8 * k)) & 0xFF);
    fs::resize_file(s.put("two.safetensors", head + j), 8 + j.size() + 2 * b);
    const EnvVar lim("MXSIM_MEMORY_LIMIT", "5G");
    const uint64_t held = n + rows * 1025;
    const auto r = s.mxsim("quantize --recipe mxfp8 --all-tensors two.safetensors -o q.safetensors");
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_NE(r.err.find("two.safetensors: tensor 'b' [65536, 32769] F32 (2147549184 elements) needs 5.9 GiB (" +
                         std::to_string(held + stream) + " bytes) of memory to quantize streamed (its codes and "
                         "scales, held until written, with those of the 1 tensor before it, and one slice"),
              std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(s.p / "q.safetensors"));
  }
  // A malformed limit is a usage error naming the variable.
  const EnvVar bad("MXSIM_MEMORY_LIMIT", "lots");
  const auto r2 = s.mxsim("quantize --recipe mxfp8 big.npy -o q");
  EXPECT_EQ(r2.rc, 2) << r2.err;
  EXPECT_NE(r2.err.find("MXSIM_MEMORY_LIMIT"), std::string::npos) << r2.err;
}

// MXSIM_MEMORY_LIMIT is a byte count, optionally with a binary suffix: a plain count above 8 MiB
// (2^23) is a limit like any other, and the bound of the count is its unit's (int64 bytes in all).
TEST(CliQuantizeLarge, MemoryLimitIsBytesOrBinarySuffixed) {
  CliSandbox s;
  const uint64_t rows = 65536, cols = 32769, n = rows * cols;
  const std::string h = npy_bytes("<f4", "(" + std::to_string(rows) + ", " + std::to_string(cols) + ")", "");
  fs::resize_file(s.put("big.npy", h), h.size() + 4 * n);
  s.put("small.npy", npy_bytes("<f4", "(4, 32)", std::string(4 * 4 * 32, '\0')));
  {  // 2 GiB as bytes refuses the 3.9 GiB tensor as "2G" does
    const EnvVar lim("MXSIM_MEMORY_LIMIT", "2147483648");
    const auto r = s.mxsim("quantize --recipe mxfp8 big.npy -o q");
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_NE(r.err.find("needs 3.9 GiB (4160251947 bytes) of memory to quantize streamed"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("above the limit of 2.0 GiB (2147483648 bytes) (MXSIM_MEMORY_LIMIT)"), std::string::npos) << r.err;
  }
  for (const char* ok : {"17179869184", "9223372036854775807", "8388607T", "16g"}) {  // admitted
    const EnvVar lim("MXSIM_MEMORY_LIMIT", ok);
    const auto r = s.mxsim("quantize --recipe mxfp8 small.npy -o /dev/null");
    EXPECT_EQ(r.rc, 0) << ok << ": " << r.err;
  }
  for (const char* bad : {"0", "8388608T", "9223372036854775808", "-1G", "1.5G", "G"}) {  // usage errors
    const EnvVar lim("MXSIM_MEMORY_LIMIT", bad);
    const auto r = s.mxsim("quantize --recipe mxfp8 small.npy -o /dev/null");
    EXPECT_EQ(r.rc, 2) << bad << ": " << r.err;
    EXPECT_NE(r.err.find("MXSIM_MEMORY_LIMIT"), std::string::npos) << bad << ": " << r.err;
  }
}

// A header claiming a huge shape in a short file, or a shape whose byte count overflows: clear
// errors from the header alone (nothing is allocated for the claimed size).
TEST(CliQuantizeLarge, HugeClaimsInShortFilesAreClearErrors) {
  CliSandbox s;
  s.put("trunc.npy", npy_bytes("<f4", "(65536, 32769)", std::string(64, '\0')));
  auto r = s.mxsim("quantize --recipe mxfp8 trunc.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("trunc.npy: truncated data: header says shape [65536, 32769] <f4 = 8590196736 bytes, the file has 64"),
            std::string::npos) << r.err;
  s.put("over.npy", npy_bytes("<f4", "(4294967296, 4294967296)", ""));
  r = s.mxsim("quantize --recipe mxfp8 over.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("over.npy: shape [4294967296, 4294967296] is too large"), std::string::npos) << r.err;
  for (const char* f : {"trunc.npy", "over.npy"}) EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << f;
}

// The quantizer's element index (docs/numerics.md §2.5) of an element past 2^32 is exact, and the
// Philox counter carries its high word: element i uses block i / 4 as counter words (low, high).
TEST(CliQuantizeLarge, IndexArithmeticIs64Bit) {
  using mxsim::hd::logical_index;
  EXPECT_EQ(logical_index(1, 0, 0, 65536, 65537), uint64_t(65536) * 65537);
  EXPECT_EQ(logical_index(3, 65535, 65536, 65536, 65537), (3ull * 65536 + 65535) * 65537 + 65536);
  const mxsim::PhiloxStream ps{0x0123456789ABCDEFull, 7};
  const uint64_t i = (uint64_t(5) << 32) + 9;  // block (5 << 30) + 2
  r123::Philox4x32 gen;
  const uint64_t b = i / 4;
  const r123::Philox4x32::ctr_type ctr = {{uint32_t(b), uint32_t(b >> 32), 7u, 0u}};
  const r123::Philox4x32::key_type key = {{0x89ABCDEFu, 0x01234567u}};
  EXPECT_EQ(ps(i), gen(ctr, key)[i % 4]);
  // The word of index i differs from that of i mod 2^32 (a 32-bit index would alias them).
  EXPECT_NE(ps(i), ps(i & 0xFFFFFFFFu));
}

// An allocation that fails while streaming (the limit raised past what the process may map: ulimit
// -v 1 GB, the codes alone are 2 GiB) is an error naming the file, the tensor and the memory needed,
// never a bare std::bad_alloc, and nothing is written.
TEST(CliQuantizeLarge, OutOfMemoryWhileStreamingIsANamedError) {
#ifdef MXSIM_TEST_ASAN
  GTEST_SKIP() << "address-space cap (ulimit -v) not usable under AddressSanitizer";
#endif
  CliSandbox s;
  const uint64_t rows = 65536, cols = 32769, n = rows * cols;
  const std::string h = npy_bytes("<f4", "(" + std::to_string(rows) + ", " + std::to_string(cols) + ")", "");
  fs::resize_file(s.put("big.npy", h), h.size() + 4 * n);
  const std::string bin = std::string(MXSIM_BINARY_DIR) + "/cli/mxsim";
  std::string cmd = "cd '";
  cmd += s.p.string();
  cmd += "' && ulimit -v 1000000 && MXSIM_MEMORY_LIMIT=64G '";
  cmd += bin;
  cmd += "' quantize --recipe mxfp8 big.npy -o q 2>err.txt";
  const int st = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << st;
  const std::string err = mxsim::test::read_bytes(s.p / "err.txt");
  EXPECT_NE(err.find("big.npy: tensor 'big': needs 3.9 GiB (4160251947 bytes) of memory to quantize streamed, and an "
                     "allocation failed (out of memory)"),
            std::string::npos) << err;
  EXPECT_EQ(err.find("bad_alloc"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(s.p / "q.data.npy"));
}
