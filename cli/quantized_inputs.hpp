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
  /// mxsim | torchao (MXTensor) | torchao-nvfp4 | torchao-float8 (Float8Tensor) |
  /// torchao-float8-training (Float8TrainingTensor) | te-rowwise | te-columnwise (MXFP8Tensor) |
  /// te-nvfp4-rowwise | te-nvfp4-columnwise | te-blockwise-rowwise |
  /// te-blockwise-columnwise | te-tensor (Float8Tensor)
  std::string layout;
  std::string base;    ///< the common prefix of the input tensors
  std::string data;    ///< the codes tensor
  std::string scale;   ///< the scale tensor
  /// Companion tensors this job reads (tensor scale, amax); an empty name
  /// marks one the layout allows but the inputs lack.
  std::vector<std::string> extra;
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
/// each layout and, where several layouts share the suffixes, by the scale's
/// dtype and the companion tensors present (docs/cli.md "dequantize"):
/// torchao `.qdata` + `._scale_e4m3`, or + `.scale` that is F8_E4M3 or has a
/// `(_)per_tensor_scale` beside it, is NVFP4Tensor; + an F32 `.scale`
/// Float8Tensor; else MXTensor (E8M0 scales); `._data` + `._scale` is
/// Float8TrainingTensor (+ `._scale_inv`: TE Float8Tensor); TE `._rowwise_data` +
/// `._rowwise_scale_inv` is NVFP4Tensor when `._amax_rowwise` is present (or
/// the data is F4, or the scale F8_E4M3), Float8BlockwiseQTensor when the scale
/// is F32, else MXFP8Tensor (columnwise alike). `layout` is auto, mxsim,
/// torchao, te (each of these takes every layout of its family) or one layout
/// name, which takes that layout only (`torchao-float8` then reads a `.qdata` +
/// `.scale` pair as Float8Tensor whatever the scale's dtype, so a wrong dtype is
/// named by load_quantized). TE rowwise wins over columnwise under auto.
std::vector<QuantJob> find_quant_jobs(const QuantSources& all, const std::string& layout);

/// --layout: auto, mxsim, torchao, te or a layout name of QuantJob (UsageError otherwise).
std::string layout_option(const Parsed& p);

/// A note for every input tensor that no job reads (`only_base`: only those of
/// that base, for a command that picks one tensor among many), saying why:
/// the columnwise copy of a tensor whose rowwise copy is decoded, torchao's
/// activation scale, or not part of any pair. Nothing is dropped silently.
void note_unused_tensors(const QuantSources& all, const std::vector<QuantJob>& jobs, Notes& notes,
                         const std::string* only_base = nullptr);

/// The QuantizedTensor of one job and the shape its values take
/// (`out_shape`, e.g. torchao's [.., K] for packed [.., K/2] E2M1 bytes).
/// `elem` (--elem-dtype) names the element format of U8 codes; where the
/// codes' dtype or metadata (mxsim's elem_format) names one too, the two must
/// agree (std::runtime_error naming both and the metadata file otherwise).
/// Codes of a 6-bit format stored one per byte with bits above the width are
/// refused (layout::check_code_width, naming the tensor and file). `block` is torchao's block
/// size; `blocked_scales`: torchao's scale tensor is in the swizzled layout
/// of block-scaled GEMMs (layout::unswizzle_blocked_scales; any shape holding
/// the padded byte count). Throws std::invalid_argument (layout::from_* shape
/// checks), std::runtime_error for a missing tensor or metadata, UsageError
/// when U8 torchao codes need --elem-dtype.
/// --scale-layout plain | blocked (UsageError otherwise): whether torchao (MX,
/// NVFP4) or TE NVFP4 scales are swizzled; other layouts refuse blocked.
/// --block-scaling-dim 1 | 2 (TE Float8BlockwiseQTensor; 0 when not given:
/// taken from the scale_inv shape).
bool scale_layout_option(const Parsed& p);

int block_scaling_dim_option(const Parsed& p);
/// Whether --scale-layout blocked applies to the job's layout (torchao, TE NVFP4);
/// the other layouts ignore it, and a command whose inputs are all such refuses
/// it (check_scale_layout_used: UsageError naming the layouts), so the option is never a silent no-op.
bool takes_swizzled_scales(const QuantJob& j);
void check_scale_layout_used(bool blocked, const std::vector<std::string>& layouts);

/// Every scale tensor's dtype is checked against the layout's scale kind:
/// E8M0 scales are U8, I8 or F8_E8M0; UE4M3 (NVFP4) scales U8, I8 or F8_E4M3;
/// FP32 scale_inv F32; codes whose dtype names a format must agree with
/// --elem-dtype. std::runtime_error naming the tensor otherwise.
QuantizedTensor load_quantized(const QuantJob& j, const QuantSources& all, std::optional<Format> elem, int block,
                               std::vector<size_t>& out_shape, Notes& notes, bool blocked_scales = false,
                               int block_scaling_dim = 0);

}  // namespace mxsim::cli
