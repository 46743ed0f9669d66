// mxsim dequantize: codes + scales (as mxsim, torchao or TransformerEngine
// store them, mxsim/layouts.hpp) back to FP32 or BF16 with the one
// dequantizer (emu::dequantize3), written as .npy or .safetensors.
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
#include "tensor_io.hpp"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace mxsim::cli {
namespace {

/// A tensor of an input, with the metadata that came with it.
struct Src {
  io::RawTensor t;
  fs::path file;
  std::map<std::string, std::string> meta;  ///< keys without the "<base>." prefix (mxsim layout)
};

struct Job {
  std::string name;    ///< output tensor name
  std::string layout;  ///< mxsim | torchao | te-rowwise | te-columnwise | te-tensor
  std::string base;    ///< the common prefix of the input tensors
};

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

/// Element format from a name (mxsim::format_from_name: mxsim, PyTorch and torchao spellings).
Format elem_from_name(const std::string& n) {
  Format f;
  if (!format_from_name(n, f)) throw UsageError("--elem-dtype: unknown element format '" + n + "'");
  return f;
}

std::optional<Format> elem_from_dtype(io::DType d) {
  switch (d) {
    case io::DType::F8_E4M3: return Format::E4M3;
    case io::DType::F8_E5M2: return Format::E5M2;
    case io::DType::F8_E4M3FNUZ: return Format::E4M3FNUZ;
    case io::DType::F8_E5M2FNUZ: return Format::E5M2FNUZ;
    case io::DType::F4: return Format::E2M1;
    default: return std::nullopt;
  }
}

/// "[1, 32]" (JSON) or "1x32" (older mxsim files) -> numbers.
std::vector<size_t> dims_of(const std::string& what, const std::string& text) {
  std::vector<size_t> v;
  try {
    const json j = json::parse(text);
    if (j.is_array()) {
      for (const auto& e : j) {
        if (!e.is_number_unsigned()) throw std::runtime_error("");
        v.push_back(e.get<size_t>());
      }
      return v;
    }
  } catch (const std::exception&) {
  }
  size_t cur = 0;
  bool digit = false;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      cur = cur * 10 + size_t(c - '0');
      digit = true;
    } else if (c == 'x' || c == ',' || c == ' ' || c == '[' || c == ']') {
      if (digit) v.push_back(cur);
      cur = 0;
      digit = false;
    } else {
      throw std::runtime_error(what + ": '" + text + "' is not a shape");
    }
  }
  if (digit) v.push_back(cur);
  if (v.empty()) throw std::runtime_error(what + ": '" + text + "' is not a shape");
  return v;
}

const Src& need(const std::map<std::string, Src>& all, const std::string& name, const std::string& why) {
  const auto it = all.find(name);
  if (it == all.end()) throw std::runtime_error("tensor '" + name + "' is missing (" + why + ")");
  return it->second;
}

std::span<const float> f32_span(const io::RawTensor& t, const std::string& what) {
  if (t.dtype != io::DType::F32)
    throw std::runtime_error("tensor '" + t.name + "': " + what + " must be F32, not " + io::name_of(t.dtype));
  return {reinterpret_cast<const float*>(t.bytes.data()), t.bytes.size() / 4};
}
void need_bytes(const io::RawTensor& t, const std::string& what) {
  if (io::size_of(t.dtype) != 1 && t.dtype != io::DType::F4)
    throw std::runtime_error("tensor '" + t.name + "': " + what + " must hold one byte per code (U8, I8, F8_*, F4), not " +
                             io::name_of(t.dtype));
}

