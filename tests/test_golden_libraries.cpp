// encode() against what ml_dtypes and PyTorch actually produce.
//
// tests/golden/*.bin.gz were written by scripts/gpu-golden-libraries.py on the
// device machine (ml_dtypes 0.6.0, numpy 2.5.2, torch 2.11 CPU and CUDA on an
// H200; versions in tests/golden/MANIFEST.txt): every BF16 and every FP16 bit
// pattern widened exactly to FP32 (131072 inputs, BF16 first), converted by
// the library to each format. These are the libraries' published behaviour,
// recorded once; mxsim's encode (RNE, IEEE overflow policy: the conversion
// semantics of both libraries) must agree bit for bit on every input except
// the conventions listed here, each checked exactly rather than skipped (for NaN
// inputs: the library's NaN-ness and mxsim's canonical code, both).
#include <gtest/gtest.h>

#include <boost/iostreams/filter/gzip.hpp>
#include <boost/iostreams/filtering_stream.hpp>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "mxsim/rounding.hpp"

using namespace mxsim;

namespace {

std::vector<uint32_t> inputs() {
  std::vector<uint32_t> x(131072);
  for (uint32_t i = 0; i < 65536; ++i) x[i] = i << 16;                                   // BF16 -> FP32
  for (uint32_t i = 0; i < 65536; ++i) x[65536 + i] = f32_bits(decode(Format::FP16, i));  // FP16 -> FP32
  return x;
}

std::vector<uint32_t> load(const std::string& name, int bytes) {
  const std::string path = std::string(MXSIM_SOURCE_DIR) + "/tests/golden/" + name + ".bin.gz";
  std::ifstream f(path, std::ios::binary);
  if (!f) ADD_FAILURE() << "missing golden file " << path;
  boost::iostreams::filtering_istream in;
  in.push(boost::iostreams::gzip_decompressor());
  in.push(f);
  const std::vector<uint8_t> raw((std::istreambuf_iterator<char>(in)), {});
  std::vector<uint32_t> codes(raw.size() / size_t(bytes));
  for (size_t i = 0; i < codes.size(); ++i)
    codes[i] = bytes == 2 ? uint32_t(raw[2 * i]) | (uint32_t(raw[2 * i + 1]) << 8) : raw[i];
  return codes;
}

enum class Lib { MlDtypes, Torch };

// mxsim's code for a NaN input, from the table of docs/numerics.md §2.3 (not from format.hpp):
// a quiet NaN with the input's sign where the format has IEEE NaNs, S.1111.111 for E4M3, the
// single 0x80 of the FNUZ formats, +max where no NaN exists, 0xFF for E8M0.
uint32_t canonical_nan(Format fmt, bool neg) {
  switch (fmt) {
    case Format::BF16: return neg ? 0xFFC0u : 0x7FC0u;
    case Format::FP16: return neg ? 0xFE00u : 0x7E00u;
    case Format::E5M2: return neg ? 0xFEu : 0x7Eu;
    case Format::E4M3: return neg ? 0xFFu : 0x7Fu;
    case Format::E4M3FNUZ: case Format::E5M2FNUZ: return 0x80u;
    case Format::E2M1: return 0x7u;
    case Format::E2M3: case Format::E3M2: return 0x1Fu;
    case Format::E8M0: return 0xFFu;
    default: ADD_FAILURE() << "no canonical NaN listed"; return 0;
  }
}

// Compare one table; return the number of inputs on which a listed convention applied.
size_t check(const std::string& name, Format fmt, Lib lib) {
  const FormatSpec f = spec_of(fmt);
  const auto x = inputs();
  const auto got = load(name, f.bits > 8 ? 2 : 1);
  EXPECT_EQ(got.size(), x.size()) << name;
  if (got.size() != x.size()) return 0;
  size_t conventions = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t ours = encode(f, x[i], 0, RoundMode::RNE, Overflow::Ieee);
    const float v = f32_from_bits(x[i]);
    if (std::isnan(v)) {
      // NaN encodings differ between libraries (payload, sign, canonical
      // pattern); formats without NaN: ml_dtypes writes a zero code (+0 or
      // -0, e.g. E2M1 0x8), mxsim writes +max like PTX satfinite.
      ++conventions;
      EXPECT_EQ(ours, canonical_nan(fmt, x[i] >> 31)) << name << " NaN input " << std::hex << x[i];
      if (f.nan == NanKind::None)
        EXPECT_EQ(got[i] & ~f.sign_bit(), 0u) << name << " NaN input " << std::hex << x[i];
      else
        EXPECT_TRUE(is_nan_code(f, got[i])) << name << " NaN input " << std::hex << x[i] << " gave " << got[i];
      continue;
    }
    if (fmt == Format::E8M0) {
      if (v == 0.0f && lib == Lib::MlDtypes) {  // ml_dtypes: 0 -> NaN; mxsim: 0x00 (no zero code)
        ++conventions;
        EXPECT_EQ(got[i], 0xFFu) << name;
        EXPECT_EQ(ours, 0x00u) << name;
        continue;
      }
      if (v < 0.0f && lib == Lib::Torch) {  // PyTorch drops the sign; mxsim (as ml_dtypes) gives NaN
        ++conventions;
        const float a = -v;  // the subnormal quirk below applies to |x| too
        const uint32_t want = (a > 0x1p-127f && a < 0x1.8p-127f)
                                  ? 0x01u
                                  : encode(f, x[i] & 0x7FFFFFFFu, 0, RoundMode::RNE, Overflow::Ieee);
        EXPECT_EQ(got[i], want) << name << " x=" << std::hexfloat << v;
        EXPECT_EQ(ours, 0xFFu) << name;
        continue;
      }
      if (v > 0x1p-127f && v < 0x1.8p-127f) {
        // FP32 subnormals just above 2^-127: both libraries round the stored
        // mantissa up to 2^-126; the nearest E8M0 value is 2^-127.
        ++conventions;
        EXPECT_EQ(got[i], 0x01u) << name << " x=" << std::hexfloat << v;
        EXPECT_EQ(ours, 0x00u) << name << " x=" << std::hexfloat << v;
        continue;
      }
    }
    if (got[i] != ours) {
      ADD_FAILURE() << name << ": input 0x" << std::hex << x[i] << " (" << std::hexfloat << v << ") library 0x"
                    << got[i] << ", mxsim 0x" << ours;
      return conventions;
    }
  }
  return conventions;
}

}  // namespace

