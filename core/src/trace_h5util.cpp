// HDF5 helpers + provenance (see trace_h5util.hpp, mxsim/trace/common.hpp).
#include "trace_h5util.hpp"

#include "mxsim/build_info.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <cstring>
#include <mutex>

namespace mxsim::trace {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::u32: return "u32";
    case DType::i64: return "i64";
    case DType::u64: return "u64";
  }
  return "?";
}

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::u8: return 1;
    case DType::f32: case DType::i32: case DType::u32: return 4;
    default: return 8;
  }
}

Provenance make_provenance(const std::string& backend, uint64_t seed) {
  Provenance p;
#ifdef MXSIM_VERSION
  p.version = MXSIM_VERSION;
#endif
  p.backend = backend;
  p.seed = seed;
  p.producer = kProducerSimulator;
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  p.date = buf;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) p.host = host;
  // The commit mxsim was built from, captured by the build: never the
  // repository of the directory the user happens to run mxsim in.
  p.git_describe = mxsim::build_commit();
  return p;
}

namespace detail {

void quiet_hdf5() {
  // The thread-safe HDF5 build keeps the error-printing setting per thread.
  thread_local bool quiet = false;
  if (!quiet) H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  quiet = true;
}

std::string hdf5_message() {
  std::vector<std::string> parts;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* e, void* data) -> herr_t {
        auto* v = static_cast<std::vector<std::string>*>(data);
        std::string s = e->func_name ? std::string(e->func_name) + ": " : std::string();
        if (e->desc) s += e->desc;
        v->push_back(s);
        return 0;
      },
      &parts);
  H5Eclear2(H5E_DEFAULT);
  // Each of the SWMR reader's attempts repeats the same entries: each is reported once.
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (std::find(parts.begin(), parts.begin() + std::ptrdiff_t(i), parts[i]) != parts.begin() + std::ptrdiff_t(i)) continue;
    if (!out.empty()) out += " <- ";
    out += parts[i];
  }
  return out;
}

void fail(const std::string& file, const std::string& what) {
  const std::string m = hdf5_message();
  throw TraceError(file + ": " + what + (m.empty() ? std::string() : " (HDF5: " + m + ")"));
}
void fail_reading(const std::string& file, const std::string& dataset, const std::string& what) {
  const std::string m = hdf5_message();
  throw TraceError(file + ": " + dataset + ": " + what + (m.empty() ? std::string() : " (HDF5: " + m + ")"), dataset);
}

hid_t file_type(DType t) {
  switch (t) {
    case DType::f32: return H5T_IEEE_F32LE;
    case DType::f64: return H5T_IEEE_F64LE;
    case DType::u8: return H5T_STD_U8LE;
    case DType::i32: return H5T_STD_I32LE;
    case DType::u32: return H5T_STD_U32LE;
    case DType::i64: return H5T_STD_I64LE;
    case DType::u64: return H5T_STD_U64LE;
  }
  return H5T_STD_U8LE;
}

hid_t native_type(DType t) {
  switch (t) {
    case DType::f32: return H5T_NATIVE_FLOAT;
    case DType::f64: return H5T_NATIVE_DOUBLE;
    case DType::u8: return H5T_NATIVE_UINT8;
    case DType::i32: return H5T_NATIVE_INT32;
    case DType::u32: return H5T_NATIVE_UINT32;
    case DType::i64: return H5T_NATIVE_INT64;
    case DType::u64: return H5T_NATIVE_UINT64;
  }
  return H5T_NATIVE_UINT8;
}

