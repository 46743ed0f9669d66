// Tensors of more than 2^31 elements quantized end to end by the `mxsim quantize` binary, streamed
// (docs/cli.md "Memory"): an F32 .npy through mxfp8 and a BF16 .safetensors through mxfp4, each a
// sparse file (no disk cost) of zeros with hand-chosen values in the first blocks, the blocks that
// hold element 2^29, 2^30 and 2^31 (and so cross the 2^31, 2^32 and 2^33 byte offsets of the F32
// source, 2^31 and 2^32 of the BF16 one), the blocks on either side of the last slice boundary and
// the last blocks of the tensor. Checked against values derived independently of mxsim: the scale
// exponents by hand from the scale rules (numerics §3.1), the element codes by the exact oracle of
// test_formats_oracle.hpp, the statistics from exact sums over those blocks. Every byte of the
// output scales and codes is read back (all others must be the all-zero block's 0x00 codes and
// 0x00 scale byte, numerics §3.2), the output files have exactly their sizes, and the child's peak
// resident memory is within the bound docs/cli.md documents: outputs + one slice's working set +
// the statistics' partials, which the command's own memory check is also given as its limit.
//
// Minutes per test and several GiB of memory: ctest label `large`, excluded from the sanitizer
// suite; skipped (with the reason) where memory, disk space or sparse files are lacking.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "test_asan.hpp"
#include "test_formats_oracle.hpp"

namespace fs = std::filesystem;
using mxsim::test::CliSandbox;
using mxsim::test::npy_bytes;
using json = nlohmann::json;

