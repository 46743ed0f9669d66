// Quantized tensors read from files (codes + scales as mxsim, torchao or
// TransformerEngine store them, mxsim/layouts.hpp): the one reader behind
// `mxsim dequantize` and `mxsim gemm --a/--b` (docs/cli.md "dequantize").
#pragma once
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mxsim/format.hpp"
#include "mxsim/io/tensor_file.hpp"
#include "mxsim/quantized_tensor.hpp"
#include "common.hpp"
#include "tensor_io.hpp"

namespace mxsim::cli {

/// A tensor of an input, with the metadata that came with it.
struct QuantSource {
  io::RawTensor t;
  std::filesystem::path file;
  std::map<std::string, std::string> meta;  ///< keys without the "<base>." prefix (mxsim layout)
};
using QuantSources = std::map<std::string, QuantSource>;

/// One codes + scales pair found among the inputs.
struct QuantJob {
  std::string name;    ///< output tensor name
  std::string layout;  ///< mxsim | torchao | te-rowwise | te-columnwise | te-tensor
  std::string base;    ///< the common prefix of the input tensors
};

/// Element format from a name (mxsim::format_from_name: mxsim, PyTorch and
/// torchao spellings); UsageError naming --elem-dtype otherwise.
Format elem_from_name(const std::string& n);

/// Reads every input (files as `expand_inputs` takes them, recorded in
/// `files`); .npy files named "<stem>.data.npy" pick up their scales and
/// "<stem>.meta.json" beside them; a "<stem>.meta.json" input stands for its
/// .npy files. Throws std::runtime_error / io::IoError naming the file.
QuantSources read_quant_inputs(const std::vector<std::string>& args, Notes& notes, std::vector<InputFile>& files);

/// The codes + scales pairs the inputs hold, by the tensor-name suffixes of
/// each layout; `layout` is auto, mxsim, torchao or te (a prefix of the
/// layout names). TE rowwise wins over columnwise under auto.
std::vector<QuantJob> find_quant_jobs(const QuantSources& all, const std::string& layout);

/// The QuantizedTensor of one job and the shape its values take
/// (`out_shape`, e.g. torchao's [.., K] for packed [.., K/2] E2M1 bytes).
/// `elem` overrides the element format of U8 codes; `block` is torchao's block
/// size; `blocked_scales`: torchao's scale tensor is in the swizzled layout
/// of block-scaled GEMMs (layout::unswizzle_blocked_scales; any shape holding
/// the padded byte count). Throws std::invalid_argument (layout::from_* shape
/// checks), std::runtime_error for a missing tensor or metadata, UsageError
/// when U8 torchao codes need --elem-dtype.
/// --scale-layout plain | blocked (UsageError otherwise): whether torchao scales are swizzled.
bool scale_layout_option(const Parsed& p);

QuantizedTensor load_quantized(const QuantJob& j, const QuantSources& all, std::optional<Format> elem, int block,
                               std::vector<size_t>& out_shape, Notes& notes, bool blocked_scales = false);

}  // namespace mxsim::cli
