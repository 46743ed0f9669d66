// HDF5 helpers + provenance (see trace_h5util.hpp, mxsim/trace/common.hpp).
#include "trace_h5util.hpp"

#include <unistd.h>

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
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  p.date = buf;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) p.host = host;
#ifdef MXSIM_SOURCE_DIR
  const std::string cmd = std::string("git -C '") + MXSIM_SOURCE_DIR + "' describe --always --dirty 2>/dev/null";
#else
  const std::string cmd = "git describe --always --dirty 2>/dev/null";
#endif
  if (FILE* f = popen(cmd.c_str(), "r")) {
    std::array<char, 256> line{};
    if (std::fgets(line.data(), int(line.size()), f)) {
      p.git_describe = line.data();
      while (!p.git_describe.empty() && (p.git_describe.back() == '\n' || p.git_describe.back() == '\r'))
        p.git_describe.pop_back();
    }
    if (pclose(f) != 0) p.git_describe.clear();
  }
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
  std::string out;
  for (const auto& s : parts) {
    if (!out.empty()) out += " <- ";
    out += s;
  }
  return out;
}

void fail(const std::string& file, const std::string& what) {
  const std::string m = hdf5_message();
  throw TraceError(file + ": " + what + (m.empty() ? std::string() : " (HDF5: " + m + ")"));
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

DType dtype_from_h5(hid_t type, const std::string& file, const std::string& name) {
  const H5T_class_t c = H5Tget_class(type);
  const std::size_t sz = H5Tget_size(type);
  if (c == H5T_FLOAT && sz == 4) return DType::f32;
  if (c == H5T_FLOAT && sz == 8) return DType::f64;
  if (c == H5T_INTEGER) {
    const bool sgn = H5Tget_sign(type) == H5T_SGN_2;
    if (sz == 1 && !sgn) return DType::u8;
    if (sz == 4) return sgn ? DType::i32 : DType::u32;
    if (sz == 8) return sgn ? DType::i64 : DType::u64;
  }
  throw TraceError(file + ": " + name + ": unsupported element type (class " + std::to_string(int(c)) + ", " +
                   std::to_string(sz) + " bytes)");
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
  Hid t = vlen_str_type();
  Hid sp(H5Screate(H5S_SCALAR), H5Sclose);
  Hid a(H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const char* p = v.c_str();
  if (!a.valid() || H5Awrite(a, t, &p) < 0) fail(file, std::string("cannot write attribute ") + name);
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

bool has_attr(hid_t obj, const char* name) { return H5Aexists(obj, name) > 0; }

std::string read_string_attr(hid_t obj, const char* name, const std::string& file) {
  Hid a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) fail(file, std::string("missing attribute ") + name);
  Hid ft(H5Aget_type(a), H5Tclose);
  if (H5Tget_class(ft) != H5T_STRING) throw TraceError(file + ": attribute " + name + " is not a string");
  if (H5Tis_variable_str(ft) > 0) {
    Hid t = vlen_str_type();
    char* p = nullptr;
    if (H5Aread(a, t, &p) < 0) fail(file, std::string("cannot read attribute ") + name);
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  }
  const std::size_t n = H5Tget_size(ft);
  std::string s(n, '\0');
  Hid mt(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mt, n);
  if (H5Aread(a, mt, s.data()) < 0) fail(file, std::string("cannot read attribute ") + name);
  s.resize(std::strlen(s.c_str()));
  return s;
}

std::vector<int64_t> read_i64_attr(hid_t obj, const char* name, const std::string& file) {
  Hid a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) fail(file, std::string("missing attribute ") + name);
  Hid sp(H5Aget_space(a), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(sp);
  std::vector<int64_t> v(std::size_t(n < 0 ? 0 : n));
  if (n > 0 && H5Aread(a, H5T_NATIVE_INT64, v.data()) < 0) fail(file, std::string("cannot read attribute ") + name);
  return v;
}

uint64_t read_u64_attr(hid_t obj, const char* name, const std::string& file) {
  Hid a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  uint64_t v = 0;
  if (!a.valid() || H5Aread(a, H5T_NATIVE_UINT64, &v) < 0) fail(file, std::string("cannot read attribute ") + name);
  return v;
}

}  // namespace detail
}  // namespace mxsim::trace