namespace {
std::string dims_str(const std::vector<hsize_t>& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

Stored stored_of(hid_t type_id, hid_t space_id, const std::string& file, const std::string& what) {
  Hid type(type_id, H5Tclose), space(space_id, H5Sclose);
  if (!type.valid() || !space.valid()) fail(file, what + ": cannot read its type or dataspace (corrupt file?)");
  Stored s;
  s.cls = H5Tget_class(type);
  s.size = H5Tget_size(type);
  if (s.cls == H5T_NO_CLASS || s.size == 0) fail(file, what + ": unreadable element type (corrupt file?)");
  if (s.cls == H5T_INTEGER) s.is_signed = H5Tget_sign(type) == H5T_SGN_2;
  if (s.cls == H5T_STRING) s.vlen_string = H5Tis_variable_str(type) > 0;
  const H5S_class_t sc = H5Sget_simple_extent_type(space);
  if (sc == H5S_SCALAR) {
    s.scalar = true;
    s.elements = 1;
  } else if (sc == H5S_NULL) {
    s.elements = 0;
  } else if (sc == H5S_SIMPLE) {
    s.dims = extent(space, file, what);
    s.elements = 1;
    for (hsize_t d : s.dims) {
      if (d != 0 && s.elements > UINT64_MAX / d)
        throw TraceError(file + ": " + what + ": extent " + dims_str(s.dims) + " overflows 64 bits");
      s.elements *= d;
    }
  } else {
    fail(file, what + ": unreadable dataspace (corrupt file?)");
  }
  return s;
}
}  // namespace

std::string Stored::describe() const {
  std::string t = cls == H5T_INTEGER  ? std::to_string(size) + "-byte " + (is_signed ? "signed" : "unsigned") + " integer"
                  : cls == H5T_FLOAT  ? std::to_string(size) + "-byte float"
                  : cls == H5T_STRING ? std::string(vlen_string ? "variable-length" : std::to_string(size) + "-byte") + " string"
                                      : "HDF5 type class " + std::to_string(int(cls));
  return t + " " + (scalar ? std::string("scalar") : dims.empty() && elements == 0 ? std::string("null dataspace") : dims_str(dims));
}

std::vector<hsize_t> extent(hid_t space, const std::string& file, const std::string& what) {
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) fail(file, what + ": cannot read its rank (corrupt file?)");
  if (rank > H5S_MAX_RANK) throw TraceError(file + ": " + what + ": rank " + std::to_string(rank) + " exceeds HDF5's 32");
  std::vector<hsize_t> d(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space, d.data(), nullptr) != rank)
    fail(file, what + ": cannot read its extent (corrupt file?)");
  return d;
}

Stored stored_dataset(hid_t dset, const std::string& file, const std::string& what) {
  return stored_of(H5Dget_type(dset), H5Dget_space(dset), file, what);
}
Stored stored_attr(hid_t attr, const std::string& file, const std::string& what) {
  return stored_of(H5Aget_type(attr), H5Aget_space(attr), file, what);
}

DType stored_dtype(const Stored& s, const std::string& file, const std::string& what) {
  if (s.cls == H5T_FLOAT && s.size == 4) return DType::f32;
  if (s.cls == H5T_FLOAT && s.size == 8) return DType::f64;
  if (s.cls == H5T_INTEGER) {
    if (s.size == 1 && !s.is_signed) return DType::u8;
    if (s.size == 4) return s.is_signed ? DType::i32 : DType::u32;
    if (s.size == 8) return s.is_signed ? DType::i64 : DType::u64;
  }
  throw TraceError(file + ": " + what + ": unsupported element type (" + s.describe() + ")");
}

void require(bool ok, const Stored& s, const std::string& expected, const std::string& file, const std::string& what) {
  if (!ok) throw TraceError(file + ": " + what + ": stored as " + s.describe() + ", expected " + expected);
}