namespace {

constexpr uint64_t kSliceSourceBytes = uint64_t(256) << 20;  // docs/cli.md: one slice reads at most 256 MiB
constexpr uint64_t kWorkBytesPerElement = 17;                // docs/cli.md: beside the slice's source bytes

enum class Elem { E4M3, E2M1 };

struct Case {
  std::string recipe;  // an MX recipe with 1x32 blocks along the rows
  Elem elem;
  bool bf16;  // source dtype BF16, else F32
  uint64_t rows, cols;
  uint64_t n() const { return rows * cols; }
  uint64_t esize() const { return bf16 ? 2 : 4; }
  uint64_t nbc() const { return (cols + 31) / 32; }  // blocks per row
  uint64_t row_bytes() const { return elem == Elem::E2M1 ? (cols + 1) / 2 : cols; }
  uint64_t code_bytes() const { return rows * row_bytes(); }
  uint64_t scale_bytes() const { return rows * nbc(); }
  uint64_t slice_rows() const { return kSliceSourceBytes / esize() / cols; }
};

/// The scale exponent s of a block whose amax is c * 2^e, derived by hand from numerics §3.1:
/// mxfp8 (E4M3, maxe 448, RCEIL s = ceil(log2(amax / 448))): 3/448 lies in (2^-8, 2^-7], so c = 3
/// gives s = e - 7; 7/448 = 2^-6 exactly, so c = 7 gives s = e - 6 (d = fl32(7 * 2^e * fl32(1/448))
/// is 2^(e-6) or one ulp below it, ceil(log2) e - 6 either way). mxfp4 (E2M1, emax 2, EVEN
/// s = E - 2 + [m >= 1.75] for amax = m * 2^E): 3 * 2^e = 1.5 * 2^(e+1) gives s = e - 1;
/// 7 * 2^e = 1.75 * 2^(e+2) gives s = e + 1.
int hand_scale_exp(Elem el, int c, int e) {
  if (el == Elem::E4M3) return c == 3 ? e - 7 : e - 6;
  return c == 3 ? e - 1 : e + 1;
}

/// The code of the block's amax element by hand: mxfp8 3 * 2^7 = 384 = 1.5 * 2^8 (E4M3 0 1111 100),
/// 7 * 2^6 = 448 = E4M3 max (0 1111 110); mxfp4 3 * 2^1 = 6 = E2M1 max (0 11 1), 7 / 2 = 3.5, the
/// tie of 3 (0 10 1) and 4 (0 11 0), to even: 4.
uint32_t hand_amax_code(Elem el, int c) {
  if (el == Elem::E4M3) return c == 3 ? 0x7C : 0x7E;
  return c == 3 ? 0x7 : 0x6;
}

const oracle::Table& table_of(Elem el) {
  static const auto make = [](const char* name) {
    for (const auto& f : oracle::all_formats())
      if (f.name == name) return oracle::Table(f);
    throw std::runtime_error(std::string("no oracle format ") + name);
  };
  static const oracle::Table e4m3 = make("e4m3"), e2m1 = make("e2m1");
  return el == Elem::E4M3 ? e4m3 : e2m1;
}

/// An exact oracle value (units of 2^unit_exp) as a double; fails if it is not exactly one.
double exact_double(const oracle::Big& v, int unit_exp) {
  if (v == 0) return 0.0;
  const unsigned lo = boost::multiprecision::lsb(v), hi = boost::multiprecision::msb(v);
  EXPECT_LT(hi - lo, 53u) << "test precondition: the expected statistic is not an FP64 value";
  return std::ldexp(double((v >> lo).convert_to<uint64_t>()), int(lo) + unit_exp);
}

/// One block given non-zero values, and what quantizing it must give.
struct Block {
  uint64_t row, bcol;
  int c, e, s;
  std::vector<float> x;          // its elements (the last block of a row may be partial)
  std::vector<uint32_t> codes;  // the oracle's code of each
};

struct Expected {
  std::vector<Block> blocks;
  std::map<uint64_t, uint8_t> scale;  // scale index (row * nbc + bcol) -> byte; every other one 0x00
  std::map<uint64_t, uint8_t> code;   // storage byte of the codes -> byte; every other one 0x00
  uint64_t underflow = 0;
  double se = 0, sx = 0, max_abs_err = 0;  // the exact sums of (x - d)^2 and x^2, max |x - d|
};

/// Values for the blocks `where` (row, block column), block t of them: amax c * 2^e (c 3 or 7,
/// e in [-1, 2], its sign varying), the others c * m * 2^(e-5) with m = (13k + 5t) mod 63 - 31 in
/// [-31, 31] (a -0 where m = 0 on odd k + t) and, in blocks of e = 2, one tiny element: values
/// exact in BF16 (c * |m| < 256), some rounding, some underflowing. Exponents stay within a few
/// binades so that the sums of the statistics are exact in FP64 in any order (checked).
Expected expected_for(const Case& cs, std::vector<std::pair<uint64_t, uint64_t>> where) {
  std::sort(where.begin(), where.end());
  where.erase(std::unique(where.begin(), where.end()), where.end());
  const oracle::Table& tab = table_of(cs.elem);
  Expected ex;
  oracle::Big se = 0, sx = 0, max_err = 0;  // units of 2^-2K (squares) and 2^-K
  for (size_t t = 0; t < where.size(); ++t) {
    Block b{where[t].first, where[t].second, t % 2 ? 7 : 3, int(t % 4) - 1, 0, {}, {}};
    b.s = hand_scale_exp(cs.elem, b.c, b.e);
    const uint64_t c0 = b.bcol * 32, len = std::min<uint64_t>(32, cs.cols - c0);
    for (uint64_t k = 0; k < len; ++k) {
      const int m = k == 0 ? (t % 3 ? 32 : -32) : int((13 * k + 5 * t) % 63) - 31;
      float x = std::ldexp(float(b.c * m), b.e - 5);
      if (m == 0 && (k + t) % 2) x = -0.0f;
      // in the blocks of e = 2, one element of 2^(e-18): x / 2^s is 2^-11 (c = 3, mxfp8), 2^-12
      // (c = 7) or less, below half of E4M3's and E2M1's smallest subnormal, so it underflows
      if (k == 1 && b.e == 2) x = std::ldexp(t % 2 ? -1.0f : 1.0f, b.e - 18);
      const uint32_t xb = std::bit_cast<uint32_t>(x);
      const uint32_t code =
          oracle::expect(tab, oracle::decide(tab, xb, b.s), oracle::Mode::RNE, oracle::Ov::Sat, 0);
      if (k == 0) {
        EXPECT_EQ(code & ~tab.f.sign_bit(), hand_amax_code(cs.elem, b.c)) << "oracle vs hand, block " << t;
      }
      b.x.push_back(x);
      b.codes.push_back(code);
      const uint32_t mag = code & ~tab.f.sign_bit();
      if (x != 0.0f && mag == 0) ++ex.underflow;
      // |x| and |d| = value(code) * 2^s, exactly, in units of 2^-K (their signs agree or d = 0)
      const oracle::Big ax = oracle::exact_abs(xb, 0), v = tab.f.value(mag);
      const oracle::Big ad = b.s >= 0 ? oracle::Big(v << b.s) : oracle::Big(v >> -b.s);
      EXPECT_EQ(b.s >= 0 ? oracle::Big(ad >> b.s) : oracle::Big(ad << -b.s), v) << "inexact shift";
      const oracle::Big err = ax > ad ? oracle::Big(ax - ad) : oracle::Big(ad - ax);
      se += err * err;
      sx += ax * ax;
      max_err = std::max(max_err, err);
      // storage: row-major codes, E2M1 two per byte (element 2i low nibble)
      const uint64_t col = c0 + k;
      if (cs.elem == Elem::E2M1)
        ex.code[b.row * cs.row_bytes() + col / 2] |= uint8_t(code << (col % 2 ? 4 : 0));
      else
        ex.code[b.row * cs.row_bytes() + col] = uint8_t(code);
    }
    ex.scale[b.row * cs.nbc() + b.bcol] = uint8_t(b.s + 127);
    ex.blocks.push_back(std::move(b));
  }
  // the pattern reaches what it is meant to: underflow, rounding, -0 codes
  EXPECT_GT(ex.underflow, 0u);
  EXPECT_GT(se, 0);
  EXPECT_TRUE(std::any_of(ex.blocks.begin(), ex.blocks.end(), [&](const Block& b) {
    for (size_t k = 0; k < b.x.size(); ++k)
      if (std::signbit(b.x[k]) && b.x[k] == 0.0f && b.codes[k] == tab.f.sign_bit()) return true;
    return false;
  }));
  ex.se = exact_double(se, -2 * oracle::K);
  ex.sx = exact_double(sx, -2 * oracle::K);
  ex.max_abs_err = exact_double(max_err, -oracle::K);
  return ex;
}

/// The blocks given values: the first and third of row 0 and its last (partial), those holding
/// elements 2^29, 2^30 and 2^31, the last block before and the first after the last slice
/// boundary, and the last three blocks of the tensor: 11 distinct blocks for both cases.
std::vector<std::pair<uint64_t, uint64_t>> target_blocks(const Case& cs) {
  auto of = [&](uint64_t i) { return std::make_pair(i / cs.cols, (i % cs.cols) / 32); };
  const uint64_t last_slice_row0 = (cs.rows - 1) / cs.slice_rows() * cs.slice_rows();
  const uint64_t R = cs.rows, B = cs.nbc();
  return {{0, 0},
          {0, 2},
          {0, B - 1},
          of(uint64_t(1) << 29),
          of(uint64_t(1) << 30),
          of(uint64_t(1) << 31),
          {last_slice_row0 - 1, B - 1},
          {last_slice_row0, 0},
          {R - 1, B - 3},
          {R - 1, B - 2},
          {R - 1, B - 1}};
}

/// The peak resident memory docs/cli.md bounds a streamed tensor by: its codes and scales, one
/// slice's source with 17 bytes per element of working set, the statistics' partials.
uint64_t documented_bound(const Case& cs) {
  const uint64_t slice = cs.slice_rows() * cs.cols;
  return cs.code_bytes() + cs.scale_bytes() + slice * (cs.esize() + kWorkBytesPerElement) + (cs.n() / 256 + 1) * 64;
}

uint64_t mem_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

struct Posix {
  int fd;
  explicit Posix(const fs::path& p, int flags) : fd(::open(p.c_str(), flags | O_CLOEXEC, 0644)) {
    if (fd < 0) throw std::runtime_error(p.string() + ": cannot open: " + std::strerror(errno));
  }
  ~Posix() { ::close(fd); }
  void pwrite_all(const void* b, size_t n, uint64_t off) const {
    if (::pwrite(fd, b, n, off_t(off)) != ssize_t(n)) throw std::runtime_error("pwrite failed");
  }
  std::string pread_str(size_t n, uint64_t off) const {
    std::string s(n, '\0');
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd, s.data() + got, n - got, off_t(off + got));
      if (r <= 0) throw std::runtime_error("short read");
      got += size_t(r);
    }
    return s;
  }
};

