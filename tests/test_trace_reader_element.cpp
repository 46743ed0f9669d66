// Reader: one element across rows (point selection), two Readers of one file in
// one process, and a Reader following a writer in the same process (the
// inspector's run mode). Values
// are closed-form functions of (step, element) written here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "mxsim/trace/reader.hpp"
#include "mxsim/trace/writer.hpp"

using namespace mxsim::trace;

namespace {

std::string tmp(const std::string& n) {
  return (std::filesystem::temp_directory_path() / ("mxsim_rdel_" + std::to_string(::getpid()) + "_" + n)).string();
}

float snap_value(int64_t step, size_t i) { return float(step) * 1000.0f + float(i) * 0.25f; }
double series_value(int64_t step, size_t i) { return double(step) * 10.0 + double(i); }

constexpr size_t kG = 2, kN = 64, kK = 32, kSnap = kG * kN * kK;  // 16 KiB chunks, several per file

/// Declares a [3] f64 series and a [2, 64, 32] f32 snapshot at `steps`, then writes `k` steps.
struct Fixture {
  std::string path;
  std::vector<int64_t> steps = {1, 3, 4, 7};
  explicit Fixture(const std::string& name) : path(tmp(name)) {}
  void declare(Writer& w) const {
    w.declare_series("/s", DType::f64, {3});
    w.declare_snapshot("/snap/w", DType::f32, {kG, kN, kK}, steps);
    w.start_swmr();
  }
  void step(Writer& w) const {
    const int64_t s = w.current_step();
    double row[3];
    for (size_t i = 0; i < 3; ++i) row[i] = series_value(s, i);
    w.append("/s", row);
    if (std::find(steps.begin(), steps.end(), s) != steps.end()) {
      std::vector<float> v(kSnap);
      for (size_t i = 0; i < kSnap; ++i) v[i] = snap_value(s, i);
      w.write_snapshot("/snap/w", v.data());
    }
    w.end_step();
  }
  void write(int64_t k) const {
    Writer w(path, "", make_provenance("emu", 1));
    declare(w);
    for (int64_t s = 0; s < k; ++s) step(w);
    w.close();
  }
  ~Fixture() { std::filesystem::remove(path); }
};

void expect_snapshots(const Reader& r, const std::vector<int64_t>& steps) {
  for (int64_t s : steps) {
    const auto v = r.read_snapshot<float>("/snap/w", s);
    ASSERT_EQ(v.size(), kSnap);
    for (size_t i : {size_t(0), size_t(1), size_t(2047), size_t(2048), kSnap - 1}) EXPECT_EQ(v[i], snap_value(s, i)) << "step " << s << " element " << i;
  }
}

}  // namespace

TEST(TraceReaderElement, OneElementAcrossSnapshotsAndSeriesRows) {
  Fixture f("elem.h5");
  f.write(8);
  const Reader r(f.path);
  for (size_t i : {size_t(0), size_t(5), size_t(2048 + 31), kSnap - 1}) {
    std::vector<int64_t> st;
    const auto v = r.read_snapshot_element<float>("/snap/w", i, &st);
    EXPECT_EQ(st, f.steps);
    ASSERT_EQ(v.size(), f.steps.size());
    for (size_t j = 0; j < st.size(); ++j) EXPECT_EQ(v[j], snap_value(st[j], i));
  }
  const auto e = r.read_series_element<double>("/s", 2, 3, 4);
  ASSERT_EQ(e.size(), 4u);
  for (size_t j = 0; j < 4; ++j) EXPECT_EQ(e[j], series_value(int64_t(3 + j), 2));
  EXPECT_EQ(r.read_series_element<double>("/s", 1, 6).size(), 2u);  // clamped to k = 8
  EXPECT_THROW(r.read_series_element<double>("/s", 3), TraceError);        // row has 3 elements
  EXPECT_THROW(r.read_snapshot_element<float>("/snap/w", kSnap), TraceError);
  EXPECT_THROW(r.read_series_element<float>("/s", 0), TraceError);         // stored as f64
}

TEST(TraceReaderElement, SnapshotElementSeesOnlyCompleteSteps) {
  Fixture f("partial.h5");
  f.write(4);  // steps 1 and 3 complete; 4 and 7 are not
  const Reader r(f.path);
  std::vector<int64_t> st;
  const auto v = r.read_snapshot_element<float>("/snap/w", 9, &st);
  EXPECT_EQ(st, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(v, (std::vector<float>{snap_value(1, 9), snap_value(3, 9)}));
}

// HDF5 1.10: H5Drefresh of a dataset open twice in one process breaks later chunk reads
// (a refreshed read of snapshot row 1 returned row 0); Readers of one file share their ids.
TEST(TraceReaderElement, TwoReadersOfOneFile) {
  Fixture f("two.h5");
  f.write(8);
  const Reader a(f.path), b(f.path);
  expect_snapshots(a, f.steps);
  expect_snapshots(b, f.steps);
  expect_snapshots(a, {7, 1});
}

// The inspector's run mode: the trainer writes, the inspector's single Reader follows in the
// same process (both handles share HDF5's file object).
TEST(TraceReaderElement, ReaderFollowsAWriterInTheSameProcess) {
  Fixture f("live.h5");
  Writer w(f.path, "", make_provenance("emu", 1));
  f.declare(w);
  Reader r(f.path);
  EXPECT_EQ(r.steps_completed(), 0u);
  std::vector<int64_t> seen;
  for (int64_t s = 0; s < 8; ++s) {
    f.step(w);
    r.refresh();
    ASSERT_EQ(r.steps_completed(), uint64_t(s + 1));
    const auto row = r.read_series<double>("/s", uint64_t(s), 1);
    EXPECT_EQ(row[1], series_value(s, 1));
    if (std::find(f.steps.begin(), f.steps.end(), s) != f.steps.end()) seen.push_back(s);
    expect_snapshots(r, seen);
    std::vector<int64_t> st;
    const auto e = r.read_snapshot_element<float>("/snap/w", 100, &st);
    EXPECT_EQ(st, seen);
    for (size_t j = 0; j < st.size(); ++j) EXPECT_EQ(e[j], snap_value(st[j], 100));
  }
  w.close();
}