void require_stored_bytes(hid_t d, uint64_t bytes, const std::string& file, const std::string& what) {
  Hid dcpl(H5Dget_create_plist(d), H5Pclose);
  if (!dcpl.valid()) fail(file, what + ": cannot read its creation properties (corrupt file?)");
  const int nf = H5Pget_nfilters(dcpl);
  if (nf < 0) fail(file, what + ": cannot read its filters (corrupt file?)");
  for (int i = 0; i < nf; ++i) {
    unsigned flags = 0, fcfg = 0;
    std::size_t ncd = 0;
    const H5Z_filter_t f = H5Pget_filter2(dcpl, unsigned(i), &flags, &ncd, nullptr, 0, nullptr, &fcfg);
    if (f < 0) fail(file, what + ": cannot read its filters (corrupt file?)");
    if (f != H5Z_FILTER_FLETCHER32 && f != H5Z_FILTER_SHUFFLE) return;  // compressed: may hold more than it stores
  }
  const hsize_t have = H5Dget_storage_size(d);
  if (have < bytes)
    throw TraceError(file + ": " + what + ": reading " + std::to_string(bytes) + " bytes, but the file stores only " +
                     std::to_string(have) + " for it (truncated, or not written by mxsim?)");
}

template <class T>
std::vector<T> buffer(uint64_t n, const std::string& file, const std::string& what) {
  const auto oom = [&] {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f", double(n) * double(sizeof(T)) / double(1u << 30));
    return TraceError(file + ": " + what + ": needs " + b + " GiB of memory to read");
  };
  if (n > SIZE_MAX / sizeof(T)) throw oom();
  try {
    return std::vector<T>(std::size_t(n));
  } catch (const std::bad_alloc&) {
    throw oom();
  } catch (const std::length_error&) {
    throw oom();
  }
}
template std::vector<unsigned char> buffer(uint64_t, const std::string&, const std::string&);
template std::vector<float> buffer(uint64_t, const std::string&, const std::string&);
template std::vector<uint64_t> buffer(uint64_t, const std::string&, const std::string&);
template std::vector<char> buffer(uint64_t, const std::string&, const std::string&);
template std::vector<int64_t> buffer(uint64_t, const std::string&, const std::string&);

std::vector<std::string> dataset_names(hid_t root, const std::string& file, const std::string& what) {
  std::vector<std::string> names;
  const herr_t rc = H5Ovisit(
      root, H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t, const char* name, const H5O_info_t* oi, void* p) -> herr_t {
        if (oi->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(p)->push_back(name);
        return 0;
      },
      &names);
  if (rc < 0) fail(file, what);
  return names;
}

void check_global_heaps(const std::string& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // H5Fopen reports it
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) return;
  const uint64_t size = uint64_t(sb.st_size);
  const uint64_t limit = size <= (uint64_t(256) << 20) ? size : uint64_t(16) << 20;
  auto read_at = [&](uint64_t off, void* buf, std::size_t n) {
    return off <= size && n <= size - off && ::pread(fd, buf, n, off_t(off)) == ssize_t(n);
  };
  auto le = [](const unsigned char* p, int n) {
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k) v = v << 8 | p[k];
    return v;
  };
  // Collection: "GCOL", version 1, 3 reserved bytes, 8-byte collection size (the default
  // "size of lengths"), then objects: 2-byte index, 2-byte reference count, 4 reserved, 8-byte
  // size, data padded to 8 bytes; index 0 is the free space, whose size includes its header
  // (HDF5 file format spec III.E; H5HG__cache_heap_deserialize).
  std::vector<unsigned char> block(std::size_t(1) << 20);
  for (uint64_t base = 0; base < limit; base += block.size() - 16) {
    const std::size_t n = std::size_t(std::min<uint64_t>(block.size(), size - base));
    if (!read_at(base, block.data(), n)) return;
    static const unsigned char sig[8] = {'G', 'C', 'O', 'L', 1, 0, 0, 0};
    // Headers starting at 0 .. n - 16 are whole in this block; later ones are whole in the next
    // block, which overlaps this one by 16 bytes.
    for (std::size_t from = 0; n >= 16 && from <= n - 16;) {
      const void* hit = memmem(block.data() + from, n - 8 - from, sig, 8);
      if (!hit) break;
      const std::size_t i = std::size_t(static_cast<const unsigned char*>(hit) - block.data());
      from = i + 1;
      const uint64_t at = base + i, csize = le(block.data() + i + 8, 8);
      const auto corrupt = [&](const std::string& why) {
        return TraceError(file + ": corrupt global heap collection at byte " + std::to_string(at) + " (" + why +
                          "); refused before libhdf5 parses it (the collection has no checksum)");
      };
      // HDF5 writes collections of at least 4 KiB (H5HG_MINSIZE), inside the file.
      if (csize < 4096 || csize > size - at) throw corrupt("size " + std::to_string(csize) + " is not a collection's");
      // The objects must tile the collection exactly as HDF5 wrote them: each index once, the
      // free space (index 0) last. A damaged size or index makes libhdf5 1.10 loop forever (a
      // size of 0), or decode the following bytes as object headers and copy objects past the
      // buffers it read them into (heap corruption, a crash or a free of an uninitialised pointer).
      std::vector<bool> seen(65536, false);
      bool free_seen = false;
      uint64_t p = 16;
      while (p < csize) {
        if (csize - p < 16) break;  // too small for a header: free space
        unsigned char h[16];
        if (!read_at(at + p, h, 16)) break;
        const uint64_t idx = le(h, 2), osize = le(h + 8, 8);
        const uint64_t need = idx > 0 ? (osize > UINT64_MAX - 23 ? UINT64_MAX : 16 + (osize + 7) / 8 * 8) : osize;
        if (need == 0 || need > csize - p)
          throw corrupt("object " + std::to_string(idx) + " claims " + std::to_string(need) + " of the " +
                        std::to_string(csize - p) + " bytes left");
        if (free_seen) throw corrupt("object " + std::to_string(idx) + " after the free space");
        if (idx == 0) {
          if (need < 16) throw corrupt("free space of " + std::to_string(need) + " bytes");
          free_seen = true;
        } else if (seen[idx]) {
          throw corrupt("object " + std::to_string(idx) + " twice");
        }
        seen[idx] = true;
        p += need;
      }
    }
    if (base + n >= limit) break;
  }
}

