// GPU codec vs CPU codec, bit for bit (issue 2, "Shared with the GPU from day
// one"). Both sides run the same header (rounding.hpp); this test proves the
// device compilation (nvcc -fmad=false / hipcc -ffp-contract=off, Philox on
// the device, denormals kept) did not change a single bit. The CPU codec's
// own correctness is proven against the exact oracle in the formats tests.
//
// Skips, with the runtime's reason, when the backend is not built or no GPU
// is present (CI has nvcc but no GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "mxsim/bits.hpp"
#include "mxsim/format.hpp"
#include "mxsim/philox.hpp"
#include "mxsim/rounding.hpp"

#ifdef MXSIM_HAVE_GPU
#include "mxsim/emu/quantize.hpp"
#include "mxsim/hip/codec.hpp"
#include "test_formats_oracle.hpp"
#endif

namespace {
using namespace mxsim;

#ifndef MXSIM_HAVE_GPU
TEST(GpuCodec, SkippedWithoutBackend) { GTEST_SKIP() << "built without the GPU backend (MXSIM_GPU=off or no GPU compiler)"; }
#else

#define REQUIRE_GPU()                                        \
  do {                                                       \
    std::string why_;                                        \
    if (!hip::available(&why_)) GTEST_SKIP() << "no GPU: " << why_; \
  } while (0)

const Format kElemFormats[] = {Format::E2M1, Format::E2M3, Format::E3M2, Format::E4M3, Format::E5M2,
                               Format::E4M3FNUZ, Format::E5M2FNUZ, Format::BF16, Format::FP16, Format::E8M0};

// Every BF16 bit pattern (as FP32: bits << 16), then every FP16 bit pattern
// widened exactly to FP32 (FP16 -> FP32 is exact: IEEE 754 §5.4.2).
std::vector<float> all_bf16_and_fp16() {
  std::vector<float> x;
  x.reserve(2 * 65536);
  for (uint32_t b = 0; b < 65536; ++b) x.push_back(f32_from_bits(b << 16));
  for (uint32_t b = 0; b < 65536; ++b) x.push_back(decode(Format::FP16, b));
  return x;
}

uint32_t code_at(const std::vector<uint8_t>& codes, size_t i, size_t cb) {
  uint32_t v = 0;
  std::memcpy(&v, codes.data() + i * cb, cb);  // little-endian host
  return v;
}

TEST(GpuCodec, ReportsDevice) {
  REQUIRE_GPU();
  const hip::DeviceInfo d = hip::device_info();
  std::printf("[gpu] %s platform=%s cc=%d.%d SMs=%d mem=%zu MiB driver=%d runtime=%d\n", d.name.c_str(),
              hip::platform(), d.cc_major, d.cc_minor, d.multiprocessors, d.global_mem >> 20, d.driver_version,
              d.runtime_version);
  EXPECT_FALSE(d.name.empty());
  EXPECT_GT(d.multiprocessors, 0);
}

// Published values, so the GPU path is checked against something other than
// the shared header: OCP MX v1.0 Table 1 / ml_dtypes float4_e2m1fn (RNE ties:
// 0.25 -> 0, 0.75 -> 1.0, 5.0 -> 4.0), OCP OFP8 v1.0 (E4M3 max 448 = 0x7E,
// NaN 0x7F; 464, the midpoint of 448 and 480, ties to even 448; beyond it
// overflows: NaN when not saturating, as ml_dtypes float8_e4m3fn; E5M2 Inf
// 0x7C).
TEST(GpuCodec, PublishedValues) {
  REQUIRE_GPU();
  struct Case { Format f; float x; Overflow ov; uint32_t code; };
  const Case cases[] = {
      {Format::E2M1, 0.25f, Overflow::Saturate, 0x0}, {Format::E2M1, 0.75f, Overflow::Saturate, 0x2},
      {Format::E2M1, 5.0f, Overflow::Saturate, 0x6},  {Format::E2M1, -6.0f, Overflow::Saturate, 0xF},
      {Format::E4M3, 448.0f, Overflow::Saturate, 0x7E}, {Format::E4M3, 464.0f, Overflow::Saturate, 0x7E},
      {Format::E4M3, 464.0f, Overflow::Ieee, 0x7E},
      {Format::E4M3, 480.0f, Overflow::Ieee, 0x7F},   {Format::E4M3, 480.0f, Overflow::Saturate, 0x7E},   {Format::E5M2, 65536.0f, Overflow::Ieee, 0x7C},
      {Format::E5M2, 57344.0f, Overflow::Ieee, 0x7B}, {Format::BF16, 1.0f, Overflow::Saturate, 0x3F80},
      {Format::FP16, 65504.0f, Overflow::Saturate, 0x7BFF}, {Format::E8M0, 1.0f, Overflow::Saturate, 0x7F},
  };
  for (const auto& c : cases) {
    hip::CodecParams p;
    p.format = c.f;
    p.overflow = c.ov;
    const float x[1] = {c.x};
    const auto codes = hip::encode_array(x, p);
    EXPECT_EQ(code_at(codes, 0, hip::code_bytes(c.f)), c.code) << spec_of(c.f).name << " " << c.x;
  }
}

// Every BF16 and FP16 pattern -> each element format, RNE / RZ / SR (fixed
// key), both overflow policies, several block-scale exponents.
TEST(GpuCodec, EncodeAllBf16AndFp16MatchesCpu) {
  REQUIRE_GPU();
  const std::vector<float> x = all_bf16_and_fp16();
  const int scale_exps[] = {0, 4, -7, 30};
  const RoundMode modes[] = {RoundMode::RNE, RoundMode::RZ, RoundMode::Stochastic};
  const Overflow ovs[] = {Overflow::Saturate, Overflow::Ieee};
  size_t compared = 0, runs = 0;
  for (Format fmt : kElemFormats) {
    const FormatSpec f = spec_of(fmt);
    const size_t cb = hip::code_bytes(fmt);
    for (RoundMode m : modes) {
      for (Overflow ov : ovs) {
        for (int se : scale_exps) {
          hip::CodecParams p;
          p.format = fmt;
          p.round = m;
          p.overflow = ov;
          p.scale_exp = se;
          p.sr = PhiloxStream{0x243F6A8885A308D3ull, make_stream(7, 11)};
          p.index_base = se == 4 ? 3 : 1024;  // one unaligned base: the per-element Philox path
          const auto codes = hip::encode_array(x, p);
          size_t bad = 0;
          for (size_t i = 0; i < x.size(); ++i) {
            const uint32_t rnd = m == RoundMode::Stochastic ? p.sr(p.index_base + i) : 0u;
            const uint32_t want = encode(f, f32_bits(x[i]), se, m, ov, rnd);
            const uint32_t got = code_at(codes, i, cb);
            if (got != want && bad++ < 5)
              ADD_FAILURE() << f.name << " " << name_of(m) << " ov=" << int(ov) << " scale_exp=" << se << " x=0x"
                            << std::hex << f32_bits(x[i]) << " gpu=0x" << got << " cpu=0x" << want << std::dec;
          }
          EXPECT_EQ(bad, 0u) << f.name << " " << name_of(m) << " scale_exp=" << se;
          compared += x.size();
          ++runs;
        }
      }
    }
  }
  std::printf("[gpu] encode: %zu conversions in %zu runs compared bit for bit\n", compared, runs);
  EXPECT_EQ(runs, 10u * 3 * 2 * 4);
}

// SR actually uses the random bits: on the same inputs, SR differs from RZ
// somewhere and equals RZ or RZ + 1 ulp everywhere (checked on magnitudes).
TEST(GpuCodec, StochasticUsesRandomBits) {
  REQUIRE_GPU();
  const std::vector<float> x = all_bf16_and_fp16();
  hip::CodecParams p;
  p.format = Format::E4M3;
  p.sr = PhiloxStream{42, 1};
  p.round = RoundMode::RZ;
  const auto rz = hip::encode_array(x, p);
  p.round = RoundMode::Stochastic;
  const auto sr = hip::encode_array(x, p);
  size_t differ = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (rz[i] == sr[i]) continue;
    ++differ;
    if (rz[i] == 0x7E || rz[i] == 0xFE) continue;  // max finite: SR may not step into NaN (saturates)
    EXPECT_EQ(sr[i] & 0x7F, (rz[i] & 0x7F) + 1) << "x=" << x[i];
  }
  EXPECT_GT(differ, 1000u);
}

