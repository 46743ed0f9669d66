// Parsers bound what they recurse over and what they print: a deeply nested safetensors
// header (its error message used to format the nested shape recursively, exhausting the stack)
// and a huge shape list in a message (quoted at most 80 characters).
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>
#include <functional>

#include "mxsim/io/npy.hpp"
#include "mxsim/io/safetensors.hpp"

#include "test_asan.hpp"

using mxsim::io::IoError;
using mxsim::io::parse_safetensors;

namespace {
std::vector<uint8_t> with_header(const std::string& json) {
  std::vector<uint8_t> b(8 + json.size());
  for (std::size_t k = 0; k < 8; ++k) b[k] = uint8_t(uint64_t(json.size()) >> (8 * k));
  for (std::size_t i = 0; i < json.size(); ++i) b[8 + i] = uint8_t(json[i]);
  return b;
}
std::string error_of(const std::vector<uint8_t>& b) {
  try {
    parse_safetensors(b, "x.safetensors");
  } catch (const IoError& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(ParserLimits, SafetensorsDeeplyNestedShapeIsRefusedWhileParsing) {
  const int n = 200000;
  const std::string json = "{\"t\":{\"dtype\":\"F32\",\"shape\":" + std::string(n, '[') + std::string(n, ']') +
                           ",\"data_offsets\":[0,0]}}";
  EXPECT_EQ(error_of(with_header(json)), "x.safetensors: header nests JSON deeper than 16 levels (a header has 3)");
  // 16 levels are parsed (and reported as a bad shape, quoted in full).
  const std::string ok = "{\"t\":{\"dtype\":\"F32\",\"shape\":" + std::string(14, '[') + std::string(14, ']') +
                         ",\"data_offsets\":[0,0]}}";
  EXPECT_EQ(error_of(with_header(ok)), "x.safetensors: tensor 't': shape [[[[[[[[[[[[[[]]]]]]]]]]]]]] is not a list of "
                                       "non-negative integers");
}

TEST(ParserLimits, SafetensorsMessageQuotesAtMost80Characters) {
  std::string shape = "[";
  for (int i = 0; i < 100000; ++i) shape += i ? ",-1" : "-1";
  shape += "]";
  const std::string json = "{\"t\":{\"dtype\":\"F32\",\"shape\":" + shape + ",\"data_offsets\":[0,0]}}";
  std::string quoted = "[-1";
  for (int i = 0; i < 25; ++i) quoted += ",-1";
  // dump() of the list: "[-1,-1,...": the first 77 characters, then "...".
  EXPECT_EQ(error_of(with_header(json)),
            "x.safetensors: tensor 't': shape " + quoted.substr(0, 77) + "... is not a list of non-negative integers");
}

// A header that is a number too large for a double (nlohmann throws out_of_range, not
// parse_error) is "not valid JSON" like any other, not an exception escaping the parser.
TEST(ParserLimits, SafetensorsHeaderNumberOverflowIsAnIoError) {
  const std::string m = error_of(with_header("2222222222222e77777039908014829395713122"));
  EXPECT_EQ(m.rfind("x.safetensors: header is not valid JSON: ", 0), 0u) << m;
  EXPECT_NE(m.find("number overflow"), std::string::npos) << m;
  const std::string n = error_of(with_header("{\"t\": {\"dtype\": \"F32\", \"shape\": [1e999], \"data_offsets\": [0, 4]}}"));
  EXPECT_EQ(n.rfind("x.safetensors: header is not valid JSON: ", 0), 0u) << n;
}

// Out of memory is a named error, never a bare std::bad_alloc: in a child whose address space
// is capped 384 MiB above what it holds, a 2^27-element BF16 tensor (256 MiB) cannot be widened
// to FP32 (512 MiB), and (capped 128 MiB above) a .npy of that size cannot be copied out of
// its file bytes.
// (Skipped under AddressSanitizer, whose shadow memory needs an uncapped address space.)
namespace {
uint64_t vm_bytes() {
  std::ifstream f("/proc/self/status");
  std::string k;
  uint64_t kb = 0;
  while (f >> k)
    if (k == "VmSize:") {
      f >> kb;
      break;
    }
  return kb * 1024;
}
// Runs fn in a child capped at (current address space + extra); returns what() of the
// IoError it threw, "(no error)" or "(bad_alloc)".
std::string in_capped_child(uint64_t extra, const std::function<void()>& fn) {
  int fds[2];
  if (pipe(fds) != 0) return "(pipe failed)";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const rlimit lim{rlim_t(vm_bytes() + extra), rlim_t(vm_bytes() + extra)};
    setrlimit(RLIMIT_AS, &lim);
    std::string msg = "(no error)";
    try {
      fn();
    } catch (const IoError& e) {
      msg = e.what();
    } catch (const std::bad_alloc&) {
      msg = "(bad_alloc)";
    }
    if (write(fds[1], msg.data(), msg.size()) < 0) _exit(3);
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, std::size_t(n));
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  return out;
}
}  // namespace

TEST(ParserLimits, OutOfMemoryIsNamedNotBadAlloc) {
#ifdef MXSIM_TEST_ASAN
  GTEST_SKIP() << "address-space cap not usable under AddressSanitizer";
#endif
  const std::size_t n = std::size_t(1) << 27;
  EXPECT_EQ(in_capped_child(std::size_t(384) << 20,
                            [&] {
                              mxsim::io::RawTensor t{"big", mxsim::io::DType::BF16, {n}, {}};
                              t.bytes.resize(2 * n);
                              (void)mxsim::io::to_f32(t);
                            }),
            "tensor 'big' as FP32: needs 0.50 GiB of memory");
  std::vector<uint8_t> file;
  {
    mxsim::io::RawTensor t{"big", mxsim::io::DType::BF16, {n}, {}};
    t.bytes.resize(2 * n);
    file = mxsim::io::encode_npy(t);  // 256 MiB + header, made before the cap
  }
  EXPECT_EQ(in_capped_child(std::size_t(128) << 20, [&] { (void)mxsim::io::parse_npy(file, "big.npy"); }),
            "big.npy: tensor 'big': needs 0.25 GiB of memory");
}
