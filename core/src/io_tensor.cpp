#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "mxsim/format.hpp"
#include "mxsim/io/checked_size.hpp"
#include "mxsim/io/tensor_file.hpp"
#include "mxsim/rounding.hpp"

static_assert(std::endian::native == std::endian::little, "tensor file I/O assumes a little-endian host");

namespace mxsim::io {
namespace {
struct DTypeInfo {
  DType d;
  const char* name;
  unsigned bits;
};
// The 22 dtypes of huggingface/safetensors (safetensors/src/tensor.rs, Dtype
// and its bitsize()).
constexpr DTypeInfo kDTypes[] = {
    {DType::BOOL, "BOOL", 8},         {DType::U8, "U8", 8},
    {DType::I8, "I8", 8},             {DType::U16, "U16", 16},
    {DType::I16, "I16", 16},          {DType::F16, "F16", 16},
    {DType::BF16, "BF16", 16},        {DType::U32, "U32", 32},
    {DType::I32, "I32", 32},          {DType::F32, "F32", 32},
    {DType::U64, "U64", 64},          {DType::I64, "I64", 64},
    {DType::F64, "F64", 64},          {DType::F8_E4M3, "F8_E4M3", 8},
    {DType::F8_E5M2, "F8_E5M2", 8},   {DType::F8_E8M0, "F8_E8M0", 8},
    {DType::F4, "F4", 4},             {DType::F6_E2M3, "F6_E2M3", 6},
    {DType::F6_E3M2, "F6_E3M2", 6},   {DType::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {DType::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8}, {DType::C64, "C64", 64},
};
}  // namespace

const char* name_of(DType d) {
  for (const auto& i : kDTypes)
    if (i.d == d) return i.name;
  return "?";
}
unsigned bits_of(DType d) {
  for (const auto& i : kDTypes)
    if (i.d == d) return i.bits;
  return 0;
}
size_t size_of(DType d) {
  const unsigned b = bits_of(d);
  return b % 8 ? 0 : b / 8;
}
size_t byte_count(DType d, size_t numel) {
  const size_t bits = bits_of(d);
  if (numel > SIZE_MAX / bits) throw std::overflow_error(std::string(name_of(d)) + " tensor of " + std::to_string(numel) + " elements is too large");
  if (numel * bits % 8)
    throw IoError(std::to_string(numel) + " elements of " + name_of(d) + " (" + std::to_string(bits) +
                  " bits each) are not a whole number of bytes");
  return numel * bits / 8;
}
bool dtype_from_name(std::string_view name, DType& out) {
  for (const auto& i : kDTypes)
    if (name == i.name) {
      out = i.d;
      return true;
    }
  return false;
}

size_t numel_of(const std::vector<size_t>& shape) {
  // The non-zero extents must multiply within size_t even when one extent is 0 (no elements):
  // code that takes the product of some axes (rows = all but the last) must not wrap either.
  uint64_t nonzero = 1;
  bool empty = false;
  for (size_t s : shape) {
    empty = empty || s == 0;
    if (s != 0 && !mul_size(nonzero, s, nonzero))
      throw std::overflow_error("tensor shape " + shape_str(shape) + " overflows size_t");
  }
  return empty ? 0 : size_t(nonzero);
}

size_t RawTensor::numel() const { return numel_of(shape); }

std::string shape_str(const std::vector<size_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string RawTensor::shape_str() const { return io::shape_str(shape); }

IoError out_of_memory(const std::string& what, uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", double(bytes) / double(uint64_t(1) << 30));
  return IoError(what + ": needs " + b + " GiB of memory");
}

std::vector<float> to_f32(const RawTensor& t, size_t* rounded) {
  const size_t n = t.numel();
  if (rounded) *rounded = 0;
  if (t.bytes.size() != byte_count(t.dtype, n))
    throw IoError("tensor '" + t.name + "': " + std::to_string(t.bytes.size()) + " bytes for shape " + t.shape_str() +
                  " " + name_of(t.dtype));
  std::vector<float> v;
  try {
    v.resize(n);
  } catch (const std::bad_alloc&) {
    throw out_of_memory("tensor '" + t.name + "' as FP32", uint64_t(n) * 4);
  }
  switch (t.dtype) {
    case DType::F32:
      std::memcpy(v.data(), t.bytes.data(), n * 4);
      break;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) {
        const uint32_t b = uint32_t(t.bytes[2 * i]) | uint32_t(t.bytes[2 * i + 1]) << 8;
        v[i] = std::bit_cast<float>(b << 16);
      }
      break;
    case DType::F16: {
      const FormatSpec& f16 = spec_of(Format::FP16);
      for (size_t i = 0; i < n; ++i) v[i] = decode(f16, uint32_t(t.bytes[2 * i]) | uint32_t(t.bytes[2 * i + 1]) << 8);
      break;
    }
    case DType::F64: {
      // One IEEE conversion per value: the host's default rounding mode is
      // round to nearest even (the project never changes it).
      size_t changed = 0;
      for (size_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, t.bytes.data() + 8 * i, 8);
        v[i] = static_cast<float>(d);
        if (!(double(v[i]) == d) && !(d != d)) ++changed;
      }
      if (rounded) *rounded = changed;
      break;
    }
    default:
      throw IoError("tensor '" + t.name + "': dtype " + name_of(t.dtype) +
                    " cannot be quantized (input dtypes: F32, F16, BF16; F64 after rounding to F32)");
  }
  return v;
}

RawTensor from_f32(std::string name, std::vector<size_t> shape, const float* v) {
  RawTensor t{std::move(name), DType::F32, std::move(shape), {}};
  t.bytes.resize(t.numel() * 4);
  if (!t.bytes.empty()) std::memcpy(t.bytes.data(), v, t.bytes.size());
  return t;
}

RawTensor from_u8(std::string name, std::vector<size_t> shape, const uint8_t* v) {
  RawTensor t{std::move(name), DType::U8, std::move(shape), {}};
  t.bytes.assign(v, v + t.numel());
  return t;
}

std::vector<uint8_t> read_prefix(const std::filesystem::path& file, uint64_t n, uint64_t* size_out) {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) throw IoError(file.string() + ": is a directory, not a file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IoError(file.string() + ": cannot open: " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) throw IoError(file.string() + ": cannot read its size");
  in.seekg(0);
  if (size_out) *size_out = uint64_t(size);
  const uint64_t want = std::min<uint64_t>(n, uint64_t(size));
  std::vector<uint8_t> b;
  try {
    b.resize(static_cast<size_t>(want));
  } catch (const std::bad_alloc&) {
    throw out_of_memory(file.string(), want);
  }
  if (want > 0 && !in.read(reinterpret_cast<char*>(b.data()), std::streamsize(want)))
    throw IoError(file.string() + ": read error");
  return b;
}

std::vector<uint8_t> read_all(const std::filesystem::path& file) {
  return read_prefix(file, UINT64_MAX, nullptr);
}

FileWriter::FileWriter(const std::filesystem::path& file) : file_(file) {
  fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd_ < 0) throw IoError(file.string() + ": cannot create: " + std::strerror(errno));
}

