// Trace and checkpoint readers on files that mxsim's writers never produce: each test builds
// one such file with the HDF5 C API (or corrupts a written one) and checks that the reader
// refuses it by name instead of reading past a buffer, dividing by zero, allocating what the
// file does not hold, or retrying a bad checksum forever. Each case is one class of defect a
// mutation fuzzer found (fuzz/README.md); the inputs here are minimal instances of it.
#include <gtest/gtest.h>

#include <hdf5.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <tuple>
#include <string>

#include "mxsim/io/tensor_file.hpp"
#include "mxsim/io/toml_nesting.hpp"
#include "mxsim/trace/checkpoint.hpp"
#include "mxsim/trace/compare.hpp"
#include "mxsim/trace/reader.hpp"
#include "mxsim/trace/schema.hpp"
#include "mxsim/trace/writer.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace mxsim::trace;
using mxsim::test::TempDir;

namespace {

// A valid two-step trace: /a scalar f32 series, /m [2, 3] f32 series, a snapshot.
void write_trace(const fs::path& f, const std::string& config = "lr = 0.1\n") {
  Writer w(f, config, make_provenance("emu", 5));
  w.declare_series("/a", DType::f32, {});
  w.declare_series("/m", DType::f32, {2, 3});
  w.declare_snapshot("/s", DType::u8, {4}, {0, 1});
  w.start_swmr();
  for (int s = 0; s < 2; ++s) {
    w.append("/a", float(s) + 0.5f);
    const float m[6] = {float(s), 1, 2, 3, 4, float(-s)};
    w.append("/m", m);
    const uint8_t snap[4] = {uint8_t(s), 7, 8, 9};
    w.write_snapshot("/s", snap);
    w.end_step();
  }
  w.close();
}

// Runs f on the file opened read-write (after the writer closed it).
void edit(const fs::path& f, const std::function<void(hid_t)>& fn) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const hid_t file = H5Fopen(f.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0) << f;
  fn(file);
  ASSERT_GE(H5Fclose(file), 0);
}

void replace_attr(hid_t obj, const char* name, hid_t type, int rank, const hsize_t* dims, const void* data) {
  if (H5Aexists(obj, name) > 0) {
    ASSERT_GE(H5Adelete(obj, name), 0);
  }
  const hid_t sp = rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims, nullptr);
  const hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(a, 0) << name;
  ASSERT_GE(H5Awrite(a, type, data), 0);
  H5Aclose(a);
  H5Sclose(sp);
}

void string_attr(hid_t obj, const char* name, const char* v) {
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  replace_attr(obj, name, t, 0, nullptr, &v);
  H5Tclose(t);
}

