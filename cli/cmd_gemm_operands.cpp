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
  std::string tensor;  ///< the tensor's name in its files
  std::string layout;  ///< mxsim | torchao | te-* | bf16
  QuantizedTensor q;   ///< quantized operands
  Tensor3f bf16;       ///< BF16 operands: [groups, rows, cols] values, each a BF16 value
  size_t groups = 1, rows = 0, cols = 0;
  std::vector<InputFile> files;
  bool is_bf16() const { return layout == "bf16"; }
  QuantSpec spec() const { return is_bf16() ? emu::bf16_spec() : q.spec; }
  std::string what() const {
    std::string s = role + " ('" + tensor + "', " + layout;
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

Operand read_operand(const std::string& role, const std::vector<std::string>& paths, const std::optional<std::string>& want,
                     const std::string& layout, std::optional<Format> elem, int block, bool blocked, Notes& notes) {
  Operand o;
  QuantSources all;
  try {
    all = read_quant_inputs(paths, notes, o.files);
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {  // io errors name the file; say which operand it was
    throw std::runtime_error(role + ": " + e.what());
  }
  std::vector<QuantJob> jobs = find_quant_jobs(all, layout);
  if (want) {
    std::vector<QuantJob> kept;
    for (const auto& j : jobs)
      if (j.name == *want || j.base == *want) kept.push_back(j);
    jobs = kept;
  }
  const std::string opt = "--" + std::string(role == "A" ? "a" : "b") + "-tensor";
  if (jobs.size() > 1) {
    std::string names;
    for (const auto& j : jobs) names += (names.empty() ? "" : ", ") + j.name;
    throw UsageError(role + ": the files hold several quantized tensors (" + names + "); pick one with " + opt);
  }
  if (jobs.empty()) {
    // No codes + scales pair: a BF16 operand, the one float tensor (or the named one).
    std::vector<const io::RawTensor*> floats;
    for (const auto& [n, s] : all)
      if (is_float_values(s.t.dtype) && (!want || n == *want)) floats.push_back(&s.t);
    if (floats.size() == 1 && layout == "auto") {
      Operand b = bf16_operand(role, *floats[0]);
      b.files = std::move(o.files);
      return b;
    }
    std::string names;
    for (const auto& [n, s] : all) names += (names.empty() ? "" : ", ") + n + " " + io::name_of(s.t.dtype);
    if (want) throw std::runtime_error(role + ": no tensor '" + *want + "' among the tensors: " + (names.empty() ? "none" : names));
    throw std::runtime_error(role + ": no codes + scales pair (" + (layout == "auto" ? "any layout" : layout) +
                             ")" + (layout == "auto" ? " and not one float tensor (BF16 operand)" : "") +
                             " among the tensors: " + (names.empty() ? "none" : names) +
                             (floats.size() > 1 ? "; pick one with " + opt : ""));
  }
  const QuantJob& j = jobs[0];
  o.role = role;
  o.tensor = j.name;
  o.layout = j.layout;
  std::vector<size_t> shape;
  try {
    o.q = load_quantized(j, all, elem, block, shape, notes, blocked);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(role + ": tensor '" + j.name + "' (" + j.layout + " layout): " + e.what());
  }
  o.groups = o.q.groups;
  o.rows = o.q.rows;
  o.cols = o.q.cols;
  if (role == "A" && o.groups != 1)
    throw std::runtime_error("A: tensor '" + j.name + "' holds " + std::to_string(o.groups) +
                             " groups; A is one [M, K] matrix (the tokens of every group, in m_splits order)");
  return o;
}

/// "3,0,5" -> {3, 0, 5}: the text must be integers separated by commas.
std::vector<int64_t> parse_m_splits(const std::string& text) {
  std::vector<int64_t> v;
  size_t at = 0;
  while (true) {
    const size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    v.push_back(parse_int("--m-splits item " + std::to_string(v.size()), item, 0, INT64_MAX / 2));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return v;
}

Tensor2f read_accumulator(const std::string& path, size_t m, size_t n) {
  io::RawTensor t;
  try {
    t = io::read_npy(path);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("--accumulate: ") + e.what());
  }
  // F32 only: a conversion would change what the FP32 accumulator starts from.
  if (t.dtype != io::DType::F32)
    throw std::runtime_error("--accumulate " + path + ": the initial output must be FP32 ('<f4'), not " + io::name_of(t.dtype));
  if (t.shape != std::vector<size_t>{m, n})
    throw std::runtime_error("--accumulate " + path + ": shape " + t.shape_str() + ", but the output is " +
                             io::shape_str({m, n}) + " [M, N]");
  Tensor2f c = Tensor2f::from_shape({m, n});
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
      ("a", po::value<std::vector<std::string>>(), "operand mode: file of A [M, K] (repeatable: codes, scales, "
       "meta.json; or one float array for BF16)")
      ("b", po::value<std::vector<std::string>>(), "operand mode: file of B [N, K] or [G, N, K] (repeatable)")
      ("a-tensor", po::value<std::string>(), "A's tensor name when its files hold several")
      ("b-tensor", po::value<std::string>(), "B's tensor name when its files hold several")
      ("layout", po::value<std::string>()->default_value("auto"), "operand files: auto | mxsim | torchao | te")
      ("elem-dtype", po::value<std::string>(), "element format of U8 codes of both operands (as in dequantize)")
      ("a-elem-dtype", po::value<std::string>(), "element format of A's U8 codes (overrides --elem-dtype)")
      ("b-elem-dtype", po::value<std::string>(), "element format of B's U8 codes (overrides --elem-dtype)")
      ("block-size", po::value<std::string>(), "torchao block size along the last axis (default 32)")
      ("scale-layout", po::value<std::string>()->default_value("plain"),
       "torchao scales: plain [.., ceil(K/block)] | blocked (the swizzled 128 x 4 tiles of cuBLAS / CUTLASS "
       "block-scaled GEMMs, torchao to_blocked; padding never read)")
      ("m-splits", po::value<std::string>(), "rows of A per group of B, e.g. 3,0,5 (sum M; default: one group)")
      ("accumulate", po::value<std::string>(), "C.npy: FP32 [M, N] initial output the accumulator starts from")
      ("out-dtype", po::value<std::string>()->default_value("fp32"), "fp32 | bf16 (the FP32 accumulator, RNE once)")
      ("impl", po::value<std::string>()->default_value("fast"), "fast | reference (same bits; reference is the oracle)")
      ("output,o", po::value<std::string>(), "OUT.npy: the output [M, N] (none: summary only)");
}

bool operand_mode(const Parsed& p) { return p.has("a") || p.has("b"); }

int run_gemm_operands(const Parsed& p) {
  if (p.flag("csv")) throw UsageError("--csv: the operand mode prints text or --json");
  for (const char* r : {"m", "n", "k", "spread", "seed"})
    if (p.has(r))
      throw UsageError(std::string("--") + r + " belongs to the random-problem mode; the operand mode (--a, --b) takes none");
  for (const char* r : {"recipe-a", "recipe-b", "model"})
    if (!p.vm[r].defaulted())
      throw UsageError(std::string("--") + r + " belongs to the random-problem mode; the operands' files give their recipes");
  if (!p.has("a") || !p.has("b")) throw UsageError("the operand mode needs both --a and --b");
  const std::string layout = p.str("layout");
  if (layout != "auto" && layout != "mxsim" && layout != "torchao" && layout != "te")
    throw UsageError("--layout must be auto, mxsim, torchao or te, not '" + layout + "'");
  std::optional<Format> ea, eb;
  if (p.has("elem-dtype")) ea = eb = elem_from_name(p.str("elem-dtype"));
  if (p.has("a-elem-dtype")) ea = elem_from_name(p.str("a-elem-dtype"));
  if (p.has("b-elem-dtype")) eb = elem_from_name(p.str("b-elem-dtype"));
  const int block = int(int_option(p, "block-size", 1, 65536, 32));
  const bool blocked = scale_layout_option(p);
  const std::string od = p.str("out-dtype");
  if (od != "fp32" && od != "bf16") throw UsageError("--out-dtype must be fp32 or bf16, not '" + od + "'");
  const std::string impl = p.str("impl");
  if (impl != "fast" && impl != "reference") throw UsageError("--impl must be fast or reference, not '" + impl + "'");
  std::optional<std::vector<int64_t>> splits;
  if (p.has("m-splits")) splits = parse_m_splits(p.str("m-splits"));
  std::string out_path;
  if (p.has("output")) {
    out_path = p.str("output");
    if (fs::path(out_path).extension() != ".npy") throw UsageError("-o " + out_path + ": the output is one .npy file");
  }
  const auto opt_str = [&](const char* n) { return p.has(n) ? std::optional<std::string>(p.str(n)) : std::nullopt; };

  Notes notes{"gemm", {}};
  const Operand A = read_operand("A", p.vm["a"].as<std::vector<std::string>>(), opt_str("a-tensor"), layout, ea, block, blocked, notes);
  const Operand B = read_operand("B", p.vm["b"].as<std::vector<std::string>>(), opt_str("b-tensor"), layout, eb, block, blocked, notes);
  if (A.cols != B.cols)
    throw std::runtime_error("K differs: " + A.what() + " is " + io::shape_str(A.shape()) + " [M, K], " + B.what() +
                             " is " + io::shape_str(B.shape()) + (B.groups > 1 ? " [G, N, K]" : " [N, K]"));
  const char* cls = nullptr;
  try {
    cls = emu::gemm_class_name(A.spec(), B.spec());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(A.what() + " with " + B.what() + ": " + e.what());
  }
  const size_t M = A.rows, N = B.rows, K = A.cols;
  std::vector<int64_t> ms = splits ? *splits : std::vector<int64_t>{int64_t(M)};
  if (!splits && B.groups != 1)
    throw std::runtime_error(B.what() + " holds " + std::to_string(B.groups) +
                             " groups [G, N, K]; give --m-splits (rows of A per group)");
  if (ms.size() != B.groups)
    throw std::runtime_error("--m-splits has " + std::to_string(ms.size()) + " groups, but " + B.what() + " holds " +
                             std::to_string(B.groups) + (B.groups == 1 ? " (one [N, K] matrix)" : " [G, N, K]"));
  int64_t sum = 0;
  for (int64_t s : ms) sum += s;
  if (uint64_t(sum) != M)
    throw std::runtime_error("--m-splits sum to " + std::to_string(sum) + ", but " + A.what() + " has M = " +
                             std::to_string(M) + " rows");

  GemmOptions gopt;
  gopt.out = od == "bf16" ? Format::BF16 : Format::FP32;
  gopt.impl = impl == "reference" ? GemmImpl::Reference : GemmImpl::Fast;
  Tensor2f y;
  if (p.has("accumulate")) {
    y = read_accumulator(p.str("accumulate"), M, N);
    gopt.accumulate = true;
  }
  try {
    if (A.is_bf16()) {
      Tensor2f x = Tensor2f::from_shape({M, K});
      std::copy(A.bf16.begin(), A.bf16.end(), x.begin());
      emu::grouped_fprop(x, emu::bf16_spec(), B.bf16, emu::bf16_spec(), ms, y, gopt);
    } else {
      emu::grouped_fprop(A.q, B.q, ms, y, gopt);
    }
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(A.what() + " with " + B.what() + ": " + e.what());
  }

  io::RawTensor t;
  if (od == "fp32") {
    t = io::from_f32("y", {M, N}, y.data());
  } else {
    t = io::RawTensor{"y", io::DType::BF16, {M, N}, {}};
    t.bytes.resize(y.size() * 2);
    for (size_t i = 0; i < y.size(); ++i) {  // BF16 values already: the top halves of their FP32 bits
      const uint32_t c = round_bf16_code(f32_bits(y.data()[i]));
      t.bytes[2 * i] = uint8_t(c);
      t.bytes[2 * i + 1] = uint8_t(c >> 8);
    }
  }
  size_t nan = 0, inf = 0;
  for (float v : y) {
    nan += std::isnan(v);
    inf += std::isinf(v);
  }
  io::AtomicOutputs outputs;
  if (!out_path.empty()) {
    std::vector<InputFile> inputs = A.files;
    inputs.insert(inputs.end(), B.files.begin(), B.files.end());
    if (p.has("accumulate")) inputs.push_back({p.str("accumulate"), true, {}, {}});
    io::write_npy(add_output(outputs, out_path, inputs), t);
  }
  outputs.commit();

  if (p.flag("json")) {
    json j;
    j["command"] = "gemm";
    j["mode"] = "operands";
    j["class"] = cls;
    j["m"] = M;
    j["n"] = N;
    j["k"] = K;
    j["groups"] = B.groups;
    j["m_splits"] = ms;
    j["a"] = operand_json(A);
    j["b"] = operand_json(B);
    j["accumulate"] = p.has("accumulate") ? json(p.str("accumulate")) : json(nullptr);
    j["out_dtype"] = od;
    j["shape"] = {M, N};
    j["nan"] = nan;
    j["inf"] = inf;
    j["output"] = out_path.empty() ? json(nullptr) : json(out_path);
    j["notes"] = notes.items;
    print_json(j);
    return kExitOk;
  }
  std::printf("%s %s . %s %s: class %s, m_splits [", A.what().c_str(), io::shape_str(A.shape()).c_str(),
              B.what().c_str(), io::shape_str(B.shape()).c_str(), cls);
  for (size_t g = 0; g < ms.size(); ++g) std::printf("%s%lld", g ? ", " : "", (long long)ms[g]);
  std::printf("]%s\n", p.has("accumulate") ? (", accumulated into " + p.str("accumulate")).c_str() : "");
  std::printf("output: %s %s, NaN %zu, Inf %zu -> %s\n", io::shape_str({M, N}).c_str(), od.c_str(), nan, inf,
              out_path.empty() ? "none (summary only)" : out_path.c_str());
  return kExitOk;
}

}  // namespace mxsim::cli