/// Build the QuantizedTensor of one job and the shape its values take.
QuantizedTensor load(const Job& j, const std::map<std::string, Src>& all, std::optional<Format> elem_opt, int block,
                     std::vector<size_t>& out_shape, Notes& notes) {
  const std::string& b = j.base;
  if (j.layout == "mxsim") {
    const Src& d = need(all, b + ".data", "the codes");
    need_bytes(d.t, "the codes");
    const auto meta = [&](const std::string& k) -> std::string {
      const auto it = d.meta.find(k);
      if (it == d.meta.end())
        throw std::runtime_error("tensor '" + b + "': no '" + k + "' in the metadata of " + d.file.string() +
                                 " (the mxsim layout needs what `mxsim quantize` records; for other layouts use --layout)");
      return it->second;
    };
    QuantSpec s;
    Format f;
    if (!format_from_name(meta("elem_format"), f)) throw std::runtime_error("tensor '" + b + "': unknown elem_format '" + meta("elem_format") + "'");
    s.elem = f;
    const std::string sk = meta("scale_kind");
    s.scale_kind = sk == "e8m0" ? ScaleKind::E8M0 : sk == "fp32" ? ScaleKind::FP32 : sk == "ue4m3" ? ScaleKind::UE4M3
                 : throw std::runtime_error("tensor '" + b + "': unknown scale_kind '" + sk + "'");
    const auto blk = dims_of(b + ".block", meta("block"));
    const auto ls = dims_of(b + ".logical_shape", meta("logical_shape"));
    if (blk.size() != 2 || ls.size() != 3) throw std::runtime_error("tensor '" + b + "': block or logical_shape has the wrong rank");
    s.block_rows = int(blk[0]);
    s.block_cols = int(blk[1]);
    const bool tr = meta("transposed") == "true";
    out_shape = dims_of(b + ".shape", meta("shape"));
    float tsi = 1.0f;
    std::span<const uint8_t> sb;
    std::span<const float> si;
    if (s.scale_kind == ScaleKind::FP32) {
      si = f32_span(need(all, b + ".scale_inv", "FP32 scales").t, "scale_inv");
    } else {
      const Src& sc = need(all, b + ".scale", "the block scales");
      need_bytes(sc.t, "the scales");
      sb = sc.t.bytes;
    }
    if (s.scale_kind == ScaleKind::UE4M3) {
      const auto t = f32_span(need(all, b + ".tensor_scale_inv", "NVFP4's tensor scale").t, "tensor_scale_inv");
      if (t.size() != 1) throw std::runtime_error("tensor '" + b + ".tensor_scale_inv' must hold one value");
      tsi = t[0];
    }
    return layout::from_mxsim(s, ls[0], ls[1], ls[2], tr, d.t.bytes, sb, si, tsi);
  }
  if (j.layout == "torchao") {
    const Src& d = need(all, b + ".qdata", "torchao MXTensor.qdata");
    const Src& sc = need(all, b + ".scale", "torchao MXTensor.scale");
    need_bytes(d.t, "qdata");
    need_bytes(sc.t, "scale");
    std::optional<Format> f = elem_opt ? elem_opt : elem_from_dtype(d.t.dtype);
    if (!f)
      throw UsageError("tensor '" + b + ".qdata' is " + io::name_of(d.t.dtype) +
                       ": give its element format with --elem-dtype (float8_e4m3fn, float8_e5m2, fp6_e2m3, fp6_e3m2, "
                       "float4_e2m1fn_x2)");
    // An F4 tensor counts 4-bit elements: torchao's [.., K/2] float4_e2m1fn_x2 bytes.
    std::vector<size_t> qs = d.t.shape;
    if (d.t.dtype == io::DType::F4) qs.back() /= 2;
    out_shape = qs;
    if (*f == Format::E2M1) out_shape.back() *= 2;
    return layout::from_torchao(*f, block, qs, d.t.bytes, sc.t.shape, sc.t.bytes);
  }
  // TransformerEngine
  const std::string dn = j.layout == "te-rowwise" ? "._rowwise_data" : j.layout == "te-columnwise" ? "._columnwise_data" : "._data";
  const std::string sn = j.layout == "te-rowwise" ? "._rowwise_scale_inv" : j.layout == "te-columnwise" ? "._columnwise_scale_inv" : "._scale_inv";
  const Src& d = need(all, b + dn, "TE data");
  const Src& sc = need(all, b + sn, "TE scale_inv");
  need_bytes(d.t, "TE data");
  std::optional<Format> f = elem_opt ? elem_opt : elem_from_dtype(d.t.dtype);
  if (!f) {
    f = Format::E4M3;
    notes.add("tensor '" + b + dn + "' is " + io::name_of(d.t.dtype) +
              ": read as E4M3 (TE's default forward format; --elem-dtype to choose)");
  }
  out_shape = d.t.shape;
  if (j.layout == "te-tensor") {
    const auto si = f32_span(sc.t, "scale_inv");
    if (si.size() != 1) throw std::runtime_error("tensor '" + b + sn + "' must hold one FP32 value (Float8Tensor)");
    return layout::from_te_fp8(*f, d.t.shape, d.t.bytes, si[0]);
  }
  need_bytes(sc.t, "TE MXFP8 scale_inv");
  return layout::from_te_mxfp8(*f, j.layout == "te-columnwise", d.t.shape, d.t.bytes, sc.t.shape, sc.t.bytes);
}

