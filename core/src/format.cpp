#include "mxsim/format.hpp"

#include <array>

namespace mxsim {
namespace {
constexpr std::array<const char*, kNumFormats> kShort = {"fp32", "bf16", "fp16", "e4m3", "e5m2", "e4m3fnuz",
                                                         "e5m2fnuz", "e3m2", "e2m3", "e2m1", "e8m0"};
}

const char* short_name(Format f) { return kShort[size_t(f)]; }

bool format_from_name(std::string_view name, Format& out) {
  // PyTorch / torchao spellings: str(torch.float8_e4m3fn) is "torch.float8_e4m3fn";
  // torchao names its sub-byte element types "fp6_e2m3", "fp6_e3m2" and uses the
  // packed storage dtype float4_e2m1fn_x2 for FP4.
  if (name.substr(0, 6) == "torch.") name.remove_prefix(6);
  if (name == "float4_e2m1fn_x2" || name == "fp4_e2m1") return out = Format::E2M1, true;
  if (name == "fp6_e2m3") return out = Format::E2M3, true;
  if (name == "fp6_e3m2") return out = Format::E3M2, true;
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