/// The sparse source: `header` then n zero elements (a hole), the blocks' values written in place.
fs::path write_sparse_input(const CliSandbox& s, const std::string& name, const std::string& header, const Case& cs,
                            const Expected& ex, bool& sparse) {
  const fs::path p = s.put(name, header);
  fs::resize_file(p, header.size() + cs.n() * cs.esize());
  struct stat st {};
  ::stat(p.c_str(), &st);
  sparse = uint64_t(st.st_blocks) * 512 < (uint64_t(64) << 20);
  const Posix f(p, O_WRONLY);
  for (const Block& b : ex.blocks) {
    std::string bytes;
    for (float x : b.x) {
      const uint32_t u = std::bit_cast<uint32_t>(x);
      for (uint64_t k = 4 - cs.esize(); k < 4; ++k) bytes += char((u >> (8 * k)) & 0xFF);  // BF16: the high half
    }
    f.pwrite_all(bytes.data(), bytes.size(), header.size() + (b.row * cs.cols + b.bcol * 32) * cs.esize());
  }
  return p;
}

/// Every byte of [begin, begin + len) of file p: `want` (offsets relative to begin) where it has
/// one, 0x00 elsewhere. Read in chunks, so the test itself holds little.
void expect_bytes(const fs::path& p, uint64_t begin, uint64_t len, const std::map<uint64_t, uint8_t>& want,
                  const std::string& what) {
  const Posix f(p, O_RDONLY);
  constexpr uint64_t kChunk = uint64_t(32) << 20;
  uint64_t bad = 0;
  auto it = want.begin();
  for (uint64_t off = 0; off < len; off += kChunk) {
    const uint64_t n = std::min(kChunk, len - off);
    std::string buf = f.pread_str(size_t(n), begin + off);
    for (; it != want.end() && it->first < off + n; ++it) {
      auto& got = buf[size_t(it->first - off)];
      if (uint8_t(got) != it->second && bad++ < 8)
        ADD_FAILURE() << what << " byte " << it->first << ": 0x" << std::hex << unsigned(uint8_t(got))
                      << ", expected 0x" << unsigned(it->second);
      got = 0;
    }
    if (std::all_of(buf.begin(), buf.end(), [](char c) { return c == 0; })) continue;
    for (size_t k = 0; k < buf.size(); ++k)
      if (buf[k] && bad++ < 8)
        ADD_FAILURE() << what << " byte " << off + k << ": 0x" << std::hex << unsigned(uint8_t(buf[k]))
                      << ", expected 0x00 (all-zero block)";
  }
  EXPECT_EQ(bad, 0u) << what << ": bytes that differ";
}