// Every code of every format decodes to the same FP32 bits on both sides, and
// to the bits of the oracle's table (test_formats_oracle.hpp: the exact value,
// every NaN code the canonical 0x7FC00000, docs/numerics.md §2.4) that
// test_formats_exhaustive, test_cli_cast and test_cli_dequantize check too.
TEST(GpuCodec, DecodeEveryCodeMatchesCpu) {
  REQUIRE_GPU();
  size_t compared = 0;
  const std::vector<oracle::Fmt> table = oracle::all_formats();
  for (Format fmt : kElemFormats) {
    const FormatSpec f = spec_of(fmt);
    const size_t cb = hip::code_bytes(fmt), n = size_t(1) << f.bits;
    std::vector<uint8_t> codes(n * cb);
    for (size_t c = 0; c < n; ++c) std::memcpy(codes.data() + c * cb, &c, cb);
    std::vector<float> out(n);
    hip::decode_array(codes, fmt, out);
    const oracle::Fmt* of = nullptr;
    for (const auto& o : table)
      if (o.name == short_name(fmt)) of = &o;
    for (size_t c = 0; c < n; ++c) {
      ASSERT_EQ(f32_bits(out[c]), f32_bits(decode(f, uint32_t(c)))) << f.name << " code 0x" << std::hex << c;
      if (of) {
        ASSERT_EQ(f32_bits(out[c]), oracle::decoded_f32_bits(*of, uint32_t(c))) << f.name << " code 0x" << std::hex << c;
      }
    }
    compared += n;
  }
  std::printf("[gpu] decode: %zu codes compared bit for bit\n", compared);
}

