// `mxsim quantize` streams .npy tensors in slices of whole block rows: forced
// into many small slices (MXSIM_QUANTIZE_CHUNK_BYTES), every output file and
// the printed statistics (JSON and text) are byte for byte those of the
// unsliced run, for rowwise blocks, 2-D tiles, per-tensor FP8 and NVFP4 (two
// passes: amax, then quantize) and stochastic rounding (words keyed by the
// global element index). The slice arithmetic of a tensor past 2^31 elements
// is checked directly (running it would take minutes on the test machine).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "mxsim/bits.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/format.hpp"
#include "mxsim/hd/quant_block.hpp"
#include "mxsim/quant_spec.hpp"

using mxsim::test::CliSandbox;
using mxsim::test::npy_bytes;
namespace fs = std::filesystem;

using mxsim::test::EnvVar;

namespace {

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// n FP32 values spread over many binades (per-row magnitudes differ, so
/// blocks get different scales), with a few zeros and subnormals; `specials`
/// adds an Inf and a NaN near the end (their blocks / groups get NaN scales).
std::vector<float> values(size_t n, uint64_t seed, bool specials) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = splitmix(seed);
    const int e = int((i / 96) % 23) - 11 + int(r % 5);
    const float m = float(int64_t(r >> 40) - (int64_t(1) << 23)) / float(1 << 23);
    v[i] = std::ldexp(m, e);
    if (r % 97 == 0) v[i] = 0.0f;
    if (r % 89 == 0) v[i] = 1e-40f;
  }
  if (specials) {
    v[n - 5] = INFINITY;
    v[n - 40] = NAN;
  }
  return v;
}

std::string f32_npy(const std::string& shape, const std::vector<float>& v) {
  return npy_bytes("<f4", shape, std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
}
std::string bf16_npy(const std::string& shape, const std::vector<float>& v) {
  std::string d;
  for (float x : v) {
    const uint32_t b = mxsim::f32_bits(x) >> 16;  // truncation: any BF16 values do
    d += char(b & 0xFF);
    d += char(b >> 8);
  }
  return npy_bytes("<V2", shape, d);
}

/// Every file under `dir` with its bytes.
std::map<std::string, std::string> files_of(const fs::path& dir) {
  std::map<std::string, std::string> m;
  for (const auto& e : fs::directory_iterator(dir)) m[e.path().filename().string()] = mxsim::test::read_bytes(e.path());
  return m;
}

/// The "notes" array of a JSON report removed (the sliced run notes its slices).
std::string without_notes(const std::string& j) {
  const size_t a = j.find("\"notes\"");
  if (a == std::string::npos) return j;
  const size_t b = j.find(']', a);
  return j.substr(0, a) + j.substr(b + 1);
}

/// Runs `args` (writing to out/) unsliced, then sliced with a chunk of
/// `chunk` bytes, and compares outputs, JSON and text reports.
void expect_sliced_equals_unsliced(CliSandbox& s, const std::string& args, const char* chunk) {
  SCOPED_TRACE(args);
  fs::create_directory(s.p / "out");
  const auto u = s.mxsim("quantize " + args + " -o out/ --json");
  ASSERT_EQ(u.rc, 0) << u.err;
  EXPECT_EQ(u.err.find("streamed"), std::string::npos) << u.err;  // one slice: the whole-tensor path
  const auto uf = files_of(s.p / "out");
  const auto ut = s.mxsim("quantize " + args);
  fs::remove_all(s.p / "out");
  const EnvVar c("MXSIM_QUANTIZE_CHUNK_BYTES", chunk);
  fs::create_directory(s.p / "out");
  const auto k = s.mxsim("quantize " + args + " -o out/ --json");
  ASSERT_EQ(k.rc, 0) << k.err;
  EXPECT_NE(k.err.find("slices of whole block rows"), std::string::npos) << k.err;
  const auto kf = files_of(s.p / "out");
  ASSERT_FALSE(uf.empty());
  EXPECT_EQ(uf.size(), kf.size());
  for (const auto& [name, bytes] : uf) {
    ASSERT_TRUE(kf.count(name)) << name;
    EXPECT_TRUE(kf.at(name) == bytes) << name << " differs";
  }
  EXPECT_EQ(without_notes(k.out), without_notes(u.out));
  const auto kt = s.mxsim("quantize " + args);
  EXPECT_EQ(kt.out, ut.out);
  fs::remove_all(s.p / "out");
}

struct Sliced : ::testing::Test {
  CliSandbox s;
  void SetUp() override {
    s.put("a.npy", f32_npy("(3, 70, 96)", values(3 * 70 * 96, 1, true)));   // 3-D, ragged tile rows (70)
    s.put("b.npy", bf16_npy("(100, 64)", values(100 * 64, 2, false)));      // BF16 source
  }
};

}  // namespace

