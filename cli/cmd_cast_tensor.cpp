// mxsim cast --input X.npy: every value of a tensor through the one
// conversion of CastOptions::code_of (encode_f64, or the E8M0 scale rule),
// written as a .npy of codes and optionally one of their values, all or
// nothing (AtomicOutputs). docs/cli.md "Tensor mode".
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "cast.hpp"
#include "mxsim/io/atomic_output.hpp"
#include "mxsim/io/npy.hpp"
#include "tensor_io.hpp"

namespace fs = std::filesystem;

namespace mxsim::cli {
namespace {

/// "[1, 3]": the multi-index of flat element i of a C-order array.
std::string index_str(size_t i, const std::vector<size_t>& shape) {
  std::vector<size_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? i / shape[d] : 0;
  }
  return io::shape_str(idx);
}

/// The FP64 bits of element i of an F32 / F16 / BF16 / F64 tensor (exact widening).
struct Values {
  const io::RawTensor& t;
  uint64_t bits(size_t i) const {
    switch (t.dtype) {
      case io::DType::F64: {
        uint64_t b;
        std::memcpy(&b, t.bytes.data() + 8 * i, 8);
        return b;
      }
      case io::DType::F32: {
        uint32_t b;
        std::memcpy(&b, t.bytes.data() + 4 * i, 4);
        return f64_bits(double(f32_from_bits(b)));
      }
      case io::DType::BF16:
      case io::DType::F16: {
        const uint32_t h = uint32_t(t.bytes[2 * i]) | uint32_t(t.bytes[2 * i + 1]) << 8;
        if (t.dtype == io::DType::BF16) return f64_bits(double(f32_from_bits(h << 16)));
        // An input value, not a decoded code: a NaN keeps its sign for the encoder's NaN rule
        // (docs/numerics.md §2.3), as F32 and BF16 inputs and Python's encode of float16 do.
        if (is_nan_code(spec_of(Format::FP16), h)) return (uint64_t(h >> 15) << 63) | 0x7FF8000000000000ull;
        return f64_bits(double(decode(Format::FP16, h)));
      }
      default: return 0;
    }
  }
};

bool is_nan64(uint64_t b) { return (b & ~(uint64_t(1) << 63)) > 0x7FF0000000000000ull; }

}  // namespace