TEST(GpuCodec, SizeMismatchIsAnError) {
  REQUIRE_GPU();
  const std::vector<float> x(10, 1.0f);
  std::vector<uint8_t> codes(19);
  hip::CodecParams p;
  p.format = Format::BF16;
  EXPECT_THROW(hip::encode_array(x, codes, p), std::invalid_argument);
}

// ---- rowwise MX quantize against emu::quantize ----------------------------

Tensor2f mx_input(size_t rows, size_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-40, 40);
  Tensor2f x = Tensor2f::from_shape({rows, cols});
  for (size_t r = 0; r < rows; ++r) {
    const float rs = pow2f(ex(rng));  // rows of very different magnitude
    for (size_t c = 0; c < cols; ++c) x(r, c) = nd(rng) * rs;
  }
  // Edge blocks (docs/numerics.md §2): all zero, NaN, Inf, subnormal amax,
  // values that clamp the scale at both ends.
  for (size_t c = 0; c < std::min<size_t>(32, cols); ++c) x(0, c) = 0.0f;
  if (rows > 1) x(1, 3) = NAN;
  if (rows > 2) x(2, cols - 1) = -INFINITY;
  if (rows > 3)
    for (size_t c = 0; c < std::min<size_t>(32, cols); ++c) x(3, c) = f32_from_bits(uint32_t(1 + c * 7));
  if (rows > 4) x(4, 0) = 3.0e38f;
  if (rows > 5) x(5, 1) = -1.0e-45f;
  return x;
}