TEST(GoldenLibraries, MlDtypesEveryBf16AndFp16Pattern) {
  EXPECT_EQ(check("ml_dtypes_e4m3", Format::E4M3, Lib::MlDtypes), 2300u);
  EXPECT_EQ(check("ml_dtypes_e5m2", Format::E5M2, Lib::MlDtypes), 2300u);
  EXPECT_EQ(check("ml_dtypes_e4m3fnuz", Format::E4M3FNUZ, Lib::MlDtypes), 2300u);
  EXPECT_EQ(check("ml_dtypes_e5m2fnuz", Format::E5M2FNUZ, Lib::MlDtypes), 2300u);
  EXPECT_EQ(check("ml_dtypes_e3m2", Format::E3M2, Lib::MlDtypes), 2300u);
  EXPECT_EQ(check("ml_dtypes_e2m3", Format::E2M3, Lib::MlDtypes), 2300u);
  EXPECT_EQ(check("ml_dtypes_e2m1", Format::E2M1, Lib::MlDtypes), 2300u);
  EXPECT_EQ(check("ml_dtypes_bf16", Format::BF16, Lib::MlDtypes), 2300u);
  // 2300 NaN inputs, 4 zeros, 31 subnormals in (2^-127, 1.5 * 2^-127).
  EXPECT_EQ(check("ml_dtypes_e8m0", Format::E8M0, Lib::MlDtypes), 2300u + 4u + 31u);
}

TEST(GoldenLibraries, TorchCpuAndCudaEveryBf16AndFp16Pattern) {
  for (const char* dev : {"torch_cpu_", "torch_cuda_"}) {
    const std::string d = dev;
    EXPECT_EQ(check(d + "e4m3", Format::E4M3, Lib::Torch), 2300u);
    EXPECT_EQ(check(d + "e5m2", Format::E5M2, Lib::Torch), 2300u);
    EXPECT_EQ(check(d + "e4m3fnuz", Format::E4M3FNUZ, Lib::Torch), 2300u);
    EXPECT_EQ(check(d + "e5m2fnuz", Format::E5M2FNUZ, Lib::Torch), 2300u);
    EXPECT_EQ(check(d + "bf16", Format::BF16, Lib::Torch), 2300u);
    EXPECT_EQ(check(d + "fp16", Format::FP16, Lib::Torch), 2300u);
    // NaN inputs, the 32640 (BF16) + 31744 (FP16) negative non-zero non-NaN
    // inputs (sign dropped), 31 subnormals just above 2^-127.
    EXPECT_EQ(check(d + "e8m0", Format::E8M0, Lib::Torch), 2300u + 64384u + 31u);
  }
}
