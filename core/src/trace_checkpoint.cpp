// Atomic HDF5 checkpoints (see mxsim/trace/checkpoint.hpp).
#include "mxsim/trace/checkpoint.hpp"

#include <algorithm>
#include <cstring>

#include "mxsim/io/atomic_output.hpp"
#include "mxsim/io/tensor_file.hpp"
#include "trace_h5util.hpp"

namespace mxsim::trace {

using detail::fail;
using detail::Hid;

struct CheckpointWriter::Item {
  DType dtype{};
  bool scalar = false, is_string = false;
  std::vector<uint64_t> shape;
  std::vector<unsigned char> bytes;
};

namespace {
uint64_t product(const std::vector<uint64_t>& s) {
  uint64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}
}  // namespace

CheckpointWriter::CheckpointWriter() = default;
CheckpointWriter::~CheckpointWriter() = default;

void CheckpointWriter::add(const std::string& name, std::shared_ptr<Item> item) {
  if (name.empty() || name[0] == '/' || name.back() == '/')
    throw TraceError("checkpoint entry '" + name + "': name must be a relative path like model/fc1/master");
  if (!items_.emplace(name, std::move(item)).second) throw TraceError("checkpoint entry '" + name + "': put twice");
}

#define MXSIM_PUT_ARRAY(T)                                                                        \
  void CheckpointWriter::put(const std::string& name, const T* data, const std::vector<uint64_t>& shape) { \
    auto it = std::make_shared<Item>();                                                           \
    it->dtype = dtype_of<T>();                                                                    \
    it->shape = shape;                                                                            \
    it->bytes.resize(product(shape) * sizeof(T));                                                 \
    if (!it->bytes.empty()) std::memcpy(it->bytes.data(), data, it->bytes.size());                \
    add(name, std::move(it));                                                                     \
  }
MXSIM_PUT_ARRAY(float)
MXSIM_PUT_ARRAY(uint8_t)
MXSIM_PUT_ARRAY(uint64_t)
#undef MXSIM_PUT_ARRAY

#define MXSIM_PUT_SCALAR(fn, T)                                       \
  void CheckpointWriter::fn(const std::string& name, T v) {           \
    auto it = std::make_shared<Item>();                               \
    it->dtype = dtype_of<T>();                                        \
    it->scalar = true;                                                \
    it->bytes.resize(sizeof(T));                                      \
    std::memcpy(it->bytes.data(), &v, sizeof(T));                     \
    add(name, std::move(it));                                         \
  }
MXSIM_PUT_SCALAR(put_u64, uint64_t)
MXSIM_PUT_SCALAR(put_i64, int64_t)
MXSIM_PUT_SCALAR(put_f64, double)
MXSIM_PUT_SCALAR(put_f32, float)
#undef MXSIM_PUT_SCALAR

void CheckpointWriter::put_string(const std::string& name, const std::string& v) {
  auto it = std::make_shared<Item>();
  it->dtype = DType::u8;
  it->is_string = true;
  it->shape = {v.size()};
  it->bytes.assign(v.begin(), v.end());
  add(name, std::move(it));
}

void CheckpointWriter::commit(const std::filesystem::path& path) const {
  detail::quiet_hdf5();
  const std::string fname = path.string();
  try {
    // The HDF5 file is written to the temporary that AtomicOutputs names; its commit fsyncs it,
    // renames it onto `path` and fsyncs the folder. On any exception its destructor removes it.
    io::AtomicOutputs out;
    const std::filesystem::path tmp = out.add(path);
    {
      Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
      H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);  // checksummed metadata
      Hid file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), H5Fclose);
      if (!file.valid()) fail(fname, "cannot create checkpoint temp file " + tmp.string());
      detail::write_u64_attr(file, "mxsim_checkpoint_format", 1, fname);
      Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
      H5Pset_create_intermediate_group(lcpl, 1);
      for (const auto& [name, it] : items_) {
        Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
        Hid space;
        const uint64_t n = it->bytes.size() / dtype_size(it->dtype);
        if (it->scalar) {
          space = Hid(H5Screate(H5S_SCALAR), H5Sclose);
          H5Pset_layout(dcpl, H5D_COMPACT);  // lives in the checksummed object header
        } else {
          const hsize_t dim = n;  // stored flat; shape kept in attribute "shape"
          space = Hid(H5Screate_simple(1, &dim, nullptr), H5Sclose);
          if (n > 0) {
            const hsize_t chunk = std::min<hsize_t>(n, hsize_t(1) << 20);
            H5Pset_chunk(dcpl, 1, &chunk);
            H5Pset_fletcher32(dcpl);
          }
        }
        Hid d(H5Dcreate2(file, name.c_str(), detail::file_type(it->dtype), space, lcpl, dcpl, H5P_DEFAULT), H5Dclose);
        if (!d.valid()) fail(fname, name + ": cannot create");
        if (n > 0 && H5Dwrite(d, detail::native_type(it->dtype), H5S_ALL, H5S_ALL, H5P_DEFAULT, it->bytes.data()) < 0)
          fail(fname, name + ": write failed");
        detail::write_string_attr(d, "kind", it->scalar ? "scalar" : it->is_string ? "string" : "array", fname);
        if (!it->scalar) {
          std::vector<int64_t> sh(it->shape.begin(), it->shape.end());
          detail::write_i64_attr(d, "shape", sh, fname);
        }
      }
      const herr_t rc = H5Fclose(file.release());
      if (rc < 0) fail(fname, "close of checkpoint temp file failed");
    }
    out.commit();
  } catch (const io::IoError& e) {
    throw TraceError(e.what());  // names the checkpoint file
  }
}