TEST(GpuMxQuantize, RowwiseMatchesEmulator) {
  REQUIRE_GPU();
  const Format elems[] = {Format::E2M1, Format::E2M3, Format::E3M2, Format::E4M3,
                          Format::E5M2, Format::E4M3FNUZ, Format::E5M2FNUZ};
  const ScaleRule rules[] = {ScaleRule::Floor, ScaleRule::Rceil, ScaleRule::Even, ScaleRule::Ceil};
  const RoundMode modes[] = {RoundMode::RNE, RoundMode::RZ, RoundMode::Stochastic};
  struct Shape { size_t rows, cols; };
  const Shape shapes[] = {{64, 256}, {37, 200}, {33, 97}};  // ragged blocks; odd cols for E2M1 packing
  size_t cases = 0;
  for (const auto& sh : shapes) {
    const Tensor2f x = mx_input(sh.rows, sh.cols, uint32_t(sh.rows * 1000 + sh.cols));
    const std::vector<float> flat(x.begin(), x.end());
    for (Format e : elems)
      for (ScaleRule rule : rules)
        for (RoundMode m : modes)
          // SR index bases: 0, one the vector kernel cannot take (6), and a
          // multiple of 4 it can (4096), as grouped wgrad slices use them.
          for (uint64_t base : {uint64_t(0), uint64_t(6), uint64_t(4096)}) {
          if (base != 0 && m != RoundMode::Stochastic) continue;
          QuantSpec s;
          s.sr_index_base = base;
          s.elem = e;
          s.block_rows = 1;
          s.block_cols = 32;
          s.scale_kind = ScaleKind::E8M0;
          s.rule = rule;
          s.round = m;
          s.sr = PhiloxStream{0x9E3779B97F4A7C15ull, make_stream(3, 5)};
          const QuantizedTensor q = emu::quantize(x, s, Axis::Cols);
          std::vector<uint8_t> data, scales;
          hip::mx_quantize_rowwise(flat, sh.rows, sh.cols, s, data, scales);
          const std::vector<uint8_t> want_data(q.data.begin(), q.data.end());
          const std::vector<uint8_t> want_scales(q.scale_bytes.begin(), q.scale_bytes.end());
          ASSERT_EQ(scales, want_scales) << s.describe() << " " << sh.rows << "x" << sh.cols;
          ASSERT_EQ(data, want_data) << s.describe() << " " << sh.rows << "x" << sh.cols << " sr_base " << base;
          ++cases;
        }
  }
  std::printf("[gpu] mx rowwise: %zu (shape, format, rule, rounding, SR base) cases match emu::quantize bit for bit\n", cases);
}

// The one-add encoder the quantizers use (rounding.hpp encode_by_add) against
// encode() on the device, for every FP32 bit pattern but the NaNs: both ends
// of the E8M0 scale range (2^-127 is an FP32 subnormal), around 0, between.
TEST(GpuCodec, EncodeByAddMatchesEncodeOnEveryFp32) {
  REQUIRE_GPU();
  const Format fs[] = {Format::E2M1, Format::E2M3, Format::E3M2, Format::E4M3,
                       Format::E5M2, Format::E4M3FNUZ, Format::E5M2FNUZ, Format::FP16};
  size_t runs = 0;
  for (Format f : fs)
    for (RoundMode m : {RoundMode::RNE, RoundMode::RZ})
      for (int s : {-127, -1, 0, 1, 9, 127}) {
        EXPECT_EQ(hip::encode_by_add_mismatches(f, m, s), 0u)
            << spec_of(f).name << (m == RoundMode::RNE ? " RNE" : " RZ") << " scale_exp " << s;
        ++runs;
      }
  EXPECT_THROW(hip::encode_by_add_mismatches(Format::BF16, RoundMode::RNE, 0), std::invalid_argument);
  std::printf("[gpu] encode_by_add == encode on every non-NaN FP32 in %zu (format, mode, scale) runs\n", runs);
}

