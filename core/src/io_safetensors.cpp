#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "mxsim/io/safetensors.hpp"

namespace mxsim::io {
namespace {

constexpr uint64_t kMaxHeader = 100'000'000;  // huggingface/safetensors MAX_HEADER_SIZE

std::string q(const std::string& name) { return "tensor '" + name + "'"; }

// A name for a message with every byte >= 0x80 or < 0x20 as \xNN, so that two names that differ
// only there (bytes that are not UTF-8) read differently.
std::string shown(const std::string& name) {
  std::string out;
  for (unsigned char c : name) {
    if (c >= 0x20 && c < 0x7F) {
      out += char(c);
      continue;
    }
    char b[5];
    std::snprintf(b, sizeof b, "\\x%02X", c);
    out += b;
  }
  return out;
}

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

namespace {
/// b: the file's first bytes (all of it, or at least the header when !with_data);
/// total: the file's size.
SafetensorsFile parse_impl(std::span<const uint8_t> b, size_t total, const std::string& label, bool with_data) {
  if (total < 8)
    throw IoError(label + ": truncated: " + std::to_string(total) + " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int k = 0; k < 8; ++k) n |= uint64_t(b[size_t(k)]) << (8 * k);
  if (n > kMaxHeader)
    throw IoError(label + ": header length " + std::to_string(n) + " exceeds the 100 MB limit (not a safetensors file?)");
  if (n > total - 8)
    throw IoError(label + ": header length " + std::to_string(n) + " runs past the end of the " +
                  std::to_string(total) + "-byte file (truncated or not a safetensors file)");
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

  const size_t buf_off = 8 + size_t(n), buf_size = total - buf_off;
  SafetensorsFile f;
  struct Span {
    size_t begin, end;
    size_t index;  ///< into f.tensors; SIZE_MAX for a tensor of unknown dtype
    std::string name;
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
    const bool known = dtype_from_name(dt, t.dtype);
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
    if (!known) {
      // A dtype newer than this reader: its bytes still occupy the buffer (so
      // the coverage checks below hold), but nothing can be said about them.
      f.unknown.push_back({name, dt, t.shape});
      spans.push_back({begin, end, SIZE_MAX, name});
      continue;
    }
    size_t numel, need;
    try {
      numel = t.numel();
    } catch (const std::overflow_error&) {
      throw IoError(label + ": " + q(name) + ": shape " + t.shape_str() + " is too large");
    }
    try {
      need = byte_count(t.dtype, numel);
    } catch (const std::overflow_error&) {
      throw IoError(label + ": " + q(name) + ": shape " + t.shape_str() + " " + dt + " is too large");
    } catch (const IoError& err) {
      throw IoError(label + ": " + q(name) + ": shape " + t.shape_str() + " " + dt + ": " + err.what());
    }
    if (need != end - begin)
      throw IoError(label + ": " + q(name) + ": shape " + t.shape_str() + " " + dt + " needs " +
                    std::to_string(need) + " bytes but data_offsets " + brief(off) + " span " +
                    std::to_string(end - begin));
    spans.push_back({begin, end, f.tensors.size(), name});
    f.tensors.push_back(std::move(t));
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& c) {
    return a.begin != c.begin ? a.begin < c.begin : a.end < c.end;
  });
  size_t pos = 0;
  for (const auto& s : spans) {
    const auto& name = s.name;
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
    if (s.index == SIZE_MAX) continue;
    RawTensor& t = f.tensors[s.index];
    if (with_data) {
      try {
        t.bytes.assign(b.begin() + ptrdiff_t(buf_off + s.begin), b.begin() + ptrdiff_t(buf_off + s.end));
      } catch (const std::bad_alloc&) {
        throw out_of_memory(label + ": " + q(t.name), s.end - s.begin);
      }
    }
    ordered.push_back(std::move(t));
    f.file_offsets.push_back(uint64_t(buf_off) + s.begin);
  }
  f.tensors = std::move(ordered);
  return f;
}
}  // namespace

SafetensorsFile parse_safetensors(std::span<const uint8_t> b, const std::string& label) {
  return parse_impl(b, b.size(), label, true);
}

SafetensorsFile read_safetensors(const std::filesystem::path& file) {
  const auto bytes = read_all(file);
  return parse_safetensors(bytes, file.string());
}

SafetensorsFile read_safetensors_header(const std::filesystem::path& file) {
  uint64_t size = 0;
  std::vector<uint8_t> head = read_prefix(file, 8, &size);
  if (head.size() == 8) {
    uint64_t n = 0;
    for (int k = 0; k < 8; ++k) n |= uint64_t(head[size_t(k)]) << (8 * k);
    if (n <= kMaxHeader && n <= size - 8) head = read_prefix(file, 8 + n, &size);
  }
  return parse_impl(head, size_t(size), file.string(), false);
}

namespace {
/// The 8-byte length and the JSON header of encode_safetensors (the data follow it).
std::vector<uint8_t> safetensors_header(const std::vector<RawTensor>& tensors,
                                        const std::map<std::string, std::string>& metadata) {
  // The header is assembled entry by entry: a JSON object library looks each
  // key up as it is added, which costs O(n^2) for a checkpoint's thousands of
  // tensors and metadata keys. Keys are unique by construction (checked here;
  // metadata is a std::map). Bytes that are not UTF-8 (a file name in the
  // metadata, say) are written as U+FFFD instead of failing.
  const auto str = [](const std::string& v) {
    return nlohmann::json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  // Keys must be unique as written, not only as given: two names that differ only in bytes that
  // are not UTF-8 would become one key, given twice (a header every reader refuses).
  const auto unique_keys = [&](auto&& each, const char* what) {
    std::map<std::string, std::string> written;  // key as written -> name as given
    each([&](const std::string& name) {
      const auto [it, fresh] = written.emplace(str(name), name);
      if (!fresh && it->second != name)
        throw IoError(std::string(what) + " '" + shown(it->second) + "' and '" + shown(name) + "' are both written as " +
                      it->first + ": safetensors keys are UTF-8 JSON strings, and bytes that are not UTF-8 become "
                      "U+FFFD; rename one of them (or its input file)");
    });
  };
  unique_keys([&](auto&& f) { for (const auto& t : tensors) f(t.name); }, "tensors");
  unique_keys([&](auto&& f) { for (const auto& [k, v] : metadata) f(k); }, "metadata keys");
  std::string text = "{";
  if (!metadata.empty()) {
    text += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) text += ',';
      first = false;
      text += str(k) + ":" + str(v);
    }
    text += "}";
  }
  std::set<std::string> names;
  size_t off = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") throw IoError("invalid tensor name '" + t.name + "'");
    if (!names.insert(t.name).second) throw IoError(q(t.name) + " appears twice");
    if (t.bytes.size() != byte_count(t.dtype, t.numel()))
      throw IoError(q(t.name) + ": " + std::to_string(t.bytes.size()) + " bytes do not match shape " + t.shape_str() +
                    " " + name_of(t.dtype));
    nlohmann::ordered_json e;
    e["dtype"] = name_of(t.dtype);
    e["shape"] = t.shape;
    e["data_offsets"] = {off, off + t.bytes.size()};
    if (text.size() > 1) text += ',';
    text += str(t.name) + ":" + e.dump();
    off += t.bytes.size();
  }
  text += "}";
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<uint8_t> out;
  out.reserve(8 + text.size());
  for (int k = 0; k < 8; ++k) out.push_back(uint8_t(uint64_t(text.size()) >> (8 * k)));
  out.insert(out.end(), text.begin(), text.end());
  return out;
}
}  // namespace

