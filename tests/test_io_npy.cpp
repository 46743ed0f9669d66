// .npy reading and writing against bytes written by hand from the format
// description in numpy.lib.format (magic "\x93NUMPY", version, LE header
// length, dict literal padded with spaces and '\n' to a multiple of 64).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>

#include "mxsim/io/npy.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace mxsim::io;
using mxsim::test::bytes_of;
using mxsim::test::TempDir;

namespace {

// A version-1.0 file from a dict literal and raw data, padded by the rule.
std::string npy_v1(const std::string& dict, const std::string& data) {
  std::string h = dict;
  while ((10 + h.size() + 1) % 64 != 0) h += ' ';
  h += '\n';
  std::string f = std::string("\x93NUMPY\x01\x00", 8);
  f += char(h.size() & 0xFF);
  f += char(h.size() >> 8);
  return f + h + data;
}

std::string error_of(const fs::path& f) {
  try {
    read_npy(f);
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(IoNpy, ReadsF32TwoByThree) {
  TempDir d("io_npy");
  // 1.0, -2.5, 0, -0, +inf, smallest subnormal (IEEE binary32 bit patterns, LE)
  const std::string data = bytes_of({0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x20, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0x80,
                                     0x00, 0x00, 0x80, 0x7f, 0x01, 0, 0, 0});
  const auto f = d.put("x.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data));
  const RawTensor t = read_npy(f);
  EXPECT_EQ(t.name, "x");
  EXPECT_EQ(t.dtype, DType::F32);
  ASSERT_EQ(t.shape, (std::vector<size_t>{2, 3}));
  const auto v = to_f32(t);
  ASSERT_EQ(v.size(), 6u);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], -2.5f);
  EXPECT_EQ(v[2], 0.0f);
  EXPECT_TRUE(std::signbit(v[3]));
  EXPECT_TRUE(std::isinf(v[4]));
  EXPECT_EQ(v[5], std::ldexp(1.0f, -149));
}

TEST(IoNpy, ReadsF16AndBf16AndU8) {
  TempDir d("io_npy");
  // FP16: 0x3E00 = 1.5, 0x0001 = 2^-24, 0xFC00 = -inf.
  auto f = d.put("h.npy", npy_v1("{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }",
                                 bytes_of({0x00, 0x3e, 0x01, 0x00, 0x00, 0xfc})));
  auto v = to_f32(read_npy(f));
  EXPECT_EQ(v, (std::vector<float>{1.5f, std::ldexp(1.0f, -24), -INFINITY}));
  // BF16 as ml_dtypes/np.save writes it ('<V2'): 0x3F80 = 1, 0xC040 = -3, 0x0001 = 2^-133.
  f = d.put("b.npy", npy_v1("{'descr': '<V2', 'fortran_order': False, 'shape': (1, 3), }",
                            bytes_of({0x80, 0x3f, 0x40, 0xc0, 0x01, 0x00})));
  RawTensor t = read_npy(f);
  EXPECT_EQ(t.dtype, DType::BF16);
  v = to_f32(t);
  EXPECT_EQ(v, (std::vector<float>{1.0f, -3.0f, std::ldexp(1.0f, -133)}));
  // 'bfloat16' spelled out (a header written from str(dtype)), double quotes, 3-D.
  f = d.put("b2.npy", npy_v1("{\"descr\": \"bfloat16\", \"fortran_order\": False, \"shape\": (1, 1, 1)}",
                             bytes_of({0x00, 0x40})));
  v = to_f32(read_npy(f));
  EXPECT_EQ(v, (std::vector<float>{2.0f}));
  f = d.put("u.npy", npy_v1("{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }", bytes_of({0x7f, 0xff})));
  t = read_npy(f);
  EXPECT_EQ(t.dtype, DType::U8);
  EXPECT_EQ(t.bytes, (std::vector<uint8_t>{0x7f, 0xff}));
}

TEST(IoNpy, ReadsVersion2And3) {
  TempDir d("io_npy");
  for (char major : {'\x02', '\x03'}) {
    std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }";
    while ((12 + h.size() + 1) % 64 != 0) h += ' ';
    h += '\n';
    std::string file = std::string("\x93NUMPY", 6) + major + '\0';
    file += char(h.size());
    file += std::string(3, '\0');
    file += h + bytes_of({0, 0, 0x40, 0x40});
    const auto v = to_f32(read_npy(d.put("v.npy", file)));
    EXPECT_EQ(v, std::vector<float>{3.0f});
  }
}

TEST(IoNpy, WritesTheFormatBytes) {
  // Expected file written out in full: 10-byte prefix, then the 57-char dict;
  // 10 + 57 + 1 > 64, so the data starts at 128 and the header is
  // 118 = 0x76 bytes: dict + 60 spaces + '\n'. (Recent numpy adds more spaces,
  // room for the shape to grow; the padding is free in the format.)
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  ASSERT_EQ(dict.size(), 57u);
  std::string expect = std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict + std::string(60, ' ') + "\n" +
                       bytes_of({0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x20, 0xc0});
  ASSERT_EQ(expect.size(), 128u + 8u);
  const float vals[2] = {1.0f, -2.5f};
  const auto got = encode_npy(from_f32("x", {2}, vals));
  EXPECT_EQ(std::string(got.begin(), got.end()), expect);

  // 2-D U8 and BF16 headers.
  const uint8_t codes[4] = {1, 2, 3, 4};
  auto u = encode_npy(from_u8("c", {2, 2}, codes));
  std::string us(u.begin(), u.end());
  EXPECT_EQ(us.size() % 64, 4u);
  EXPECT_NE(us.find("{'descr': '|u1', 'fortran_order': False, 'shape': (2, 2), }"), std::string::npos);
  RawTensor b{"b", DType::BF16, {1}, {0x80, 0x3f}};
  auto bb = encode_npy(b);
  EXPECT_NE(std::string(bb.begin(), bb.end()).find("'descr': '<V2'"), std::string::npos);
}

TEST(IoNpy, RoundTripThroughAFile) {
  TempDir d("io_npy");
  const float vals[6] = {0.5f, -0.0f, 3e38f, -1e-40f, 7.0f, 1.0f};
  write_npy(d.p / "r.npy", from_f32("r", {1, 2, 3}, vals));
  const RawTensor t = read_npy(d.p / "r.npy");
  EXPECT_EQ(t.shape, (std::vector<size_t>{1, 2, 3}));
  ASSERT_EQ(t.bytes.size(), 24u);
  EXPECT_EQ(std::memcmp(t.bytes.data(), vals, 24), 0);
}

TEST(IoNpy, ErrorsNameTheFileAndTheProblem) {
  TempDir d("io_npy");
  const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  struct Case {
    const char* file;
    std::string bytes;
    const char* problem;
  };
  const Case cases[] = {
      {"magic.npy", "PK\x03\x04 not numpy at all", "bad magic"},
      {"short.npy", "\x93NUM", "bad magic"},
      {"version.npy", std::string("\x93NUMPY\x04\x00\x10\x00", 10) + std::string(16, ' '), "unsupported .npy format version 4.0"},
      {"hdrlen.npy", std::string("\x93NUMPY\x01\x00\xff\x00", 10) + ok_dict, "truncated header"},
      {"trunc.npy", npy_v1(ok_dict, bytes_of({0, 0, 0x80, 0x3f, 0, 0})), "truncated data"},
      {"trail.npy", npy_v1(ok_dict, std::string(9, '\0')), "trailing bytes"},
      {"f16.npy", npy_v1("{'descr': '<f16', 'fortran_order': False, 'shape': (1,), }", std::string(16, '\0')),
       "unsupported dtype '<f16'"},
      {"be.npy", npy_v1("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", std::string(4, '\0')),
       "unsupported dtype '>f4'"},
      {"void.npy", npy_v1("{'descr': '|V2', 'fortran_order': False, 'shape': (1,), }", std::string(2, '\0')),
       "unsupported dtype '|V2'"},
      {"struct.npy", npy_v1("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", std::string(4, '\0')),
       "structured"},
      {"fortran.npy", npy_v1("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", std::string(16, '\0')),
       "Fortran order"},
      {"noshape.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, }", ""), "missing 'shape'"},
      {"badshape.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -1), }", ""), "malformed .npy header"},
      {"extra.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", std::string(4, '\0')),
       "unexpected key 'x'"},
      {"notdict.npy", npy_v1("[1, 2]", ""), "malformed .npy header"},
      // A repeated key: Python's dict literal keeps the last one silently.
      {"dupdescr.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'descr': '<f2', }", std::string(8, '\0')),
       "key 'descr' appears twice"},
      {"dupshape.npy", npy_v1("{'descr': '<f4', 'shape': (1,), 'fortran_order': False, 'shape': (2,), }", std::string(8, '\0')),
       "key 'shape' appears twice"},
      // 2^62 elements of 4 bytes: the element count fits size_t, the byte count does not.
      {"huge.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,), }", ""), "is too large"},
      {"huge2.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", ""), "is too large"},
      {"hugedim.npy", npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }", ""),
       "shape dimension too large"},
  };
  for (const auto& c : cases) {
    const auto f = d.put(c.file, c.bytes);
    const std::string e = error_of(f);
    EXPECT_NE(e.find(f.string()), std::string::npos) << c.file << ": " << e;
    EXPECT_NE(e.find(c.problem), std::string::npos) << c.file << ": " << e;
  }
  const std::string missing = error_of(d.p / "missing.npy");
  EXPECT_NE(missing.find("missing.npy: cannot open"), std::string::npos) << missing;
}