struct Child {
  int rc = -1;
  std::string out, err;
  uint64_t maxrss = 0;  // bytes
  double wall_s = 0;
};

/// `mxsim ARGS` in folder dir, waited for with wait4 to get its own peak resident set size.
Child run_mxsim(const fs::path& dir, const std::vector<std::string>& args) {
  const std::string bin = std::string(MXSIM_BINARY_DIR) + "/cli/mxsim";
  std::vector<std::string> a{bin};
  a.insert(a.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  const fs::path out = dir / ".stdout", err = dir / ".stderr";
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0 || ::chdir(dir.c_str()) != 0 || ::dup2(o, 1) < 0 || ::dup2(e, 2) < 0) ::_exit(126);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  Child c;
  if (pid < 0) return c;
  int st = 0;
  struct rusage ru {};
  if (::wait4(pid, &st, 0, &ru) != pid) return c;
  c.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  c.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  c.maxrss = uint64_t(ru.ru_maxrss) * 1024;  // Linux: kilobytes
  c.out = mxsim::test::read_bytes(out);
  c.err = mxsim::test::read_bytes(err);
  return c;
}

/// Why the test cannot run here (empty: it can): under AddressSanitizer, or without the memory or
/// the disk space the run needs. (A file system without sparse files is found once the input is made.)
std::string cannot_run(const Case& cs, const fs::path& dir) {
#ifdef MXSIM_TEST_ASAN
  return "more than 2^31 elements under AddressSanitizer: its shadow memory and minutes of run time";
#endif
  const uint64_t need = documented_bound(cs) + (uint64_t(1) << 30);
  if (mem_available() < need)
    return "needs " + std::to_string(need) + " bytes of MemAvailable (the documented peak + 1 GiB), have " +
           std::to_string(mem_available());
  struct statvfs v {};
  if (::statvfs(dir.c_str(), &v) != 0) return "statvfs failed on " + dir.string();
  const uint64_t disk = cs.code_bytes() + cs.scale_bytes() + (uint64_t(1) << 30);
  const uint64_t free = uint64_t(v.f_bavail) * v.f_frsize;
  if (free < disk)
    return "needs " + std::to_string(disk) + " bytes of free disk in " + dir.string() + " for the outputs, have " +
           std::to_string(free);
  return "";
}

