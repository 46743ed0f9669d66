// Tensor inputs and outputs shared by `mxsim quantize` and `mxsim dequantize`:
// several input files (.npy, .safetensors, a sharded checkpoint's
// *.index.json) read tensor by tensor at their header offsets, and the OUT argument resolved to a
// plan of final paths that never writes beside a non-folder and never
// replaces an input.
#pragma once
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common.hpp"
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

/// The memory a command may plan to hold, in bytes: MXSIM_MEMORY_LIMIT when
/// set (an integer of bytes, optionally with a binary suffix K, M, G or T:
/// "64G" = 64 GiB), else MemAvailable of /proc/meminfo, else no limit
/// (UINT64_MAX). `source` receives where the value came from, for messages.
/// Throws UsageError for a malformed MXSIM_MEMORY_LIMIT.
uint64_t memory_limit(std::string& source);
/// "8.0 GiB (8589934592 bytes)".
std::string bytes_str(uint64_t b);

/// One tensor of an input as its file's header gives it: name, dtype and
/// shape (header.bytes empty), and the file offset of its first data byte
/// (a .npy file's data end the file; a .safetensors tensor's start at
/// 8 + header length + data_offsets[0]). Data are little-endian, C order.
struct TensorRef {
  io::RawTensor header;
  uint64_t offset = 0;
};

/// Walk the inputs' headers in order and hand each tensor to `fn(file, ref)`
/// without reading any data. Tensors of unknown dtype are noted and skipped;
/// a tensor name seen in two inputs is an error naming both; a shard that
/// lacks a tensor its index places there is an error; tensors a shard holds
/// beyond its index are noted and skipped. `wanted`, when not empty, limits
/// the files opened to those that can hold a wanted name (for an index, its
/// shard) and the tensors handed over to those names.
void for_each_tensor_ref(const std::vector<InputFile>& inputs, const std::set<std::string>& wanted, Notes& notes,
                         const std::function<void(const InputFile&, const TensorRef&)>& fn);

/// The data of `ref` (from `in`), read whole: the header with its bytes.
/// IoError naming the file on a read error; "<file>: tensor '<name>': needs
/// N GiB of memory" when the bytes cannot be allocated.
io::RawTensor read_tensor(const InputFile& in, const TensorRef& ref);

/// for_each_tensor_ref, each tensor read whole (read_tensor) as it is handed
/// over and dropped after `fn` returns: peak memory is one tensor.
void for_each_tensor(const std::vector<InputFile>& inputs, const std::set<std::string>& wanted, Notes& notes,
                     const std::function<void(const InputFile&, io::RawTensor&&)>& fn);

/// Where the outputs of a command go (docs/cli.md "Output").
struct OutPlan {
  enum Kind { None, Discard, Safetensors, Folder, Prefix } kind = None;
  std::filesystem::path path;  ///< the OUT argument (folder / file / prefix without ".npy")
  /// Resolve `out` ("" = no -o). Throws UsageError for an existing OUT that is
  /// neither a folder, a .safetensors file nor /dev/null (a prefix would write
  /// files beside it), and for any other device, FIFO or socket. A command
  /// that writes no prefix output passes `no_prefix`, what it accepts instead
  /// ("a .safetensors file, a .npy file (one tensor) or a folder"): an OUT
  /// that would be a prefix is then a usage error suggesting only that.
  static OutPlan resolve(const std::string& out, const std::string& no_prefix = "");
  /// The stem of the files of tensor `name` (Folder / Prefix): folder/<stem>,
  /// the prefix itself when `single`, else prefix.<stem>, with the tensor name
  /// encoded by io::file_stem.
  std::filesystem::path stem_for(const std::string& name, bool single) const;
  bool writes() const { return kind == Safetensors || kind == Folder || kind == Prefix; }
};

/// Every file `files` stands for, for refuse_overwriting_input: each file,
/// and each *.index.json that named shards.
std::vector<InputPath> input_paths(const std::vector<InputFile>& files);

/// Register `final_path` with `outputs` after checking that it is none of the
/// files the command reads (refuse_overwriting_input: the same file, a link to
/// it, or a name that a prefix regenerates); throws std::runtime_error
/// "... is the input file ..." / "... is the --rand-file input file ..."; `out_option`
/// names the option of the output ("-o", "--decoded") in that message.
std::filesystem::path add_output(io::AtomicOutputs& outputs, const std::filesystem::path& final_path,
                                 const std::vector<InputPath>& inputs, const std::string& out_option = "-o");
std::filesystem::path add_output(io::AtomicOutputs& outputs, const std::filesystem::path& final_path,
                                 const std::vector<InputFile>& inputs, const std::string& out_option = "-o");

/// The name a .npy input's tensor gets: its file stem.
std::string npy_tensor_name(const std::filesystem::path& p);

}  // namespace mxsim::cli
