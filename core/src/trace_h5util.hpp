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
/// DType of a stored dataset type; throws TraceError naming file/dataset when unsupported.
DType dtype_from_h5(hid_t type, const std::string& file, const std::string& name);

void write_string_attr(hid_t obj, const char* name, const std::string& v, const std::string& file);
void write_i64_attr(hid_t obj, const char* name, const std::vector<int64_t>& v, const std::string& file);
void write_u64_attr(hid_t obj, const char* name, uint64_t v, const std::string& file);
bool has_attr(hid_t obj, const char* name);
std::string read_string_attr(hid_t obj, const char* name, const std::string& file);
std::vector<int64_t> read_i64_attr(hid_t obj, const char* name, const std::string& file);
uint64_t read_u64_attr(hid_t obj, const char* name, const std::string& file);

}  // namespace mxsim::trace::detail
