#include "quantized_inputs.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>
#include <span>
#include <stdexcept>

#include "common.hpp"
#include "mxsim/io/checked_size.hpp"
#include "mxsim/io/npy.hpp"
#include "mxsim/io/quant_meta.hpp"
#include "mxsim/io/safetensors.hpp"
#include "mxsim/layouts.hpp"

namespace fs = std::filesystem;

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
/// Codes: one per byte (U8, I8, an F8 element dtype) or packed E2M1 (F4).
void need_bytes(const io::RawTensor& t, const std::string& what) {
  const bool ok = t.dtype == io::DType::U8 || t.dtype == io::DType::I8 || t.dtype == io::DType::F4 ||
                  elem_from_dtype(t.dtype).has_value();
  if (!ok)
    throw std::runtime_error("tensor '" + t.name + "': " + what + " must hold one byte per code (U8, I8, F8_E4M3, "
                             "F8_E5M2, F8_E4M3FNUZ, F8_E5M2FNUZ) or packed E2M1 (F4), not " + io::name_of(t.dtype));
}

/// Scale bytes of `kind` (E8M0 or UE4M3): raw bytes (U8, I8) or the dtype of that kind.
void need_scale_bytes(const io::RawTensor& t, ScaleKind kind, const std::string& layout) {
  const io::DType typed = kind == ScaleKind::E8M0 ? io::DType::F8_E8M0 : io::DType::F8_E4M3;
  if (t.dtype == io::DType::U8 || t.dtype == io::DType::I8 || t.dtype == typed) return;
  const std::string want = kind == ScaleKind::E8M0 ? "E8M0 scale bytes (U8, I8 or F8_E8M0)"
                                                   : "UE4M3 (NVFP4) scale bytes (U8, I8 or F8_E4M3)";
  std::string hint;
  if (kind == ScaleKind::E8M0 && t.dtype == io::DType::F8_E4M3)
    hint = "; F8_E4M3 block scales are NVFP4's: torchao NVFP4Tensor names them <name>._scale_e4m3, TE NVFP4Tensor "
           "stores <name>._amax_rowwise beside them";
  if (kind == ScaleKind::E8M0 && t.dtype == io::DType::F32)
    hint = "; F32 scales are FP8 per-tensor, per-row or blockwise scaling (torchao Float8Tensor .qdata + .scale, "
           "Float8TrainingTensor ._data + ._scale; TE Float8Tensor ._scale_inv, Float8BlockwiseQTensor "
           "._rowwise_scale_inv)";
  throw std::runtime_error("tensor '" + t.name + "' is " + io::name_of(t.dtype) + ": the " + layout + " layout needs " +
                           want + hint);
}

/// The element format of codes `d`: --elem-dtype, else the dtype's, else `fallback`
/// (with a note), else UsageError. A dtype that names another format than --elem-dtype is refused.
Format codes_format(const io::RawTensor& d, std::optional<Format> opt, std::optional<Format> fallback, Notes& notes,
                    const std::string& fallback_why) {
  const std::optional<Format> typed = elem_from_dtype(d.dtype);
  if (opt && typed && *opt != *typed)
    throw std::runtime_error("tensor '" + d.name + "' is " + io::name_of(d.dtype) + " (" + short_name(*typed) +
                             ") but --elem-dtype says " + short_name(*opt));
  const std::string data = "tensor '" + d.name + "' (" + io::name_of(d.dtype) + ")";
  if (opt) {
    layout::check_elem_width(*opt, "--elem-dtype", data);
    return *opt;
  }
  if (typed) return *typed;
  if (fallback) {
    layout::check_elem_width(*fallback, fallback_why, data);
    std::string up = short_name(*fallback);
    for (char& ch : up) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    notes.add("tensor '" + d.name + "' is " + io::name_of(d.dtype) + ": read as " + up + " (" + fallback_why +
              "; --elem-dtype to choose)");
    return *fallback;
  }
  throw UsageError("tensor '" + d.name + "' is " + io::name_of(d.dtype) +
                   ": give its element format with --elem-dtype (float8_e4m3fn, float8_e5m2, fp6_e2m3, fp6_e3m2, "
                   "float4_e2m1fn_x2)");
}

