#include "quantized_inputs.hpp"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>

#include "common.hpp"
#include "mxsim/io/npy.hpp"
#include "mxsim/io/safetensors.hpp"
#include "mxsim/layouts.hpp"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace mxsim::cli {
namespace {

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
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

const QuantSource& need(const QuantSources& all, const std::string& name, const std::string& why) {
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

}  // namespace

/// Element format from a name (mxsim::format_from_name: mxsim, PyTorch and torchao spellings).
Format elem_from_name(const std::string& n) {
  Format f;
  if (!format_from_name(n, f)) throw UsageError("--elem-dtype: unknown element format '" + n + "'");
  return f;
}

/// Build the QuantizedTensor of one job and the shape its values take.
bool scale_layout_option(const Parsed& p) {
  const std::string v = p.str("scale-layout");
  if (v != "plain" && v != "blocked") throw UsageError("--scale-layout must be plain or blocked, not '" + v + "'");
  return v == "blocked";
}

QuantizedTensor load_quantized(const QuantJob& j, const QuantSources& all, std::optional<Format> elem_opt, int block,
                               std::vector<size_t>& out_shape, Notes& notes, bool blocked_scales) {
  const std::string& b = j.base;
  if (j.layout == "mxsim") {
    const QuantSource& d = need(all, b + ".data", "the codes");
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
      const QuantSource& sc = need(all, b + ".scale", "the block scales");
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
    const QuantSource& d = need(all, b + ".qdata", "torchao MXTensor.qdata");
    const QuantSource& sc = need(all, b + ".scale", "torchao MXTensor.scale");
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
    return layout::from_torchao(*f, block, qs, d.t.bytes, sc.t.shape, sc.t.bytes, blocked_scales);
  }
  // TransformerEngine
  const std::string dn = j.layout == "te-rowwise" ? "._rowwise_data" : j.layout == "te-columnwise" ? "._columnwise_data" : "._data";
  const std::string sn = j.layout == "te-rowwise" ? "._rowwise_scale_inv" : j.layout == "te-columnwise" ? "._columnwise_scale_inv" : "._scale_inv";
  const QuantSource& d = need(all, b + dn, "TE data");
  const QuantSource& sc = need(all, b + sn, "TE scale_inv");
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
std::vector<QuantJob> find_quant_jobs(const QuantSources& all, const std::string& layout) {
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
  std::vector<QuantJob> jobs;
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
QuantSources read_quant_inputs(const std::vector<std::string>& args, Notes& notes, std::vector<InputFile>& files) {
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
  QuantSources all;
  for (const auto& in : files) {
    std::map<std::string, std::string> file_meta;
    if (!in.npy) file_meta = io::read_safetensors_header(in.path).metadata;
    for_each_tensor({in}, {}, notes, [&](const InputFile& f, io::RawTensor&& t) {
      QuantSource s{std::move(t), f.path, {}};
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
}  // namespace mxsim::cli