// A chunked dataset of the given extent (nothing written: no chunk allocated).
hid_t make_dataset(hid_t file, const char* name, hid_t type, std::vector<hsize_t> dims, std::vector<hsize_t> chunk) {
  std::vector<hsize_t> maxd(dims);
  maxd[0] = H5S_UNLIMITED;
  const hid_t sp = H5Screate_simple(int(dims.size()), dims.data(), maxd.data());
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, int(chunk.size()), chunk.data());
  const hid_t d = H5Dcreate2(file, name, type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Pclose(dcpl);
  H5Sclose(sp);
  return d;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const TraceError& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_HAS(hay, needle) EXPECT_NE(std::string(hay).find(needle), std::string::npos) << (hay)

int run_compare_cli(const fs::path& a, const fs::path& b, std::string* out) {
  const std::string cmd =
      std::string(MXSIM_BINARY_DIR) + "/cli/mxsim compare '" + a.string() + "' '" + b.string() + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  char buf[512];
  while (p && std::fgets(buf, sizeof buf, p)) *out += buf;
  const int st = p ? pclose(p) : -1;
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace

// Root attributes are read with the size the file declares: an mxsim_trace_format or seed
// stored as 1000 integers, or config_toml as three strings, is refused by name (the reader
// used to read them into one uint64_t / one char*: a stack overflow).
TEST(TraceRobust, RootAttributeStoredAsArrayIsRefused) {
  TempDir d("robust");
  const fs::path f = d.p / "t.h5";
  std::vector<uint64_t> many(1000, 1);
  const hsize_t n = many.size();
  write_trace(f);
  edit(f, [&](hid_t file) { replace_attr(file, schema::kFormatAttr, H5T_NATIVE_UINT64, 1, &n, many.data()); });
  EXPECT_HAS(error_of([&] { Reader r(f); }),
             "t.h5: attribute mxsim_trace_format: stored as 8-byte unsigned integer [1000], expected one integer");

  write_trace(f);
  edit(f, [&](hid_t file) { replace_attr(file, "seed", H5T_NATIVE_UINT64, 1, &n, many.data()); });
  Reader r(f);
  EXPECT_HAS(error_of([&] { r.provenance(); }), "attribute seed: stored as 8-byte unsigned integer [1000]");

  write_trace(f);
  edit(f, [&](hid_t file) {
    const char* v[3] = {"a", "b", "c"};
    const hsize_t three = 3;
    const hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    replace_attr(file, "config_toml", t, 1, &three, v);
    H5Tclose(t);
  });
  Reader r2(f);
  EXPECT_HAS(error_of([&] { r2.config_toml(); }), "attribute config_toml: stored as variable-length string [3], expected one string");

  write_trace(f);
  edit(f, [&](hid_t file) {
    const double x = 1.0;
    replace_attr(file, "seed", H5T_NATIVE_DOUBLE, 0, nullptr, &x);
  });
  Reader r3(f);
  EXPECT_HAS(error_of([&] { r3.provenance(); }), "attribute seed: stored as 8-byte float scalar, expected one integer");
}

// A snapshot's steps attribute must have one step per snapshot row, >= 0, increasing; a
// series' mxsim_kind must be one string.
TEST(TraceRobust, SnapshotStepsAndKindAreChecked) {
  TempDir d("robust");
  const fs::path f = d.p / "t.h5";
  write_trace(f);
  edit(f, [&](hid_t file) {
    const hid_t s = H5Dopen2(file, "/s", H5P_DEFAULT);
    const int64_t steps[5] = {0, 1, 2, 3, 4};
    const hsize_t n = 5;
    replace_attr(s, "steps", H5T_NATIVE_INT64, 1, &n, steps);
    H5Dclose(s);
  });
  EXPECT_HAS(error_of([&] { Reader r(f); }),
             "/s: attribute steps: stored as 8-byte signed integer [5], expected at most 2 integers");
  write_trace(f);
  edit(f, [&](hid_t file) {
    const hid_t s = H5Dopen2(file, "/s", H5P_DEFAULT);
    const int64_t steps[2] = {1, 1};
    const hsize_t n = 2;
    replace_attr(s, "steps", H5T_NATIVE_INT64, 1, &n, steps);
    H5Dclose(s);
  });
  EXPECT_HAS(error_of([&] { Reader r(f); }), "/s: snapshot steps are not >= 0 and strictly increasing");
  write_trace(f);
  edit(f, [&](hid_t file) {
    const hid_t a = H5Dopen2(file, "/a", H5P_DEFAULT);
    const int32_t k = 7;
    replace_attr(a, "mxsim_kind", H5T_NATIVE_INT32, 0, nullptr, &k);
    H5Dclose(a);
  });
  EXPECT_HAS(error_of([&] { Reader r(f); }), "attribute mxsim_kind: stored as 4-byte signed integer scalar, expected one string");
}

// A series whose per-step shape has a zero dimension ([k, 0]): compare divided its block size
// by the row's 0 bytes (SIGFPE). The reader refuses it at open, naming it; `mxsim compare`
// exits 2 with that message.
TEST(TraceRobust, ZeroWidthSeriesIsRefusedNotDividedBy) {
  TempDir d("robust");
  const fs::path f = d.p / "t.h5";
  write_trace(f);
  edit(f, [&](hid_t file) {
    const hid_t z = make_dataset(file, "/z", H5T_IEEE_F32LE, {2, 0}, {1, 1});
    ASSERT_GE(z, 0);
    string_attr(z, "mxsim_kind", "series");
    H5Dclose(z);
  });
  EXPECT_HAS(error_of([&] { Reader r(f); }), "t.h5: /z: per-row shape [0] has a zero dimension");
  std::string out;
  EXPECT_EQ(run_compare_cli(f, f, &out), 1) << out;  // a data error (docs/cli.md exit codes)
  EXPECT_HAS(out, "/z: per-row shape [0] has a zero dimension");
}

// A series that is a scalar dataspace (rank 0) cannot have rows.
TEST(TraceRobust, RankZeroSeriesIsRefused) {
  TempDir d("robust");
  const fs::path f = d.p / "t.h5";
  write_trace(f);
  edit(f, [&](hid_t file) {
    const hid_t sp = H5Screate(H5S_SCALAR);
    const hid_t z = H5Dcreate2(file, "/r0", H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(z, 0);
    string_attr(z, "mxsim_kind", "series");
    H5Dclose(z);
    H5Sclose(sp);
  });
  EXPECT_HAS(error_of([&] { Reader r(f); }), "/r0: stored as 8-byte float scalar, expected rank >= 1 (rows first)");
}

// An extent that promises far more than the file stores (a row of 2^37 doubles, no chunk
// written) is refused before any allocation, naming the bytes.
TEST(TraceRobust, ExtentBeyondStoredBytesIsRefusedBeforeAllocating) {
  TempDir d("robust");
  const fs::path f = d.p / "t.h5";
  write_trace(f);
  edit(f, [&](hid_t file) {
    const hid_t z = make_dataset(file, "/huge", H5T_IEEE_F64LE, {2, hsize_t(1) << 37}, {1, 1024});
    ASSERT_GE(z, 0);
    string_attr(z, "mxsim_kind", "series");
    H5Dclose(z);
  });
  Reader r(f);
  EXPECT_HAS(error_of([&] { r.read_series<double>("/huge", 1, 1); }),
             "/huge: reading 1099511627776 bytes, but the file stores only 0 for it");
  EXPECT_HAS(error_of([&] { compare(f, f); }), "/huge: reading");
}

// Valid traces with rank-2 and rank-3 series: every extent read sizes its buffer from the
// rank (the reader wrote a [k, 2, 3] extent into one hsize_t on every compare; in the
// sanitizer build the HDF5 bounds shim reports that). Values are the ones written.
TEST(TraceRobust, MultiDimensionalSeriesReadAndCompared) {
  TempDir d("robust");
  const fs::path f = d.p / "a.h5", g = d.p / "b.h5";
  write_trace(f);
  write_trace(g);
  Reader r(f);
  EXPECT_EQ(r.info("/m").row_shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(r.read_series<float>("/m", 1, 1), (std::vector<float>{1, 1, 2, 3, 4, -1}));
  EXPECT_EQ(r.read_snapshot<uint8_t>("/s", 1), (std::vector<uint8_t>{1, 7, 8, 9}));
  const CompareResult c = compare(f, g);
  EXPECT_TRUE(c.identical());
  EXPECT_EQ(c.common, (std::vector<std::string>{"/a", "/m", "/s"}));
}

// One flipped byte in an object header's checksummed metadata: HDF5's SWMR reader retried the
// checksum with exponentially growing sleeps, so compare never returned. Now it gives up after
// a bounded number of attempts and names the corruption. Runs in a child with a 60 s alarm so
// that a regression fails instead of hanging the suite.
TEST(TraceRobust, CorruptMetadataChecksumIsReportedQuickly) {
  TempDir d("robust");
  const fs::path f = d.p / "t.h5", bad = d.p / "bad.h5";
  write_trace(f);
  std::string bytes = mxsim::test::read_bytes(f);
  // The second version-2 object header ("OHDR", HDF5 file format spec, section IV.A.1.b):
  // signature, version, flags, optional times (flags bit 5) and attribute phase change values
  // (bit 4), the size of chunk 0 in 1 << (flags & 3) bytes, then the header messages, all
  // covered by the checksum at the end. One byte of the first message is flipped.
  std::size_t at = bytes.find("OHDR");
  ASSERT_NE(at, std::string::npos);
  at = bytes.find("OHDR", at + 4);
  ASSERT_NE(at, std::string::npos);
  const unsigned flags = uint8_t(bytes[at + 5]);
  const std::size_t first_msg = at + 6 + ((flags & 0x20) ? 16 : 0) + ((flags & 0x10) ? 4 : 0) + (std::size_t(1) << (flags & 3));
  bytes[first_msg + 2] ^= 0x5A;
  mxsim::test::write_bytes(bad, bytes);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(60);
    std::string msg = error_of([&] { compare(bad, f); });
    if (write(fds[1], msg.data(), msg.size()) < 0) _exit(3);
    _exit(0);
  }
  close(fds[1]);
  std::string msg;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) msg.append(buf, std::size_t(n));
  close(fds[0]);
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(st)) << "compare of a corrupt trace did not return (killed by signal "
                             << (WIFSIGNALED(st) ? WTERMSIG(st) : 0) << " after " << secs << " s)";
  EXPECT_HAS(msg, "bad.h5: ");
  EXPECT_HAS(msg, "incorrect metadata checksum after all read attempts");
}

// A 'scalar' checkpoint entry stored as 5000 values was read into one T (stack overflow); an
// array entry whose data does not match its shape attribute, or whose shape attribute is a
// 2-D or negative, is refused.
TEST(TraceRobust, CheckpointEntriesAreReadWithTheirStoredSize) {
  TempDir d("robust");
  const fs::path f = d.p / "c.ckpt";
  auto base = [&] {
    CheckpointWriter w;
    w.put_u64("step", 3);
    const float x[4] = {1, 2, 3, 4};
    w.put("w", x, {2, 2});
    w.commit(f);
  };
  base();
  edit(f, [&](hid_t file) {
    ASSERT_GE(H5Ldelete(file, "step", H5P_DEFAULT), 0);
    std::vector<uint64_t> v(5000, 9);
    const hsize_t n = v.size();
    const hid_t sp = H5Screate_simple(1, &n, nullptr);
    const hid_t s = H5Dcreate2(file, "step", H5T_STD_U64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(H5Dwrite(s, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
    string_attr(s, "kind", "scalar");
    H5Dclose(s);
    H5Sclose(sp);
  });
  {
    Checkpoint c(f);
    EXPECT_HAS(error_of([&] { c.get_u64("step"); }),
               "c.ckpt: entry 'step': stored as 8-byte unsigned integer [5000], expected one value");
  }
  base();
  edit(f, [&](hid_t file) {
    const hid_t w = H5Dopen2(file, "w", H5P_DEFAULT);
    const int64_t shape[2] = {4, 4};
    const hsize_t n = 2;
    replace_attr(w, "shape", H5T_NATIVE_INT64, 1, &n, shape);
    H5Dclose(w);
  });
  {
    Checkpoint c(f);
    EXPECT_HAS(error_of([&] { c.get_f32("w"); }), "entry 'w': 4 values do not match its shape");
  }
  base();
  edit(f, [&](hid_t file) {
    const hid_t w = H5Dopen2(file, "w", H5P_DEFAULT);
    const int64_t shape[2] = {-1, -4};
    const hsize_t n = 2;
    replace_attr(w, "shape", H5T_NATIVE_INT64, 1, &n, shape);
    H5Dclose(w);
  });
  {
    Checkpoint c(f);
    EXPECT_HAS(error_of([&] { c.get_f32("w"); }), "entry 'w': shape attribute holds a negative or overflowing size");
  }
  base();
  edit(f, [&](hid_t file) {
    const hid_t w = H5Dopen2(file, "w", H5P_DEFAULT);
    std::vector<int64_t> shape(40, 1);
    const hsize_t n = shape.size();
    replace_attr(w, "shape", H5T_NATIVE_INT64, 1, &n, shape.data());
    H5Dclose(w);
  });
  {
    Checkpoint c(f);
    EXPECT_HAS(error_of([&] { c.get_f32("w"); }), "attribute shape: stored as 8-byte signed integer [40], expected at most 32");
  }
}

// toml_nesting_depth on hand-counted documents (depth = levels of tables and arrays below the
// root that a parser builds; strings and comments do not count).
TEST(TomlNesting, DepthOfHandCountedDocuments) {
  using mxsim::io::toml_nesting_depth;
  EXPECT_EQ(toml_nesting_depth(""), 0);
  EXPECT_EQ(toml_nesting_depth("a = 1\n"), 1);
  EXPECT_EQ(toml_nesting_depth("a.b.c = 1\n"), 3);
  EXPECT_EQ(toml_nesting_depth("[x]\n[x.y]\nk = 1\n"), 3);
  EXPECT_EQ(toml_nesting_depth("[[x.y]]\nk = 1\n"), 4);  // x, y (array), element table, k
  EXPECT_EQ(toml_nesting_depth("a = [[1]]\n"), 3);
  EXPECT_EQ(toml_nesting_depth("a = [[1], [2, [3]]]\n"), 4);
  EXPECT_EQ(toml_nesting_depth("a = {b = {c.d = 1}}\n"), 4);
  EXPECT_EQ(toml_nesting_depth("a = [{b = 1}, {c = {d = 2}}]\n"), 4);
  EXPECT_EQ(toml_nesting_depth("\"a.b.c\" = 1\n'x.y' = \"[[[[{{{{\"\n"), 1);
  EXPECT_EQ(toml_nesting_depth("a = 1 # [[[[ b.c.d = {\n"), 1);
  EXPECT_EQ(toml_nesting_depth("a = \"\"\"\n[[[[\nb.c.d = 1\n\"\"\"\nz = 1.5\n"), 1);
  EXPECT_EQ(toml_nesting_depth("a = '''x.y\n]]'''\nb = [\n  1, # ]\n  [2],\n]\nc.d = 1\n"), 3);
  std::size_t line = 0;
  EXPECT_EQ(toml_nesting_depth("a = 1\n\nb.c.d.e = 2\nf = 3\n", &line), 4);
  EXPECT_EQ(line, 3u);
}

// Deeply dotted keys made toml++ build 100000 nested tables and exhaust the stack destroying
// (and compare walking) them; the bound refuses them before parsing, with the line.
TEST(TomlNesting, DeepDottedKeysAreRefusedBeforeParsing) {
  std::string deep = "x = 1\n";
  for (int i = 0; i < 100000; ++i) deep += i ? ".a" : "a";
  deep += " = 1\n";
  try {
    mxsim::io::check_toml_nesting(deep, "cfg.toml");
    FAIL() << "100000-level dotted key accepted";
  } catch (const mxsim::io::IoError& e) {
    EXPECT_STREQ(e.what(), "cfg.toml: line 2: TOML nesting deeper than 64 levels (tables, dotted keys, arrays and "
                           "inline tables counted)");
  }
  std::string ok;
  for (int i = 0; i < 64; ++i) ok += i ? ".a" : "a";
  EXPECT_NO_THROW(mxsim::io::check_toml_nesting(ok + " = 1\n", "cfg.toml"));
  EXPECT_THROW(mxsim::io::check_toml_nesting(ok + ".b = 1\n", "cfg.toml"), mxsim::io::IoError);
}

// A trace whose stored config nests 100000 levels: compare compares it as text (it used to
// crash parsing it); the data still decides identity.
TEST(TomlNesting, CompareOfTraceWithDeepStoredConfig) {
  TempDir d("robust");
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += i ? ".a" : "a";
  deep += " = 1\n";
  write_trace(d.p / "a.h5", deep);
  write_trace(d.p / "b.h5", "lr = 0.1\n");
  const CompareResult c = compare(d.p / "a.h5", d.p / "b.h5");
  EXPECT_TRUE(c.identical());
  ASSERT_EQ(c.config_diffs.size(), 2u);
  EXPECT_EQ(c.config_diffs[0].key, "(config_toml text)");
  EXPECT_EQ(c.config_diffs[0].a, deep);
  EXPECT_EQ(c.config_diffs[1].key, "lr");
}
// Two Readers of one file in a process: HDF5 1.10 shares one dataset object between ids, and
// a refresh through one id made the other read stale chunks (snapshot row 1 read as row 0's
// bytes). Readers of the same file now share one set of ids; values are the ones written.
TEST(TraceRobust, TwoReadersOfOneFileReadTheRowsWritten) {
  TempDir d("robust");
  const fs::path f = d.p / "a.h5", g = d.p / "b.h5";
  write_trace(f);
  write_trace(g);
  Reader r(f), r2(d.p / "." / "a.h5");
  for (const Reader* x : {&r, &r2, &r}) {
    EXPECT_EQ(x->read_snapshot<uint8_t>("/s", 0), (std::vector<uint8_t>{0, 7, 8, 9}));
    EXPECT_EQ(x->read_snapshot<uint8_t>("/s", 1), (std::vector<uint8_t>{1, 7, 8, 9}));
    EXPECT_EQ(x->read_series<float>("/a"), (std::vector<float>{0.5f, 1.5f}));
  }
  EXPECT_TRUE(compare(f, g).identical());
  EXPECT_EQ(r2.path(), d.p / "." / "a.h5");
}

// A global heap collection (where HDF5 keeps variable-length strings: the kind attributes of a
// checkpoint, a trace's config_toml, as mxsim wrote them before fixed-length strings; a trace's
// DIMENSION_LIST attributes) whose free-space object has size 0: libhdf5 1.10.8 walks
// its object list forever the first time such a string is read (h5py hangs too). The readers
// walk it first and refuse the file. Here the free-space size of a written file is set to 0.
TEST(TraceRobust, LoopingGlobalHeapCollectionIsRefusedBeforeHdf5ReadsIt) {
  TempDir d("robust");
  auto zero_free_space = [](const fs::path& f) {
    std::string b = mxsim::test::read_bytes(f);
    const std::size_t at = b.find(std::string("GCOL\x01\0\0\0", 8));
    if (at == std::string::npos) return false;
    auto le = [&](std::size_t o, int n) {
      uint64_t v = 0;
      for (int k = n - 1; k >= 0; --k) v = v << 8 | uint8_t(b[o + std::size_t(k)]);
      return v;
    };
    const uint64_t csize = le(at + 8, 8);
    for (uint64_t p = 16; p + 16 <= csize;) {
      const uint64_t idx = le(at + p, 2), osize = le(at + p + 8, 8);
      if (idx == 0) {
        for (int k = 0; k < 8; ++k) b[at + p + 8 + std::size_t(k)] = 0;
        mxsim::test::write_bytes(f, b);
        return true;
      }
      p += 16 + (osize + 7) / 8 * 8;
    }
    return false;
  };
  const fs::path c = d.p / "c.ckpt";
  CheckpointWriter w;
  w.put_u64("step", 3);
  w.put_string("config", "[model]\nexperts = 4\n");
  w.commit(c);
  // mxsim now writes fixed-length strings (no collection); a checkpoint of an older mxsim held
  // its kind attributes as variable-length strings, as made here.
  edit(c, [](hid_t f) {
    const hid_t ds = H5Dopen2(f, "config", H5P_DEFAULT);
    string_attr(ds, "kind", "string");
    H5Dclose(ds);
  });
  ASSERT_TRUE(zero_free_space(c));
  EXPECT_HAS(error_of([&] { Checkpoint k(c); k.get_string("config"); }), "c.ckpt: corrupt global heap collection at byte ");
  const fs::path t = d.p / "t.h5";
  write_trace(t);
  ASSERT_TRUE(zero_free_space(t));
  EXPECT_HAS(error_of([&] { Reader r(t); }), "t.h5: corrupt global heap collection at byte ");
}

namespace {

// The bit-flip campaigns: one flipped bit of a small file mxsim wrote must either leave every
// value as written or make the open / read fail with a TraceError naming the file, never crash,
// hang or return other values. Before the fix, a flip in the global heap collection holding the
// variable-length string attributes (no checksum in the HDF5 format) made libhdf5 1.10.8 copy
// past its buffers (segfault, or ASan's "attempting free on address which was not malloc()-ed"),
// and a flip in a trace's raw data chunk read back as another value (no Fletcher32 then).
struct FlipTally {
  int refused = 0, same = 0;
};

}  // namespace

// A checkpoint of an older mxsim kept its kind attributes as variable-length strings (in a
// global heap collection): it still opens and reads back as written. (Traces of that form:
// SimGolden.SmallRunMatchesCheckedInTrace reads the checked-in golden trace.)
TEST(TraceRobust, CheckpointWithVariableLengthKindStringsStillOpens) {
  TempDir d("robust");
  const fs::path c = d.p / "old.ckpt";
  const std::vector<float> w = {1.5f, -2.0f};
  CheckpointWriter cw;
  cw.put("model/w", w.data(), {2});
  cw.put_u64("step", 9);
  cw.put_string("config", "[run]\n");
  cw.commit(c);
  edit(c, [](hid_t f) {
    for (const auto& [name, kind] : {std::pair{"model/w", "array"}, {"step", "scalar"}, {"config", "string"}}) {
      const hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
      string_attr(ds, "kind", kind);
      H5Dclose(ds);
    }
  });
  ASSERT_NE(mxsim::test::read_bytes(c).find(std::string("GCOL\x01\0\0\0", 8)), std::string::npos);
  Checkpoint k(c);
  EXPECT_EQ(k.get_f32("model/w").data, w);
  EXPECT_EQ(k.get_u64("step"), 9u);
  EXPECT_EQ(k.get_string("config"), "[run]\n");
}

namespace {

// Every `byte_step`-th byte gets `bits_per_byte` flipped bits (all 8, or a seeded sample), each
// alone.
template <class Check>
void flip_campaign(const fs::path& good, const fs::path& dir, std::size_t byte_step, int bits_per_byte, uint64_t seed,
                   Check check, FlipTally* tally) {
  // The undamaged file reads back as written (else every flip would pass as "refused").
  try {
    const std::string diff = check(good);
    if (!diff.empty()) {
      ADD_FAILURE() << good << " as written: " << diff;
      return;
    }
  } catch (const TraceError& e) {
    ADD_FAILURE() << good << " as written: " << e.what();
    return;
  }
  const std::string bytes = mxsim::test::read_bytes(good);
  uint64_t x = seed;
  int n = 0;
  for (std::size_t at = seed % byte_step; at < bytes.size(); at += byte_step) {
    uint8_t mask = 0xFF;
    if (bits_per_byte < 8) {
      mask = 0;
      while (__builtin_popcount(mask) < bits_per_byte) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;  // PCG's LCG step: a fixed sample
        mask |= uint8_t(1u << (x >> 61));
      }
    }
    for (int bit = 0; bit < 8; ++bit) {
      if (!(mask >> bit & 1)) continue;
      std::string b = bytes;
      b[at] = char(uint8_t(b[at]) ^ (1u << bit));
      // A new file per flip: HDF5 recognises an open file by its inode, and an error path that
      // left an id open must not hand the next flip the previous file.
      const fs::path bad = dir / ("flip" + std::to_string(n++ % 2) + "-" + good.filename().string());
      fs::remove(bad);
      mxsim::test::write_bytes(bad, b);
      const std::string where = "byte " + std::to_string(at) + " bit " + std::to_string(bit);
      try {
        const std::string diff = check(bad);
        if (!diff.empty()) {
          ADD_FAILURE() << where << ": opened, but " << diff;
          return;
        }
        ++tally->same;
      } catch (const TraceError& e) {
        if (std::string(e.what()).rfind(bad.string() + ": ", 0) != 0) {
          ADD_FAILURE() << where << ": error does not start with the file's name: " << e.what();
          return;
        }
        ++tally->refused;
      }
    }
  }
}

template <class T>
std::string differs(const char* what, const T& got, const T& want) {
  return got == want ? std::string() : std::string(what) + " differs";
}
// Floating values compared bit for bit (-0 is not 0, a NaN is a difference).
template <class T>
std::vector<uint64_t> bits_of(const std::vector<T>& v) {
  std::vector<uint64_t> b;
  for (const T& x : v) {
    uint64_t u = 0;
    std::memcpy(&u, &x, sizeof x);
    b.push_back(u);
  }
  return b;
}
std::string differs(const char* what, const std::vector<float>& got, const std::vector<float>& want) {
  return differs(what, bits_of(got), bits_of(want));
}
std::string differs(const char* what, float got, float want) { return differs(what, bits_of<float>({got}), bits_of<float>({want})); }
std::string differs(const char* what, double got, double want) { return differs(what, bits_of<double>({got}), bits_of<double>({want})); }

}  // namespace

// One bit of every byte of a small checkpoint (a seeded sample), each flipped alone: every
// entry through its getter.
TEST(TraceRobust, CheckpointBitFlipsAreRefusedOrHarmless) {
  TempDir d("robust");
  const fs::path c = d.p / "c.ckpt";
  const std::vector<float> w = {1.5f, -2.0f, 0.25f, 3e-8f, 6.0f, -0.0f};
  const std::vector<uint8_t> codes = {0, 0x7f, 0x80, 0xff};
  const std::vector<uint64_t> order = {3, 1, 2};
  const std::string config = "[run]\nmax_steps = 2\n";
  {
    CheckpointWriter cw;
    cw.put("model/fc1/master", w.data(), {2, 3});
    cw.put("model/fc1/codes", codes.data(), {4});
    cw.put("data/order", order.data(), {3});
    cw.put_u64("step", 7);
    cw.put_i64("deosc/global_step", -3);
    cw.put_f64("sched/lr", 0.125);
    cw.put_f32("delayed/scale", 0.5f);
    cw.put_string("config", config);
    cw.commit(c);
  }
  FlipTally t;
  flip_campaign(c, d.p, 1, 1, 34, [&](const fs::path& f) -> std::string {
    Checkpoint k(f);
    std::string diff;
    for (const std::string& s : {differs("names", k.names(), std::vector<std::string>{
                                     "config", "data/order", "delayed/scale", "deosc/global_step", "model/fc1/codes",
                                     "model/fc1/master", "sched/lr", "step"}),
                                 differs("master", k.get_f32("model/fc1/master").data, w),
                                 differs("master shape", k.get_f32("model/fc1/master").shape, std::vector<uint64_t>{2, 3}),
                                 differs("codes", k.get_u8("model/fc1/codes").data, codes),
                                 differs("order", k.get_u64_array("data/order").data, order),
                                 differs("step", k.get_u64("step"), uint64_t(7)),
                                 differs("global_step", k.get_i64("deosc/global_step"), int64_t(-3)),
                                 differs("lr", k.get_f64("sched/lr"), 0.125),
                                 differs("scale", k.get_f32_scalar("delayed/scale"), 0.5f),
                                 differs("config", k.get_string("config"), config)})
      if (diff.empty()) diff = s;
    return diff;
  }, &t);
  EXPECT_GT(t.refused, 0);
  std::printf("checkpoint of %ju bytes: %d flips refused, %d harmless\n", uintmax_t(fs::file_size(c)), t.refused, t.same);
}

// One bit of every fourth byte of a small trace (a seeded sample), each flipped alone: config,
// provenance, every series and snapshot row, and `mxsim compare`'s reading of it.
TEST(TraceRobust, TraceBitFlipsAreRefusedOrHarmless) {
  TempDir d("robust");
  const fs::path f = d.p / "t.h5";
  write_trace(f);
  const Provenance want = Reader(f).provenance();  // date and host are the run's; checked below
  ASSERT_EQ(want.backend, "emu");
  ASSERT_EQ(want.seed, 5u);
  FlipTally t;
  flip_campaign(f, d.p, 4, 1, 34, [&](const fs::path& g) -> std::string {
    Reader r(g);
    const Provenance p = r.provenance();
    std::string diff;
    for (const std::string& s :
         {differs("steps", r.steps_completed(), uint64_t(2)), differs("config", r.config_toml(), std::string("lr = 0.1\n")),
          differs("provenance", std::tie(p.version, p.git_describe, p.backend, p.seed, p.date, p.host),
                  std::tie(want.version, want.git_describe, want.backend, want.seed, want.date, want.host)),
          differs("/a", r.read_series<float>("/a"), std::vector<float>{0.5f, 1.5f}),
          differs("/m", r.read_series<float>("/m"), std::vector<float>{0, 1, 2, 3, 4, 0, 1, 1, 2, 3, 4, -1}),
          differs("/s row 0", r.read_snapshot<uint8_t>("/s", 0), std::vector<uint8_t>{0, 7, 8, 9}),
          differs("/s row 1", r.read_snapshot<uint8_t>("/s", 1), std::vector<uint8_t>{1, 7, 8, 9}),
          differs("compare with itself", compare(r, r).identical(), true)})
      if (diff.empty()) diff = s;
    return diff;
  }, &t);
  EXPECT_GT(t.refused, 0);
  std::printf("trace of %ju bytes: %d flips refused, %d harmless\n", uintmax_t(fs::file_size(f)), t.refused, t.same);
}