Hid read_fapl() {
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_metadata_read_attempts(fapl, kMetadataReadAttempts);
  return fapl;
}

namespace {
Hid vlen_str_type() {
  Hid t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}
}  // namespace

void write_string_attr(hid_t obj, const char* name, const std::string& v, const std::string& file) {
  // Fixed length, not variable length: a variable-length string lives in a global heap
  // collection, the one metadata structure of the file format without a checksum, and
  // libhdf5 1.10 parses a damaged collection into memory errors (one flipped bit made it free
  // an uninitialised pointer; h5dump segfaults on most flips of an object's size). A fixed-length value is stored
  // in the attribute message itself, inside the checksummed object header (or, past 64 KiB, in
  // the checksummed dense-attribute heap). UTF-8, NUL-padded; readers take it up to its first NUL.
  Hid t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t, std::max<std::size_t>(v.size(), 1));  // HDF5 has no zero-length string type
  H5Tset_strpad(t, H5T_STR_NULLPAD);
  H5Tset_cset(t, H5T_CSET_UTF8);
  Hid sp(H5Screate(H5S_SCALAR), H5Sclose);
  Hid a(H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  std::string padded = v;
  padded.resize(std::max<std::size_t>(v.size(), 1), '\0');
  if (!a.valid() || H5Awrite(a, t, padded.data()) < 0) fail(file, std::string("cannot write attribute ") + name);
}

