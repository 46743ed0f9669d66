// Internal HDF5 helpers shared by trace_*.cpp (not installed, not public).
#pragma once
#include <hdf5.h>

#include <string>
#include <utility>
#include <vector>

#include "mxsim/trace/common.hpp"

namespace mxsim::trace::detail {

/// Silences HDF5's automatic error printing (once per thread: the thread-safe build keeps
/// the setting per thread); errors become exceptions.
void quiet_hdf5();
/// HDF5's current error stack as one line (innermost description last), "" if empty.
std::string hdf5_message();
/// Throws TraceError "<file>: <what>: <hdf5 message>".
[[noreturn]] void fail(const std::string& file, const std::string& what);
/// As fail, for a failure to read the stored data of `dataset`: the TraceError names it
/// (TraceError::dataset()), so a reader can go on without it and say which one it lost.
[[noreturn]] void fail_reading(const std::string& file, const std::string& dataset, const std::string& what);

/// RAII owner of an hid_t with the matching close function.
class Hid {
 public:
  Hid() = default;
  Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Hid() { reset(); }
  Hid(Hid&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  Hid& operator=(Hid&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }
  void reset() {
    if (id_ >= 0 && close_) close_(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  herr_t (*close_)(hid_t) = nullptr;
};

hid_t file_type(DType t);    ///< little-endian storage type (H5T_IEEE_F32LE, ...), not to be closed
hid_t native_type(DType t);  ///< in-memory type (H5T_NATIVE_FLOAT, ...), not to be closed

/// What a dataset or attribute stores, taken from its type and dataspace before any data is read.
/// The file, not the reader, decides how many bytes HDF5 writes into a read buffer (an attribute
/// stored as an array, a "scalar" entry stored as thousands of values, a rank-2 extent read into
/// one hsize_t), so every read of the trace library sizes and checks its buffer from this, here,
/// and nowhere else.
struct Stored {
  H5T_class_t cls = H5T_NO_CLASS;
  std::size_t size = 0;       ///< bytes per element (H5Tget_size; a variable-length string: the pointer)
  bool is_signed = false;     ///< integers: two's complement
  bool vlen_string = false;   ///< variable-length string
  bool scalar = false;        ///< H5S_SCALAR dataspace: dims empty, one element
  std::vector<hsize_t> dims;  ///< extent of a simple dataspace, rank = dims.size() <= H5S_MAX_RANK
  uint64_t elements = 0;      ///< 1 for a scalar dataspace, product of dims otherwise (0 for H5S_NULL)
  std::string describe() const;  ///< e.g. "8-byte integer [3, 256]", "string scalar"
};
/// Type and dataspace of a dataset / attribute; throws TraceError "<file>: <what>: ..." when HDF5
/// cannot tell them (corrupt metadata) or the extent overflows 64 bits.
Stored stored_dataset(hid_t dset, const std::string& file, const std::string& what);
Stored stored_attr(hid_t attr, const std::string& file, const std::string& what);
/// Extent of a dataspace, rank checked first (never more dims written than the vector holds).
std::vector<hsize_t> extent(hid_t space, const std::string& file, const std::string& what);
/// DType of a stored element type; throws TraceError naming file/what when unsupported.
DType stored_dtype(const Stored& s, const std::string& file, const std::string& what);
/// Throws TraceError "<file>: <what>: stored as <s.describe()>, expected <expected>" unless ok.
void require(bool ok, const Stored& s, const std::string& expected, const std::string& file, const std::string& what);
/// Before reading `bytes` from dataset `d`: a dataset without compressing filters must store at
/// least that many bytes (the extent of a crafted file can promise terabytes that are not there,
/// which would otherwise be allocated and read as fill values); throws TraceError otherwise.
void require_stored_bytes(hid_t d, uint64_t bytes, const std::string& file, const std::string& what);
/// A buffer of n elements, or TraceError "<file>: <what>: needs N GiB of memory" (never std::bad_alloc).
template <class T>
std::vector<T> buffer(uint64_t n, const std::string& file, const std::string& what);

void write_string_attr(hid_t obj, const char* name, const std::string& v, const std::string& file);
void write_i64_attr(hid_t obj, const char* name, const std::vector<int64_t>& v, const std::string& file);
void write_u64_attr(hid_t obj, const char* name, uint64_t v, const std::string& file);
/// Whether attribute `name` exists; throws TraceError when HDF5 cannot tell (corrupt object header).
bool has_attr(hid_t obj, const char* name, const std::string& file);
/// One string (scalar or one-element dataspace; fixed or variable length, at most 64 MiB).
std::string read_string_attr(hid_t obj, const char* name, const std::string& file);
/// Integers of a scalar or rank-1 attribute of at most max_elements values.
std::vector<int64_t> read_i64_attr(hid_t obj, const char* name, const std::string& file, uint64_t max_elements);
/// One integer (scalar or one-element dataspace, integer class of at most 8 bytes).
uint64_t read_u64_attr(hid_t obj, const char* name, const std::string& file);

/// Names (relative to `root`, no leading '/') of every dataset below `root`; nothing throws inside
/// HDF5's visit callback (an exception must not unwind through the C library's frames). Throws
/// TraceError "<file>: <what>" when the visit fails (corrupt links or object headers).
std::vector<std::string> dataset_names(hid_t root, const std::string& file, const std::string& what);

/// Refuses a file holding a global heap collection ("GCOL", where HDF5 keeps variable-length
/// strings) whose object list libhdf5 1.10's parser would walk forever: an object whose size
/// does not advance the walk (a free-space object of size 0) or runs past the collection. HDF5
/// reads such a collection in an endless loop the first time a vlen string of it is read, with
/// no error; walking it first, as HDF5 would, turns that into TraceError "<file>: corrupt global
/// heap collection at byte N ...". The whole file is scanned up to 256 MiB, else its first 16 MiB
/// (where the root attributes' collection of an mxsim or h5py file lies).
void check_global_heaps(const std::string& file);

/// File access list of every trace/checkpoint open: metadata read attempts bounded (kMetadataReadAttempts).
Hid read_fapl();
/// HDF5's SWMR reader retries a metadata block whose checksum fails (a live writer may be
/// mid-flush), sleeping 2^attempt ns between attempts; its default of 100 attempts makes one
/// corrupt block a hang. 20 attempts wait about 2 ms in all, then report the corruption.
inline constexpr unsigned kMetadataReadAttempts = 20;

}  // namespace mxsim::trace::detail
