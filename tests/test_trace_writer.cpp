// HDF5 SWMR trace writer/reader: a writer process killed with SIGKILL mid-run leaves a file
// that the C++ reader and h5py open, complete up to the last finished step, with the exact
// values written. Expected values are the closed-form formulas of tests/trace_writer_main.cpp.
#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>
#include <thread>

#include "mxsim/trace/histogram.hpp"
#include <hdf5.h>
#include <hdf5_hl.h>

#include "mxsim/trace/reader.hpp"
#include "mxsim/trace/schema.hpp"
#include "mxsim/trace/writer.hpp"
#include "test_util.hpp"

extern char** environ;
namespace fs = std::filesystem;
using namespace mxsim::trace;
namespace schema = mxsim::trace::schema;

namespace {
fs::path temp_dir() { return mxsim::test::make_temp_dir("trace"); }


pid_t spawn_writer(const fs::path& file, long steps, long sleep_us) {
  const std::string exe = std::string(MXSIM_BINARY_DIR) + "/tests/trace_writer_main";
  std::string a1 = file.string(), a2 = std::to_string(steps), a3 = std::to_string(sleep_us);
  char* argv[] = {const_cast<char*>(exe.c_str()), a1.data(), a2.data(), a3.data(), nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv, environ) != 0) throw std::runtime_error("spawn " + exe);
  return pid;
}

uint64_t steps_seen(const fs::path& f) {
  try {
    Reader r(f);
    return r.steps_completed();
  } catch (const TraceError&) {
    return 0;  // not yet renamed into place
  }
}

// Checks every complete step's values against the formulas; returns k.
uint64_t check_contents(const fs::path& f) {
  Reader r(f);
  const uint64_t k = r.steps_completed();
  EXPECT_EQ(r.config_toml(), "[model]\nexperts = 4\n");
  EXPECT_EQ(r.provenance().backend, "emu");
  EXPECT_EQ(r.provenance().seed, 7u);
  EXPECT_EQ(r.format_version(), 5);  // docs/trace-format.md "Layout": the current format
  EXPECT_EQ(r.datasets().size(), 5u);
  auto loss = r.read_series<float>("/train/loss");
  auto counts = r.read_series<uint64_t>("/train/counts");
  auto g = r.read_series<float>("/layers/fc1/grad_norm");
  auto h = r.read_series<uint64_t>("/layers/fc1/scale_exp_hist");
  EXPECT_EQ(r.info("/layers/fc1/grad_norm").row_shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(loss.size(), k);
  EXPECT_EQ(counts.size(), 3 * k);
  EXPECT_EQ(g.size(), 6 * k);
  EXPECT_EQ(h.size(), 256 * k);
  if (loss.size() != k || counts.size() != 3 * k || g.size() != 6 * k || h.size() != 256 * k) return k;
  for (uint64_t s = 0; s < k; ++s) {
    EXPECT_EQ(loss[s], float(s) * 0.5f + 0.25f) << s;
    EXPECT_EQ(counts[3 * s], s);
    EXPECT_EQ(counts[3 * s + 1], s * s);
    EXPECT_EQ(counts[3 * s + 2], ~s);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(g[6 * s + i], float(s * 10 + i) / 8.0f);
    for (int b = 0; b < 256; ++b) {
      // codes 120..120+(s%7) once each, plus one NaN (bin 255)
      const uint64_t want = (b >= 120 && b <= 120 + int(s % 7)) || b == 255 ? 1 : 0;
      EXPECT_EQ(h[256 * s + b], want) << "step " << s << " bin " << b;
    }
  }
  for (int64_t snap : {2, 4}) {
    if (uint64_t(snap) < k) {
      auto v = r.read_snapshot<float>("/snapshots/fc1/master", snap);
      EXPECT_EQ(v.size(), 20u);
      for (int i = 0; i < 20 && v.size() == 20u; ++i) EXPECT_EQ(v[i], float(snap) + float(i) / 32.0f);
    } else {
      EXPECT_THROW(r.read_snapshot<float>("/snapshots/fc1/master", snap), TraceError);
    }
  }
  EXPECT_THROW(r.read_snapshot<float>("/snapshots/fc1/master", 1000000), TraceError);
  EXPECT_THROW(r.read_snapshot<float>("/snapshots/fc1/master", 3), TraceError);
  EXPECT_THROW(r.read_series<double>("/train/loss"), TraceError);
  return k;
}

// h5py, without project code: opens with SWMR read, checks the same formulas, prints k.
long h5py_check(const fs::path& f) {
  const fs::path py = f.parent_path() / "check.py";
  std::ofstream(py) << R"(import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r", swmr=True)
k = f["steps"].shape[0]
assert list(f["steps"][:]) == list(range(k))
s = np.arange(k)
assert np.array_equal(f["train/loss"][:k], (s * 0.5 + 0.25).astype(np.float32))
c = f["train/counts"][:k]
assert np.array_equal(c[:, 0], s.astype(np.uint64)) and np.array_equal(c[:, 1], (s * s).astype(np.uint64))
assert np.array_equal(c[:, 2], ~s.astype(np.uint64))
g = f["layers/fc1/grad_norm"][:k]
assert g.shape == (k, 2, 3)
assert np.array_equal(g.reshape(k, 6), ((s[:, None] * 10 + np.arange(6)) / 8.0).astype(np.float32))
h = f["layers/fc1/scale_exp_hist"][:k]
for i in range(k):
    want = np.zeros(256, np.uint64); want[120:121 + i % 7] = 1; want[255] = 1
    assert np.array_equal(h[i], want), i
snap = f["snapshots/fc1/master"]
steps = list(snap.attrs["steps"])
for st in (2, 4):
    if st < k:
        assert np.array_equal(snap[steps.index(st)], (st + np.arange(20) / 32.0).reshape(4, 5).astype(np.float32))
# fixed-length UTF-8 strings (inside the checksummed object header): h5py reads them as bytes
assert f.attrs["config_toml"].decode() == "[model]\nexperts = 4\n"
print(k)
)";
  const std::string cmd = "/usr/bin/python3 '" + py.string() + "' '" + f.string() + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  while (p && std::fgets(buf, sizeof buf, p)) out += buf;
  const int rc = p ? pclose(p) : -1;
  EXPECT_EQ(rc, 0) << out;
  return rc == 0 ? std::stol(out) : -1;
}