// BF16 sources (2 bytes per element) give the codes and scales of their exact
// FP32 widening: emu::quantize on the widened tensor, bit for bit.
TEST(GpuMxQuantize, RowwiseBf16SourceMatchesEmulator) {
  REQUIRE_GPU();
  const Format elems[] = {Format::E2M1, Format::E2M3, Format::E3M2, Format::E4M3,
                          Format::E5M2, Format::E4M3FNUZ, Format::E5M2FNUZ};
  struct Shape { size_t rows, cols; };
  const Shape shapes[] = {{64, 256}, {37, 200}, {5, 8}};  // a ragged last block, a single short block
  size_t cases = 0;
  for (const auto& sh : shapes) {
    const Tensor2f x32 = mx_input(sh.rows, sh.cols, uint32_t(sh.rows * 977 + sh.cols));
    Tensor2f x = x32;
    std::vector<uint16_t> bf(sh.rows * sh.cols);
    for (size_t i = 0; i < bf.size(); ++i) {  // BF16 by truncation: keeps NaN, Inf and the zero block
      bf[i] = uint16_t(f32_bits(x32.data()[i]) >> 16);
      x.data()[i] = f32_from_bits(uint32_t(bf[i]) << 16);
    }
    hip::DeviceBuffer dx(bf.size() * 2, "bf16 source");
    dx.upload(bf.data(), bf.size() * 2);
    for (Format e : elems)
      for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Rceil, ScaleRule::Even})
        for (RoundMode m : {RoundMode::RNE, RoundMode::RZ, RoundMode::Stochastic}) {
          QuantSpec s;
          s.elem = e;
          s.rule = rule;
          s.round = m;
          s.sr_index_base = m == RoundMode::Stochastic ? 4096 : 0;
          s.sr = PhiloxStream{0x51ED2701ull, make_stream(4, 1)};
          const QuantizedTensor q = emu::quantize(x, s, Axis::Cols);
          hip::DeviceBuffer dd(q.data.size(), "codes"), ds(q.scale_bytes.size(), "scales");
          hip::mx_quantize_rowwise_bf16_device(static_cast<const uint16_t*>(dx.get()), sh.rows, sh.cols, s,
                                               static_cast<uint8_t*>(dd.get()), static_cast<uint8_t*>(ds.get()));
          std::vector<uint8_t> data(q.data.size()), scales(q.scale_bytes.size());
          dd.download(data.data(), data.size());
          ds.download(scales.data(), scales.size());
          ASSERT_EQ(scales, std::vector<uint8_t>(q.scale_bytes.begin(), q.scale_bytes.end())) << s.describe();
          ASSERT_EQ(data, std::vector<uint8_t>(q.data.begin(), q.data.end())) << s.describe() << " " << sh.rows << "x"
                                                                              << sh.cols;
          ++cases;
        }
  }
  hip::DeviceBuffer small(64 * 2, "bf16 source");
  QuantSpec ok;
  hip::DeviceBuffer d(64, "codes"), sc(4, "scales");
  EXPECT_THROW(hip::mx_quantize_rowwise_bf16_device(static_cast<const uint16_t*>(small.get()), 2, 12, ok,
                                                    static_cast<uint8_t*>(d.get()), static_cast<uint8_t*>(sc.get())),
               std::invalid_argument);  // cols % 8 != 0
  std::printf("[gpu] mx rowwise from BF16: %zu cases match emu::quantize of the widened values\n", cases);
}

// Every BF16 value under every scale exponent the rules give, as rowwise
// blocks of [rows, 4096] (rows a multiple of 64): for each exponent field of
// the block amax (and amax mantissas 0 and all ones, where the rules part),
// blocks whose first element is that amax and whose others run through every
// BF16 pattern of magnitude <= amax, both signs, NaN excluded; then NaN, Inf
// and zero blocks.
std::vector<uint16_t> every_bf16_under_every_scale(size_t cols) {
  std::vector<uint16_t> bf;
  for (uint32_t ea = 0; ea <= 254; ++ea)
    for (uint32_t am : {0x00u, 0x7Fu}) {
      const uint32_t amax = ea << 7 | am;
      if (amax == 0) continue;
      size_t in_block = 0;
      for (uint32_t mag = 0; mag <= amax; ++mag)
        for (uint32_t sign : {0x0000u, 0x8000u}) {
          if (in_block == 0) {
            bf.push_back(uint16_t(amax | sign));
            in_block = 1;
          }
          bf.push_back(uint16_t(mag | sign));
          in_block = (in_block + 1) % 32;
        }
      while (in_block != 0) {  // close the block with zeros
        bf.push_back(0);
        in_block = (in_block + 1) % 32;
      }
    }
  for (uint16_t special : {uint16_t(0x7FC0), uint16_t(0xFF81), uint16_t(0x7F80), uint16_t(0xFF80)})
    for (int i = 0; i < 32; ++i) bf.push_back(i == 7 ? special : uint16_t(0x3F80 + i));
  bf.resize((bf.size() + 64 * cols - 1) / (64 * cols) * (64 * cols), 0);  // and zero blocks
  return bf;
}