/// NVFP4 codes: E2M1, packed two per byte (U8 / I8 bytes or F4 elements).
void need_e2m1(const io::RawTensor& d, std::optional<Format> opt, const std::string& layout) {
  if (d.dtype != io::DType::U8 && d.dtype != io::DType::I8 && d.dtype != io::DType::F4)
    throw std::runtime_error("tensor '" + d.name + "' is " + io::name_of(d.dtype) + ": the " + layout +
                             " layout holds packed E2M1 codes (U8 bytes or F4)");
  if (opt && *opt != Format::E2M1)
    throw std::runtime_error("tensor '" + d.name + "': the " + layout + " layout holds E2M1 codes, not " +
                             short_name(*opt) + " (--elem-dtype)");
}

/// Shape of packed E2M1 bytes: an F4 tensor counts 4-bit elements.
std::vector<size_t> packed_shape(const io::RawTensor& d) {
  std::vector<size_t> s = d.shape;
  if (d.dtype == io::DType::F4 && !s.empty()) s.back() /= 2;
  return s;
}

/// `shape` with axis `axis` of packed E2M1 bytes counted in codes (two per
/// byte): a file's extents, so the doubling and the element count it gives
/// are checked (io::mul_size, io::numel_of) instead of wrapping.
std::vector<size_t> unpacked_fp4(std::vector<size_t> shape, size_t axis, const std::string& tensor) {
  const std::vector<size_t> packed = shape;
  uint64_t codes = 0;
  bool fits = io::mul_size(shape.at(axis), 2, codes);
  if (fits) {
    shape[axis] = size_t(codes);
    try {
      io::numel_of(shape);
    } catch (const std::overflow_error&) {
      fits = false;
    }
  }
  if (!fits)
    throw std::runtime_error("tensor '" + tensor + "': shape " + io::shape_str(packed) + " of packed E2M1 bytes holds " +
                             "more codes than a size can count");
  return shape;
}

/// Where the metadata of codes `d` came from: "<stem>.meta.json" beside an
/// .npy (read_quant_inputs), else the __metadata__ of its .safetensors file.
std::string meta_source(const QuantSource& d) {
  if (d.file.extension() != ".npy") return "the __metadata__ of " + d.file.string();
  const std::string& n = d.t.name;
  const size_t cut = ends_with(n, ".qdata") || ends_with(n, "._data") ? 6 : ends_with(n, ".data") ? 5 : 0;
  return (d.file.parent_path() / (n.substr(0, n.size() - cut) + ".meta.json")).string();
}

/// The codes of `d` as a message names them: the tensor, its dtype and its file.
std::string codes_desc(const QuantSource& d) {
  return "tensor '" + d.t.name + "' (" + io::name_of(d.t.dtype) + ") of " + d.file.string();
}

/// Codes of a sub-8-bit format one per byte hold no bits above its width
/// (layout::check_code_width, here so the message names the file).
void check_codes(const QuantSource& d, Format f) { layout::check_code_width(f, d.t.bytes, codes_desc(d)); }

/// --elem-dtype against the element format the metadata of `d` names: given
/// both, they must agree; the file's word never silently beats the user's, nor
/// the other way round.
void agree_with_metadata(std::optional<Format> opt, Format meta, const QuantSource& d) {
  if (opt && *opt != meta)
    throw std::runtime_error(codes_desc(d) + ": --elem-dtype " + short_name(*opt) + " disagrees with elem_format " +
                             short_name(meta) + " in " + meta_source(d) +
                             " (give the format the file names, or leave --elem-dtype out)");
}

float one_f32(const QuantSources& all, const std::string& name, const std::string& why) {
  const auto v = f32_span(need(all, name, why).t, why);
  if (v.size() != 1) throw std::runtime_error("tensor '" + name + "' (" + why + ") must hold one value, not " + std::to_string(v.size()));
  return v[0];
}

bool starts_with(const std::string& s, const std::string& pre) { return s.rfind(pre, 0) == 0; }

const char* const kLayouts[] = {"mxsim",          "torchao",          "torchao-nvfp4",       "torchao-float8",
                                "torchao-float8-training", "te-rowwise", "te-columnwise",  "te-nvfp4-rowwise",
                                "te-nvfp4-columnwise",     "te-blockwise-rowwise",          "te-blockwise-columnwise",
                                "te-tensor"};