int cast_tensor(const Parsed& p, const CastOptions& opts, OutputFormat outfmt) {
  Notes notes{"cast", {}};
  const fs::path in = p.str("input");
  const std::string nan_policy = p.str("nan");
  if (nan_policy != "encode" && nan_policy != "error")
    throw UsageError("--nan must be encode or error, not '" + nan_policy + "'");
  if (!p.has("output")) throw UsageError("--input needs -o CODES.npy (where the codes go)");

  io::RawTensor t = io::read_npy(in);  // IoError "<file>: <problem>" for unreadable or malformed files
  const std::string where = in.string();
  if (t.dtype != io::DType::F32 && t.dtype != io::DType::F16 && t.dtype != io::DType::BF16 && t.dtype != io::DType::F64)
    throw std::runtime_error(where + ": dtype " + io::name_of(t.dtype) + " is not a floating dtype (cast reads F32, F16, BF16, F64 .npy)");
  const size_t n = t.numel();
  const Values vals{t};
  // The tensor's dtype is the source format: F16 -> FP32 widens (Inf stays Inf under any --overflow).
  CastOptions o = opts;
  if (t.dtype == io::DType::F32) o.source = Format::FP32;
  else if (t.dtype == io::DType::F16) o.source = Format::FP16;
  else if (t.dtype == io::DType::BF16) o.source = Format::BF16;

  std::vector<uint32_t> rand;
  if (o.mode == RoundMode::Stochastic) {
    const fs::path rf = p.str("rand-file");
    io::RawTensor r = io::read_npy(rf);
    if (r.dtype != io::DType::U32)
      throw std::runtime_error(rf.string() + ": --rand-file must be uint32 ('<u4'), not " + io::name_of(r.dtype));
    if (r.shape != t.shape)
      throw std::runtime_error(rf.string() + ": --rand-file shape " + r.shape_str() + " differs from the input's " +
                               t.shape_str() + " (one random word per element)");
    rand.resize(n);
    if (n) std::memcpy(rand.data(), r.bytes.data(), 4 * n);
  }

  // NaN inputs: counted, refused under --nan error.
  size_t nans = 0, first_nan = 0;
  for (size_t i = 0; i < n; ++i)
    if (is_nan64(vals.bits(i)) && nans++ == 0) first_nan = i;
  if (nans && nan_policy == "error")
    throw std::runtime_error(where + ": " + std::to_string(nans) + " NaN value" + (nans > 1 ? "s" : "") + " (first at " +
                             index_str(first_nan, t.shape) + ") and --nan error (--nan encode gives the format's NaN code" +
                             (o.f.nan == NanKind::None ? ", here +max: " + std::string(short_name(o.to)) + " has no NaN" : "") +
                             ")");

  const FormatSpec& f = o.f;
  const int bytes = f.bits <= 8 ? 1 : f.bits <= 16 ? 2 : 4;
  io::RawTensor codes{t.name, bytes == 1 ? io::DType::U8 : bytes == 2 ? io::DType::U16 : io::DType::U32, t.shape, {}};
  codes.bytes.resize(n * size_t(bytes));
  std::vector<float> dec(p.has("decoded") ? n : 0);
  struct Counts {
    size_t zero = 0, subnormal = 0, normal = 0, max = 0, inf = 0, nan = 0, exact = 0;
  } c;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t xb = vals.bits(i);
    const uint32_t code = o.code_of(xb, rand.empty() ? 0u : rand[i]);
    std::memcpy(codes.bytes.data() + i * size_t(bytes), &code, size_t(bytes));  // little-endian host
    const float d = decode(f, code);
    if (!dec.empty()) dec[i] = d;
    const std::string cls = code_class(f, code);
    if (cls == "zero") ++c.zero;
    else if (cls == "subnormal") ++c.subnormal;
    else if (cls == "normal") ++c.normal;
    else if (cls == "max") ++c.max;
    else if (cls == "inf") ++c.inf;
    else ++c.nan;
    const double x = f64_from_bits(xb);
    if (!o.rule && ((std::isnan(x) && std::isnan(d)) || std::ldexp(double(d), o.scale_exp) == x)) ++c.exact;
  }
  if (nans && f.nan == NanKind::None)
    notes.add(where + ": " + std::to_string(nans) + " NaN value" + (nans > 1 ? "s" : "") + " became +max (" +
              hex_code(f.max_code(), f.bits) + "): " + short_name(o.to) + " has no NaN (--nan error refuses them)");

  // All or nothing: both files go to temporaries and are renamed together.
  io::AtomicOutputs outputs;
  std::vector<InputPath> inputs{{in}};
  if (p.has("rand-file")) inputs.push_back({p.str("rand-file"), "--rand-file input file"});
  const fs::path out = p.str("output");
  io::write_npy(add_output(outputs, out, inputs), codes);
  fs::path decoded;
  if (p.has("decoded")) {
    decoded = p.str("decoded");
    io::write_npy(add_output(outputs, decoded, inputs, "--decoded"), io::from_f32(t.name, t.shape, dec.data()));
  }
  outputs.commit();

  const char* dtype_out = bytes == 1 ? "uint8" : bytes == 2 ? "uint16" : "uint32";
  if (outfmt == OutputFormat::Json) {
    nlohmann::ordered_json j;
    j["command"] = "cast";
    j["input"] = in.string();
    j["shape"] = t.shape;
    j["dtype"] = io::name_of(t.dtype);
    conversion_json(j, o);
    j["codes"] = {{"file", out.string()}, {"dtype", dtype_out}};
    if (!decoded.empty()) j["decoded"] = {{"file", decoded.string()}, {"dtype", "float32"}};
    j["elements"] = n;
    if (!o.rule) j["exact"] = c.exact;
    j["nan_in"] = nans;
    j["classes"] = {{"zero", c.zero}, {"subnormal", c.subnormal}, {"normal", c.normal},
                    {"max", c.max},   {"inf", c.inf},             {"nan", c.nan}};
    j["notes"] = notes.items;
    print_json(j);
  } else if (outfmt == OutputFormat::Csv) {
    std::printf("%s", csv_row({"input", "shape", "dtype", "to", "elements", "exact", "nan_in", "zero", "subnormal", "normal",
                               "max", "inf", "nan", "codes", "decoded"})
                          .c_str());
    std::printf("%s", csv_row({in.string(), t.shape_str(), io::name_of(t.dtype), short_name(o.to), std::to_string(n),
                               o.rule ? "" : std::to_string(c.exact), std::to_string(nans), std::to_string(c.zero),
                               std::to_string(c.subnormal), std::to_string(c.normal), std::to_string(c.max),
                               std::to_string(c.inf), std::to_string(c.nan), out.string(), decoded.string()})
                          .c_str());
  } else {
    std::printf("cast %s %s %s -> %s", in.string().c_str(), t.shape_str().c_str(), io::name_of(t.dtype), short_name(o.to));
    if (o.rule) std::printf(" scale bytes, rule %s, element %s\n", name_of(*o.rule), short_name(o.elem));
    else
      std::printf(" (%s), round %s, overflow %s%s%s\n", f.name, name_of(o.mode), o.ovs.c_str(),
                  o.scale_exp ? (", scale 2^" + std::to_string(o.scale_exp)).c_str() : "", widening_note(o).c_str());
    std::printf("  codes:    %s (%s %s)\n", out.string().c_str(), dtype_out, t.shape_str().c_str());
    if (!decoded.empty()) std::printf("  decoded:  %s (float32 %s)\n", decoded.string().c_str(), t.shape_str().c_str());
    std::printf("  elements %zu", n);
    if (!o.rule) std::printf(": exact %zu, inexact %zu", c.exact, n - c.exact);
    std::printf("; zero %zu, subnormal %zu, normal %zu, max %zu, inf %zu, nan %zu (NaN in: %zu)\n", c.zero, c.subnormal,
                c.normal, c.max, c.inf, c.nan, nans);
  }
  return kExitOk;
}

}  // namespace mxsim::cli