struct Checkpoint::Impl {
  std::string fname;
  Hid file;
  std::vector<std::string> names;

  // Opens entry `name` and checks what it stores against what is requested before any read:
  // element type, kind attribute, and the dataspace (one element for a scalar, rank 1 of the
  // "shape" attribute's product for an array), so a read never writes past its buffer.
  Hid open(const std::string& name, DType want, const char* kind, detail::Stored* st) const {
    if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0 || H5Oexists_by_name(file, name.c_str(), H5P_DEFAULT) <= 0) {
      detail::hdf5_message();
      throw TraceError(fname + ": checkpoint has no entry '" + name + "'");
    }
    Hid d(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
    if (!d.valid()) fail(fname, name + ": cannot open");
    const std::string what = "entry '" + name + "'";
    *st = detail::stored_dataset(d, fname, what);
    const DType got = detail::stored_dtype(*st, fname, what);
    const std::string k = detail::read_string_attr(d, "kind", fname);
    if (got != want || k != kind)
      throw TraceError(fname + ": entry '" + name + "' is a " + dtype_name(got) + " " + k + ", requested " +
                       dtype_name(want) + " " + kind);
    return d;
  }
  template <class T>
  Array<T> array(const std::string& name, const char* kind = "array") const {
    detail::Stored st;
    Hid d = open(name, dtype_of<T>(), kind, &st);
    const std::string what = "entry '" + name + "'";
    detail::require(st.dims.size() == 1, st, "a flat array (rank 1)", fname, what);
    Array<T> a;
    uint64_t n = 1;
    for (auto v : detail::read_i64_attr(d, "shape", fname, H5S_MAX_RANK)) {
      if (v < 0 || (v != 0 && n > UINT64_MAX / uint64_t(v)))
        throw TraceError(fname + ": " + what + ": shape attribute holds a negative or overflowing size");
      n *= uint64_t(v);
      a.shape.push_back(uint64_t(v));
    }
    if (n != st.elements)
      throw TraceError(fname + ": " + what + ": " + std::to_string(st.elements) + " values do not match its shape");
    detail::require_stored_bytes(d, n * sizeof(T), fname, what);
    a.data = detail::buffer<T>(n, fname, what);
    if (n > 0 && H5Dread(d, detail::native_type(dtype_of<T>()), H5S_ALL, H5S_ALL, H5P_DEFAULT, a.data.data()) < 0)
      fail(fname, "entry '" + name + "': read failed (corrupt checkpoint?)");
    return a;
  }
  template <class T>
  T scalar(const std::string& name) const {
    detail::Stored st;
    Hid d = open(name, dtype_of<T>(), "scalar", &st);
    detail::require(st.elements == 1 && st.dims.size() <= 1, st, "one value", fname, "entry '" + name + "'");
    T v{};
    if (H5Dread(d, detail::native_type(dtype_of<T>()), H5S_ALL, H5S_ALL, H5P_DEFAULT, &v) < 0)
      fail(fname, "entry '" + name + "': read failed (corrupt checkpoint?)");
    return v;
  }
};

Checkpoint::Checkpoint(const std::filesystem::path& path) : impl_(std::make_unique<Impl>()) {
  detail::quiet_hdf5();
  auto& m = *impl_;
  m.fname = path.string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw TraceError(m.fname + ": checkpoint missing (no such file)");
  detail::check_global_heaps(m.fname);
  m.file = Hid(H5Fopen(m.fname.c_str(), H5F_ACC_RDONLY, detail::read_fapl()), H5Fclose);
  if (!m.file.valid()) fail(m.fname, "not a readable checkpoint (truncated, corrupt or not HDF5)");
  if (!detail::has_attr(m.file, "mxsim_checkpoint_format", m.fname))
    throw TraceError(m.fname + ": not an mxsim checkpoint (no mxsim_checkpoint_format attribute)");
  m.names = detail::dataset_names(m.file, m.fname, "corrupt checkpoint (cannot list its entries)");
  if (H5Eget_num(H5E_DEFAULT) > 0) fail(m.fname, "corrupt checkpoint (cannot list its entries)");
  std::sort(m.names.begin(), m.names.end());
}

Checkpoint::~Checkpoint() = default;
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;

bool Checkpoint::has(const std::string& name) const {
  return std::binary_search(impl_->names.begin(), impl_->names.end(), name);
}
std::vector<std::string> Checkpoint::names() const { return impl_->names; }
Array<float> Checkpoint::get_f32(const std::string& name) const { return impl_->array<float>(name); }
Array<uint8_t> Checkpoint::get_u8(const std::string& name) const { return impl_->array<uint8_t>(name); }
Array<uint64_t> Checkpoint::get_u64_array(const std::string& name) const { return impl_->array<uint64_t>(name); }
uint64_t Checkpoint::get_u64(const std::string& name) const { return impl_->scalar<uint64_t>(name); }
int64_t Checkpoint::get_i64(const std::string& name) const { return impl_->scalar<int64_t>(name); }
double Checkpoint::get_f64(const std::string& name) const { return impl_->scalar<double>(name); }
float Checkpoint::get_f32_scalar(const std::string& name) const { return impl_->scalar<float>(name); }
std::string Checkpoint::get_string(const std::string& name) const {
  auto a = impl_->array<uint8_t>(name, "string");
  return std::string(a.data.begin(), a.data.end());
}

}  // namespace mxsim::trace