/// The jobs the inputs hold, by the suffixes each layout uses.
std::vector<Job> find_jobs(const std::map<std::string, Src>& all, const std::string& layout) {
  struct Pat {
    const char* layout;
    const char* data;
    const char* scale;
    const char* alt_scale;
  };
  const Pat pats[] = {{"mxsim", ".data", ".scale", ".scale_inv"},
                      {"torchao", ".qdata", ".scale", nullptr},
                      {"te-rowwise", "._rowwise_data", "._rowwise_scale_inv", nullptr},
                      {"te-columnwise", "._columnwise_data", "._columnwise_scale_inv", nullptr},
                      {"te-tensor", "._data", "._scale_inv", nullptr}};
  std::vector<Job> jobs;
  for (const auto& [name, src] : all)
    for (const auto& p : pats) {
      if (!ends_with(name, p.data)) continue;
      const std::string base = name.substr(0, name.size() - std::strlen(p.data));
      if (!all.count(base + p.scale) && !(p.alt_scale && all.count(base + p.alt_scale))) continue;
      const std::string lay = p.layout;
      if (layout != "auto" && lay.rfind(layout, 0) != 0) continue;
      std::string out = base;
      if (lay == "mxsim") {
        const auto it = src.meta.find("tensor");  // .npy outputs name the source tensor in meta.json
        if (it != src.meta.end()) out = it->second;
      }
      if (lay == "te-rowwise" || lay == "te-columnwise") {
        // Both copies of one TE tensor: keep the rowwise one unless only columnwise was asked for.
        if (lay == "te-columnwise" && layout == "auto" && all.count(base + "._rowwise_data")) continue;
      }
      jobs.push_back({out, lay, base});
    }
  return jobs;
}

/// Reads every input; .npy files named "<stem>.data.npy" pick up "<stem>.meta.json"; a
/// "<stem>.meta.json" input stands for its .npy files.
std::map<std::string, Src> read_all_inputs(const std::vector<std::string>& args, Notes& notes,
                                           std::vector<InputFile>& files) {
  std::vector<std::string> expanded;
  for (const auto& a : args) {
    if (ends_with(a, ".meta.json")) {
      const std::string stem = a.substr(0, a.size() - 10);
      bool any = false;
      for (const char* suf : {".data.npy", ".scale.npy", ".scale_inv.npy", ".tensor_scale_inv.npy"})
        if (fs::exists(stem + suf)) {
          expanded.push_back(stem + suf);
          any = any || std::strcmp(suf, ".data.npy") == 0;
        }
      if (!any) throw std::runtime_error(a + ": no " + stem + ".data.npy beside it");
      continue;
    }
    expanded.push_back(a);
    if (ends_with(a, ".data.npy")) {  // its scales beside it
      const std::string stem = a.substr(0, a.size() - 9);
      for (const char* suf : {".scale.npy", ".scale_inv.npy", ".tensor_scale_inv.npy"})
        if (fs::exists(stem + suf) && std::find(args.begin(), args.end(), stem + suf) == args.end())
          expanded.push_back(stem + suf);
    }
  }
  std::sort(expanded.begin(), expanded.end());
  expanded.erase(std::unique(expanded.begin(), expanded.end()), expanded.end());
  files = expand_inputs(expanded);
  std::map<std::string, Src> all;
  for (const auto& in : files) {
    std::map<std::string, std::string> file_meta;
    if (!in.npy) file_meta = io::read_safetensors_header(in.path).metadata;
    for_each_tensor({in}, {}, notes, [&](const InputFile& f, io::RawTensor&& t) {
      Src s{std::move(t), f.path, {}};
      if (f.npy && ends_with(s.t.name, ".data")) {
        const fs::path mj = f.path.parent_path() / (s.t.name.substr(0, s.t.name.size() - 5) + ".meta.json");
        if (fs::exists(mj)) {
          const auto bytes = io::read_all(mj);
          json j;
          try {
            j = json::parse(bytes.begin(), bytes.end());
          } catch (const json::exception& e) {
            throw std::runtime_error(mj.string() + ": not valid JSON: " + e.what());
          }
          for (const auto& [k, v] : j.items()) s.meta[k] = v.is_string() ? v.get<std::string>() : v.dump();
        }
      } else if (!f.npy && ends_with(s.t.name, ".data")) {
        const std::string pre = s.t.name.substr(0, s.t.name.size() - 4);  // "<base>."
        for (const auto& [k, v] : file_meta)
          if (k.rfind(pre, 0) == 0) s.meta[k.substr(pre.size())] = v;
      }
      const std::string name = s.t.name;
      all.emplace(name, std::move(s));
    });
  }
  return all;
}

