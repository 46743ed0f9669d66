// Tensor inputs and outputs shared by `mxsim quantize` and `mxsim dequantize`:
// several input files (.npy, .safetensors, a sharded checkpoint's
// *.index.json) read one file at a time, and the OUT argument resolved to a
// plan of final paths that never writes beside a non-folder and never
// replaces an input.
#pragma once
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "mxsim/io/atomic_output.hpp"
#include "mxsim/io/tensor_file.hpp"

namespace mxsim::cli {

/// A note for the user (stderr, "mxsim CMD: note: ..."), kept in order so
/// --json can list them too.
struct Notes {
  std::string command;
  std::vector<std::string> items;
  void add(const std::string& s);
};

/// Every input file, expanded: an *.index.json names its shards (each read
/// once); .npy and .safetensors files stand for themselves.
struct InputFile {
  std::filesystem::path path;
  bool npy = false;
  /// From an index: the tensors the index places in this shard (empty: every tensor).
  std::vector<std::string> from_index;
  std::filesystem::path index;  ///< the index that named it, or empty
};
std::vector<InputFile> expand_inputs(const std::vector<std::string>& args);

/// Read each input in turn and hand its tensors to `fn(file, tensor)`, then
/// drop them (so peak memory is one file). Tensors of unknown dtype are noted
/// and skipped; a tensor name seen in two inputs is an error naming both; a
/// shard that lacks a tensor its index places there is an error; tensors a
/// shard holds beyond its index are noted and skipped. `wanted`, when not
/// empty, limits the files read to those that can hold a wanted name (for an
/// index, its shard) and the tensors handed over to those names.
/// The memory a command may plan to hold, in bytes: MXSIM_MEMORY_LIMIT when
/// set (an integer of bytes, optionally with a binary suffix K, M, G or T:
/// "64G" = 64 GiB), else MemAvailable of /proc/meminfo, else no limit
/// (UINT64_MAX). `source` receives where the value came from, for messages.
/// Throws UsageError for a malformed MXSIM_MEMORY_LIMIT.
uint64_t memory_limit(std::string& source);
/// "8.0 GiB (8589934592 bytes)".
std::string bytes_str(uint64_t b);

/// `takes_npy`, when given, is called for each .npy input handed over (after
/// the duplicate check of its tensor name): returning true means it handled
/// the file itself (streamed it); false, the file is read and given to fn.
void for_each_tensor(const std::vector<InputFile>& inputs, const std::set<std::string>& wanted, Notes& notes,
                     const std::function<void(const InputFile&, io::RawTensor&&)>& fn,
                     const std::function<bool(const InputFile&)>& takes_npy = {});

/// Where the outputs of a command go (docs/cli.md "Output").
struct OutPlan {
  enum Kind { None, Discard, Safetensors, Folder, Prefix } kind = None;
  std::filesystem::path path;  ///< the OUT argument (folder / file / prefix without ".npy")
  /// Resolve `out` ("" = no -o). Throws UsageError for an existing OUT that is
  /// neither a folder, a .safetensors file nor /dev/null (a prefix would write
  /// files beside it), and for any other device, FIFO or socket.
  static OutPlan resolve(const std::string& out);
  /// The stem of the files of tensor `name` (Folder / Prefix): folder/<stem>,
  /// the prefix itself when `single`, else prefix.<stem>, with the tensor name
  /// encoded by io::file_stem.
  std::filesystem::path stem_for(const std::string& name, bool single) const;
  bool writes() const { return kind == Safetensors || kind == Folder || kind == Prefix; }
};

/// Register `final_path` with `outputs` after checking that it is none of the
/// input files (the same file, a link to it, or a name that a prefix
/// regenerates); throws std::runtime_error "... is the input file ...".
std::filesystem::path add_output(io::AtomicOutputs& outputs, const std::filesystem::path& final_path,
                                 const std::vector<InputFile>& inputs);

/// The name a .npy input's tensor gets: its file stem.
std::string npy_tensor_name(const std::filesystem::path& p);

}  // namespace mxsim::cli
