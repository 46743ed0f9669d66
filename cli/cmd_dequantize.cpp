// mxsim dequantize: codes + scales (as mxsim, torchao or TransformerEngine
// store them, mxsim/layouts.hpp) back to FP32 or BF16 with the one
// dequantizer (emu::dequantize3), written as .npy or .safetensors. The reader
// of the inputs is quantized_inputs.hpp (shared with `mxsim gemm --a/--b`).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "commands.hpp"
#include "common.hpp"
#include "mxsim/build_info.hpp"
#include "mxsim/emu/quantize.hpp"
#include "mxsim/io/atomic_output.hpp"
#include "mxsim/io/npy.hpp"
#include "mxsim/io/safetensors.hpp"
#include "mxsim/layouts.hpp"
#include "mxsim/rounding.hpp"
#include "quantized_inputs.hpp"
#include "tensor_io.hpp"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace mxsim::cli {
namespace {

/// What the command line asks for.
struct Request {
  OutputFormat outfmt;
  std::string layout;
  std::optional<Format> elem;
  int block = 32;
  bool blocked = false;
  int block_dim = 0;
  std::string dt;       ///< fp32 | bf16
  std::string out_arg;  ///< -o as given ("" = none)
  bool to_npy = false;
  OutPlan plan;
};

/// One decoded tensor and its summary.
struct Out {
  QuantJob job;
  io::RawTensor t;
  size_t nan = 0, inf = 0;
  double amax = 0;
  Format elem;
};

const CommandHelp& help() {
  static const CommandHelp h{
      "dequantize", "IN... [-o OUT] [--layout L] [--elem-dtype F] [--block-size N] [--dtype fp32|bf16]",
      "Decodes codes + scales back to FP32 (or BF16) with the one dequantizer (emu::dequantize3):\n"
      "code * 2^(byte-127) for E8M0 scales, fl32(code * scale_inv) for FP32 scales, fl32(code / scale)\n"
      "for torchao Float8TrainingTensor, NVFP4 in two steps.\n"
      "IN: .safetensors or .npy files (or an mxsim <stem>.meta.json), whose tensors pair by name:",
      "  mxsim    <name>.data + <name>.scale | .scale_inv [+ .tensor_scale_inv], with the metadata\n"
      "           `mxsim quantize` writes (safetensors __metadata__ or <stem>.meta.json)\n"
      "  torchao  <name>.qdata + <name>.scale (MXTensor, E8M0 scale; blocks along the last axis, --block-size)\n"
      "  torchao  <name>.qdata + <name>._scale_e4m3 (or an F8_E4M3 .scale) [+ ._per_tensor_scale]\n"
      "           (NVFP4Tensor; blocks of 16)\n"
      "  torchao  <name>.qdata + an F32 <name>.scale (Float8Tensor: per tensor, per row or blockwise, the\n"
      "           blocks from the two shapes; fl32(code * scale))\n"
      "  torchao  <name>._data + <name>._scale (Float8TrainingTensor: tensorwise or axiswise;\n"
      "           fl32(code / _scale))\n"
      "  te       <name>._rowwise_data + ._rowwise_scale_inv, ._columnwise_data + ._columnwise_scale_inv\n"
      "           (MXFP8Tensor, padded E8M0 scales; NVFP4Tensor with ._amax_rowwise / ._amax_columnwise,\n"
      "           padded E4M3 scales; Float8BlockwiseQTensor, F32 scale_inv) or ._data + ._scale_inv (Float8Tensor)\n"
      "Element formats come from the dtype (F8_E4M3, F8_E5M2, F4) or --elem-dtype. Scale dtypes are checked\n"
      "against the layout; input tensors no pair reads are listed in a note.",
      ""};
  return h;
}

void add_options(po::options_description& opts) {
  opts.add_options()("help,h", "this help")
      ("output,o", po::value<std::string>(), "OUT: .safetensors, .npy (one tensor) or a folder; none: statistics only")
      ("layout", po::value<std::string>()->default_value("auto"),
       "auto | mxsim | torchao | te (by tensor-name suffixes), or one layout: torchao-nvfp4, torchao-float8, "
       "torchao-float8-training, te-rowwise, te-columnwise, te-nvfp4-rowwise, te-nvfp4-columnwise, "
       "te-blockwise-rowwise, te-blockwise-columnwise, te-tensor")
      ("elem-dtype", po::value<std::string>(), "element format of U8 codes (torchao names: float8_e4m3fn, float8_e5m2, "
       "fp6_e2m3, fp6_e3m2, float4_e2m1fn_x2; or e4m3, ...)")
      ("block-size", po::value<std::string>(), "torchao block size along the last axis, 1 to 65536 (default 32)")
      ("scale-layout", po::value<std::string>()->default_value("plain"),
       "torchao scales: plain [.., ceil(K/block)] | blocked (the swizzled 128 x 4 tiles of cuBLAS / CUTLASS "
       "block-scaled GEMMs, torchao to_blocked; padding never read); also torchao and TE NVFP4 scales")
      ("block-scaling-dim", po::value<std::string>(),
       "TE Float8BlockwiseQTensor: 1 (1 x 128 blocks) | 2 (128 x 128 tiles); default: from the scale_inv shape")
      ("dtype", po::value<std::string>()->default_value("fp32"), "output dtype: fp32 | bf16 (one RNE rounding)")
      ("tensor", po::value<std::vector<std::string>>(), "only this output tensor (repeatable)");
  add_format_options(opts, true, "the summary");
}

Request parse_request(const Parsed& p) {
  const OutputFormat outfmt = output_format(p, true);
  if (p.positional.empty()) throw UsageError("an input file is required");
  const std::string layout = layout_option(p);
  std::optional<Format> elem;
  if (p.has("elem-dtype")) elem = elem_from_name(p.str("elem-dtype"));
  const int block = int(int_option(p, "block-size", 1, 65536, 32));
  const bool blocked = scale_layout_option(p);
  const int block_dim = block_scaling_dim_option(p);
  const std::string dt = p.str("dtype");
  if (dt != "fp32" && dt != "bf16") throw UsageError("--dtype must be fp32 or bf16, not '" + dt + "'");
  if (p.has("output") && p.str("output").empty()) throw UsageError("-o OUT is empty");
  const std::string out_arg = p.has("output") ? p.str("output") : "";
  const bool to_npy = !out_arg.empty() && fs::path(out_arg).extension() == ".npy";
  OutPlan plan;
  if (!to_npy) plan = OutPlan::resolve(out_arg, "a .safetensors file, a .npy file (one tensor) or a folder");

  return Request{outfmt, layout, elem, block, blocked, block_dim, dt, out_arg, to_npy, plan};
}

/// The pairs to decode: found by the layout, narrowed to --tensor, checked against --scale-layout
/// and the output.
std::vector<QuantJob> select_jobs(const Request& rq, const Parsed& p, const std::map<std::string, QuantSource>& all,
                                  Notes& notes) {
  const std::string& layout = rq.layout;
  std::vector<QuantJob> jobs = find_quant_jobs(all, layout);
  note_unused_tensors(all, jobs, notes);
  if (p.has("tensor")) {
    const auto want = p.vm["tensor"].as<std::vector<std::string>>();
    std::vector<QuantJob> kept;
    for (const auto& w : want) {
      const auto it = std::find_if(jobs.begin(), jobs.end(), [&](const QuantJob& j) { return j.name == w; });
      if (it == jobs.end()) throw std::runtime_error("no quantized tensor '" + w + "' in the inputs");
      kept.push_back(*it);
    }
    jobs = kept;
  }
  if (jobs.empty()) {
    std::string names;
    for (const auto& [n, s] : all) names += (names.empty() ? "" : ", ") + n;
    throw std::runtime_error("no codes + scales pair found (" + std::string(layout == "auto" ? "any layout" : layout) +
                             ") among the tensors: " + (names.empty() ? "none" : names));
  }
  {
    std::vector<std::string> lays;
    for (const auto& j : jobs) lays.push_back(j.layout);
    check_scale_layout_used(rq.blocked, lays);
  }
  if (rq.to_npy && jobs.size() > 1)
    throw UsageError("-o " + rq.out_arg + ": a .npy holds one tensor; the inputs hold " + std::to_string(jobs.size()) +
                     " (name a .safetensors file or a folder)");

  return jobs;
}

/// Every pair decoded by the one dequantizer, in the output dtype, with its NaN / Inf / amax.
std::vector<Out> decode_all(const Request& rq, const std::vector<QuantJob>& jobs,
                            const std::map<std::string, QuantSource>& all, Notes& notes) {
  std::vector<Out> outs;
  for (const auto& j : jobs) {
    std::vector<size_t> shape;
    QuantizedTensor q;
    try {
      q = load_quantized(j, all, rq.elem, rq.block, shape, notes, rq.blocked, rq.block_dim);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error("tensor '" + j.name + "' (" + j.layout + " layout): " + e.what());
    }
    const Tensor3f v = emu::dequantize3(q);
    if (io::numel_of(shape) != v.size())
      throw std::runtime_error("tensor '" + j.name + "': shape " + io::shape_str(shape) + " does not hold the " +
                               std::to_string(v.size()) + " decoded values");
    Out o{j, {}, 0, 0, 0, q.spec.elem};
    for (float x : v) {
      if (std::isnan(x)) ++o.nan;
      else if (std::isinf(x)) ++o.inf;
      else o.amax = std::max(o.amax, double(std::fabs(x)));
    }
    if (rq.dt == "fp32") {
      o.t = io::from_f32(j.name, shape, v.data());
    } else {
      o.t = io::RawTensor{j.name, io::DType::BF16, shape, {}};
      o.t.bytes.resize(v.size() * 2);
      for (size_t i = 0; i < v.size(); ++i) {
        const uint32_t c = round_bf16_code(f32_bits(v.data()[i]));
        o.t.bytes[2 * i] = uint8_t(c);
        o.t.bytes[2 * i + 1] = uint8_t(c >> 8);
      }
    }
    outs.push_back(std::move(o));
  }

  return outs;
}

/// Every output committed together; the files written.
std::vector<fs::path> write_outputs(const Request& rq, const std::vector<Out>& outs, const std::vector<InputFile>& files,
                                    Notes& notes) {
  const OutPlan& plan = rq.plan;
  io::AtomicOutputs outputs;
  auto add = [&](const fs::path& f) { return add_output(outputs, f, files); };
  if (rq.to_npy) {
    io::write_npy(add(rq.out_arg), outs[0].t);
  } else if (plan.kind == OutPlan::Safetensors) {
    std::vector<io::RawTensor> ts;
    for (const auto& o : outs) ts.push_back(o.t);
    io::write_safetensors(add(plan.path), ts,
                          {{"format", "mxsim.dequantized"}, {"mxsim_version", mxsim::version()}, {"mxsim_commit", mxsim::build_commit()}},
                          plan.path.string());
  } else if (plan.kind == OutPlan::Folder) {
    for (const auto& o : outs) io::write_npy(add(plan.path / (io::file_stem(o.job.name) + ".npy")), o.t);
  }
  outputs.commit();
  if (plan.kind == OutPlan::Discard) notes.add("-o " + rq.out_arg + ": nothing written (statistics only)");

  return outputs.finals();
}

void report(const Request& rq, const std::vector<Out>& outs, const std::vector<fs::path>& written, const Notes& notes) {
  const OutputFormat outfmt = rq.outfmt;
  const std::string& dt = rq.dt;
  if (outfmt == OutputFormat::Json) {
    json j;
    j["command"] = "dequantize";
    j["dtype"] = dt;
    j["outputs"] = json::array();
    for (const auto& f : written) j["outputs"].push_back(f.string());
    j["notes"] = notes.items;
    j["tensors"] = json::array();
    for (const auto& o : outs)
      j["tensors"].push_back({{"name", o.job.name}, {"layout", o.job.layout}, {"elem", short_name(o.elem)},
                              {"shape", o.t.shape}, {"amax", json_number(o.amax)}, {"nan", o.nan}, {"inf", o.inf}});
    print_json(j);
    return;
  }
  if (outfmt == OutputFormat::Csv) std::printf("%s", csv_row({"tensor", "layout", "elem", "shape", "amax", "nan", "inf"}).c_str());
  for (const auto& o : outs) {
    std::string sh;
    for (size_t i = 0; i < o.t.shape.size(); ++i) {
      if (i) sh += 'x';
      sh += std::to_string(o.t.shape[i]);
    }
    if (outfmt == OutputFormat::Csv)
      std::printf("%s", csv_row({o.job.name, o.job.layout, short_name(o.elem), sh, num(o.amax), std::to_string(o.nan),
                                 std::to_string(o.inf)})
                            .c_str());
    else
      std::printf("tensor %s (%s, %s): %s %s, amax %s, NaN %zu, Inf %zu\n", o.job.name.c_str(), o.job.layout.c_str(),
                  short_name(o.elem), io::shape_str(o.t.shape).c_str(), dt.c_str(), num(o.amax).c_str(), o.nan, o.inf);
  }
  if (outfmt == OutputFormat::Text) {
    std::printf("output:");
    if (written.empty()) std::printf(" none (statistics only)");
    for (const auto& f : written) std::printf(" %s", f.string().c_str());
    std::printf("\n");
  }
}

int run(const Args& args) {
  po::options_description opts("options");
  add_options(opts);
  const Parsed p = parse(args, opts, "IN");
  if (p.has("help")) {
    print_help(stdout, help(), opts);
    return kExitOk;
  }
  const Request rq = parse_request(p);
  Notes notes{"dequantize", {}};
  std::vector<InputFile> files;
  const std::map<std::string, QuantSource> all = read_quant_inputs(p.positional, notes, files);
  const std::vector<QuantJob> jobs = select_jobs(rq, p, all, notes);
  const std::vector<Out> outs = decode_all(rq, jobs, all, notes);
  const std::vector<fs::path> written = write_outputs(rq, outs, files, notes);
  report(rq, outs, written, notes);
  return kExitOk;
}

}  // namespace

int cmd_dequantize(const Args& args) { return guarded("dequantize", [&] { return run(args); }); }

}  // namespace mxsim::cli
