#include "mxsim/format.hpp"

#include <array>

namespace mxsim {
namespace {
constexpr std::array<const char*, kNumFormats> kShort = {"fp32", "bf16", "fp16", "e4m3", "e5m2", "e4m3fnuz",
                                                         "e5m2fnuz", "e3m2", "e2m3", "e2m1", "e8m0"};
}

const char* short_name(Format f) { return kShort[size_t(f)]; }

bool format_from_name(std::string_view name, Format& out) {
  for (int i = 0; i < kNumFormats; ++i) {
    const Format f = Format(i);
    if (name == kShort[size_t(i)] || name == spec_of(f).name) {
      out = f;
      return true;
    }
  }
  return false;
}

}  // namespace mxsim
