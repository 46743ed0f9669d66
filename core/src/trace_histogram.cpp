// E8M0 scale-exponent histogram on Boost.Histogram (see mxsim/trace/histogram.hpp).
#include "mxsim/trace/histogram.hpp"

#include <stdexcept>
#include <string>

#include <boost/histogram.hpp>

namespace mxsim::trace {

namespace bh = boost::histogram;

namespace {
// Integer axis over exponents [-127, 128): 255 regular bins for -127..127; its overflow bin
// (index 255) is used for NaN (code 0xFF), fed as the value 128. No underflow bin.
using Axis = bh::axis::integer<int, bh::use_default, bh::axis::option::overflow_t>;
using Hist = decltype(bh::make_histogram_with(bh::dense_storage<uint64_t>(), Axis(-127, 128)));
}  // namespace

struct ScaleExpHistogram::Impl {
  Hist h = bh::make_histogram_with(bh::dense_storage<uint64_t>(), Axis(-127, 128));
};

ScaleExpHistogram::ScaleExpHistogram() : impl_(std::make_unique<Impl>()) {}
ScaleExpHistogram::~ScaleExpHistogram() = default;
ScaleExpHistogram::ScaleExpHistogram(const ScaleExpHistogram& o) : impl_(std::make_unique<Impl>(*o.impl_)) {}
ScaleExpHistogram& ScaleExpHistogram::operator=(const ScaleExpHistogram& o) {
  *impl_ = *o.impl_;
  return *this;
}

void ScaleExpHistogram::add_e8m0(uint8_t code) { impl_->h(int(code) - 127); }  // 0xFF -> 128 -> NaN bin
void ScaleExpHistogram::add_e8m0(const uint8_t* codes, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) add_e8m0(codes[i]);
}
void ScaleExpHistogram::add_exponent(int e) {
  if (e < kMinExp || e > kMaxExp)
    throw std::out_of_range("ScaleExpHistogram: exponent " + std::to_string(e) + " outside [-127, 127]");
  impl_->h(e);
}
void ScaleExpHistogram::add_nan() { impl_->h(128); }
void ScaleExpHistogram::reset() { impl_->h.reset(); }

uint64_t ScaleExpHistogram::total() const {
  uint64_t t = 0;
  for (auto c : counts()) t += c;
  return t;
}

std::array<uint64_t, ScaleExpHistogram::kBins> ScaleExpHistogram::counts() const {
  std::array<uint64_t, kBins> out{};
  for (int i = 0; i < 255; ++i) out[std::size_t(i)] = impl_->h.at(i);
  out[kNanBin] = impl_->h.at(255);  // overflow bin
  return out;
}

}  // namespace mxsim::trace