/// The statistics, the streaming note and the memory of the run, against the expectations.
void expect_run(const Case& cs, const Expected& ex, const Child& r, const std::string& input) {
  ASSERT_EQ(r.rc, 0) << r.err;
  std::cout << "[ measured ] " << cs.recipe << " " << cs.rows << "x" << cs.cols << " " << (cs.bf16 ? "BF16" : "F32")
            << ": wall " << r.wall_s << " s, peak RSS " << r.maxrss << " bytes (documented bound "
            << documented_bound(cs) << ")" << std::endl;
  ::testing::Test::RecordProperty("wall_s", std::to_string(r.wall_s));
  ::testing::Test::RecordProperty("max_rss_bytes", std::to_string(r.maxrss));
  EXPECT_LE(r.maxrss, documented_bound(cs)) << "peak resident memory above the documented bound";
  const json j = json::parse(r.out);
  ASSERT_EQ(j["tensors"].size(), 1u) << r.out;
  const json& t = j["tensors"][0];
  EXPECT_EQ(t["elements"].get<uint64_t>(), cs.n());
  EXPECT_EQ(t["underflow"].get<uint64_t>(), ex.underflow);
  EXPECT_EQ(t["saturated"].get<uint64_t>(), 0u);
  EXPECT_EQ(t["nan_out"].get<uint64_t>(), 0u);
  EXPECT_EQ(t["nonfinite_in"].get<uint64_t>(), 0u);
  EXPECT_EQ(t["max_abs_err"].get<double>(), ex.max_abs_err);
  EXPECT_EQ(t["mse"].get<double>(), ex.se / double(cs.n()));           // numerics §4.6: sum / n
  EXPECT_EQ(t["sqnr_db"].get<double>(), 10.0 * std::log10(ex.sx / ex.se));  // 10 log10(sum x^2 / sum (x - d)^2)
  const uint64_t slices = (cs.rows + cs.slice_rows() - 1) / cs.slice_rows();
  const std::string note = input + ": tensor '" + t["name"].get<std::string>() + "' streamed in " +
                           std::to_string(slices) + " slices of whole block rows";
  EXPECT_NE(r.out.find(note), std::string::npos) << r.out;
}

/// An .npy's header as mxsim writes it (numpy format 1.0, padded to 64) for a U8 array.
std::string u8_npy_header(uint64_t a, uint64_t b) {
  return npy_bytes("|u1", "(" + std::to_string(a) + ", " + std::to_string(b) + ")", "");
}

}  // namespace