Tensor2f widen(const std::vector<uint16_t>& bf, size_t rows, size_t cols) {
  Tensor2f x = Tensor2f::from_shape({rows, cols});
  for (size_t i = 0; i < bf.size(); ++i) x.data()[i] = f32_from_bits(uint32_t(bf[i]) << 16);
  return x;
}

// Number of differing bytes of a device buffer against the oracle's, and the first.
std::string diff_bytes(const hip::DeviceBuffer& d, const Bytes3& want_t) {
  const std::span<const uint8_t> want(want_t.data(), want_t.size());
  std::vector<uint8_t> got(want.size());
  d.download(got.data(), got.size());
  size_t bad = 0, first = SIZE_MAX;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      ++bad;
      first = std::min(first, i);
    }
  if (bad == 0) return "";
  char msg[160];
  std::snprintf(msg, sizeof msg, "%zu of %zu bytes differ, first at %zu (got 0x%02x, emu 0x%02x)", bad, got.size(),
                first, got[first], want[first]);
  return msg;
}

const Format kPackedElems[] = {Format::E2M1, Format::E2M3, Format::E3M2, Format::E4M3, Format::E5M2};
const ScaleRule kRules[] = {ScaleRule::Floor, ScaleRule::Rceil, ScaleRule::Even, ScaleRule::Ceil};

// On NVIDIA the rowwise case is the packed bf16x2 path (cols % 32 == 0, RNE);
// emu::quantize of the widened values is the oracle.
TEST(GpuMxQuantize, RowwiseBf16EveryValueUnderEveryScale) {
  REQUIRE_GPU();
  constexpr size_t kCols = 4096;
  const std::vector<uint16_t> bf = every_bf16_under_every_scale(kCols);
  const size_t rows = bf.size() / kCols;
  const Tensor2f x = widen(bf, rows, kCols);
  hip::DeviceBuffer dx(bf.size() * 2, "bf16 source");
  dx.upload(bf.data(), bf.size() * 2);
  size_t cases = 0;
  for (Format e : kPackedElems)
    for (ScaleRule rule : kRules) {
      QuantSpec s;
      s.elem = e;
      s.rule = rule;
      s.round = RoundMode::RNE;
      const QuantizedTensor q = emu::quantize(x, s, Axis::Cols);
      hip::DeviceBuffer dd(q.data.size(), "codes"), ds(q.scale_bytes.size(), "scales");
      hip::mx_quantize_rowwise_bf16_device(static_cast<const uint16_t*>(dx.get()), rows, kCols, s,
                                           static_cast<uint8_t*>(dd.get()), static_cast<uint8_t*>(ds.get()));
      EXPECT_EQ(diff_bytes(ds, q.scale_bytes), "") << s.describe() << " scales";
      EXPECT_EQ(diff_bytes(dd, q.data), "") << s.describe() << " codes";
      ++cases;
    }
  std::printf("[gpu] mx rowwise from BF16: every value under every scale, %zu elements, %zu (format, rule) cases\n",
              bf.size(), cases);
}

