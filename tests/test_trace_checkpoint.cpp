// Checkpoint I/O: exact round trip, atomic replace, clear errors for missing/corrupt files.
#include <gtest/gtest.h>

#include <unistd.h>

#include <bit>
#include <cmath>
#include <functional>
#include <fstream>
#include <iterator>
#include <limits>

#include "mxsim/trace/checkpoint.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace mxsim::trace;

namespace {
fs::path temp_dir() { return mxsim::test::make_temp_dir("ckpt"); }
using mxsim::test::read_bytes;
using mxsim::test::write_bytes;
void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no exception, expected: " << needle;
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(Checkpoint, RoundTripIsBitExact) {
  const fs::path dir = temp_dir(), p = dir / "run.ckpt";
  // Bit patterns that a lossy path would change: -0, a signalling-NaN payload, a subnormal.
  const std::vector<uint32_t> fbits = {0x80000000u, 0x7F800001u, 0x00000001u, 0x3F800000u, 0xFF7FFFFFu, 0x12345678u};
  std::vector<float> f(fbits.size());
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = std::bit_cast<float>(fbits[i]);
  const std::vector<uint8_t> u8 = {0, 1, 255, 128};
  const std::vector<uint64_t> u64 = {0, ~uint64_t(0), 0x0123456789ABCDEFull};
  CheckpointWriter w;
  w.put("model/fc1/master", f.data(), {2, 3});
  w.put("rng/bytes", u8.data(), {4});
  w.put("data/order", u64.data(), {3});
  w.put("empty", f.data(), {0, 5});
  w.put_u64("step", 1234);
  w.put_i64("neg", -5);
  w.put_f64("lr", 0.1);
  w.put_f32("scale", -0.0f);
  w.put_string("config", "[model]\nexperts = 4\n");
  EXPECT_THROW(w.put_u64("step", 1), TraceError);
  w.commit(p);
  Checkpoint c(p);
  auto a = c.get_f32("model/fc1/master");
  EXPECT_EQ(a.shape, (std::vector<uint64_t>{2, 3}));
  ASSERT_EQ(a.data.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(std::bit_cast<uint32_t>(a.data[i]), fbits[i]) << i;
  EXPECT_EQ(c.get_u8("rng/bytes").data, u8);
  EXPECT_EQ(c.get_u64_array("data/order").data, u64);
  EXPECT_EQ(c.get_f32("empty").shape, (std::vector<uint64_t>{0, 5}));
  EXPECT_TRUE(c.get_f32("empty").data.empty());
  EXPECT_EQ(c.get_u64("step"), 1234u);
  EXPECT_EQ(c.get_i64("neg"), -5);
  EXPECT_EQ(c.get_f64("lr"), 0.1);
  EXPECT_EQ(std::bit_cast<uint32_t>(c.get_f32_scalar("scale")), 0x80000000u);
  EXPECT_EQ(c.get_string("config"), "[model]\nexperts = 4\n");
  EXPECT_TRUE(c.has("model/fc1/master"));
  EXPECT_FALSE(c.has("model/fc2/master"));
  EXPECT_EQ(c.names().size(), 9u);
  expect_error([&] { c.get_f32("model/fc2/master"); }, "no entry 'model/fc2/master'");
  expect_error([&] { c.get_u8("model/fc1/master"); }, "is a f32 array, requested u8 array");
  expect_error([&] { c.get_u64("lr"); }, "is a f64 scalar");
  fs::remove_all(dir);
}

TEST(Checkpoint, CommitReplacesAtomicallyAndFailureKeepsOld) {
  const fs::path dir = temp_dir(), p = dir / "c.ckpt";
  CheckpointWriter a;
  a.put_u64("step", 1);
  a.commit(p);
  CheckpointWriter b;
  b.put_u64("step", 2);
  b.commit(p);
  EXPECT_EQ(Checkpoint(p).get_u64("step"), 2u);
  expect_error([&] { b.commit(dir / "no-such-dir" / "c.ckpt"); }, "no-such-dir/c.ckpt");
  // Only the final file remains: no temp files.
  std::size_t n = 0;
  for (auto& e : fs::directory_iterator(dir)) n += e.path() != p;
  EXPECT_EQ(n, 0u);
  fs::remove_all(dir);
}

TEST(Checkpoint, MissingTruncatedCorruptAndForeignFiles) {
  const fs::path dir = temp_dir(), p = dir / "c.ckpt";
  expect_error([&] { Checkpoint c(dir / "missing.ckpt"); }, "missing.ckpt: checkpoint missing");
  std::vector<float> big(4096);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = std::bit_cast<float>(uint32_t(0x4A5A0000u + i));
  CheckpointWriter w;
  w.put("w", big.data(), {4096});
  w.commit(p);
  const std::string bytes = read_bytes(p);
  // Truncated: the file cut in half.
  const fs::path t = dir / "trunc.ckpt";
  write_bytes(t, bytes.substr(0, bytes.size() / 2));
  expect_error([&] { Checkpoint c(t); c.get_f32("w"); }, "trunc.ckpt");
  // Corrupt payload: flip one bit inside the array data; Fletcher-32 must catch it.
  const uint32_t probe = 0x4A5A0000u + 100;
  const std::string needle(reinterpret_cast<const char*>(&probe), 4);
  const auto at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  std::string bad = bytes;
  bad[at] ^= 0x10;
  const fs::path c2 = dir / "flip.ckpt";
  write_bytes(c2, bad);
  expect_error([&] { Checkpoint c(c2); c.get_f32("w"); }, "flip.ckpt: entry 'w': read failed");
  // Not a checkpoint.
  write_bytes(dir / "text.ckpt", "hello");
  expect_error([&] { Checkpoint c(dir / "text.ckpt"); }, "text.ckpt: not a readable checkpoint");
  fs::remove_all(dir);
}
