// `mxsim quantize` streams every large input in slices of whole block rows
// (columnwise blocks: bands of whole blocks down the columns): forced into
// many small slices (MXSIM_QUANTIZE_CHUNK_BYTES), every output file (codes,
// scales, metadata, --per-block CSV / NPY) and the printed statistics (JSON
// and text) are byte for byte those of the unsliced run, which quantizes each
// tensor whole (emu::quantize / quantize_f64, quant_stats, block_stats): for
// .npy and .safetensors inputs (several dtypes in one file, a sharded index),
// F32 / F16 / BF16 / F64 sources, rowwise and columnwise 1-D blocks, 2-D
// tiles, per-tensor FP8 and NVFP4 (two passes: amax, then quantize),
// whole-column blocks (a column-amax pass), the Hadamard transform and
// stochastic rounding (words keyed by the global element index). The slice
// arithmetic of a tensor past 2^31 elements is checked directly here (such
// tensors run end to end, for minutes, in test_cli_quantize_2to31.cpp).
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

/// values() (below 2^16 in magnitude) with the first and the last row of each
/// R-row group set to +-(1..3) * 2^20: the group's and each column's amax lie
/// in its first slice (columns c = 2 mod 3) or its last (the others), so a
/// pass that missed either would change the scales.
std::vector<float> peaked(size_t G, size_t R, size_t C, uint64_t seed) {
  std::vector<float> v = values(G * R * C, seed, false);
  for (size_t g = 0; g < G; ++g)
    for (size_t c = 0; c < C; ++c) {
      const float sign = c % 2 ? -1.0f : 1.0f;
      v[(g * R) * C + c] = sign * std::ldexp(float(1 + c % 3), 20 + int(g));
      v[(g * R + R - 1) * C + c] = -sign * std::ldexp(float(1 + (c + 1) % 3), 20 + int(g));
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

/// FP16 bit patterns over the whole finite range (normals of every binade,
/// subnormals, zeros), an Inf near the end; and their F32 values are not needed:
/// the comparison is sliced against unsliced.
std::string f16_bytes(size_t n, uint64_t seed) {
  std::string d;
  for (size_t i = 0; i < n; ++i) {
    uint16_t b = uint16_t(splitmix(seed));
    if ((b & 0x7C00) == 0x7C00) b &= 0xBFFF;  // no Inf / NaN from the random bits
    if (i == n - 3) b = 0x7C00;
    d += char(b & 0xFF);
    d += char(b >> 8);
  }
  return d;
}
/// F64 values most of which are not FP32 values (so rounding once from FP64
/// differs from rounding through FP32), one beyond FP32's range (its block gets
/// the NaN scale) and a NaN.
/// Every other 32-element run is an E2M1 block whose codes differ between
/// rounding once and rounding through FP32: amax 6 * 2^e (scale 2^e) and
/// elements 2^-32 beside the ties of E2M1 (0.25, 0.75, ..., 5), which FP32
/// rounds onto the tie.
std::string f64_bytes(size_t n, uint64_t seed) {
  const std::vector<float> base = values(n, seed, false);
  static const double ties[] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
  std::string d;
  for (size_t i = 0; i < n; ++i) {
    double v = double(base[i]) * (1.0 + std::ldexp(double(splitmix(seed) >> 40), -50));
    if ((i / 32) % 2 == 0) {
      const int e = int((i / 32) % 9) - 4;
      const uint64_t r = splitmix(seed);
      v = i % 32 == 0 ? 6.0 : ties[r % 7] + ((r >> 8) % 2 ? 1 : -1) * std::ldexp(1.0, -32);
      v = std::ldexp((r >> 9) % 2 ? -v : v, e);
    }
    if (i == n / 2 + 40) v = 1e39;
    if (i == n / 3 + 40) v = NAN;
    d.append(reinterpret_cast<const char*>(&v), 8);
  }
  return d;
}
std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}
std::string bf16_bytes(const std::vector<float>& v) {
  std::string d;
  for (float x : v) {
    const uint32_t b = mxsim::f32_bits(x) >> 16;
    d += char(b & 0xFF);
    d += char(b >> 8);
  }
  return d;
}

/// A .safetensors file (huggingface/safetensors layout: u64 header length,
/// JSON header, the tensors back to back) of (name, dtype, shape, bytes).
struct StTensor {
  std::string name, dtype, shape, bytes;
};
std::string safetensors(const std::vector<StTensor>& ts) {
  std::string j = "{";
  size_t off = 0;
  for (const auto& t : ts) {
    if (j.size() > 1) j += ",";
    j += "\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[" + t.shape + "],\"data_offsets\":[" +
         std::to_string(off) + "," + std::to_string(off + t.bytes.size()) + "]}";
    off += t.bytes.size();
  }
  j += "}";
  while (j.size() % 8) j += ' ';
  std::string f(8, '\0');
  for (int k = 0; k < 8; ++k) f[size_t(k)] = char((uint64_t(j.size()) >> (8 * k)) & 0xFF);
  f += j;
  for (const auto& t : ts) f += t.bytes;
  return f;
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
/// `streamed`, when not negative, is how many tensors the sliced run must
/// note as streamed; `out` is the -o argument (inside out/).
void expect_sliced_equals_unsliced(CliSandbox& s, const std::string& args, const char* chunk, int streamed = -1,
                                   const std::string& out = "out/") {
  SCOPED_TRACE(args);
  fs::create_directory(s.p / "out");
  const auto u = s.mxsim("quantize " + args + " -o " + out + " --json");
  ASSERT_EQ(u.rc, 0) << u.err;
  EXPECT_EQ(u.err.find("streamed"), std::string::npos) << u.err;  // one slice: the whole-tensor path
  const auto uf = files_of(s.p / "out");
  const auto ut = s.mxsim("quantize " + args);
  fs::remove_all(s.p / "out");
  const EnvVar c("MXSIM_QUANTIZE_CHUNK_BYTES", chunk);
  fs::create_directory(s.p / "out");
  const auto k = s.mxsim("quantize " + args + " -o " + out + " --json");
  ASSERT_EQ(k.rc, 0) << k.err;
  EXPECT_NE(k.err.find("streamed in "), std::string::npos) << k.err;
  if (streamed >= 0) {
    int notes = 0;
    for (size_t at = k.err.find("streamed in "); at != std::string::npos; at = k.err.find("streamed in ", at + 1)) ++notes;
    EXPECT_EQ(notes, streamed) << k.err;
  }
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
  // under the (random) Hadamard transform the tensor amax is the transformed tensor's, in both
  // passes alike (the first pass used to fold the source's: a 4x error where H x > x)
  expect_sliced_equals_unsliced(s, "--recipe nvfp4 --hadamard a.npy", "1000");
  expect_sliced_equals_unsliced(s, "--recipe nvfp4 --hadamard --hadamard-signs 55272 b.npy", "1000");
}
TEST_F(Sliced, StochasticRoundingKeyedByGlobalIndexEqualsUnsliced) {
  expect_sliced_equals_unsliced(s, "--recipe mxfp4 --round sr --seed 12345 a.npy", "1000");
  expect_sliced_equals_unsliced(s, "--recipe fp8_tensor --round sr --seed 99 b.npy", "1000");
}

// Columnwise blocks (--axis rows) stream in bands of whole blocks down the
// columns: a.npy has 70 rows per group (bands 0-31, 32-63 and 64-69 of each
// group: a row count that is no multiple of the band), c.npy 300 rows in
// bands of 128-row fp8_block blocks, e.npy 77 rows with an odd row length
// (bands of E2M1 codes packed two per byte along the storage rows).
TEST_F(Sliced, ColumnwiseBandsEqualUnsliced) {
  s.put("c.npy", f32_npy("(300, 40)", values(300 * 40, 3, true)));
  s.put("e.npy", f32_npy("(77, 83)", values(77 * 83, 4, true)));
  for (const char* f : {"a.npy", "b.npy", "e.npy"}) {
    expect_sliced_equals_unsliced(s, std::string("--recipe mxfp4 --axis rows ") + f, "1000");
    expect_sliced_equals_unsliced(s, std::string("--recipe mxfp8 --axis rows ") + f, "1000");
  }
  expect_sliced_equals_unsliced(s, "--recipe fp8_block --axis rows c.npy", "1000");
  expect_sliced_equals_unsliced(s, "--recipe nvfp4 --axis rows a.npy", "1000");  // two passes, bands of 16
  expect_sliced_equals_unsliced(s, "--recipe mxfp4 --axis rows --round sr --seed 5 a.npy", "1000");
  s.put("d.npy", f32_npy("(160, 48)", values(160 * 48, 6, true)));
  expect_sliced_equals_unsliced(s, "--recipe mxfp4 --axis rows --hadamard d.npy", "1000");  // runs of 16 down the band
  // NVFP4's tensor amax of the transform down the columns, folded band by band (finite values:
  // a NaN would make the whole tensor NaN either way)
  s.put("g.npy", f32_npy("(160, 48)", values(160 * 48, 7, false)));
  expect_sliced_equals_unsliced(s, "--recipe nvfp4 --axis rows --hadamard --hadamard-signs 55272 g.npy", "1000");
  // 300 rows are no multiple of the Hadamard run: the same error, naming the whole extent, sliced or not
  const auto u = s.mxsim("quantize --recipe mxfp4 --axis rows --hadamard c.npy");
  const EnvVar c("MXSIM_QUANTIZE_CHUNK_BYTES", "1000");
  const auto k = s.mxsim("quantize --recipe mxfp4 --axis rows --hadamard c.npy");
  EXPECT_EQ(u.rc, 1);
  EXPECT_EQ(k.rc, 1);
  EXPECT_NE(u.err.find("needs the blocked extent (300) to be a multiple of 16"), std::string::npos) << u.err;
  EXPECT_EQ(k.err, u.err);
}

// Per-column scaling (fp8_row with --axis rows: one block per whole column)
// needs each column's amax of the whole group before any band is quantized:
// two passes, also with the Hadamard transform down the columns (bands of 16).
TEST_F(Sliced, WholeColumnBlocksTwoPassesEqualUnsliced) {
  s.put("d.npy", f32_npy("(160, 48)", values(160 * 48, 6, true)));
  s.put("p.npy", f32_npy("(2, 64, 48)", peaked(2, 64, 48, 8)));
  for (const char* r : {"fp8_row --axis rows", "fp8_row --axis rows --hadamard", "fp8_tensor", "fp8_tensor --hadamard",
                        "nvfp4", "nvfp4 --axis rows"})
    expect_sliced_equals_unsliced(s, std::string("--recipe ") + r + " p.npy", "1000");
  expect_sliced_equals_unsliced(s, "--recipe fp8_row --axis rows a.npy", "1000");
  expect_sliced_equals_unsliced(s, "--recipe fp8_row --axis rows b.npy", "1000");
  expect_sliced_equals_unsliced(s, "--recipe fp8_row --axis rows --hadamard d.npy", "1000");
}

// 1000 bytes of [77, 83] F32 are 3 rows: slices start at element 249, 498,
// ..., multiples of nothing a block, a byte of packed E2M1 or a vector has.
TEST_F(Sliced, OddSliceBoundaryEqualsUnsliced) {
  s.put("e.npy", f32_npy("(77, 83)", values(77 * 83, 4, true)));
  expect_sliced_equals_unsliced(s, "--recipe mxfp4 e.npy", "1000");
  expect_sliced_equals_unsliced(s, "--recipe nvfp4 e.npy", "1000");
  expect_sliced_equals_unsliced(s, "--recipe fp8_row --round sr --seed 3 e.npy", "1000");
  expect_sliced_equals_unsliced(s, "--recipe mxfp6_e3m2 e.npy", "997");
}

// F64 sources stream too: each slice's elements rounded once from FP64 (MX
// recipes: quantize_slice_f64 re-encodes the values FP32 cannot hold), the
// other recipes through FP32; the rounded_from_f64 count is summed over slices.
TEST_F(Sliced, F64RoundedOncePerSliceEqualsUnsliced) {
  s.put("f.npy", npy_bytes("<f8", "(40, 96)", f64_bytes(40 * 96, 7)));
  for (const char* r : {"mxfp4", "mxfp8 --round sr --seed 11", "mxfp4 --axis rows", "mxfp4_2d", "fp8_tensor",
                        "fp8_row --axis rows", "nvfp4", "mxfp8 --hadamard"})
    expect_sliced_equals_unsliced(s, std::string("--recipe ") + r + " f.npy", "1000");
}

namespace {
/// m.safetensors: an I64 counter (skipped) and four floating tensors of
/// different dtypes and shapes, each read at its own offset.
struct SlicedSafetensors : ::testing::Test {
  CliSandbox s;
  StTensor step{"step", "I64", "1", std::string("\x07\0\0\0\0\0\0\0", 8)};
  StTensor w32{"w.f32", "F32", "3,70,96", f32_bytes(values(3 * 70 * 96, 11, true))};
  StTensor w16{"w.bf16", "BF16", "100,64", bf16_bytes(values(100 * 64, 12, false))};
  StTensor h16{"w.f16", "F16", "77,83", f16_bytes(77 * 83, 13)};
  StTensor w64{"w.f64", "F64", "40,96", f64_bytes(40 * 96, 14)};
  void SetUp() override { s.put("m.safetensors", safetensors({step, w32, w16, h16, w64})); }
};
}  // namespace

TEST_F(SlicedSafetensors, EveryDtypeStreamsFromItsOffsetEqualsUnsliced) {
  for (const char* r : {"mxfp4", "mxfp8 --round sr --seed 7", "mxfp4_2d", "fp8_tensor", "nvfp4", "fp8_block",
                        "mxfp8 --axis rows", "fp8_row --axis rows"})
    expect_sliced_equals_unsliced(s, std::string("--recipe ") + r + " --all-tensors m.safetensors", "1000", 4);
  // into one .safetensors output, and a chosen subset
  expect_sliced_equals_unsliced(s, "--recipe mxfp4 --all-tensors m.safetensors", "1000", 4, "out/q.safetensors");
  expect_sliced_equals_unsliced(s, "--recipe fp8_tensor --tensor w.f64 --tensor w.bf16 m.safetensors", "1000", 2,
                                "out/q.safetensors");
}

// A sharded checkpoint: an index placing the tensors in two shards.
TEST_F(SlicedSafetensors, ShardedIndexEqualsUnsliced) {
  s.put("model-00001-of-00002.safetensors", safetensors({w32, step}));
  s.put("model-00002-of-00002.safetensors", safetensors({h16, w16, w64}));
  s.put("model.safetensors.index.json",
        "{\"metadata\": {\"total_size\": 1}, \"weight_map\": {\"w.f32\": \"model-00001-of-00002.safetensors\", "
        "\"step\": \"model-00001-of-00002.safetensors\", \"w.f16\": \"model-00002-of-00002.safetensors\", "
        "\"w.bf16\": \"model-00002-of-00002.safetensors\", \"w.f64\": \"model-00002-of-00002.safetensors\"}}");
  expect_sliced_equals_unsliced(s, "--recipe mxfp4 --all-tensors model.safetensors.index.json", "1000", 4);
  expect_sliced_equals_unsliced(s, "--recipe nvfp4 --all-tensors model.safetensors.index.json", "1000", 4,
                                "out/q.safetensors");
  expect_sliced_equals_unsliced(s, "--recipe mxfp8 --tensor w.f16 --tensor w.f32 model.safetensors.index.json", "1000",
                                2);
}

// --per-block rows of streamed tensors: a block inside one slice, and blocks
// that span slices (per-tensor scaling: a group; per-column scaling: a
// column), whose sums continue from slice to slice in storage order.
TEST_F(SlicedSafetensors, PerBlockCsvEqualsUnsliced) {
  for (const char* r : {"mxfp4", "fp8_tensor", "nvfp4", "mxfp4_2d", "fp8_row --axis rows", "mxfp4 --axis rows",
                        "mxfp8 --round sr --seed 2"})
    expect_sliced_equals_unsliced(s, std::string("--recipe ") + r + " --all-tensors m.safetensors --per-block out/b.csv",
                                  "1000", 4);
}
TEST_F(Sliced, PerBlockNpyEqualsUnsliced) {
  s.put("d.npy", f32_npy("(160, 48)", values(160 * 48, 6, true)));
  s.put("f.npy", npy_bytes("<f8", "(40, 96)", f64_bytes(40 * 96, 7)));
  for (const char* r : {"fp8_tensor --hadamard a.npy", "mxfp4 --axis rows a.npy", "mxfp4_2d a.npy", "nvfp4 b.npy",
                        "fp8_row --axis rows --hadamard d.npy", "mxfp4 f.npy", "fp8_tensor f.npy"})
    expect_sliced_equals_unsliced(s, std::string("--recipe ") + r + " --per-block out/b.npy", "1000", 1);
}

// The bands of a columnwise [3, 70, C] tensor: whole 32-row blocks inside
// each group (64-69 the short last band), 16 rows for NVFP4's 1x16 blocks,
// one row for whole-column blocks (16 with the Hadamard transform); E2M1 bands
// start on a byte of the packed storage rows.
TEST(SliceArithmetic, ColumnwiseBandsAreWholeBlocksInsideGroups) {
  using mxsim::Axis;
  const uint64_t C = 96;
  const auto b = mxsim::emu::row_slices(3, 70, C, mxsim::tensor_recipe("mxfp4"), 1, Axis::Rows);
  ASSERT_EQ(b.size(), 9u);
  EXPECT_EQ(b[1].row0, 32u);
  EXPECT_EQ(b[2].row0, 64u);
  EXPECT_EQ(b[2].rows, 6u);
  EXPECT_EQ(b[3].row0, 70u);
  EXPECT_EQ(b[3].group, 1u);
  EXPECT_EQ(b[8].index_base, (2 * 70 + 64) * C);
  // 100 rows' worth of elements: three 32-row blocks per band
  const auto w = mxsim::emu::row_slices(1, 300, C, mxsim::tensor_recipe("mxfp8"), 100 * C, Axis::Rows);
  ASSERT_EQ(w.size(), 4u);
  EXPECT_EQ(w[1].row0, 96u);
  EXPECT_EQ(w[3].rows, 300u - 3 * 96);
  EXPECT_EQ(mxsim::emu::slice_unit(70, mxsim::tensor_recipe("nvfp4"), Axis::Rows), 16u);
  EXPECT_EQ(mxsim::emu::slice_unit(70, mxsim::tensor_recipe("fp8_row"), Axis::Rows), 1u);
  mxsim::QuantSpec h = mxsim::tensor_recipe("fp8_row");
  h.hadamard16 = true;
  EXPECT_EQ(mxsim::emu::slice_unit(70, h, Axis::Rows), 16u);
  mxsim::QuantSpec odd = mxsim::tensor_recipe("mxfp4");
  odd.block_cols = 0;  // whole-column E2M1 blocks: a band of one row would split a byte
  EXPECT_EQ(mxsim::emu::slice_unit(70, odd, Axis::Rows), 2u);
  // rowwise blocks ignore the unit of the other axis
  EXPECT_EQ(mxsim::emu::slice_unit(70, mxsim::tensor_recipe("mxfp4"), Axis::Cols), 1u);
  EXPECT_EQ(mxsim::emu::slice_unit(70, mxsim::tensor_recipe("mxfp4_2d"), Axis::Rows), 32u);
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