TEST(IoNpy, F64IsReadAndRoundedOnceToNearestEven) {
  // Hand values: 1 + 2^-24 lies halfway between 1 and 1 + 2^-23 -> 1 (even);
  // 1 + 3 * 2^-24 halfway between 1 + 2^-23 and 1 + 2^-22 -> 1 + 2^-22 (even);
  // 1e300 overflows to +inf; 0.5 and -2 are exact.
  TempDir d("io_npy");
  const double v[5] = {1.0 + std::ldexp(1.0, -24), 1.0 + 3 * std::ldexp(1.0, -24), 1e300, 0.5, -2.0};
  std::string data(reinterpret_cast<const char*>(v), sizeof v);
  const auto t = read_npy(d.put("d.npy", npy_v1("{'descr': '<f8', 'fortran_order': False, 'shape': (5,), }", data)));
  EXPECT_EQ(t.dtype, DType::F64);
  size_t changed = 0;
  const auto f = to_f32(t, &changed);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_EQ(f[1], 1.0f + std::ldexp(1.0f, -22));
  EXPECT_TRUE(std::isinf(f[2]) && f[2] > 0);
  EXPECT_EQ(f[3], 0.5f);
  EXPECT_EQ(f[4], -2.0f);
  EXPECT_EQ(changed, 3u);
  EXPECT_EQ(npy_descr(DType::F64), "<f8");
  EXPECT_EQ(read_npy_header(d.p / "d.npy").shape, std::vector<size_t>{5});
}