int run(const Args& args) {
  po::options_description opts("options");
  opts.add_options()("help,h", "this help")
      ("output,o", po::value<std::string>(), "OUT: .safetensors, .npy (one tensor) or a folder; none: statistics only")
      ("layout", po::value<std::string>()->default_value("auto"), "auto | mxsim | torchao | te (by tensor-name suffixes)")
      ("elem-dtype", po::value<std::string>(), "element format of U8 codes (torchao names: float8_e4m3fn, float8_e5m2, "
       "fp6_e2m3, fp6_e3m2, float4_e2m1fn_x2; or e4m3, ...)")
      ("block-size", po::value<std::string>(), "torchao block size along the last axis, 1 to 65536 (default 32)")
      ("dtype", po::value<std::string>()->default_value("fp32"), "output dtype: fp32 | bf16 (one RNE rounding)")
      ("tensor", po::value<std::vector<std::string>>(), "only this output tensor (repeatable)");
  add_format_options(opts, true, "the summary");
  const CommandHelp help{
      "dequantize", "IN... [-o OUT] [--layout L] [--elem-dtype F] [--block-size N] [--dtype fp32|bf16]",
      "Decodes codes + scales back to FP32 (or BF16) with the one dequantizer (emu::dequantize3):\n"
      "code * 2^(byte-127) for E8M0 scales, fl32(code * scale_inv) for FP32 scales, NVFP4 in two steps.\n"
      "IN: .safetensors or .npy files (or an mxsim <stem>.meta.json), whose tensors pair by name:",
      "  mxsim    <name>.data + <name>.scale | .scale_inv [+ .tensor_scale_inv], with the metadata\n"
      "           `mxsim quantize` writes (safetensors __metadata__ or <stem>.meta.json)\n"
      "  torchao  <name>.qdata + <name>.scale (MXTensor; blocks along the last axis, --block-size)\n"
      "  te       <name>._rowwise_data + ._rowwise_scale_inv, ._columnwise_data + ._columnwise_scale_inv\n"
      "           (MXFP8Tensor, padded scales) or ._data + ._scale_inv (Float8Tensor)\n"
      "Element formats come from the dtype (F8_E4M3, F8_E5M2, F4) or --elem-dtype.",
      ""};
  const Parsed p = parse(args, opts, "IN");
  if (p.has("help")) {
    print_help(stdout, help, opts);
    return kExitOk;
  }
  const OutputFormat outfmt = output_format(p, true);
  if (p.positional.empty()) throw UsageError("an input file is required");
  const std::string layout = p.str("layout");
  if (layout != "auto" && layout != "mxsim" && layout != "torchao" && layout != "te")
    throw UsageError("--layout must be auto, mxsim, torchao or te, not '" + layout + "'");
  std::optional<Format> elem;
  if (p.has("elem-dtype")) elem = elem_from_name(p.str("elem-dtype"));
  const int block = int(int_option(p, "block-size", 1, 65536, 32));
  const std::string dt = p.str("dtype");
  if (dt != "fp32" && dt != "bf16") throw UsageError("--dtype must be fp32 or bf16, not '" + dt + "'");
  if (p.has("output") && p.str("output").empty()) throw UsageError("-o OUT is empty");
  const std::string out_arg = p.has("output") ? p.str("output") : "";
  const bool to_npy = !out_arg.empty() && fs::path(out_arg).extension() == ".npy";
  OutPlan plan;
  if (!to_npy) plan = OutPlan::resolve(out_arg);
  if (plan.kind == OutPlan::Prefix)
    throw UsageError("-o " + out_arg + ": name a .safetensors file, a .npy file (one tensor) or a folder");

  Notes notes{"dequantize", {}};
  std::vector<InputFile> files;
  const std::map<std::string, Src> all = read_all_inputs(p.positional, notes, files);
  std::vector<Job> jobs = find_jobs(all, layout);
  if (p.has("tensor")) {
    const auto want = p.vm["tensor"].as<std::vector<std::string>>();
    std::vector<Job> kept;
    for (const auto& w : want) {
      const auto it = std::find_if(jobs.begin(), jobs.end(), [&](const Job& j) { return j.name == w; });
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
  if (to_npy && jobs.size() > 1)
    throw UsageError("-o " + out_arg + ": a .npy holds one tensor; the inputs hold " + std::to_string(jobs.size()) +
                     " (name a .safetensors file or a folder)");

  struct Out {
    Job job;
    io::RawTensor t;
    size_t nan = 0, inf = 0;
    double amax = 0;
    Format elem;
  };
  std::vector<Out> outs;
  for (const auto& j : jobs) {
    std::vector<size_t> shape;
    QuantizedTensor q;
    try {
      q = load(j, all, elem, block, shape, notes);
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
    if (dt == "fp32") {
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

  io::AtomicOutputs outputs;
  auto add = [&](const fs::path& f) { return add_output(outputs, f, files); };
  if (to_npy) {
    io::write_npy(add(out_arg), outs[0].t);
  } else if (plan.kind == OutPlan::Safetensors) {
    std::vector<io::RawTensor> ts;
    for (const auto& o : outs) ts.push_back(o.t);
    io::write_safetensors(add(plan.path), ts,
                          {{"format", "mxsim.dequantized"}, {"mxsim_version", mxsim::version()}, {"mxsim_commit", mxsim::build_commit()}});
  } else if (plan.kind == OutPlan::Folder) {
    for (const auto& o : outs) io::write_npy(add(plan.path / (io::file_stem(o.job.name) + ".npy")), o.t);
  }
  outputs.commit();
  if (plan.kind == OutPlan::Discard) notes.add("-o " + out_arg + ": nothing written (statistics only)");

  if (outfmt == OutputFormat::Json) {
    json j;
    j["command"] = "dequantize";
    j["dtype"] = dt;
    j["outputs"] = json::array();
    for (const auto& f : outputs.finals()) j["outputs"].push_back(f.string());
    j["notes"] = notes.items;
    j["tensors"] = json::array();
    for (const auto& o : outs)
      j["tensors"].push_back({{"name", o.job.name}, {"layout", o.job.layout}, {"elem", short_name(o.elem)},
                              {"shape", o.t.shape}, {"amax", json_number(o.amax)}, {"nan", o.nan}, {"inf", o.inf}});
    print_json(j);
    return kExitOk;
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
    if (outputs.finals().empty()) std::printf(" none (statistics only)");
    for (const auto& f : outputs.finals()) std::printf(" %s", f.string().c_str());
    std::printf("\n");
  }
  return kExitOk;
}

}  // namespace

int cmd_dequantize(const Args& args) { return guarded("dequantize", [&] { return run(args); }); }

}  // namespace mxsim::cli
