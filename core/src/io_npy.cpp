// .npy reader/writer: a small parser of the header's Python dict literal so
// that every malformed file gets an error naming the file and the problem
// (xtensor's xnpy reports "invalid header" without a file name and has no
// bfloat16).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>

#include "mxsim/io/npy.hpp"

namespace mxsim::io {
namespace {

struct HeaderParser {
  std::string_view s;
  size_t i = 0;
  const std::string& label;

  [[noreturn]] void fail(const std::string& what) const {
    throw IoError(label + ": malformed .npy header: " + what + " at header offset " + std::to_string(i) + " in \"" +
                  std::string(s) + "\"");
  }
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(std::string("expected '") + c + "'");
  }
  std::string str() {
    ws();
    if (i >= s.size() || (s[i] != '\'' && s[i] != '"')) fail("expected a string");
    const char q = s[i++];
    const size_t b = i;
    while (i < s.size() && s[i] != q) {
      if (s[i] == '\\') fail("escape sequences are not supported");
      ++i;
    }
    if (i >= s.size()) fail("unterminated string");
    return std::string(s.substr(b, i++ - b));
  }
  bool boolean() {
    ws();
    if (s.substr(i, 4) == "True") return i += 4, true;
    if (s.substr(i, 5) == "False") return i += 5, false;
    fail("expected True or False");
  }
  std::vector<size_t> tuple() {
    expect('(');
    std::vector<size_t> v;
    for (;;) {
      ws();
      if (eat(')')) return v;
      if (i >= s.size() || s[i] < '0' || s[i] > '9') fail("expected a non-negative integer in the shape");
      size_t x = 0;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
        if (x > (SIZE_MAX - 9) / 10) fail("shape dimension too large");
        x = x * 10 + size_t(s[i++] - '0');
      }
      if (i < s.size() && s[i] == 'L') ++i;  // Python 2 long suffix
      v.push_back(x);
      if (!eat(',')) {
        expect(')');
        return v;
      }
    }
  }
};

// numpy descr (little-endian or byte-order-free) of each io::DType that NumPy
// has; BF16 as ml_dtypes' bfloat16 saves it ('<V2', see npy.hpp).
struct Descr {
  const char* descr;
  DType dtype;
};
constexpr Descr kDescrs[] = {
    {"<f4", DType::F32}, {"<f2", DType::F16}, {"<f8", DType::F64}, {"|u1", DType::U8},  {"|i1", DType::I8},
    {"<u2", DType::U16}, {"<i2", DType::I16}, {"<u4", DType::U32}, {"<i4", DType::I32}, {"<u8", DType::U64},
    {"<i8", DType::I64}, {"|b1", DType::BOOL}, {"<c8", DType::C64}, {"<V2", DType::BF16},
};

std::optional<DType> descr_dtype(const std::string& d) {
  if (d == "bfloat16") return DType::BF16;
  // One-byte types: numpy writes '|u1'; '<u1' and 'u1' mean the same.
  std::string k = d;
  if (k.size() == 2) k = "|" + k;
  if (k.size() == 3 && k[0] == '<' && k[2] == '1' && k[1] != 'V') k[0] = '|';
  for (const auto& e : kDescrs)
    if (k == e.descr) return e.dtype;
  return std::nullopt;
}

uint32_t le(const uint8_t* p, int n) {
  uint32_t v = 0;
  for (int k = 0; k < n; ++k) v |= uint32_t(p[k]) << (8 * k);
  return v;
}

}  // namespace

std::string npy_descr(DType d) {
  for (const auto& e : kDescrs)
    if (e.dtype == d) return e.descr;
  throw IoError(std::string("dtype ") + name_of(d) + " has no .npy descr (NumPy has no such dtype; write a .safetensors file)");
}