// The same values as columns: the transposed tensor [4096, rows], whose
// columnwise blocks are the rowwise blocks above; columnwise alone and both
// orientations from one read, against emu::quantize along each axis.
TEST(GpuMxQuantize, ColwiseAndBothBf16EveryValueUnderEveryScale) {
  REQUIRE_GPU();
  constexpr size_t kRows = 4096;
  const std::vector<uint16_t> src = every_bf16_under_every_scale(kRows);
  const size_t cols = src.size() / kRows;
  std::vector<uint16_t> bf(src.size());
  for (size_t r = 0; r < kRows; ++r)
    for (size_t c = 0; c < cols; ++c) bf[r * cols + c] = src[c * kRows + r];
  const Tensor2f x = widen(bf, kRows, cols);
  hip::DeviceBuffer dx(bf.size() * 2, "bf16 source");
  dx.upload(bf.data(), bf.size() * 2);
  size_t cases = 0;
  for (Format e : kPackedElems)
    for (ScaleRule rule : kRules) {
      QuantSpec s;
      s.elem = e;
      s.rule = rule;
      s.round = RoundMode::RNE;
      const QuantizedTensor qc = emu::quantize(x, s, Axis::Rows), qr = emu::quantize(x, s, Axis::Cols);
      hip::DeviceBuffer cd(qc.data.size(), "codes"), cs(qc.scale_bytes.size(), "scales");
      hip::DeviceBuffer rd(qr.data.size(), "codes"), rs(qr.scale_bytes.size(), "scales");
      const auto* px = static_cast<const uint16_t*>(dx.get());
      hip::mx_quantize_colwise_bf16_device(px, kRows, cols, s, static_cast<uint8_t*>(cd.get()),
                                           static_cast<uint8_t*>(cs.get()));
      EXPECT_EQ(diff_bytes(cs, qc.scale_bytes), "") << s.describe() << " colwise scales";
      EXPECT_EQ(diff_bytes(cd, qc.data), "") << s.describe() << " colwise codes";
      cd.fill(0xA5), cs.fill(0xA5);  // poison: both must write every byte again
      hip::mx_quantize_both_bf16_device(px, kRows, cols, s, static_cast<uint8_t*>(rd.get()),
                                        static_cast<uint8_t*>(rs.get()), static_cast<uint8_t*>(cd.get()),
                                        static_cast<uint8_t*>(cs.get()));
      EXPECT_EQ(diff_bytes(cs, qc.scale_bytes), "") << s.describe() << " both: colwise scales";
      EXPECT_EQ(diff_bytes(cd, qc.data), "") << s.describe() << " both: colwise codes";
      EXPECT_EQ(diff_bytes(rs, qr.scale_bytes), "") << s.describe() << " both: rowwise scales";
      EXPECT_EQ(diff_bytes(rd, qr.data), "") << s.describe() << " both: rowwise codes";
      ++cases;
    }
  std::printf("[gpu] mx colwise and both from BF16: every value under every scale, %zu elements, %zu cases\n",
              bf.size(), cases);
}