// [2147484, 1000] F32 (2^31 + 352 elements, 8 GiB of source) to mxfp8: cols of 1000 put element
// 2^31 (byte 2^33 of the data) inside block 20 of row 2147483 and end every row with a partial
// block of 8; the codes (2 GiB, one byte each) cross the 2^31 byte offset. Output: .npy files.
TEST(CliQuantize2To31, F32NpyToMxfp8EveryBlockInPlaceExactStatsWithinTheMemoryBound) {
  const Case cs{"mxfp8", Elem::E4M3, false, 2147484, 1000};
  ASSERT_GT(cs.n(), uint64_t(1) << 31);
  CliSandbox s;
  if (const std::string why = cannot_run(cs, s.p); !why.empty()) GTEST_SKIP() << why;
  ::unsetenv("MXSIM_QUANTIZE_CHUNK_BYTES");
  const Expected ex = expected_for(cs, target_blocks(cs));
  ASSERT_EQ(ex.blocks.size(), 11u);  // the targets are distinct blocks
  ASSERT_EQ((uint64_t(1) << 31) % cs.cols % 32, 8u);  // element 2^31 is inside its block, not at its start
  bool sparse = false;
  const std::string header = npy_bytes("<f4", "(" + std::to_string(cs.rows) + ", " + std::to_string(cs.cols) + ")", "");
  write_sparse_input(s, "big.npy", header, cs, ex, sparse);
  if (!sparse) GTEST_SKIP() << s.p << ": the file system does not keep sparse files (the source would take 8 GiB)";
  // the command's own memory check, given the documented bound as its limit, admits the run
  const mxsim::test::EnvVar lim("MXSIM_MEMORY_LIMIT", std::to_string(documented_bound(cs)).c_str());
  const Child r = run_mxsim(s.p, {"quantize", "--recipe", "mxfp8", "--json", "big.npy", "-o", "q"});
  fs::remove(s.p / "big.npy");
  expect_run(cs, ex, r, "big.npy");
  if (HasFatalFailure()) return;

  const std::string hd = u8_npy_header(cs.rows, cs.cols), hs = u8_npy_header(cs.rows, cs.nbc());
  ASSERT_EQ(fs::file_size(s.p / "q.data.npy"), hd.size() + cs.code_bytes());
  ASSERT_EQ(fs::file_size(s.p / "q.scale.npy"), hs.size() + cs.scale_bytes());
  EXPECT_EQ(Posix(s.p / "q.data.npy", O_RDONLY).pread_str(hd.size(), 0), hd);
  EXPECT_EQ(Posix(s.p / "q.scale.npy", O_RDONLY).pread_str(hs.size(), 0), hs);
  // an all-zero block by name, (1, 0): scale byte 0x00, codes +0 (the scans below check every block)
  ASSERT_EQ(ex.scale.count(cs.nbc()), 0u);
  EXPECT_EQ(Posix(s.p / "q.scale.npy", O_RDONLY).pread_str(1, hs.size() + cs.nbc()), std::string(1, '\0'));
  EXPECT_EQ(Posix(s.p / "q.data.npy", O_RDONLY).pread_str(32, hd.size() + cs.row_bytes()), std::string(32, '\0'));
  expect_bytes(s.p / "q.scale.npy", hs.size(), cs.scale_bytes(), ex.scale, "scales");
  expect_bytes(s.p / "q.data.npy", hd.size(), cs.code_bytes(), ex.code, "codes");
}