// 1000 bytes: 2 rows of a.npy per slice (1-D), one 32-row tile row (tiles).
TEST_F(Sliced, MxFp4RowwiseEqualsUnsliced) {
  expect_sliced_equals_unsliced(s, "--recipe mxfp4 a.npy", "1000");
  expect_sliced_equals_unsliced(s, "--recipe mxfp4 b.npy", "1000");
}
TEST_F(Sliced, MxFp4TilesEqualUnsliced) {
  expect_sliced_equals_unsliced(s, "--recipe mxfp4_2d a.npy", "1000");
  expect_sliced_equals_unsliced(s, "--recipe mxfp4_2d b.npy", "1000");
}
TEST_F(Sliced, Fp8TensorTwoPassesEqualUnsliced) {
  expect_sliced_equals_unsliced(s, "--recipe fp8_tensor a.npy", "1000");
  expect_sliced_equals_unsliced(s, "--recipe fp8_tensor b.npy", "1000");
  // the per-tensor amax in the domain of the codes: after the Hadamard transform
  expect_sliced_equals_unsliced(s, "--recipe fp8_tensor --hadamard a.npy", "1000");
}
TEST_F(Sliced, Nvfp4TensorScaleTwoPassesEqualsUnsliced) {
  expect_sliced_equals_unsliced(s, "--recipe nvfp4 a.npy", "1000");
  expect_sliced_equals_unsliced(s, "--recipe nvfp4 b.npy", "1000");
}
TEST_F(Sliced, StochasticRoundingKeyedByGlobalIndexEqualsUnsliced) {
  expect_sliced_equals_unsliced(s, "--recipe mxfp4 --round sr --seed 12345 a.npy", "1000");
  expect_sliced_equals_unsliced(s, "--recipe fp8_tensor --round sr --seed 99 b.npy", "1000");
}

// The slices of a [65536, 32769] tensor (2^31 + 2^16 elements): contiguous,
// whole rows, the last one ending at the last element, its logical index
// (the SR index base and the file offset) past 2^31.
TEST(SliceArithmetic, TensorAbove2To31ElementsIsCoveredTo64BitOffsets) {
  const uint64_t R = 65536, C = 32769;
  const mxsim::QuantSpec spec = mxsim::tensor_recipe("mxfp4");
  const auto v = mxsim::emu::row_slices(1, R, C, spec, uint64_t(64) << 20);
  ASSERT_FALSE(v.empty());
  const uint64_t per = (uint64_t(64) << 20) / C;  // 2047 rows of 32769
  EXPECT_EQ(v[0].rows, per);
  uint64_t next = 0;
  for (const auto& sl : v) {
    EXPECT_EQ(sl.row0, next);
    EXPECT_EQ(sl.index_base, sl.row0 * C);
    next = sl.row0 + sl.rows;
  }
  EXPECT_EQ(next, R);
  const auto& last = v.back();
  EXPECT_EQ(last.rows, R - (v.size() - 1) * per);
  EXPECT_EQ(last.index_base + last.rows * C, R * C);
  // One row per slice: the last slice starts past 2^31 (65535 * 32769), as a 32-bit offset could not.
  const auto rows = mxsim::emu::row_slices(1, R, C, spec, 1);
  ASSERT_EQ(rows.size(), R);
  EXPECT_EQ(rows.back().index_base, uint64_t(2147516415));
  EXPECT_GT(rows.back().index_base, uint64_t(1) << 31);
  // Tiles: slices of whole 32-row tile rows inside each group of a [3, 70, C] tensor.
  const auto t = mxsim::emu::row_slices(3, 70, C, mxsim::tensor_recipe("mxfp4_2d"), 1);
  ASSERT_EQ(t.size(), 9u);  // rows 0-31, 32-63, 64-69 of each group
  EXPECT_EQ(t[2].row0, 64u);
  EXPECT_EQ(t[2].rows, 6u);
  EXPECT_EQ(t[3].row0, 70u);
  EXPECT_EQ(t[3].group, 1u);
  EXPECT_EQ(t[8].index_base, (2 * 70 + 64) * C);
}

// The last block of that tensor, quantized as a slice with SR: each code is
// the block's encoding with the Philox word of its global index (above 2^31),
// not of the index inside the slice.
TEST(SliceArithmetic, LastBlockOfHugeTensorDrawsWordsOfItsGlobalIndex) {
  const uint64_t R = 65536, C = 32769;
  mxsim::QuantSpec spec = mxsim::tensor_recipe("mxfp4");
  spec.round = mxsim::RoundMode::Stochastic;
  spec.sr = mxsim::PhiloxStream{0xC0FFEEull, 3};
  const std::vector<float> v = values(C, 5, false);
  auto x = mxsim::Tensor3f::from_shape({1, 1, C});
  std::copy(v.begin(), v.end(), x.begin());
  mxsim::QuantSpec s = spec;
  s.sr_index_base = (R - 1) * C;  // the last row
  const mxsim::QuantizedTensor q = mxsim::emu::quantize_slice(x, s, mxsim::Axis::Cols, {});
  const mxsim::FormatSpec ef = mxsim::spec_of(spec.elem);
  const size_t c0 = C - 1 - (C - 1) % 32;  // the last (partial: one element) block and the one before it
  for (size_t b0 : {c0 - 32, c0}) {
    uint32_t amax = 0;
    for (size_t c = b0; c < std::min<size_t>(C, b0 + 32); ++c) amax = mxsim::hd::amax_step(amax, mxsim::f32_bits(v[c]));
    const mxsim::hd::BlockQuant bq = mxsim::hd::block_quant(spec, ef, amax, {});
    bool differs_from_local = false;
    for (size_t c = b0; c < std::min<size_t>(C, b0 + 32); ++c) {
      const uint64_t gi = (R - 1) * C + c;
      ASSERT_GT(gi, uint64_t(1) << 31);
      const uint32_t want = bq.encode(ef, mxsim::f32_bits(v[c]), spec.round, spec.sr(gi));
      EXPECT_EQ(q.code(0, 0, c), want) << "column " << c;
      differs_from_local = differs_from_local || bq.encode(ef, mxsim::f32_bits(v[c]), spec.round, spec.sr(c)) != want;
    }
    if (b0 + 32 <= C) {
      EXPECT_TRUE(differs_from_local) << "the block does not tell global from local indices";
    }
  }
}