// Every format, rule and rounding mode on ragged shapes: a short last row
// block ending in its first 16 rows (37, 45) and in its second (57: the
// columnwise kernel's lower 16-row lane segment then holds 9 rows, an odd
// count of E2M1 nibbles), columns not a multiple of 32 or 64 (both then runs
// the two quantizers), a single short block.
TEST(GpuMxQuantize, ColwiseAndBothBf16SourceMatchEmulator) {
  REQUIRE_GPU();
  const Format elems[] = {Format::E2M1, Format::E2M3, Format::E3M2, Format::E4M3,
                          Format::E5M2, Format::E4M3FNUZ, Format::E5M2FNUZ};
  struct Shape { size_t rows, cols; };
  // 202 and 70 columns (not a multiple of 8): columnwise only, as both needs
  // cols % 8 == 0; 136: a last column group of 8 columns.
  const Shape shapes[] = {{64, 256}, {37, 200}, {96, 96}, {45, 160}, {57, 96}, {5, 8}, {37, 202}, {70, 70}, {300, 136}};
  size_t cases = 0;
  for (const auto& sh : shapes) {
    const Tensor2f x32 = mx_input(sh.rows, sh.cols, uint32_t(sh.rows * 131 + sh.cols));
    std::vector<uint16_t> bf(sh.rows * sh.cols);
    for (size_t i = 0; i < bf.size(); ++i) bf[i] = uint16_t(f32_bits(x32.data()[i]) >> 16);  // keeps NaN, Inf
    const Tensor2f x = widen(bf, sh.rows, sh.cols);
    hip::DeviceBuffer dx(bf.size() * 2, "bf16 source");
    dx.upload(bf.data(), bf.size() * 2);
    const auto* px = static_cast<const uint16_t*>(dx.get());
    for (Format e : elems)
      for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Rceil, ScaleRule::Even})
        for (RoundMode m : {RoundMode::RNE, RoundMode::RZ, RoundMode::Stochastic}) {
          QuantSpec s;
          s.elem = e;
          s.rule = rule;
          s.round = m;
          s.sr_index_base = m == RoundMode::Stochastic ? 4096 : 0;
          s.sr = PhiloxStream{0x51ED2702ull, make_stream(4, 2)};
          const QuantizedTensor qc = emu::quantize(x, s, Axis::Rows), qr = emu::quantize(x, s, Axis::Cols);
          hip::DeviceBuffer cd(qc.data.size(), "codes"), cs(qc.scale_bytes.size(), "scales");
          hip::DeviceBuffer rd(qr.data.size(), "codes"), rs(qr.scale_bytes.size(), "scales");
          hip::mx_quantize_colwise_bf16_device(px, sh.rows, sh.cols, s, static_cast<uint8_t*>(cd.get()),
                                               static_cast<uint8_t*>(cs.get()));
          const std::string at = s.describe() + " " + std::to_string(sh.rows) + "x" + std::to_string(sh.cols);
          ASSERT_EQ(diff_bytes(cs, qc.scale_bytes), "") << at << " colwise scales";
          ASSERT_EQ(diff_bytes(cd, qc.data), "") << at << " colwise codes";
          ++cases;
          if (sh.cols % 8 != 0) continue;  // both needs cols % 8 == 0 (codec.hpp)
          cd.fill(0xA5), cs.fill(0xA5);
          hip::mx_quantize_both_bf16_device(px, sh.rows, sh.cols, s, static_cast<uint8_t*>(rd.get()),
                                            static_cast<uint8_t*>(rs.get()), static_cast<uint8_t*>(cd.get()),
                                            static_cast<uint8_t*>(cs.get()));
          ASSERT_EQ(diff_bytes(cs, qc.scale_bytes), "") << at << " both: colwise scales";
          ASSERT_EQ(diff_bytes(cd, qc.data), "") << at << " both: colwise codes";
          ASSERT_EQ(diff_bytes(rs, qr.scale_bytes), "") << at << " both: rowwise scales";
          ASSERT_EQ(diff_bytes(rd, qr.data), "") << at << " both: rowwise codes";
        }
  }
  hip::DeviceBuffer odd(64 * 2, "bf16 source"), d(64, "codes"), sc(8, "scales");
  QuantSpec ok;
  EXPECT_THROW(hip::mx_quantize_colwise_bf16_device(static_cast<const uint16_t*>(odd.get()), 3, 7, ok,
                                                    static_cast<uint8_t*>(d.get()), static_cast<uint8_t*>(sc.get())),
               std::invalid_argument);  // odd column count
  std::printf("[gpu] mx colwise and both from BF16: %zu cases match emu::quantize of the widened values\n", cases);
}

TEST(GpuMxQuantize, RejectsSpecsItCannotTake) {
  REQUIRE_GPU();
  const std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> d, s;
  QuantSpec bad;
  bad.block_cols = 16;
  EXPECT_THROW(hip::mx_quantize_rowwise(x, 2, 32, bad, d, s), std::invalid_argument);
  QuantSpec bf;
  bf.elem = Format::BF16;
  EXPECT_THROW(hip::mx_quantize_rowwise(x, 2, 32, bf, d, s), std::invalid_argument);
  QuantSpec ok;
  EXPECT_THROW(hip::mx_quantize_rowwise(x, 3, 32, ok, d, s), std::invalid_argument);  // 64 values, 3x32 shape
}
#endif

}  // namespace
