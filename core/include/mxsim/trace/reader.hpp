// HDF5 trace reader. Opens read-only with SWMR read, so it works on finished files, on
// files being written, and on files left by a killed writer. Sees only complete steps.
#pragma once
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mxsim/trace/common.hpp"

namespace mxsim::trace {

struct DatasetInfo {
  std::string name;                 ///< absolute path, e.g. "/train/loss"
  DType dtype;
  bool snapshot = false;            ///< false: per-step series; true: snapshot
  std::vector<uint64_t> row_shape;  ///< per-step (series) or per-snapshot shape
  std::vector<int64_t> snapshot_steps;  ///< declared steps (snapshots only)
  uint64_t row_elems() const;       ///< product of row_shape (1 for scalars); >= 1, no overflow (checked at open)
  uint64_t row_bytes() const;       ///< row_elems() * dtype_size(dtype)
};

class Reader {
 public:
  /// Opens `path` (H5F_ACC_RDONLY | H5F_ACC_SWMR_READ). Throws TraceError naming the path
  /// when it is missing, not HDF5, or not an mxsim trace (no mxsim_trace_format attribute);
  /// naming the dataset or attribute when one is not what the writer stores (type class and
  /// size, rank, zero or overflowing extents, snapshot steps); and reporting the corruption when
  /// a metadata checksum fails (after a bounded number of SWMR read attempts, never a hang).
  explicit Reader(const std::filesystem::path& path);
  ~Reader();
  Reader(Reader&&) noexcept;
  Reader& operator=(Reader&&) noexcept;

  /// Re-reads /steps (H5Drefresh) for files still being written; every other dataset is
  /// refreshed on its next read. A Reader that is never refreshed never calls H5Drefresh.
  /// HDF5 1.10 limitation: refresh a file that one process has open through a single Reader
  /// only (H5Drefresh of a dataset open twice makes later chunk reads return wrong rows).
  void refresh();

  /// Number of complete steps k = len(/steps) at open/refresh time.
  uint64_t steps_completed() const;

  std::string config_toml() const;
  Provenance provenance() const;
  int format_version() const;

  /// String / i64 attribute `name` of the group at absolute path `group` (a recorded layer's
  /// recipe and weight shape: schema::kLayerRecipeAttr, kLayerShapeAttr); nullopt when the group
  /// or the attribute is absent (traces written before they existed). Throws TraceError for an
  /// attribute of another type.
  std::optional<std::string> group_string_attribute(const std::string& group, const std::string& name) const;
  std::optional<std::vector<int64_t>> group_i64_attribute(const std::string& group, const std::string& name) const;

  /// Every series and snapshot in the file (not /steps), sorted by name.
  const std::vector<DatasetInfo>& datasets() const;
  const DatasetInfo& info(const std::string& name) const;  ///< throws if absent
  bool has(const std::string& name) const;

  /// Rows [first, first+count) of a series, count clamped to steps_completed().
  /// T must match the dtype. Returns count * row_elems() values, row-major.
  template <class T>
  std::vector<T> read_series(const std::string& name, uint64_t first = 0, uint64_t count = UINT64_MAX) const {
    std::vector<T> out;
    auto raw = read_raw(name, dtype_of<T>(), first, count);
    out.resize(raw.size() / sizeof(T));
    if (!raw.empty()) std::memcpy(out.data(), raw.data(), raw.size());
    return out;
  }
  /// Raw little-endian bytes of rows [first, first+count) (count clamped); checks dtype.
  std::vector<unsigned char> read_raw(const std::string& name, DType dtype, uint64_t first = 0,
                                      uint64_t count = UINT64_MAX) const;

  /// Snapshot at trace row `step` (0-based: global step first_step + step, not the global
  /// step itself). Throws if that row took no snapshot or is not yet complete.
  template <class T>
  std::vector<T> read_snapshot(const std::string& name, int64_t step) const {
    auto raw = read_snapshot_raw(name, dtype_of<T>(), step);
    std::vector<T> out(raw.size() / sizeof(T));
    if (!raw.empty()) std::memcpy(out.data(), raw.data(), raw.size());
    return out;
  }
  std::vector<unsigned char> read_snapshot_raw(const std::string& name, DType dtype, int64_t step) const;

  /// One element across rows: element `index` (flat, row-major within one row) of series
  /// rows [first, first+count) (count clamped to steps_completed()). Reads only that element
  /// of each row (an HDF5 point selection), so a timeline of one weight costs count values,
  /// not count rows. Throws TraceError when index >= row_elems() or the dtype differs.
  template <class T>
  std::vector<T> read_series_element(const std::string& name, uint64_t index, uint64_t first = 0,
                                     uint64_t count = UINT64_MAX) const {
    return cast_raw<T>(read_series_element_raw(name, dtype_of<T>(), index, first, count));
  }
  std::vector<unsigned char> read_series_element_raw(const std::string& name, DType dtype, uint64_t index,
                                                     uint64_t first = 0, uint64_t count = UINT64_MAX) const;
  /// Element `index` (flat within one snapshot) of snapshot `name` at each of its declared
  /// steps that is complete (< steps_completed()), in step order; `steps` (optional) receives
  /// those steps.
  template <class T>
  std::vector<T> read_snapshot_element(const std::string& name, uint64_t index,
                                       std::vector<int64_t>* steps = nullptr) const {
    return cast_raw<T>(read_snapshot_element_raw(name, dtype_of<T>(), index, steps));
  }
  std::vector<unsigned char> read_snapshot_element_raw(const std::string& name, DType dtype, uint64_t index,
                                                       std::vector<int64_t>* steps = nullptr) const;

  const std::filesystem::path& path() const;

 private:
  template <class T>
  static std::vector<T> cast_raw(const std::vector<unsigned char>& raw) {
    std::vector<T> out(raw.size() / sizeof(T));
    if (!raw.empty()) std::memcpy(out.data(), raw.data(), raw.size());
    return out;
  }
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mxsim::trace
