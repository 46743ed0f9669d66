#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "mxsim/io/safetensors.hpp"

namespace mxsim::io {
namespace {

constexpr uint64_t kMaxHeader = 100'000'000;  // huggingface/safetensors MAX_HEADER_SIZE

std::string q(const std::string& name) { return "tensor '" + name + "'"; }

// A header value as JSON text for a message, at most 80 characters (a shape may be a list of
// millions of numbers; the parser already refused nesting deeper than kMaxDepth).
std::string brief(const nlohmann::json& j) {
  std::string s = j.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}
// A valid header nests 3 levels (root, tensor entry, shape list); deeper JSON is refused while
// parsing, before anything formats or walks it recursively.
constexpr int kMaxDepth = 16;

bool as_size(const nlohmann::json& j, size_t& out) {
  if (!j.is_number_integer()) return false;
  if (j.is_number_unsigned()) {
    out = j.get<uint64_t>();
    return true;
  }
  const int64_t v = j.get<int64_t>();
  if (v < 0) return false;
  out = size_t(v);
  return true;
}

}  // namespace

const RawTensor* SafetensorsFile::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

SafetensorsFile parse_safetensors(std::span<const uint8_t> b, const std::string& label) {
  if (b.size() < 8)
    throw IoError(label + ": truncated: " + std::to_string(b.size()) + " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int k = 0; k < 8; ++k) n |= uint64_t(b[size_t(k)]) << (8 * k);
  if (n > kMaxHeader)
    throw IoError(label + ": header length " + std::to_string(n) + " exceeds the 100 MB limit (not a safetensors file?)");
  if (n > b.size() - 8)
    throw IoError(label + ": header length " + std::to_string(n) + " runs past the end of the " +
                  std::to_string(b.size()) + "-byte file (truncated or not a safetensors file)");
  const std::string_view text(reinterpret_cast<const char*>(b.data()) + 8, size_t(n));
  nlohmann::json j;
  // nlohmann keeps the last of duplicate object keys silently; a header that
  // names a tensor (or a field) twice is ambiguous, so it is rejected.
  std::vector<std::set<std::string>> keys;  // one set per open object
  std::string dup;
  const nlohmann::json::parser_callback_t cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& v) {
    using E = nlohmann::json::parse_event_t;
    if ((ev == E::object_start || ev == E::array_start) && depth >= kMaxDepth)
      throw IoError(label + ": header nests JSON deeper than " + std::to_string(kMaxDepth) + " levels (a header has 3)");
    if (ev == E::object_start) keys.emplace_back();
    else if (ev == E::object_end) keys.pop_back();
    else if (ev == E::key && !keys.empty() && !keys.back().insert(v.get<std::string>()).second && dup.empty())
      dup = v.get<std::string>();
    return true;
  };
  try {
    j = nlohmann::json::parse(text, cb);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number like 2e777
    throw IoError(label + ": header is not valid JSON: " + e.what());
  }
  if (!dup.empty()) throw IoError(label + ": header names the key '" + dup + "' twice in one object");
  if (!j.is_object()) throw IoError(label + ": header JSON is not an object");

  const size_t buf_off = 8 + size_t(n), buf_size = b.size() - buf_off;
  SafetensorsFile f;
  struct Span {
    size_t begin, end;
    size_t index;
  };
  std::vector<Span> spans;
  for (const auto& [name, e] : j.items()) {
    if (name == "__metadata__") {
      if (!e.is_object()) throw IoError(label + ": __metadata__ is not an object");
      for (const auto& [k, v] : e.items()) {
        if (!v.is_string()) throw IoError(label + ": __metadata__ entry '" + k + "' is not a string");
        f.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (!e.is_object()) throw IoError(label + ": " + q(name) + ": entry is not an object");
    for (const auto& [k, v] : e.items()) {
      (void)v;
      if (k != "dtype" && k != "shape" && k != "data_offsets")
        throw IoError(label + ": " + q(name) + ": unexpected key '" + k + "'");
    }
    if (!e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      throw IoError(label + ": " + q(name) + ": entry needs dtype, shape and data_offsets");
    RawTensor t;
    t.name = name;
    if (!e["dtype"].is_string()) throw IoError(label + ": " + q(name) + ": dtype is not a string");
    const std::string dt = e["dtype"].get<std::string>();
    if (!dtype_from_name(dt, t.dtype)) throw IoError(label + ": " + q(name) + ": unknown dtype '" + dt + "'");
    const auto& sh = e["shape"];
    if (!sh.is_array()) throw IoError(label + ": " + q(name) + ": shape is not a list");
    for (const auto& d : sh) {
      size_t v;
      if (!as_size(d, v)) throw IoError(label + ": " + q(name) + ": shape " + brief(sh) + " is not a list of non-negative integers");
      t.shape.push_back(v);
    }
    const auto& off = e["data_offsets"];
    size_t begin, end;
    if (!off.is_array() || off.size() != 2 || !as_size(off[0], begin) || !as_size(off[1], end))
      throw IoError(label + ": " + q(name) + ": data_offsets " + brief(off) + " is not two non-negative integers");
    if (begin > end) throw IoError(label + ": " + q(name) + ": data_offsets " + brief(off) + " has begin > end");
    if (end > buf_size)
      throw IoError(label + ": " + q(name) + ": data_offsets " + brief(off) + " run past the end of the " +
                    std::to_string(buf_size) + "-byte data buffer (truncated file?)");
    size_t numel;
    try {
      numel = t.numel();
    } catch (const std::overflow_error&) {
      throw IoError(label + ": " + q(name) + ": shape " + t.shape_str() + " is too large");
    }
    if (numel > SIZE_MAX / size_of(t.dtype))
      throw IoError(label + ": " + q(name) + ": shape " + t.shape_str() + " " + dt + " is too large");
    if (numel * size_of(t.dtype) != end - begin)
      throw IoError(label + ": " + q(name) + ": shape " + t.shape_str() + " " + dt + " needs " +
                    std::to_string(numel * size_of(t.dtype)) + " bytes but data_offsets " + brief(off) + " span " +
                    std::to_string(end - begin));
    spans.push_back({begin, end, f.tensors.size()});
    f.tensors.push_back(std::move(t));
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& c) {
    return a.begin != c.begin ? a.begin < c.begin : a.end < c.end;
  });
  size_t pos = 0;
  for (const auto& s : spans) {
    const auto& name = f.tensors[s.index].name;
    if (s.begin < pos) throw IoError(label + ": " + q(name) + ": data_offsets overlap another tensor's bytes");
    if (s.begin > pos)
      throw IoError(label + ": bytes " + std::to_string(pos) + ".." + std::to_string(s.begin) +
                    " of the data buffer belong to no tensor (gap before " + q(name) + ")");
    pos = s.end;
  }
  if (pos != buf_size)
    throw IoError(label + ": " + std::to_string(buf_size - pos) + " bytes at the end of the data buffer belong to no tensor");
  std::vector<RawTensor> ordered;
  ordered.reserve(spans.size());
  for (const auto& s : spans) {
    RawTensor& t = f.tensors[s.index];
    try {
      t.bytes.assign(b.begin() + ptrdiff_t(buf_off + s.begin), b.begin() + ptrdiff_t(buf_off + s.end));
    } catch (const std::bad_alloc&) {
      throw out_of_memory(label + ": " + q(t.name), s.end - s.begin);
    }
    ordered.push_back(std::move(t));
  }
  f.tensors = std::move(ordered);
  return f;
}

SafetensorsFile read_safetensors(const std::filesystem::path& file) {
  const auto bytes = read_all(file);
  return parse_safetensors(bytes, file.string());
}

std::vector<uint8_t> encode_safetensors(const std::vector<RawTensor>& tensors,
                                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& m = h["__metadata__"];
    m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
  }
  std::set<std::string> names;
  size_t off = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") throw IoError("invalid tensor name '" + t.name + "'");
    if (!names.insert(t.name).second) throw IoError(q(t.name) + " appears twice");
    if (t.bytes.size() != t.numel() * size_of(t.dtype))
      throw IoError(q(t.name) + ": " + std::to_string(t.bytes.size()) + " bytes do not match shape " + t.shape_str());
    auto& e = h[t.name];
    e["dtype"] = name_of(t.dtype);
    e["shape"] = t.shape;
    e["data_offsets"] = {off, off + t.bytes.size()};
    off += t.bytes.size();
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<uint8_t> out;
  out.reserve(8 + text.size() + off);
  for (int k = 0; k < 8; ++k) out.push_back(uint8_t(uint64_t(text.size()) >> (8 * k)));
  out.insert(out.end(), text.begin(), text.end());
  for (const auto& t : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

void write_safetensors(const std::filesystem::path& file, const std::vector<RawTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<uint8_t> bytes;
  try {
    bytes = encode_safetensors(tensors, metadata);
  } catch (const IoError& e) {
    throw IoError(file.string() + ": " + e.what());
  }
  write_file(file, bytes);
}

}  // namespace mxsim::io