// [534333, 4019] BF16 (2^31 + 679 elements, 4 GiB of source) in a .safetensors file to mxfp4:
// element 2^31 (byte 2^32 of the data) sits inside block 104 of row 534332, element 2^30
// (byte 2^31) inside a block too; rows end in a partial block of 19 and, 4019 being odd, in a
// padding nibble. Output: one .safetensors file (F4 codes, F8_E8M0 scales).
TEST(CliQuantize2To31, Bf16SafetensorsToMxfp4EveryBlockInPlaceExactStatsWithinTheMemoryBound) {
  const Case cs{"mxfp4", Elem::E2M1, true, 534333, 4019};
  ASSERT_GT(cs.n(), uint64_t(1) << 31);
  CliSandbox s;
  if (const std::string why = cannot_run(cs, s.p); !why.empty()) GTEST_SKIP() << why;
  ::unsetenv("MXSIM_QUANTIZE_CHUNK_BYTES");
  const Expected ex = expected_for(cs, target_blocks(cs));
  ASSERT_EQ(ex.blocks.size(), 11u);
  ASSERT_EQ((uint64_t(1) << 31) % cs.cols % 32, 12u);  // element 2^31 is inside its block
  ASSERT_EQ((uint64_t(1) << 30) % cs.cols % 32, 6u);   // and so is element 2^30
  std::string j = "{\"w\":{\"dtype\":\"BF16\",\"shape\":[" + std::to_string(cs.rows) + "," + std::to_string(cs.cols) +
                  "],\"data_offsets\":[0," + std::to_string(cs.n() * 2) + "]}}";
  while (j.size() % 8) j += ' ';
  std::string header(8, '\0');
  for (int k = 0; k < 8; ++k) header[size_t(k)] = char((uint64_t(j.size()) >> (8 * k)) & 0xFF);
  bool sparse = false;
  write_sparse_input(s, "big.safetensors", header + j, cs, ex, sparse);
  if (!sparse) GTEST_SKIP() << s.p << ": the file system does not keep sparse files (the source would take 4 GiB)";
  const mxsim::test::EnvVar lim("MXSIM_MEMORY_LIMIT", std::to_string(documented_bound(cs)).c_str());
  const Child r = run_mxsim(s.p, {"quantize", "--recipe", "mxfp4", "--json", "big.safetensors", "-o", "q.safetensors"});
  fs::remove(s.p / "big.safetensors");
  expect_run(cs, ex, r, "big.safetensors");
  if (HasFatalFailure()) return;

  const fs::path q = s.p / "q.safetensors";
  const Posix f(q, O_RDONLY);
  const std::string len8 = f.pread_str(8, 0);
  uint64_t hlen = 0;
  for (int k = 0; k < 8; ++k) hlen |= uint64_t(uint8_t(len8[size_t(k)])) << (8 * k);
  ASSERT_LT(hlen, uint64_t(1) << 20);
  const json h = json::parse(f.pread_str(size_t(hlen), 8));
  const json& d = h["w.data"];
  const json& sc = h["w.scale"];
  EXPECT_EQ(d["dtype"], "F4");
  EXPECT_EQ(d["shape"], json::array({cs.rows, 2 * cs.row_bytes()}));  // 4-bit elements, padding nibble included
  EXPECT_EQ(sc["dtype"], "F8_E8M0");
  EXPECT_EQ(sc["shape"], json::array({cs.rows, cs.nbc()}));
  const uint64_t d0 = d["data_offsets"][0], d1 = d["data_offsets"][1];
  const uint64_t s0 = sc["data_offsets"][0], s1 = sc["data_offsets"][1];
  ASSERT_EQ(d1 - d0, cs.code_bytes());
  ASSERT_EQ(s1 - s0, cs.scale_bytes());
  ASSERT_EQ(fs::file_size(q), 8 + hlen + cs.code_bytes() + cs.scale_bytes());  // nothing else in the buffer
  // an all-zero block by name, (1, 0): scale byte 0x00, codes +0 (the scans below check every block)
  ASSERT_EQ(ex.scale.count(cs.nbc()), 0u);
  EXPECT_EQ(f.pread_str(1, 8 + hlen + s0 + cs.nbc()), std::string(1, '\0'));
  EXPECT_EQ(f.pread_str(16, 8 + hlen + d0 + cs.row_bytes()), std::string(16, '\0'));
  expect_bytes(q, 8 + hlen + s0, cs.scale_bytes(), ex.scale, "scales");
  expect_bytes(q, 8 + hlen + d0, cs.code_bytes(), ex.code, "codes");
}