/// Whether --layout `want` takes a job of layout `job`: auto all; the family
/// names torchao and te every layout of theirs; any other name that layout only.
bool layout_takes(const std::string& want, const std::string& job) {
  if (want == "auto" || want == job) return true;
  return (want == "torchao" || want == "te") && starts_with(job, want + "-");
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

int block_scaling_dim_option(const Parsed& p) {
  if (!p.has("block-scaling-dim")) return 0;
  const std::string v = p.str("block-scaling-dim");
  if (v != "1" && v != "2") throw UsageError("--block-scaling-dim must be 1 (1 x 128 blocks) or 2 (128 x 128 tiles), not '" + v + "'");
  return v == "1" ? 1 : 2;
}

std::string layout_option(const Parsed& p) {
  const std::string v = p.str("layout");
  if (v == "auto" || v == "te") return v;
  for (const char* l : kLayouts)
    if (v == l) return v;
  std::string names;
  for (const char* l : kLayouts) names += std::string(", ") + l;
  throw UsageError("--layout must be auto, te" + names + "; not '" + v + "'");
}

QuantizedTensor load_quantized(const QuantJob& j, const QuantSources& all, std::optional<Format> elem_opt, int block,
                               std::vector<size_t>& out_shape, Notes& notes, bool blocked_scales, int block_dim) {
  const std::string& b = j.base;
  if (j.layout == "mxsim") {
    const QuantSource& d = need(all, j.data, "the codes");
    need_bytes(d.t, "the codes");
    const io::QuantMeta m = io::quant_meta(d.meta, "tensor '" + b + "' (metadata of " + d.file.string() + ")");
    const QuantSpec& s = m.spec;
    layout::check_elem_width(s.elem, "elem_format of " + meta_source(d) + ":",
                             "tensor '" + d.t.name + "' (" + io::name_of(d.t.dtype) + ")");
    agree_with_metadata(elem_opt, s.elem, d);
    check_codes(d, s.elem);
    out_shape = m.shape;
    float tsi = 1.0f;
    std::span<const uint8_t> sb;
    std::span<const float> si;
    if (s.scale_kind == ScaleKind::FP32) {
      si = f32_span(need(all, b + ".scale_inv", "FP32 scales").t, "scale_inv");
    } else {
      const QuantSource& sc = need(all, b + ".scale", "the block scales");
      need_scale_bytes(sc.t, s.scale_kind, std::string("mxsim (scale_kind ") + name_of(s.scale_kind) + ")");
      sb = sc.t.bytes;
    }
    if (has_tensor_scale(s.scale_kind)) tsi = one_f32(all, b + ".tensor_scale_inv", "NVFP4's tensor scale");
    return layout::from_mxsim(s, m.groups, m.rows, m.cols, m.transposed, d.t.bytes, sb, si, tsi);
  }
  const QuantSource& d = need(all, j.data, "the codes");
  const QuantSource& sc = need(all, j.scale, "the scales");
  if (j.layout == "torchao-float8" || j.layout == "torchao-float8-training") {
    const bool training = j.layout == "torchao-float8-training";
    need_bytes(d.t, training ? "_data" : "qdata");
    const auto s = f32_span(sc.t, training ? "torchao Float8TrainingTensor _scale" : "torchao Float8Tensor scale");
    // U8 codes written by `mxsim quantize --scale-convention torchao*` carry their format in its metadata
    std::optional<Format> from_meta;
    const auto em = d.meta.find("elem_format");
    Format mf;
    if (em != d.meta.end()) {
      if (!format_from_name(em->second, mf))
        throw std::runtime_error(codes_desc(d) + ": elem_format '" + em->second + "' in " + meta_source(d) +
                                 " is no element format");
      agree_with_metadata(elem_opt, mf, d);
      from_meta = mf;
    }
    const Format f = codes_format(d.t, elem_opt, from_meta, notes, "the elem_format of " + meta_source(d));
    check_codes(d, f);
    out_shape = d.t.shape;
    return training ? layout::from_torchao_float8_training(f, d.t.shape, d.t.bytes, sc.t.shape, s)
                    : layout::from_torchao_float8(f, d.t.shape, d.t.bytes, sc.t.shape, s);
  }
  if (j.layout == "torchao") {
    need_bytes(d.t, "qdata");
    need_scale_bytes(sc.t, ScaleKind::E8M0, "torchao MXTensor");
    const Format f = codes_format(d.t, elem_opt, std::nullopt, notes, "");
    check_codes(d, f);
    const std::vector<size_t> qs = packed_shape(d.t);
    out_shape = f == Format::E2M1 && !qs.empty() ? unpacked_fp4(qs, qs.size() - 1, d.t.name) : qs;
    return layout::from_torchao(f, block, qs, d.t.bytes, sc.t.shape, sc.t.bytes, blocked_scales);
  }
  if (j.layout == "torchao-nvfp4") {
    need_e2m1(d.t, elem_opt, j.layout);
    need_scale_bytes(sc.t, ScaleKind::UE4M3, "torchao NVFP4Tensor");
    float pts = 1.0f;
    if (j.extra.at(0).empty())
      notes.add("tensor '" + b + "': no per_tensor_scale beside it: single-level NVFP4 scaling (tensor scale 1)");
    else
      pts = one_f32(all, j.extra[0], "torchao NVFP4Tensor per_tensor_scale");
    const std::vector<size_t> qs = packed_shape(d.t);
    out_shape = qs.empty() ? qs : unpacked_fp4(qs, qs.size() - 1, d.t.name);
    return layout::from_torchao_nvfp4(qs, d.t.bytes, sc.t.shape, sc.t.bytes, pts, blocked_scales);
  }
  const bool col = ends_with(j.layout, "columnwise");
  if (starts_with(j.layout, "te-nvfp4")) {
    need_e2m1(d.t, elem_opt, j.layout);
    need_scale_bytes(sc.t, ScaleKind::UE4M3, "TE NVFP4Tensor");
    const float amax = one_f32(all, j.extra.at(0), "TE NVFP4Tensor amax");
    const std::vector<size_t> ds = packed_shape(d.t);
    if (col) {
      if (ds.size() != 2) throw std::runtime_error("tensor '" + j.data + "': columnwise NVFP4 data must be 2-D [K, M/2]");
      out_shape = unpacked_fp4({ds[1], ds[0]}, 0, d.t.name);
    } else {
      out_shape = ds.empty() ? ds : unpacked_fp4(ds, ds.size() - 1, d.t.name);
    }
    return layout::from_te_nvfp4(col, ds, d.t.bytes, sc.t.shape, sc.t.bytes, amax, blocked_scales);
  }
  need_bytes(d.t, "TE data");
  const Format f = codes_format(d.t, elem_opt, Format::E4M3, notes, "TE's default forward format");
  check_codes(d, f);
  if (j.layout == "te-tensor") {
    out_shape = d.t.shape;
    const auto si = f32_span(sc.t, "scale_inv");
    if (si.size() != 1) throw std::runtime_error("tensor '" + j.scale + "' must hold one FP32 value (Float8Tensor)");
    return layout::from_te_fp8(f, d.t.shape, d.t.bytes, si[0]);
  }
  if (starts_with(j.layout, "te-blockwise")) {
    const auto si = f32_span(sc.t, "Float8BlockwiseQTensor scale_inv");
    out_shape = d.t.shape;
    if (col && !out_shape.empty()) std::rotate(out_shape.begin(), out_shape.begin() + 1, out_shape.end());
    return layout::from_te_fp8_blockwise(f, col, block_dim, d.t.shape, d.t.bytes, sc.t.shape, si);
  }
  need_scale_bytes(sc.t, ScaleKind::E8M0, "TE MXFP8Tensor");
  out_shape = d.t.shape;
  return layout::from_te_mxfp8(f, col, d.t.shape, d.t.bytes, sc.t.shape, sc.t.bytes);
}

/// The jobs the inputs hold, by the suffixes each layout uses (and, where
/// layouts share suffixes, by the scale dtype and the companions present).
std::vector<QuantJob> find_quant_jobs(const QuantSources& all, const std::string& layout) {
  const auto has = [&](const std::string& n) { return all.count(n) > 0; };
  const auto dtype = [&](const std::string& n) { return all.at(n).t.dtype; };
  std::vector<QuantJob> jobs;
  const auto add = [&](QuantJob j) {
    if (layout_takes(layout, j.layout)) jobs.push_back(std::move(j));
  };
  for (const auto& [name, src] : all) {
    if (ends_with(name, ".data")) {  // mxsim
      const std::string base = name.substr(0, name.size() - 5);
      const std::string sc = has(base + ".scale") ? base + ".scale" : base + ".scale_inv";
      if (!has(sc)) continue;
      std::string out = base;
      const auto it = src.meta.find("tensor");  // .npy outputs name the source tensor in meta.json
      if (it != src.meta.end()) out = it->second;
      QuantJob j{out, "mxsim", base, name, sc, {}};
      if (has(base + ".tensor_scale_inv")) j.extra.push_back(base + ".tensor_scale_inv");
      add(std::move(j));
    } else if (ends_with(name, ".qdata")) {  // torchao MXTensor / NVFP4Tensor / Float8Tensor
      const std::string base = name.substr(0, name.size() - 6);
      std::string pts;
      for (const char* s : {"._per_tensor_scale", ".per_tensor_scale"})
        if (has(base + s)) pts = base + s;
      if (has(base + "._scale_e4m3")) {
        add({base, "torchao-nvfp4", base, name, base + "._scale_e4m3", {pts}});
      } else if (has(base + ".scale")) {
        const io::DType sd = dtype(base + ".scale");
        if (layout == "torchao-float8" || (sd == io::DType::F32 && pts.empty()))  // FP32 scales: Float8Tensor
          add({base, "torchao-float8", base, name, base + ".scale", {}});
        else if (sd == io::DType::F8_E4M3 || !pts.empty())
          add({base, "torchao-nvfp4", base, name, base + ".scale", {pts}});
        else
          add({base, "torchao", base, name, base + ".scale", {}});
      }
    } else if (ends_with(name, "._data")) {  // TE Float8Tensor, torchao Float8TrainingTensor
      const std::string base = name.substr(0, name.size() - 6);
      const bool training = has(base + "._scale") && (layout == "torchao-float8-training" || !has(base + "._scale_inv"));
      if (training) add({base, "torchao-float8-training", base, name, base + "._scale", {}});
      else if (has(base + "._scale_inv")) add({base, "te-tensor", base, name, base + "._scale_inv", {}});
    } else {
      for (const std::string dir : {"rowwise", "columnwise"}) {
        const std::string suf = "._" + dir + "_data";
        if (!ends_with(name, suf)) continue;
        const std::string base = name.substr(0, name.size() - suf.size());
        const std::string sc = base + "._" + dir + "_scale_inv", amax = base + "._amax_" + dir;
        if (!has(sc)) continue;
        // Both copies of one TE tensor: keep the rowwise one unless only columnwise was asked for.
        if (dir == "columnwise" && layout == "auto" && has(base + "._rowwise_data") && has(base + "._rowwise_scale_inv"))
          continue;
        if (has(amax) || src.t.dtype == io::DType::F4 || dtype(sc) == io::DType::F8_E4M3) {
          // NVFP4 needs its amax: an empty name is reported by load_quantized.
          add({base, "te-nvfp4-" + dir, base, name, sc, {has(amax) ? amax : std::string()}});
        } else if (dtype(sc) == io::DType::F32) {
          add({base, "te-blockwise-" + dir, base, name, sc, {}});
        } else {
          add({base, "te-" + dir, base, name, sc, {}});
        }
      }
    }
  }
  for (const auto& j : jobs)
    if (starts_with(j.layout, "te-nvfp4") && j.extra.at(0).empty())
      throw std::runtime_error("tensor '" + j.base + "' (" + j.layout + " layout): no '" + j.base + "._amax_" +
                               (ends_with(j.layout, "columnwise") ? "columnwise" : "rowwise") +
                               "' among the inputs: TE NVFP4Tensor's tensor amax, which its decode scale needs");
  return jobs;
}

bool takes_swizzled_scales(const QuantJob& j) {
  return j.layout == "torchao" || j.layout == "torchao-nvfp4" || starts_with(j.layout, "te-nvfp4");
}

void check_scale_layout_used(bool blocked, const std::vector<std::string>& layouts) {
  if (!blocked) return;
  for (const auto& l : layouts)
    if (takes_swizzled_scales({"", l, "", "", "", {}})) return;
  std::string names;
  for (const auto& l : layouts) names += (names.empty() ? "" : ", ") + l;
  throw UsageError("--scale-layout blocked applies to torchao (MXTensor, NVFP4Tensor) and TE NVFP4Tensor scales; "
                   "the inputs are in the " + names + " layout");
}

void note_unused_tensors(const QuantSources& all, const std::vector<QuantJob>& jobs, Notes& notes,
                         const std::string* only_base) {
  std::set<std::string> used;
  for (const auto& j : jobs) {
    used.insert(j.data);
    used.insert(j.scale);
    for (const auto& e : j.extra) used.insert(e);
  }
  for (const auto& [name, src] : all) {
    if (used.count(name)) continue;
    if (only_base && !starts_with(name, *only_base + ".")) continue;
    std::string why = "not part of any codes + scales pair";
    for (const char* c : {"._columnwise_data", "._columnwise_scale_inv", "._amax_columnwise"})
      if (ends_with(name, c) && used.count(name.substr(0, name.size() - std::strlen(c)) + "._rowwise_data"))
        why = "the columnwise copy of a tensor whose rowwise copy is decoded (--layout te-...-columnwise reads it)";
    if (ends_with(name, "._act_per_tensor_scale"))
      why = "torchao's per-tensor scale for the activation this weight multiplies, not a scale of its own values";
    notes.add("tensor '" + name + "' (" + io::name_of(src.t.dtype) + " " + io::shape_str(src.t.shape) + "): " + why +
              "; not used");
  }
}

/// Reads every input; .npy files named "<stem>.data.npy" pick up "<stem>.meta.json"; a
/// "<stem>.meta.json" input stands for its .npy files.
QuantSources read_quant_inputs(const std::vector<std::string>& args, Notes& notes, std::vector<InputFile>& files) {
  std::vector<std::string> expanded;
  for (const auto& a : args) {
    if (ends_with(a, ".meta.json")) {
      const std::string stem = a.substr(0, a.size() - 10);
      bool any = false;
      // mxsim's own names, and the torchao layouts `mxsim quantize --scale-convention torchao*` writes
      for (const char* suf : {".data.npy", ".scale.npy", ".scale_inv.npy", ".tensor_scale_inv.npy", ".qdata.npy",
                              "._data.npy", "._scale.npy"})
        if (fs::exists(stem + suf)) {
          expanded.push_back(stem + suf);
          any = any || std::strcmp(suf, ".data.npy") == 0 || std::strcmp(suf, ".qdata.npy") == 0 ||
                std::strcmp(suf, "._data.npy") == 0;
        }
      if (!any) throw std::runtime_error(a + ": no " + stem + ".data.npy (or .qdata.npy, ._data.npy) beside it");
      continue;
    }
    expanded.push_back(a);
    const bool training = ends_with(a, "._data.npy"), torchao = training || ends_with(a, ".qdata.npy");
    if (ends_with(a, ".data.npy") || torchao) {  // its scales beside it
      const std::string stem = a.substr(0, a.size() - (torchao ? 10 : 9));
      const std::vector<const char*> sufs = training ? std::vector<const char*>{"._scale.npy"}
                                            : ends_with(a, ".qdata.npy")
                                                ? std::vector<const char*>{".scale.npy"}
                                                : std::vector<const char*>{".scale.npy", ".scale_inv.npy",
                                                                           ".tensor_scale_inv.npy"};
      for (const char* suf : sufs)
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
      const bool torchao_codes = ends_with(s.t.name, ".qdata") || ends_with(s.t.name, "._data");
      if (f.npy && (ends_with(s.t.name, ".data") || torchao_codes)) {
        const size_t cut = torchao_codes ? 6 : 5;
        const fs::path mj = f.path.parent_path() / (s.t.name.substr(0, s.t.name.size() - cut) + ".meta.json");
        if (fs::exists(mj)) s.meta = io::parse_meta_json(io::read_all(mj), mj.string());
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