namespace {
/// b: the file's first bytes (all of it, or at least the header when !with_data);
/// total: the file's size.
RawTensor parse_impl(std::span<const uint8_t> b, size_t total, const std::string& label, bool with_data) {
  if (b.size() < 8 || std::memcmp(b.data(), "\x93NUMPY", 6) != 0)
    throw IoError(label + ": bad magic: not a .npy file (expected \\x93NUMPY)");
  const int major = b[6], minor = b[7];
  if (!((major == 1 || major == 2 || major == 3) && minor == 0))
    throw IoError(label + ": unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                  " (1.0, 2.0, 3.0 are read)");
  const int len_bytes = major == 1 ? 2 : 4;
  if (total < size_t(8 + len_bytes)) throw IoError(label + ": truncated header (file ends in the header length)");
  const size_t hlen = le(b.data() + 8, len_bytes);
  const size_t data_off = 8 + size_t(len_bytes) + hlen;
  if (total < data_off)
    throw IoError(label + ": truncated header: header length " + std::to_string(hlen) + " runs past the end of the " +
                  std::to_string(total) + "-byte file");
  const std::string header(reinterpret_cast<const char*>(b.data()) + 8 + len_bytes, hlen);
  if (major < 3)
    for (unsigned char c : header)
      if (c >= 0x80) throw IoError(label + ": malformed .npy header: non-ASCII byte in a version " + std::to_string(major) + ".0 header");

  HeaderParser p{header, 0, label};
  std::optional<std::string> descr;
  std::optional<bool> fortran;
  std::optional<std::vector<size_t>> shape;
  p.expect('{');
  std::vector<std::string> seen;
  for (;;) {
    if (p.eat('}')) break;
    const std::string key = p.str();
    // Python's dict literal would keep the last value silently: ambiguous.
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) p.fail("key '" + key + "' appears twice");
    seen.push_back(key);
    p.expect(':');
    if (key == "descr") {
      p.ws();
      if (p.i < header.size() && header[p.i] == '[')
        throw IoError(label + ": unsupported dtype: structured arrays (a list descr) are not read");
      descr = p.str();
    } else if (key == "fortran_order") {
      fortran = p.boolean();
    } else if (key == "shape") {
      shape = p.tuple();
    } else {
      p.fail("unexpected key '" + key + "'");
    }
    if (!p.eat(',')) {
      p.expect('}');
      break;
    }
  }
  p.ws();
  if (p.i != header.size()) p.fail("text after the closing '}'");
  if (!descr) throw IoError(label + ": malformed .npy header: missing 'descr'");
  if (!fortran) throw IoError(label + ": malformed .npy header: missing 'fortran_order'");
  if (!shape) throw IoError(label + ": malformed .npy header: missing 'shape'");
  const auto dt = descr_dtype(*descr);
  if (!dt)
    throw IoError(label + ": unsupported dtype '" + *descr +
                  "' (read: '<f4' float32, '<f2' float16, '<f8' float64, '<V2'/'bfloat16' bfloat16, integers, bool, "
                  "'<c8' complex64; little-endian only)");
  if (*fortran)
    throw IoError(label + ": Fortran order is not supported (save a C-order array, e.g. np.ascontiguousarray)");

  RawTensor t;
  t.name = std::filesystem::path(label).stem().string();
  t.dtype = *dt;
  t.shape = *shape;
  size_t n;
  try {
    n = t.numel();
  } catch (const std::overflow_error&) {
    throw IoError(label + ": shape " + t.shape_str() + " is too large");
  }
  const size_t isz = size_of(t.dtype);
  if (n > SIZE_MAX / isz) throw IoError(label + ": shape " + t.shape_str() + " is too large");
  const size_t need = n * isz, have = total - data_off;
  if (have < need)
    throw IoError(label + ": truncated data: header says shape " + t.shape_str() + " " + *descr + " = " +
                  std::to_string(need) + " bytes, the file has " + std::to_string(have) + " after the header");
  if (have > need)
    throw IoError(label + ": " + std::to_string(have - need) + " unexpected trailing bytes after the data of shape " +
                  t.shape_str() + " " + *descr);
  if (with_data) {
    try {
      t.bytes.assign(b.begin() + ptrdiff_t(data_off), b.end());
    } catch (const std::bad_alloc&) {
      throw out_of_memory(label + ": tensor '" + t.name + "'", need);
    }
  }
  return t;
}
}  // namespace

RawTensor parse_npy(std::span<const uint8_t> b, const std::string& label) { return parse_impl(b, b.size(), label, true); }

RawTensor read_npy(const std::filesystem::path& file) {
  const auto bytes = read_all(file);
  return parse_npy(bytes, file.string());
}

RawTensor read_npy_header(const std::filesystem::path& file) {
  uint64_t size = 0;
  std::vector<uint8_t> head = read_prefix(file, 12, &size);
  if (head.size() >= 10 && std::memcmp(head.data(), "\x93NUMPY", 6) == 0) {
    const int len_bytes = head[6] == 1 ? 2 : 4;
    if (head.size() >= size_t(8 + len_bytes)) {
      const uint64_t want = 8 + uint64_t(len_bytes) + le(head.data() + 8, len_bytes);
      if (want <= size) head = read_prefix(file, want, &size);
    }
  }
  return parse_impl(head, size_t(size), file.string(), false);
}

std::vector<uint8_t> npy_header(DType dtype, const std::vector<size_t>& shape) {
  std::string h = "{'descr': '" + npy_descr(dtype) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) h += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) h += ",";
  h += "), }";
  // magic(6) + version(2) + length(2 or 4) + header + '\n' padded to 64.
  int major = 1;
  size_t prefix = 10;
  size_t total = (prefix + h.size() + 1 + 63) / 64 * 64;
  if (total - prefix > 65535) {
    major = 2;
    prefix = 12;
    total = (prefix + h.size() + 1 + 63) / 64 * 64;
  }
  h.append(total - prefix - h.size() - 1, ' ');
  h += '\n';
  std::vector<uint8_t> out(prefix + h.size());
  const uint8_t magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', uint8_t(major), 0};
  std::memcpy(out.data(), magic, 8);
  const size_t hl = h.size();
  for (size_t k = 0; k < prefix - 8; ++k) out[8 + k] = uint8_t(hl >> (8 * k));
  std::memcpy(out.data() + prefix, h.data(), h.size());
  return out;
}

namespace {
void check_npy_bytes(const RawTensor& t) {
  if (t.bytes.size() != byte_count(t.dtype, t.numel()))
    throw IoError("tensor '" + t.name + "': " + std::to_string(t.bytes.size()) + " bytes do not match shape " +
                  t.shape_str());
}
}  // namespace

std::vector<uint8_t> encode_npy(const RawTensor& t) {
  std::vector<uint8_t> out = npy_header(t.dtype, t.shape);
  check_npy_bytes(t);
  out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

void write_npy(const std::filesystem::path& file, const RawTensor& t) {
  const std::vector<uint8_t> head = npy_header(t.dtype, t.shape);
  check_npy_bytes(t);
  FileWriter w(file);  // header, then the data from where they are: no second copy of a large tensor
  w.write(head.data(), head.size());
  w.write(t.bytes.data(), t.bytes.size());
  w.close();
}

}  // namespace mxsim::io