std::vector<uint8_t> encode_safetensors(const std::vector<RawTensor>& tensors,
                                        const std::map<std::string, std::string>& metadata) {
  std::vector<uint8_t> out = safetensors_header(tensors, metadata);
  for (const auto& t : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

void write_safetensors(const std::filesystem::path& file, const std::vector<RawTensor>& tensors,
                       const std::map<std::string, std::string>& metadata, const std::string& label) {
  std::vector<uint8_t> head;
  try {
    head = safetensors_header(tensors, metadata);
  } catch (const IoError& e) {
    throw IoError((label.empty() ? file.string() : label) + ": " + e.what());
  }
  FileWriter w(file);  // the header, then each tensor's bytes from where they are: no copy of the outputs
  w.write(head.data(), head.size());
  for (const auto& t : tensors) w.write(t.bytes.data(), t.bytes.size());
  w.close();
}

}  // namespace mxsim::io

namespace mxsim::io {

bool is_safetensors_index(const std::filesystem::path& file) {
  const std::string n = file.filename().string();
  return n.size() > 11 && n.compare(n.size() - 11, 11, ".index.json") == 0;
}

SafetensorsIndex read_safetensors_index(const std::filesystem::path& file) {
  const std::string label = file.string();
  const auto bytes = read_all(file);
  std::set<std::string> seen;
  std::string dup, top;
  // Only weight_map's own keys are tensor names; a name given twice is ambiguous
  // (the parser would keep one silently).
  const nlohmann::ordered_json::parser_callback_t cb = [&](int d, nlohmann::ordered_json::parse_event_t ev,
                                                          nlohmann::ordered_json& v) {
    using E = nlohmann::ordered_json::parse_event_t;
    if (ev == E::key && d == 1) top = v.get<std::string>();
    else if (ev == E::key && d == 2 && top == "weight_map" && !seen.insert(v.get<std::string>()).second && dup.empty())
      dup = v.get<std::string>();
    return true;
  };
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(bytes.begin(), bytes.end(), cb, true);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(label + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw IoError(label + ": not a JSON object (expected {\"weight_map\": {...}})");
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    throw IoError(label + ": no \"weight_map\" object (not a sharded-checkpoint index?)");
  if (!dup.empty()) throw IoError(label + ": weight_map names tensor '" + dup + "' twice");
  SafetensorsIndex ix;
  ix.file = file;
  const std::filesystem::path dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  for (const auto& [name, v] : j["weight_map"].items()) {
    if (!v.is_string()) throw IoError(label + ": weight_map entry '" + name + "' is not a string");
    const std::string shard = v.get<std::string>();
    const std::filesystem::path sp(shard);
    bool bad = shard.empty() || sp.is_absolute() || shard.find('\0') != std::string::npos;
    for (const auto& part : sp) bad = bad || part == "..";
    if (bad)
      throw IoError(label + ": weight_map entry '" + name + "': shard name '" + shard +
                    "' must be a relative path inside the index's folder");
    ix.weight_map.emplace_back(name, shard);
    const std::filesystem::path full = file.has_parent_path() ? dir / sp : sp;
    if (std::find(ix.shards.begin(), ix.shards.end(), full) == ix.shards.end()) ix.shards.push_back(full);
  }
  return ix;
}

std::vector<std::string> SafetensorsIndex::tensors_in(const std::filesystem::path& shard) const {
  const std::filesystem::path dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  std::vector<std::string> v;
  for (const auto& [t, s] : weight_map)
    if ((file.has_parent_path() ? dir / s : std::filesystem::path(s)) == shard) v.push_back(t);
  return v;
}

std::filesystem::path SafetensorsIndex::shard_of(const std::string& tensor) const {
  const std::filesystem::path dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  for (const auto& [t, s] : weight_map)
    if (t == tensor) return file.has_parent_path() ? dir / s : std::filesystem::path(s);
  return {};
}

}  // namespace mxsim::io
