// libFuzzer harness: the simulator's TOML config and its --set overrides (sim/config.hpp), and
// the TOML nesting bound they are parsed behind (io/toml_nesting.hpp). Input: the config text,
// optionally followed by a line "#--set" and one override per line. Any exception but the
// documented std::invalid_argument / IoError, or any sanitizer report, is a finding; so is an
// accepted config whose canonical text (to_toml) does not parse back to the same text.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mxsim/io/tensor_file.hpp"
#include "mxsim/io/toml_nesting.hpp"
#include "mxsim/sim/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  std::string text = in;
  std::vector<std::string> sets;
  if (const auto at = in.find("\n#--set\n"); at != std::string::npos) {
    text = in.substr(0, at);
    std::string_view rest = std::string_view(in).substr(at + 8);
    while (!rest.empty()) {
      const auto nl = rest.find('\n');
      sets.emplace_back(rest.substr(0, nl));
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    }
  }
  std::string printed;
  try {
    // The bound every TOML text passes before toml++ sees it (the config parser's own call is
    // made here until core/src/sim_config.cpp makes it itself).
    mxsim::io::check_toml_nesting(text, "fuzz.toml");
    for (const auto& s : sets) mxsim::io::check_toml_nesting(s, "--set");
    const auto c = mxsim::sim::parse_config(text, sets, "fuzz.toml");
    printed = mxsim::sim::to_toml(c);
  } catch (const std::invalid_argument&) {
    return 0;
  } catch (const mxsim::io::IoError&) {
    return 0;
  }
  // The canonical text of any accepted config parses back to the same config (strings escaped
  // by toml++'s writer, numbers exact): a refusal or a different text is a finding.
  try {
    if (mxsim::sim::to_toml(mxsim::sim::parse_config(printed, {}, "printed")) != printed) __builtin_trap();
  } catch (const std::exception&) {
    __builtin_trap();
  }
  return 0;
}
