#include "mxsim/io/quant_meta.hpp"

#include <climits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "mxsim/format.hpp"

namespace mxsim::io {
namespace {

constexpr size_t kMaxDim = size_t(1) << 48;

const std::string& need(const std::map<std::string, std::string>& kv, const std::string& key, const std::string& label) {
  const auto it = kv.find(key);
  if (it == kv.end())
    throw IoError(label + ": no '" + key + "' in the metadata (the mxsim layout needs what `mxsim quantize` records)");
  return it->second;
}

size_t product(const std::vector<size_t>& d, const std::string& what) {
  try {
    return numel_of(d);
  } catch (const std::overflow_error&) {
    throw IoError(what + ": " + shape_str(d) + " has too many elements");
  }
}

}  // namespace

std::map<std::string, std::string> parse_meta_json(std::span<const uint8_t> bytes, const std::string& label) {
  using J = nlohmann::ordered_json;
  std::string dup;
  std::vector<std::string> seen;
  const J::parser_callback_t cb = [&](int depth, J::parse_event_t ev, J& v) {
    using E = J::parse_event_t;
    if ((ev == E::object_start || ev == E::array_start) && depth >= kMaxMetaJsonDepth)
      throw IoError(label + ": JSON nests deeper than " + std::to_string(kMaxMetaJsonDepth) + " levels");
    if (ev == E::key && depth == 1) {
      const std::string k = v.get<std::string>();
      for (const auto& s : seen)
        if (s == k && dup.empty()) dup = k;
      seen.push_back(k);
    }
    return true;
  };
  J j;
  try {
    j = J::parse(bytes.begin(), bytes.end(), cb, true);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(label + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw IoError(label + ": not a JSON object");
  if (!dup.empty()) throw IoError(label + ": key '" + dup + "' given twice");
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : j.items()) {
    try {
      out[k] = v.is_string() ? v.get<std::string>() : v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } catch (const nlohmann::json::exception& e) {
      throw IoError(label + ": key '" + k + "': " + e.what());
    }
  }
  return out;
}

std::vector<size_t> parse_dims(const std::string& text, const std::string& what) {
  std::vector<size_t> v;
  const auto bad = [&] { return IoError(what + ": '" + text + "' is not a list of sizes"); };
  // JSON: a list of unsigned integers.
  if (!text.empty() && text.front() == '[') {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text, nullptr, true);
    } catch (const nlohmann::json::exception&) {
      j = nullptr;  // may still be the "[1x32]" form below
    }
    if (j.is_array()) {
      for (const auto& e : j) {
        if (!e.is_number_unsigned() || e.get<uint64_t>() > kMaxDim) throw bad();
        v.push_back(size_t(e.get<uint64_t>()));
      }
      return v;
    }
  }
  // "1x32", "1, 32": digits separated by x, comma, blanks or brackets.
  size_t cur = 0;
  bool digit = false;
  for (char c : text) {
    if (c >= '0' && c <= '9') {
      cur = cur * 10 + size_t(c - '0');
      if (cur > kMaxDim) throw bad();
      digit = true;
    } else if (c == 'x' || c == ',' || c == ' ' || c == '[' || c == ']') {
      if (digit) v.push_back(cur);
      cur = 0;
      digit = false;
    } else {
      throw bad();
    }
  }
  if (digit) v.push_back(cur);
  if (v.empty()) throw bad();
  return v;
}

QuantMeta quant_meta(const std::map<std::string, std::string>& kv, const std::string& label) {
  QuantMeta m;
  const std::string& ef = need(kv, "elem_format", label);
  if (!format_from_name(ef, m.spec.elem)) throw IoError(label + ": unknown elem_format '" + ef + "'");
  const std::string& sk = need(kv, "scale_kind", label);
  if (sk == "e8m0") m.spec.scale_kind = ScaleKind::E8M0;
  else if (sk == "fp32") m.spec.scale_kind = ScaleKind::FP32;
  else if (sk == "ue4m3") m.spec.scale_kind = ScaleKind::UE4M3;
  else throw IoError(label + ": unknown scale_kind '" + sk + "' (e8m0, fp32 or ue4m3)");
  const auto blk = parse_dims(need(kv, "block", label), label + ": block");
  if (blk.size() != 2 || blk[0] > size_t(INT_MAX) || blk[1] > size_t(INT_MAX))
    throw IoError(label + ": block " + shape_str(blk) + " is not [rows, cols] of at most " + std::to_string(INT_MAX));
  if (blk[0] == 0 || blk[1] == 0)
    throw IoError(label + ": block " + shape_str(blk) + " has a block size of 0 (each is at least 1)");
  m.spec.block_rows = int(blk[0]);
  m.spec.block_cols = int(blk[1]);
  const auto ls = parse_dims(need(kv, "logical_shape", label), label + ": logical_shape");
  if (ls.size() != 3) throw IoError(label + ": logical_shape " + shape_str(ls) + " is not [groups, rows, cols]");
  m.groups = ls[0];
  m.rows = ls[1];
  m.cols = ls[2];
  product(ls, label + ": logical_shape");
  m.shape = parse_dims(need(kv, "shape", label), label + ": shape");
  if (m.shape.empty() || m.shape.size() > 3) throw IoError(label + ": shape " + shape_str(m.shape) + " is not 1-D to 3-D");
  if (product(m.shape, label + ": shape") != product(ls, label + ": logical_shape"))
    throw IoError(label + ": shape " + shape_str(m.shape) + " and logical_shape " + shape_str(ls) +
                  " hold different element counts");
  const auto t = kv.find("transposed");
  if (t != kv.end() && t->second != "true" && t->second != "false")
    throw IoError(label + ": transposed must be true or false, not '" + t->second + "'");
  m.transposed = t != kv.end() && t->second == "true";
  return m;
}

}  // namespace mxsim::io
