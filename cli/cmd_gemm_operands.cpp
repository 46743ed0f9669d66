// mxsim gemm --a A... --b B...: one GEMM reproduced from a dump. The operands
// are read exactly as `mxsim dequantize` reads them (quantized_inputs.hpp) and
// fed to emu::grouped_fprop, the API the Python module's grouped_fprop on
// QuantizedTensors uses; no arithmetic of its own lives here.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "gemm_operands.hpp"
#include "mxsim/bits.hpp"
#include "mxsim/emu/grouped_gemm.hpp"
#include "mxsim/io/atomic_output.hpp"
#include "mxsim/io/checked_size.hpp"
#include "mxsim/io/npy.hpp"
#include "mxsim/rounding.hpp"
#include "quantized_inputs.hpp"
#include "tensor_io.hpp"

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace mxsim::cli {
namespace {

/// One operand: a QuantizedTensor (codes + scales) or BF16 values.
struct Operand {
  std::string role;    ///< "A" or "B"
  std::string field;   ///< the field's name of the operand in this GEMM: X, W, dY
  std::string tensor;  ///< the tensor's name in its files
  std::string layout;  ///< mxsim | torchao | te-* | bf16
  QuantizedTensor q;   ///< quantized operands
  Tensor3f bf16;       ///< BF16 operands: [groups, rows, cols] values, each a BF16 value
  size_t groups = 1, rows = 0, cols = 0;
  std::vector<InputFile> files;
  bool transposed_copy = false;  ///< read as the logical transpose of the stored tensor (torchao backward copies)
  bool is_bf16() const { return layout == "bf16"; }
  QuantSpec spec() const { return is_bf16() ? emu::bf16_spec() : q.spec; }
  std::string what() const {
    std::string s = role + " (" + (field.empty() ? "" : field + ": ") + "'" + tensor + "', " + layout;
    if (!is_bf16()) s += ", " + q.spec.describe();
    return s + ")";
  }
  std::vector<size_t> shape() const {
    return groups == 1 ? std::vector<size_t>{rows, cols} : std::vector<size_t>{groups, rows, cols};
  }
};

bool is_float_values(io::DType d) { return io::is_quantizable(d) || io::is_quantizable_after_rounding(d); }

/// A float array taken as a BF16 operand. Values are never rounded: a value
/// that is not a BF16 value means the file is not the BF16 tensor the GEMM saw
/// (an FP32 master weight, say), and a silent RNE would hide that.
Operand bf16_operand(const std::string& role, const io::RawTensor& t) {
  Operand o;
  o.role = role;
  o.tensor = t.name;
  o.layout = "bf16";
  const auto& s = t.shape;
  if (s.size() == 3 && role == "B") {
    o.groups = s[0];
    o.rows = s[1];
    o.cols = s[2];
  } else if (s.size() == 2) {
    o.rows = s[0];
    o.cols = s[1];
  } else {
    throw std::runtime_error(role + ": tensor '" + t.name + "' has shape " + t.shape_str() + "; " +
                             (role == "A" ? "A is [M, K]" : "B is [N, K] or [G, N, K]"));
  }
  const std::vector<float> v = io::to_f32(t);  // exact for F32, F16, BF16; F64 rounded (checked below)
  for (size_t i = 0; i < v.size(); ++i) {
    double d = v[i];  // the value as stored
    if (t.dtype == io::DType::F64) std::memcpy(&d, t.bytes.data() + 8 * i, 8);
    if (std::isnan(d) || ((f32_bits(v[i]) & 0xFFFFu) == 0 && double(v[i]) == d)) continue;
    const size_t c = i % o.cols, r = (i / o.cols) % o.rows, g = i / (o.cols * o.rows);
    const std::string at = o.groups > 1 ? "[" + std::to_string(g) + ", " + std::to_string(r) + ", " + std::to_string(c) + "]"
                                        : "[" + std::to_string(r) + ", " + std::to_string(c) + "]";
    throw std::runtime_error(role + ": tensor '" + t.name + "' (" + io::name_of(t.dtype) + ") element " + at + " = " +
                             num(d, "%.17g") + " is not a BF16 value; BF16 operands are taken as they are, never "
                             "rounded (give the BF16 tensor the GEMM saw, or codes + scales)");
  }
  o.bf16 = Tensor3f::from_shape({o.groups, o.rows, o.cols});
  std::copy(v.begin(), v.end(), o.bf16.data());
  return o;
}

/// The operands named by `wants` (none: the one the files hold) from one
/// operand's files, read once. Several wants: wgrad's per-group tensors.
std::vector<Operand> read_operands(const std::string& role, const std::vector<std::string>& paths,
                                   const std::vector<std::string>& wants, const std::string& layout,
                                   std::optional<Format> elem, int block, bool blocked, int block_dim, Notes& notes) {
  QuantSources all;
  std::vector<InputFile> files;
  try {
    all = read_quant_inputs(paths, notes, files);
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {  // io errors name the file; say which operand it was
    throw std::runtime_error(role + ": " + e.what());
  }
  const std::vector<QuantJob> jobs_all = find_quant_jobs(all, layout);
  const std::string opt = "--" + std::string(role == "A" ? "a" : "b") + "-tensor";
  std::vector<Operand> out;
  const std::vector<std::optional<std::string>> picks =
      wants.empty() ? std::vector<std::optional<std::string>>{std::nullopt}
                    : std::vector<std::optional<std::string>>(wants.begin(), wants.end());
  for (const auto& want : picks) {
    std::vector<QuantJob> jobs;
    for (const auto& j : jobs_all)
      if (!want || j.name == *want || j.base == *want) jobs.push_back(j);
    if (jobs.size() > 1) {
      std::string names;
      for (const auto& j : jobs) names += (names.empty() ? "" : ", ") + j.name;
      throw UsageError(role + ": the files hold several quantized tensors (" + names + "); pick one with " + opt);
    }
    Operand o;
    if (jobs.empty()) {
      // No codes + scales pair: a BF16 operand, the one float tensor (or the named one).
      std::vector<const io::RawTensor*> floats;
      for (const auto& [n, s] : all)
        if (is_float_values(s.t.dtype) && (!want || n == *want)) floats.push_back(&s.t);
      if (floats.size() == 1 && layout == "auto") {
        o = bf16_operand(role, *floats[0]);
      } else {
        std::string names;
        for (const auto& [n, s] : all) names += (names.empty() ? "" : ", ") + n + " " + io::name_of(s.t.dtype);
        if (want) throw std::runtime_error(role + ": no tensor '" + *want + "' among the tensors: " + (names.empty() ? "none" : names));
        throw std::runtime_error(role + ": no codes + scales pair (" + (layout == "auto" ? "any layout" : layout) +
                                 ")" + (layout == "auto" ? " and not one float tensor (BF16 operand)" : "") +
                                 " among the tensors: " + (names.empty() ? "none" : names) +
                                 (floats.size() > 1 ? "; pick one with " + opt : ""));
      }
    } else {
      const QuantJob& j = jobs[0];
      o.role = role;
      o.tensor = j.name;
      o.layout = j.layout;
      std::vector<size_t> shape;
      try {
        o.q = load_quantized(j, all, elem, block, shape, notes, blocked, block_dim);
        note_unused_tensors(all, {j}, notes, &j.base);
      } catch (const std::invalid_argument& e) {
        throw std::runtime_error(role + ": tensor '" + j.name + "' (" + j.layout + " layout): " + e.what());
      }
      o.groups = o.q.groups;
      o.rows = o.q.rows;
      o.cols = o.q.cols;
      if (o.q.divides_by_scale())
        notes.add(role + ": tensor '" + j.name + "' (torchao Float8TrainingTensor): each _scale s enters the GEMM as "
                  "scale_inv = fl32(1 / s), as torchao's matmul passes _scale.reciprocal() to torch._scaled_mm "
                  "(torchao/float8/float8_ops.py addmm_float8_unwrapped); `mxsim dequantize` divides, fl32(code / s)");
    }
    o.files = files;
    out.push_back(std::move(o));
  }
  return out;
}

/// A stored copy taken as its logical transpose (torchao keeps no transposed
/// flag: its backward operands are the transposed copies themselves).
void transpose_operand(Operand& o) {
  o.q = transpose_logical(std::move(o.q));
  o.rows = o.q.rows;
  o.cols = o.q.cols;
  o.transposed_copy = true;
}

/// "3,0,5" -> {3, 0, 5}: the text must be integers separated by commas, whose
/// sum (the rows of A) fits int64: a sum that wrapped could equal M and pass.
std::vector<int64_t> parse_m_splits(const std::string& text) {
  std::vector<int64_t> v;
  std::vector<uint64_t> sizes;
  size_t at = 0;
  while (true) {
    const size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    v.push_back(parse_int("--m-splits item " + std::to_string(v.size()), item, 0, INT64_MAX));
    sizes.push_back(uint64_t(v.back()));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  try {
    io::checked_sum(sizes, "--m-splits", INT64_MAX);
  } catch (const std::overflow_error& e) {
    throw UsageError(std::string(e.what()) + " (the group sizes sum to M, the rows of A)");
  }
  return v;
}

/// The FP32 initial output of an accumulating GEMM (fprop / dgrad output, or
/// wgrad's main_grad), of exactly `shape`.
std::vector<float> read_accumulator(const std::string& path, const std::vector<size_t>& shape, const char* axes) {
  io::RawTensor t;
  try {
    t = io::read_npy(path);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("--accumulate: ") + e.what());
  }
  // F32 only: a conversion would change what the FP32 accumulator starts from.
  if (t.dtype != io::DType::F32)
    throw std::runtime_error("--accumulate " + path + ": the initial output must be FP32 ('<f4'), not " + io::name_of(t.dtype));
  if (t.shape != shape)
    throw std::runtime_error("--accumulate " + path + ": shape " + t.shape_str() + ", but the output is " +
                             io::shape_str(shape) + " " + axes);
  std::vector<float> c(t.bytes.size() / 4);
  std::memcpy(c.data(), t.bytes.data(), t.bytes.size());
  return c;
}

json operand_json(const Operand& o) {
  json j;
  j["tensor"] = o.tensor;
  j["layout"] = o.layout;
  j["elem"] = short_name(o.spec().elem);
  if (!o.is_bf16()) j["spec"] = o.q.spec.describe();
  j["shape"] = o.shape();
  j["files"] = json::array();
  for (const auto& f : o.files) j["files"].push_back(f.path.string());
  return j;
}

}  // namespace

void add_operand_options(po::options_description& opts) {
  opts.add_options()
      ("op", po::value<std::string>()->default_value("fprop"), "operand mode: the GEMM, fprop (Y = X W^T) | dgrad "
       "(dX = dY W) | wgrad (dW_g = dY_g^T X_g per group)")
      ("a", po::value<std::vector<std::string>>(), "operand mode: file of A (repeatable: codes, scales, meta.json; "
       "or one float array for BF16): fprop X [M, K], dgrad dY [M, N], wgrad dY [M, N] quantized along M")
      ("b", po::value<std::vector<std::string>>(), "operand mode: file of B (repeatable): fprop W [N, K] or [G, N, K], "
       "dgrad W quantized along N, wgrad X [M, K] quantized along M")
      ("a-tensor", po::value<std::vector<std::string>>(), "A's tensor name when its files hold several (wgrad: "
       "repeatable, one per non-empty group)")
      ("b-tensor", po::value<std::vector<std::string>>(), "B's tensor name when its files hold several (wgrad: repeatable)")
      ("layout", po::value<std::string>()->default_value("auto"),
       "operand files: auto | mxsim | torchao | te, or one layout name (as in dequantize)")
      ("elem-dtype", po::value<std::string>(), "element format of U8 codes of both operands (as in dequantize)")
      ("a-elem-dtype", po::value<std::string>(), "element format of A's U8 codes (overrides --elem-dtype)")
      ("b-elem-dtype", po::value<std::string>(), "element format of B's U8 codes (overrides --elem-dtype)")
      ("block-size", po::value<std::string>(), "torchao block size along the last axis (default 32)")
      ("scale-layout", po::value<std::string>()->default_value("plain"),
       "torchao scales: plain [.., ceil(K/block)] | blocked (the swizzled 128 x 4 tiles of cuBLAS / CUTLASS "
       "block-scaled GEMMs, torchao to_blocked; padding never read)")
      ("block-scaling-dim", po::value<std::string>(),
       "TE Float8BlockwiseQTensor operands: 1 (1 x 128) | 2 (128 x 128); default: from the scale_inv shape")
      ("m-splits", po::value<std::string>(), "tokens per group, e.g. 3,0,5 (sum M; default: one group)")
      ("accumulate", po::value<std::string>(), "C.npy: FP32 initial output the accumulator starts from (wgrad: "
       "main_grad [G, N, K], or [N, K] without --m-splits)")
      ("out-dtype", po::value<std::string>()->default_value("fp32"), "fp32 | bf16 (the FP32 accumulator, RNE once)")
      ("impl", po::value<std::string>()->default_value("fast"), "fast | reference (same bits; reference is the oracle)")
      ("output,o", po::value<std::string>(), "OUT.npy: the output (none: summary only)");
}

bool operand_mode(const Parsed& p) { return p.has("a") || p.has("b"); }

namespace {

enum class Form { Fprop, Dgrad, Wgrad };

std::vector<std::string> strs(const Parsed& p, const char* n) {
  return p.has(n) ? p.vm[n].as<std::vector<std::string>>() : std::vector<std::string>{};
}

/// How to give an operand quantized along the axis the form needs (for errors).
const char* axis_hint(Form f, bool w) {
  switch (f) {
    case Form::Fprop:
      return "fprop reads X and W quantized along K: mxsim `quantize --axis cols` (the default), TE _rowwise_*, "
             "torchao to_mx(t)";
    case Form::Dgrad:
      return w ? "dgrad reads W quantized along N: mxsim `quantize --axis rows` of W [N, K] (or 32x32 tiles), TE "
                 "_columnwise_data / _columnwise_scale_inv, torchao to_mx(w.t().contiguous()) [K, N]"
               : "dgrad reads dY quantized along N: mxsim `quantize --axis cols`, TE _rowwise_*, torchao to_mx(dy)";
    case Form::Wgrad:
      return "wgrad reads dY and X quantized along the tokens M, per group: mxsim `quantize --axis rows`, TE "
             "_columnwise_*, torchao to_mx(t.t().contiguous()) [.., M]";
  }
  return "";
}

/// The wgrad operand of each group: one whole tensor cut at the m_splits
/// (whole blocks only), or one tensor per non-empty group. An empty group gets
/// an empty tensor (rows = 0), as quantize_grouped_colwise gives.
std::vector<QuantizedTensor> wgrad_groups(const std::vector<Operand>& ops, const std::vector<int64_t>& ms,
                                          const std::string& name) {
  std::vector<QuantizedTensor> out;
  size_t nonempty = 0;
  for (int64_t m : ms) nonempty += m != 0;
  if (ops.size() == 1) {
    const Operand& o = ops[0];
    size_t m0 = 0;
    for (size_t g = 0; g < ms.size(); ++g) {
      try {
        out.push_back(slice_rows(o.q, m0, size_t(ms[g]), o.what()));
      } catch (const std::invalid_argument& e) {
        throw std::runtime_error(name + ", group " + std::to_string(g) + " (tokens " + std::to_string(m0) + " to " +
                                 std::to_string(m0 + size_t(ms[g])) + "): " + e.what() +
                                 "; wgrad operands are quantized per group (blocks never cross a group boundary), so "
                                 "give one tensor per non-empty group, or groups that start on block boundaries");
      }
      m0 += size_t(ms[g]);
    }
    return out;
  }
  if (ops.size() != nonempty)
    throw std::runtime_error(name + ": " + std::to_string(ops.size()) + " per-group tensors for " +
                             std::to_string(nonempty) + " non-empty groups of --m-splits (one per non-empty group, in "
                             "group order)");
  size_t i = 0;
  for (size_t g = 0; g < ms.size(); ++g) {
    if (ms[g] == 0) {
      QuantizedTensor q;
      q.spec = ops[0].q.spec;
      q.cols = ops[0].q.cols;
      q.transposed = true;
      out.push_back(std::move(q));
      continue;
    }
    const Operand& o = ops[i++];
    if (o.rows != size_t(ms[g]))
      throw std::runtime_error(name + ", group " + std::to_string(g) + ": " + o.what() + " has " +
                               std::to_string(o.rows) + " tokens, but --m-splits gives it " + std::to_string(ms[g]));
    out.push_back(o.q);
  }
  return out;
}

}  // namespace

int run_gemm_operands(const Parsed& p) {
  if (p.flag("csv")) throw UsageError("--csv: the operand mode prints text or --json");
  for (const char* r : {"m", "n", "k", "spread", "seed"})
    if (p.has(r))
      throw UsageError(std::string("--") + r + " belongs to the random-problem mode; the operand mode (--a, --b) takes none");
  for (const char* r : {"recipe-a", "recipe-b", "model"})
    if (!p.vm[r].defaulted())
      throw UsageError(std::string("--") + r + " belongs to the random-problem mode; the operands' files give their recipes");
  if (!p.has("a") || !p.has("b")) throw UsageError("the operand mode needs both --a and --b");
  const std::string op = p.str("op");
  if (op != "fprop" && op != "dgrad" && op != "wgrad") throw UsageError("--op must be fprop, dgrad or wgrad, not '" + op + "'");
  const Form form = op == "fprop" ? Form::Fprop : op == "dgrad" ? Form::Dgrad : Form::Wgrad;
  const std::string layout = layout_option(p);
  std::optional<Format> ea, eb;
  if (p.has("elem-dtype")) ea = eb = elem_from_name(p.str("elem-dtype"));
  if (p.has("a-elem-dtype")) ea = elem_from_name(p.str("a-elem-dtype"));
  if (p.has("b-elem-dtype")) eb = elem_from_name(p.str("b-elem-dtype"));
  const int block = int(int_option(p, "block-size", 1, 65536, 32));
  const bool blocked = scale_layout_option(p);
  const int block_dim = block_scaling_dim_option(p);
  const std::string od = p.str("out-dtype");
  if (od != "fp32" && od != "bf16") throw UsageError("--out-dtype must be fp32 or bf16, not '" + od + "'");
  const std::string impl = p.str("impl");
  if (impl != "fast" && impl != "reference") throw UsageError("--impl must be fast or reference, not '" + impl + "'");
  std::optional<std::vector<int64_t>> splits;
  if (p.has("m-splits")) splits = parse_m_splits(p.str("m-splits"));
  const std::vector<std::string> wa = strs(p, "a-tensor"), wb = strs(p, "b-tensor");
  if (form != Form::Wgrad && (wa.size() > 1 || wb.size() > 1))
    throw UsageError(std::string(wa.size() > 1 ? "--a-tensor" : "--b-tensor") + " is given more than once; only "
                     "--op wgrad takes one tensor per group");
  std::string out_path;
  if (p.has("output")) {
    out_path = p.str("output");
    if (fs::path(out_path).extension() != ".npy") throw UsageError("-o " + out_path + ": the output is one .npy file");
  }

  // Field names of the operands: fprop X . W^T, dgrad dY . W, wgrad dY^T . X.
  const char* na = form == Form::Fprop ? "A (X)" : "A (dY)";
  const char* nb = form == Form::Wgrad ? "B (X)" : "B (W)";
  Notes notes{"gemm", {}};
  std::vector<Operand> As = read_operands("A", strs(p, "a"), wa, layout, ea, block, blocked, block_dim, notes);
  std::vector<Operand> Bs = read_operands("B", strs(p, "b"), wb, layout, eb, block, blocked, block_dim, notes);
  {
    std::vector<std::string> lays;
    for (const auto* v : {&As, &Bs})
      for (const auto& o : *v) lays.push_back(o.layout);
    check_scale_layout_used(blocked, lays);
  }
  for (Operand& o : As) o.field = form == Form::Fprop ? "X" : "dY";
  for (Operand& o : Bs) o.field = form == Form::Wgrad ? "X" : "W";
  // torchao tensors are the copies torchao's backward quantizes: W^T [K, N] for dgrad, dY^T [N, M] and X^T [K, M]
  // for wgrad, blocks along their last axis; read as the logical operands of the form.
  for (auto* v : {&As, &Bs})
    for (Operand& o : *v) {
      const bool is_a = v == &As;
      if (o.layout == "torchao" && (form == Form::Wgrad || (form == Form::Dgrad && !is_a))) transpose_operand(o);
    }
  const bool bf16 = As[0].is_bf16() || Bs[0].is_bf16();
  for (auto* v : {&As, &Bs})
    for (const Operand& o : *v) {
      const bool is_a = v == &As;
      if ((o.groups != 1 && (is_a || form == Form::Wgrad)))
        throw std::runtime_error(std::string(is_a ? na : nb) + ": tensor '" + o.tensor + "' holds " +
                                 std::to_string(o.groups) + " groups; " + (is_a ? na : nb) + " is one matrix (the "
                                 "tokens of every group, in m_splits order)");
      if (v->size() > 1 && o.is_bf16())
        throw std::runtime_error(std::string(is_a ? na : nb) + ": BF16 operands of wgrad are one [M, C] array, not one "
                                 "per group (tensor '" + o.tensor + "')");
    }
  const Operand& A = As[0];
  const Operand& B = Bs[0];
  // The class of the pair (the same for every group).
  const char* cls = nullptr;
  try {
    cls = emu::gemm_class_name(A.spec(), B.spec());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(A.what() + " with " + B.what() + ": " + e.what());
  }

  // Shapes. M tokens; N, K as the field names them (X [M, K], W [N, K], dY [M, N]).
  size_t M = 0, N = 0, K = 0, G = 1;
  if (form == Form::Fprop || form == Form::Dgrad) {
    M = A.rows;
    G = B.groups;
    const size_t a_c = A.cols;
    const size_t b_c = form == Form::Fprop ? B.cols : B.rows;  // the contraction extent of W
    const char* ax = form == Form::Fprop ? "K" : "N";
    if (a_c != b_c)
      throw std::runtime_error(std::string(ax) + " differs: " + A.what() + " is " + io::shape_str(A.shape()) +
                               (form == Form::Fprop ? " [M, K], " : " [M, N], ") + B.what() + " is " +
                               io::shape_str(B.shape()) + (B.groups > 1 ? " [G, N, K]" : " [N, K]") +
                               (B.transposed_copy ? " (read from the stored transpose)" : ""));
    N = form == Form::Fprop ? B.rows : A.cols;
    K = form == Form::Fprop ? A.cols : B.cols;
  } else {
    auto total = [&](const std::vector<Operand>& v) {
      std::vector<uint64_t> rows;
      for (const auto& o : v) rows.push_back(o.rows);
      try {
        return size_t(io::checked_sum(rows, std::string(&v == &As ? na : nb) + ": the tokens of the per-group tensors",
                                      INT64_MAX));
      } catch (const std::overflow_error& e) {
        throw std::runtime_error(e.what());
      }
    };
    M = total(As);
    N = A.cols;
    K = B.cols;
    for (const auto* v : {&As, &Bs})
      for (const Operand& o : *v)
        if (o.cols != (v == &As ? N : K))
          throw std::runtime_error(std::string(v == &As ? na : nb) + ": per-group tensors differ in width (" + o.what() +
                                   " is " + io::shape_str(o.shape()) + ")");
    if (total(Bs) != M)
      throw std::runtime_error("M differs: " + A.what() + " holds " + std::to_string(M) + " tokens, " + B.what() + " " +
                               std::to_string(total(Bs)) +
                               " (both are [M, .], the tokens of every group)");
  }
  std::vector<int64_t> ms = splits ? *splits : std::vector<int64_t>{int64_t(M)};
  if (form != Form::Wgrad) {
    if (!splits && B.groups != 1)
      throw std::runtime_error(B.what() + " holds " + std::to_string(B.groups) +
                               " groups [G, N, K]; give --m-splits (rows of A per group)");
    if (ms.size() != B.groups)
      throw std::runtime_error("--m-splits has " + std::to_string(ms.size()) + " groups, but " + B.what() + " holds " +
                               std::to_string(B.groups) + (B.groups == 1 ? " (one [N, K] matrix)" : " [G, N, K]"));
  }
  G = ms.size();
  int64_t sum = 0;
  for (int64_t s : ms) sum += s;  // fits: parse_m_splits checked it
  if (uint64_t(sum) != M)
    throw std::runtime_error("--m-splits sum to " + std::to_string(sum) + ", but " + A.what() + " has M = " +
                             std::to_string(M) + " rows");

  GemmOptions gopt;
  gopt.out = od == "bf16" ? Format::BF16 : Format::FP32;
  gopt.impl = impl == "reference" ? GemmImpl::Reference : GemmImpl::Fast;
  std::vector<size_t> oshape;
  if (form == Form::Fprop) oshape = {M, N};
  else if (form == Form::Dgrad) oshape = {M, K};
  else oshape = splits ? std::vector<size_t>{G, N, K} : std::vector<size_t>{N, K};
  const char* oaxes = form == Form::Fprop ? "[M, N]" : form == Form::Dgrad ? "[M, K]" : splits ? "[G, N, K]" : "[N, K]";
  std::vector<float> init;
  if (p.has("accumulate")) {
    init = read_accumulator(p.str("accumulate"), oshape, oaxes);
    gopt.accumulate = true;
  }
  auto as2 = [](const Operand& o) {  // a BF16 [rows, cols] operand as a matrix
    Tensor2f x = Tensor2f::from_shape({o.rows, o.cols});
    std::copy(o.bf16.begin(), o.bf16.end(), x.begin());
    return x;
  };
  std::vector<float> result;
  try {
    if (form == Form::Wgrad) {
      Tensor3f dw;
      if (gopt.accumulate) {
        dw = Tensor3f::from_shape({G, N, K});
        std::copy(init.begin(), init.end(), dw.begin());
      }
      if (bf16) {
        if (!A.is_bf16() || !B.is_bf16())
          throw std::invalid_argument("BF16 operands pair only with BF16 operands (got " + A.spec().describe() + " with " +
                                      B.spec().describe() + ")");
        emu::grouped_wgrad(as2(A), emu::bf16_spec(), as2(B), emu::bf16_spec(), ms, dw, gopt);
      } else {
        const auto dy = wgrad_groups(As, ms, na), x = wgrad_groups(Bs, ms, nb);
        emu::grouped_wgrad(dy, x, ms, dw, gopt);
      }
      result.assign(dw.begin(), dw.end());
    } else {
      Tensor2f y;
      if (gopt.accumulate) {
        y = Tensor2f::from_shape({oshape[0], oshape[1]});
        std::copy(init.begin(), init.end(), y.begin());
      }
      if (A.is_bf16() && B.is_bf16()) {
        if (form == Form::Fprop) emu::grouped_fprop(as2(A), emu::bf16_spec(), B.bf16, emu::bf16_spec(), ms, y, gopt);
        else emu::grouped_dgrad(as2(A), emu::bf16_spec(), B.bf16, emu::bf16_spec(), ms, y, gopt);
      } else if (A.is_bf16() || B.is_bf16()) {
        (void)emu::gemm_class_name(A.spec(), B.spec());  // throws: BF16 pairs only with BF16
      } else if (form == Form::Fprop) {
        emu::grouped_fprop(A.q, B.q, ms, y, gopt);
      } else {
        emu::grouped_dgrad(A.q, B.q, ms, y, gopt);
      }
      result.assign(y.begin(), y.end());
    }
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    const bool axis = m.find("along the contraction") != std::string::npos;
    throw std::runtime_error(A.what() + " with " + B.what() + ": " + m +
                             (axis ? std::string(" (") + axis_hint(form, m.find(": W (") != std::string::npos) + ")"
                                   : std::string()));
  }

  io::RawTensor t;
  if (od == "fp32") {
    t = io::from_f32("y", oshape, result.data());
  } else {
    t = io::RawTensor{"y", io::DType::BF16, oshape, {}};
    t.bytes.resize(result.size() * 2);
    for (size_t i = 0; i < result.size(); ++i) {  // BF16 values already: the top halves of their FP32 bits
      const uint32_t c = round_bf16_code(f32_bits(result[i]));
      t.bytes[2 * i] = uint8_t(c);
      t.bytes[2 * i + 1] = uint8_t(c >> 8);
    }
  }
  size_t nan = 0, inf = 0;
  for (float v : result) {
    nan += std::isnan(v);
    inf += std::isinf(v);
  }
  io::AtomicOutputs outputs;
  if (!out_path.empty()) {
    std::vector<InputPath> inputs;
    for (const auto* v : {&As, &Bs})
      for (const Operand& o : *v)
        for (const InputPath& f : input_paths(o.files))
          inputs.push_back({f.path, std::string(v == &As ? "--a" : "--b") + " input file"});
    if (p.has("accumulate")) inputs.push_back({p.str("accumulate"), "--accumulate input file"});
    io::write_npy(add_output(outputs, out_path, inputs), t);
  }
  outputs.commit();

  std::vector<size_t> ashape = A.shape(), bshape = B.shape();
  if (As.size() > 1) ashape = {M, N};
  if (Bs.size() > 1) bshape = {M, K};
  if (p.flag("json")) {
    json j;
    j["command"] = "gemm";
    j["mode"] = "operands";
    j["op"] = op;
    j["class"] = cls;
    j["m"] = M;
    j["n"] = N;
    j["k"] = K;
    j["groups"] = G;
    j["m_splits"] = ms;
    auto opj = [&](const std::vector<Operand>& v, const std::vector<size_t>& shape) {
      json o = operand_json(v[0]);
      o["shape"] = shape;
      o["transposed_copy"] = v[0].transposed_copy;
      if (v.size() > 1) {
        o["tensor"] = json::array();
        for (const auto& x : v) o["tensor"].push_back(x.tensor);
      }
      return o;
    };
    j["a"] = opj(As, ashape);
    j["b"] = opj(Bs, bshape);
    j["accumulate"] = p.has("accumulate") ? json(p.str("accumulate")) : json(nullptr);
    j["out_dtype"] = od;
    j["shape"] = oshape;
    j["nan"] = nan;
    j["inf"] = inf;
    j["output"] = out_path.empty() ? json(nullptr) : json(out_path);
    j["notes"] = notes.items;
    print_json(j);
    return kExitOk;
  }
  std::printf("%s: %s %s . %s %s: class %s, m_splits [", op.c_str(), A.what().c_str(), io::shape_str(ashape).c_str(),
              B.what().c_str(), io::shape_str(bshape).c_str(), cls);
  for (size_t g = 0; g < ms.size(); ++g) std::printf("%s%lld", g ? ", " : "", (long long)ms[g]);
  std::printf("]%s\n", p.has("accumulate") ? (", accumulated into " + p.str("accumulate")).c_str() : "");
  std::printf("output: %s %s, NaN %zu, Inf %zu -> %s\n", io::shape_str(oshape).c_str(), od.c_str(), nan, inf,
              out_path.empty() ? "none (summary only)" : out_path.c_str());
  return kExitOk;
}

}  // namespace mxsim::cli