FileWriter::~FileWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  std::error_code ec;
  std::filesystem::remove(file_, ec);
}

void FileWriter::fail(const char* what) {
  const int err = errno;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  std::error_code ec;
  std::filesystem::remove(file_, ec);
  throw IoError(file_.string() + ": " + what + ": " + std::strerror(err));
}

void FileWriter::write(const void* data, size_t size) {
  if (fd_ < 0) throw IoError(file_.string() + ": write after close or failure");
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write error");
    }
    p += n;
    size -= size_t(n);
  }
}

void FileWriter::close(bool durable) {
  if (fd_ < 0) throw IoError(file_.string() + ": closed twice or after a failure");
  if (durable && ::fsync(fd_) != 0) fail("fsync failed");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    std::error_code ec;
    std::filesystem::remove(file_, ec);
    throw IoError(file_.string() + ": write error on close: " + std::strerror(err));
  }
}

void write_file(const std::filesystem::path& file, const void* data, size_t size, bool durable) {
  FileWriter w(file);
  w.write(data, size);
  w.close(durable);
}

static_assert(sizeof(off_t) == 8, "64-bit file offsets");

FileReader::FileReader(const std::filesystem::path& file) : file_(file) {
  fd_ = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw IoError(file.string() + ": cannot open: " + std::strerror(errno));
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

void FileReader::read(uint64_t offset, void* data, size_t size) const {
  auto* p = static_cast<char*>(data);
  uint64_t at = offset;
  while (size > 0) {
    const ssize_t n = ::pread(fd_, p, size, off_t(at));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(file_.string() + ": read error at byte " + std::to_string(at) + ": " + std::strerror(errno));
    }
    if (n == 0) throw IoError(file_.string() + ": ends before byte " + std::to_string(at + size));
    p += n;
    at += uint64_t(n);
    size -= size_t(n);
  }
}

void sync_path(const std::filesystem::path& path, bool dir) {
  const int fd = ::open(path.c_str(), (dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) throw IoError(path.string() + ": cannot open to fsync: " + std::strerror(errno));
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw IoError(path.string() + ": fsync failed: " + std::strerror(err));
  }
  ::close(fd);
}

FileKind detect_kind(const std::filesystem::path& file) {
  const auto ext = file.extension().string();
  if (ext == ".npy") return FileKind::Npy;
  if (ext == ".safetensors") return FileKind::Safetensors;
  std::ifstream in(file, std::ios::binary);
  if (!in) throw IoError(file.string() + ": cannot open: " + std::strerror(errno));
  char magic[6] = {};
  in.read(magic, 6);
  if (in.gcount() == 6 && std::memcmp(magic, "\x93NUMPY", 6) == 0) return FileKind::Npy;
  throw IoError(file.string() + ": cannot tell the file kind (expected a .npy or .safetensors file name, or the .npy magic)");
}

}  // namespace mxsim::io