void write_i64_attr(hid_t obj, const char* name, const std::vector<int64_t>& v, const std::string& file) {
  const hsize_t n = v.size();
  Hid sp(H5Screate_simple(1, &n, nullptr), H5Sclose);
  Hid a(H5Acreate2(obj, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid() || H5Awrite(a, H5T_NATIVE_INT64, v.data()) < 0)
    fail(file, std::string("cannot write attribute ") + name);
}

void write_u64_attr(hid_t obj, const char* name, uint64_t v, const std::string& file) {
  Hid sp(H5Screate(H5S_SCALAR), H5Sclose);
  Hid a(H5Acreate2(obj, name, H5T_STD_U64LE, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid() || H5Awrite(a, H5T_NATIVE_UINT64, &v) < 0) fail(file, std::string("cannot write attribute ") + name);
}

bool has_attr(hid_t obj, const char* name, const std::string& file) {
  const htri_t e = H5Aexists(obj, name);
  if (e < 0) fail(file, std::string("cannot look up attribute ") + name + " (corrupt file?)");
  return e > 0;
}

namespace {
// "attribute NAME" of the root, "/path: attribute NAME" of a dataset or group.
std::string attr_label(hid_t obj, const char* name) {
  std::string path;
  const ssize_t n = H5Iget_name(obj, nullptr, 0);
  if (n > 0) {
    path.resize(std::size_t(n) + 1);
    H5Iget_name(obj, path.data(), path.size());
    path.resize(std::size_t(n));
  }
  H5Eclear2(H5E_DEFAULT);
  return (path.empty() || path == "/" ? std::string() : path + ": ") + "attribute " + name;
}
Hid open_attr(hid_t obj, const char* name, const std::string& file) {
  Hid a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) fail(file, "missing " + attr_label(obj, name));
  return a;
}
}  // namespace

std::string read_string_attr(hid_t obj, const char* name, const std::string& file) {
  Hid a = open_attr(obj, name, file);
  const std::string what = attr_label(obj, name);
  const Stored s = stored_attr(a, file, what);
  require(s.cls == H5T_STRING && s.elements == 1 && s.dims.size() <= 1, s, "one string", file, what);
  if (s.vlen_string) {
    // Same character set as stored (h5py writes ASCII or UTF-8): HDF5 has no conversion between them.
    Hid ft(H5Aget_type(a), H5Tclose);
    Hid t = vlen_str_type();
    H5Tset_cset(t, H5Tget_cset(ft));
    char* p = nullptr;
    if (H5Aread(a, t, &p) < 0) fail(file, "cannot read " + what);
    std::string v = p ? p : "";
    H5free_memory(p);
    return v;
  }
  constexpr std::size_t kMaxFixed = std::size_t(64) << 20;
  require(s.size <= kMaxFixed, s, "a string of at most 64 MiB", file, what);
  std::vector<char> v = buffer<char>(s.size + 1, file, what);
  Hid ft(H5Aget_type(a), H5Tclose);
  Hid mt(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mt, s.size);
  H5Tset_cset(mt, H5Tget_cset(ft));       // as above: mxsim's own strings are UTF-8
  H5Tset_strpad(mt, H5T_STR_NULLPAD);     // all s.size bytes (NULLTERM would drop the last one)
  if (H5Aread(a, mt, v.data()) < 0) fail(file, "cannot read " + what);
  return std::string(v.data(), strnlen(v.data(), s.size));
}

std::vector<int64_t> read_i64_attr(hid_t obj, const char* name, const std::string& file, uint64_t max_elements) {
  Hid a = open_attr(obj, name, file);
  const std::string what = attr_label(obj, name);
  const Stored s = stored_attr(a, file, what);
  require(s.cls == H5T_INTEGER && s.size <= 8 && s.dims.size() <= 1 && s.elements <= max_elements, s,
          "at most " + std::to_string(max_elements) + " integers of at most 8 bytes, rank 1", file, what);
  std::vector<int64_t> v = buffer<int64_t>(s.elements, file, what);
  if (!v.empty() && H5Aread(a, H5T_NATIVE_INT64, v.data()) < 0) fail(file, "cannot read " + what);
  return v;
}

uint64_t read_u64_attr(hid_t obj, const char* name, const std::string& file) {
  Hid a = open_attr(obj, name, file);
  const std::string what = attr_label(obj, name);
  const Stored s = stored_attr(a, file, what);
  require(s.cls == H5T_INTEGER && s.size <= 8 && s.elements == 1 && s.dims.size() <= 1, s,
          "one integer of at most 8 bytes", file, what);
  uint64_t v = 0;
  if (H5Aread(a, H5T_NATIVE_UINT64, &v) < 0) fail(file, "cannot read " + what);
  return v;
}

}  // namespace detail
}  // namespace mxsim::trace
