// Fixed-bin histogram of E8M0 scale exponents, built on Boost.Histogram.
//
// Bins: unbiased exponent -127..127 (E8M0 codes 0..254, value 2^(code-127)) and one NaN bin
// (E8M0 code 0xFF), 256 bins in all; bin i <-> code i, so counts()[i] is the number of
// scales with E8M0 byte i (OCP MX spec v1.0, E8M0: bias 127, 0xFF = NaN). Stored in a trace
// as a uint64 series of per-step shape [256] (or [layers, 256]).
#pragma once
#include <array>
#include <cstdint>
#include <memory>

namespace mxsim::trace {

class ScaleExpHistogram {
 public:
  static constexpr int kBins = 256;
  static constexpr int kMinExp = -127;
  static constexpr int kMaxExp = 127;
  static constexpr int kNanBin = 255;

  ScaleExpHistogram();
  ~ScaleExpHistogram();
  ScaleExpHistogram(const ScaleExpHistogram&);
  ScaleExpHistogram& operator=(const ScaleExpHistogram&);

  void add_e8m0(uint8_t code);                    ///< one scale byte (0xFF counts as NaN)
  void add_e8m0(const uint8_t* codes, std::size_t n);
  /// Unbiased exponent in [-127, 127]; throws std::out_of_range otherwise.
  void add_exponent(int e);
  void add_nan();
  void reset();
  uint64_t total() const;

  /// counts()[code] for code 0..254 (exponent code-127), [255] = NaN.
  std::array<uint64_t, kBins> counts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mxsim::trace
