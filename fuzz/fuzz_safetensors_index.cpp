// libFuzzer harness: the sharded-checkpoint index parser (io::read_safetensors_index, the
// "*.index.json" that `mxsim quantize` and `mxsim dequantize` take). Any exception but IoError,
// any sanitizer report, or an accepted index that breaks its documented guarantees (every
// shard a relative path inside the index's folder, listed once; every tensor named once and
// placed in a listed shard) is a finding.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <set>

#include "fuzz_util.hpp"
#include "mxsim/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  using namespace mxsim::io;
  const auto file = mxsim::fuzz::input_file("model.safetensors.index.json", data, size);
  SafetensorsIndex ix;
  try {
    ix = read_safetensors_index(file);
  } catch (const IoError&) {
    return 0;
  }
  const auto dir = file.parent_path();
  std::set<std::string> names;
  for (const auto& [name, shard] : ix.weight_map) {
    if (!names.insert(name).second) std::abort();
    const std::filesystem::path sp(shard);
    if (shard.empty() || sp.is_absolute()) std::abort();
    for (const auto& part : sp)
      if (part == "..") std::abort();
    if (std::find(ix.shards.begin(), ix.shards.end(), dir / sp) == ix.shards.end()) std::abort();
  }
  for (std::size_t i = 0; i < ix.shards.size(); ++i) {
    if (std::count(ix.shards.begin(), ix.shards.end(), ix.shards[i]) != 1) std::abort();
    const auto rel = ix.shards[i].lexically_relative(dir);
    if (rel.empty() || *rel.begin() == "..") std::abort();
    (void)ix.tensors_in(ix.shards[i]);
  }
  return 0;
}