bool have_h5py() { return std::system("/usr/bin/python3 -c 'import h5py' >/dev/null 2>&1") == 0; }

}  // namespace

class KillMidRun : public ::testing::TestWithParam<int> {};

TEST_P(KillMidRun, FileOpensAndIsCompleteUpToLastStep) {
  const fs::path dir = temp_dir();
  const fs::path f = dir / "run.h5";
  const uint64_t target = uint64_t(GetParam());
  const pid_t pid = spawn_writer(f, 1000000, 200);
  const auto t0 = std::chrono::steady_clock::now();
  while (steps_seen(f) < target && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  // Land the kill at a varying point inside a step.
  std::this_thread::sleep_for(std::chrono::microseconds(137 * GetParam()));
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "writer exited early, status " << status;
  const uint64_t k = check_contents(f);
  EXPECT_GE(k, target);
  EXPECT_FALSE(fs::exists(dir / "run.h5.partial"));
  if (have_h5py()) {
    EXPECT_EQ(h5py_check(f), long(k));
  } else {
    fs::remove_all(dir);
    GTEST_SKIP() << "python3-h5py not installed: h5py sub-check skipped (C++ reader checks passed)";
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Trace, KillMidRun, ::testing::Values(1, 3, 6, 11));

// Overwrites the 4 bytes of row `row` of a float series inside its first chunk: what a write of
// that row cut short by a kill leaves (the chunk's Fletcher-32 no longer matches).
void tear_row(const fs::path& f, const char* name, hsize_t row) {
  hid_t file = H5Fopen(f.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  const hsize_t origin[1] = {0};
  unsigned mask = 0;
  haddr_t addr = 0;
  hsize_t size = 0;
  ASSERT_GE(H5Dget_chunk_info_by_coord(d, origin, &mask, &addr, &size), 0);
  H5Dclose(d);
  H5Fclose(file);
  ASSERT_GE(size, (row + 1) * 4) << "row " << row << " lies in the first chunk";
  std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(std::streamoff(addr + row * 4));
  const char junk[4] = {char(0xAB), char(0xCD), char(0xEF), char(0x01)};
  io.write(junk, 4);
  ASSERT_TRUE(io.good());
}

// A kill inside the write of a step's rows leaves the series' last chunk half rewritten: its
// checksum fails, but the rows the trace counts as complete hold their bytes. Such a trace (its
// writer never closed it) still reads every complete step; the same damage in a trace that was
// closed cleanly is refused as damage (docs/trace-format.md "Integrity").
TEST(KillMidRunTornChunk, CompleteRowsOfAKilledRunStillReadAClosedTraceRefuses) {
  const fs::path dir = temp_dir();
  const fs::path f = dir / "run.h5";
  const pid_t pid = spawn_writer(f, 1000000, 20000);
  const auto t0 = std::chrono::steady_clock::now();
  while (steps_seen(f) < 4 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  const uint64_t k = steps_seen(f);
  ASSERT_GE(k, 4u);
  tear_row(f, "/train/loss", hsize_t(k + 1));  // past the complete rows, inside the last chunk
  EXPECT_EQ(check_contents(f), k);

  const fs::path g = dir / "closed.h5";
  const pid_t done = spawn_writer(g, 5, 0);
  ASSERT_EQ(waitpid(done, &status, 0), done);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  tear_row(g, "/train/loss", 7);
  Reader r(g);
  try {
    (void)r.read_series<float>("/train/loss");
    ADD_FAILURE() << "a damaged chunk of a closed trace was read";
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("Fletcher32"), std::string::npos) << e.what();
  }
}

// A reader opened while the writer runs sees complete steps only, more of them after each
// refresh(), with the values written; after the writer exits, the whole run.
TEST(TraceWriter, LiveReaderWhileWriterRunsThenCompletedRun) {
  const fs::path dir = temp_dir();
  const fs::path f = dir / "live.h5";
  const pid_t pid = spawn_writer(f, 7, 30000);  // ~90 ms per step
  std::optional<Reader> live;
  std::set<uint64_t> seen_running;  // step counts observed while the writer was alive
  uint64_t last = 0;
  int status = 0;
  bool exited = false;
  const auto t0 = std::chrono::steady_clock::now();
  while (!exited && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    ASSERT_NE(w, -1);
    exited = w == pid;
    if (!live) {
      try {
        live.emplace(f);
      } catch (const TraceError&) {  // not yet renamed into place
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
    }
    live->refresh();
    const uint64_t k = live->steps_completed();
    EXPECT_GE(k, last) << "complete steps never decrease";
    last = k;
    if (k > 0 && !exited) {
      const auto loss = live->read_series<float>("/train/loss");
      const auto counts = live->read_series<uint64_t>("/train/counts");
      ASSERT_EQ(loss.size(), k);
      ASSERT_EQ(counts.size(), 3 * k);
      for (uint64_t s = 0; s < k; ++s) {
        EXPECT_EQ(loss[s], float(s) * 0.5f + 0.25f) << s;
        EXPECT_EQ(counts[3 * s + 1], s * s) << s;
      }
      seen_running.insert(k);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(exited) << "writer did not finish";
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_GE(seen_running.size(), 2u) << "the live reader should see the run grow while the writer runs";
  EXPECT_LT(*seen_running.begin(), 7u);
  live->refresh();
  EXPECT_EQ(live->steps_completed(), 7u);
  EXPECT_EQ(check_contents(f), 7u);  // a second Reader of the same file, the live one still open
  if (have_h5py()) {
    EXPECT_EQ(h5py_check(f), 7);
  }
  live.reset();
  fs::remove_all(dir);
}

TEST(TraceWriter, CreateFailureLeavesNothingAndNamesPath) {
  const fs::path dir = temp_dir();
  const fs::path f = dir / "no-such-dir" / "x.h5";
  try {
    Writer w(f, "", make_provenance("emu", 1));
    FAIL();
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find(f.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("HDF5"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(f));
  fs::remove_all(dir);
}

TEST(TraceWriter, DeclareErrorsRemoveThePartialFile) {
  const fs::path dir = temp_dir();
  const fs::path f = dir / "t.h5";
  {
    Writer w(f, "", make_provenance("emu", 1));
    w.declare_series("/a", DType::f32, {});
    EXPECT_TRUE(fs::exists(dir / "t.h5.partial"));
    EXPECT_THROW(w.declare_series("/a", DType::f32, {}), TraceError);
    EXPECT_FALSE(fs::exists(dir / "t.h5.partial"));
  }
  {
    Writer w(f, "", make_provenance("emu", 1));
    EXPECT_THROW(w.declare_series("/steps", DType::f32, {}), TraceError);
    EXPECT_THROW(w.declare_series("rel", DType::f32, {}), TraceError);
  }
  {
    Writer w(f, "", make_provenance("emu", 1));
    EXPECT_THROW(w.declare_snapshot(schema::kSnapshotRows, DType::f32, {2}, {0}), TraceError);  // reserved
  }
  {
    Writer w(f, "", make_provenance("emu", 1));
    EXPECT_THROW(w.declare_snapshot("/s", DType::f32, {2}, {3, 3}), TraceError);
  }
  {
    Writer w(f, "", make_provenance("emu", 1));
    w.declare_series("/a", DType::f32, {});
  }  // destroyed before start_swmr: nothing left
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

TEST(TraceWriter, MisuseIsAnError) {
  const fs::path dir = temp_dir();
  const fs::path f = dir / "t.h5";
  Writer w(f, "", make_provenance("emu", 1));
  w.declare_series("/a", DType::f32, {});
  w.declare_series("/b", DType::u8, {2});
  EXPECT_THROW(w.append("/a", 1.0f), TraceError);  // before start_swmr
  w.start_swmr();
  EXPECT_THROW(w.declare_series("/c", DType::f32, {}), TraceError);
  EXPECT_THROW(w.append("/a", 1.0), TraceError);  // double vs f32
  EXPECT_THROW(w.append("/zz", 1.0f), TraceError);
  w.append("/a", 1.0f);
  EXPECT_THROW(w.append("/a", 2.0f), TraceError);  // twice in a step
  try {
    w.end_step();
    FAIL();
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("/b: no row appended in step 0"), std::string::npos) << e.what();
  }
  const uint8_t b[2] = {1, 2};
  w.append("/b", b);
  w.end_step();
  EXPECT_EQ(w.current_step(), 1);
  w.close();
  Reader r(f);
  EXPECT_EQ(r.steps_completed(), 1u);
  EXPECT_EQ(r.read_series<uint8_t>("/b"), (std::vector<uint8_t>{1, 2}));
  fs::remove_all(dir);
}

// The snapshots' row axis is an HDF5 dimension scale: one i64 dataset of the trace rows per
// distinct steps list, named in the order of the snapshots' names and attached to each; the
// reader passes over it (it is neither a series nor a snapshot) and over the new attributes.
TEST(TraceWriter, SnapshotRowsAreDimensionScales) {
  const fs::path dir = temp_dir();
  const fs::path f = dir / "t.h5";
  {
    Writer w(f, "", make_provenance("emu", 1));
    w.declare_series("/a", DType::f32, {});
    w.declare_snapshot("/snap/a", DType::f32, {2}, {0, 2});
    w.declare_snapshot("/snap/b", DType::u8, {1}, {1});
    w.declare_snapshot("/snap/c", DType::f32, {3}, {0, 2});
    w.start_swmr();
    for (int s = 0; s < 3; ++s) {
      w.append("/a", float(s));
      if (s != 1) {
        const float v[3] = {float(s), 1, 2};
        w.write_snapshot("/snap/a", v);
        w.write_snapshot("/snap/c", v);
      } else {
        const uint8_t b = 7;
        w.write_snapshot("/snap/b", &b);
      }
      w.end_step();
    }
  }
  const hid_t file = H5Fopen(f.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  auto values = [&](const std::string& n) {
    const hid_t d = H5Dopen(file, n.c_str(), H5P_DEFAULT);
    const hid_t sp = H5Dget_space(d);
    std::vector<int64_t> v(size_t(H5Sget_simple_extent_npoints(sp)));
    H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Sclose(sp);
    H5Dclose(d);
    return v;
  };
  EXPECT_EQ(values("/snapshot_rows"), (std::vector<int64_t>{0, 2}));  // the first list, of /snap/a
  EXPECT_EQ(values("/snapshot_rows_2"), (std::vector<int64_t>{1}));   // /snap/b's
  EXPECT_EQ(H5Lexists(file, "/snapshot_rows_3", H5P_DEFAULT), 0);    // /snap/c shares /snap/a's
  const hid_t s1 = H5Dopen(file, "/snapshot_rows", H5P_DEFAULT), s2 = H5Dopen(file, "/snapshot_rows_2", H5P_DEFAULT);
  EXPECT_GT(H5DSis_scale(s1), 0);
  for (const auto& [n, scale] : {std::pair<const char*, hid_t>{"/snap/a", s1}, {"/snap/b", s2}, {"/snap/c", s1}}) {
    const hid_t d = H5Dopen(file, n, H5P_DEFAULT);
    EXPECT_GT(H5DSis_attached(d, scale, 0), 0) << n;
    EXPECT_EQ(H5DSget_num_scales(d, 0), 1) << n;
    EXPECT_GT(H5Aexists(d, "rows"), 0) << n;
    H5Dclose(d);
  }
  const hid_t steps = H5Dopen(file, "/steps", H5P_DEFAULT);
  for (const char* a : {"units", "description", "rows"}) EXPECT_GT(H5Aexists(steps, a), 0) << a;
  H5Dclose(steps);
  H5Dclose(s1);
  H5Dclose(s2);
  H5Fclose(file);
  const Reader r(f);
  EXPECT_EQ(r.datasets().size(), 4u);  // /a and the three snapshots
  EXPECT_EQ(r.read_snapshot<uint8_t>("/snap/b", 1), (std::vector<uint8_t>{7}));
  fs::remove_all(dir);
}

TEST(TraceReader, Errors) {
  const fs::path dir = temp_dir();
  try {
    Reader r(dir / "missing.h5");
    FAIL();
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.h5: missing"), std::string::npos) << e.what();
  }
  mxsim::test::write_bytes(dir / "text.h5", "not hdf5");
  try {
    Reader r(dir / "text.h5");
    FAIL();
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("text.h5: not an HDF5 file"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// A trace written by a newer mxsim (a larger mxsim_trace_format) is refused by
// name and version, not misread.
TEST(TraceReader, RefusesNewerFormatVersion) {
  const fs::path dir = temp_dir();
  const fs::path f = dir / "newer.h5";
  {
    Writer w(f, "", make_provenance("emu", 1));
    w.declare_series("/a", DType::f32, {});
    w.start_swmr();
    w.append("/a", 1.0f);
    w.end_step();
    w.close();
  }
  {
    const hid_t file = H5Fopen(f.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    const hid_t a = H5Aopen(file, schema::kFormatAttr, H5P_DEFAULT);
    ASSERT_GE(a, 0);
    const uint64_t v = uint64_t(schema::kFormatVersion) + 1;
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_UINT64, &v), 0);
    H5Aclose(a);
    H5Fclose(file);
  }
  try {
    Reader r(f);
    FAIL() << "a newer trace format was accepted";
  } catch (const TraceError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("newer.h5: trace format " + std::to_string(schema::kFormatVersion + 1) + " is newer"),
              std::string::npos) << m;
  }
  fs::remove_all(dir);
}

TEST(ScaleExpHistogram, BinsFollowE8M0Codes) {
  ScaleExpHistogram h;
  h.add_exponent(-127);  // code 0
  h.add_exponent(0);     // code 127 (2^0)
  h.add_exponent(0);
  h.add_exponent(127);   // code 254
  h.add_e8m0(uint8_t(0xFF));
  const uint8_t codes[3] = {5, 5, 200};
  h.add_e8m0(codes, 3);
  EXPECT_THROW(h.add_exponent(128), std::out_of_range);
  EXPECT_THROW(h.add_exponent(-128), std::out_of_range);
  auto c = h.counts();
  EXPECT_EQ(c[0], 1u);
  EXPECT_EQ(c[127], 2u);
  EXPECT_EQ(c[254], 1u);
  EXPECT_EQ(c[255], 1u);
  EXPECT_EQ(c[5], 2u);
  EXPECT_EQ(c[200], 1u);
  EXPECT_EQ(h.total(), 8u);
  h.reset();
  EXPECT_EQ(h.total(), 0u);
}
