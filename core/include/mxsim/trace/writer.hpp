// HDF5 trace writer: one file per run, SWMR (single-writer/multiple-reader), flushed per step.
//
// Life cycle (HDF5 1.10 SWMR cannot create objects after H5Fstart_swmr_write, so every
// dataset is declared first):
//   Writer w(path, config_toml, provenance);           // file created at path + ".partial"
//   w.declare_series("/train/loss", DType::f32, {});   // one scalar per step
//   w.declare_series("/layers/fc1/hist", DType::u64, {256});
//   w.declare_snapshot("/snap/fc1/master", DType::f32, {64, 784}, {0, 100, 500});
//   w.start_swmr();                                    // renamed to `path`; readers may open it
//   for each step s = 0, 1, ...:
//     w.append("/train/loss", &loss); ...             // exactly one row per series per step
//     if (s is a snapshot step) w.write_snapshot("/snap/fc1/master", s, ptr);
//     w.end_step();                                    // flush data, then extend /steps, flush
//   w.close();                                         // (destructor closes too, never throws)
//
// Completeness rule: /steps (int64, one row per finished step, value = step index) is
// extended only in end_step(), after every series row of that step has been written and
// flushed. A reader trusts k = len(/steps) rows of every series and the snapshots of steps
// < k. A process killed at any point (SIGKILL included) leaves a file that opens with
// SWMR read (h5py: h5py.File(p, "r", swmr=True)) and is complete up to the last end_step().
//
// Errors: every failure throws TraceError naming the path (and dataset) and HDF5's message.
// If the constructor or any declare_* fails, nothing is left at `path` or at the ".partial"
// name. Not thread-safe: one thread at a time uses a Writer (sim::TraceRecorder hands
// it from the training thread to its writer thread where hdf5_thread_safe()).
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "mxsim/trace/common.hpp"

namespace mxsim::trace {

/// Whether the HDF5 library in use serialises its API calls itself
/// (H5is_library_threadsafe; Debian's build does): then another thread may
/// use HDF5, other files included, while a Writer works.
bool hdf5_thread_safe();

class Writer {
 public:
  /// Creates the file (libver bounds latest..latest, so SWMR works) at `path` + ".partial",
  /// writes root attributes: mxsim_trace_format = 1, config_toml, and the provenance fields.
  /// Declares /steps. Parent directory must exist. Throws TraceError.
  Writer(const std::filesystem::path& path, const std::string& config_toml, const Provenance& prov);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  Writer(Writer&&) noexcept;
  Writer& operator=(Writer&&) noexcept;

  /// Declares a per-step series at absolute HDF5 path `name` (e.g. "/train/loss"; parent
  /// groups are created). Stored shape [steps, per_step_shape...], chunked, first dim
  /// unlimited. per_step_shape {} = one scalar per step. Only before start_swmr().
  /// Throws on duplicate names, "/steps", zero-sized dims or after start_swmr().
  void declare_series(const std::string& name, DType dtype, const std::vector<uint64_t>& per_step_shape);

  /// Declares a snapshot: tensor of `shape` captured at each of `steps` (strictly increasing,
  /// >= 0). Stored as dataset [steps.size(), shape...] (chunk = one snapshot) with int64
  /// attribute "steps". Only before start_swmr().
  void declare_snapshot(const std::string& name, DType dtype, const std::vector<uint64_t>& shape,
                        const std::vector<int64_t>& steps);

  /// Attribute `name` of the group at absolute path `group` (created with its parents when
  /// missing), e.g. a recorded layer's recipe and weight shape on /layers/<l>
  /// (schema::kLayerRecipeAttr, kLayerShapeAttr). Only before start_swmr() (SWMR writes no
  /// attribute). Throws TraceError naming the group.
  void set_group_attribute(const std::string& group, const std::string& name, const std::string& value);
  void set_group_attribute(const std::string& group, const std::string& name, const std::vector<int64_t>& value);

  /// Renames the file to its final path and switches to SWMR write. Declarations end here.
  void start_swmr();

  /// Appends this step's row to series `name`: prod(per_step_shape) elements of type T
  /// (T must match the declared dtype). Only after start_swmr(), at most once per series per step.
  template <class T>
  void append(const std::string& name, const T* data) { append_raw(name, dtype_of<T>(), data); }
  template <class T>
  void append(const std::string& name, const T& scalar) requires std::is_arithmetic_v<T> {
    append_raw(name, dtype_of<T>(), &scalar);
  }
  void append_raw(const std::string& name, DType dtype, const void* data);

  /// Writes snapshot `name` for the current step (must be one of its declared steps).
  template <class T>
  void write_snapshot(const std::string& name, const T* data) { write_snapshot_raw(name, dtype_of<T>(), data); }
  void write_snapshot_raw(const std::string& name, DType dtype, const void* data);

  /// Finishes the current step: checks every series got its row (throws naming the first
  /// that did not), flushes, appends the step index to /steps, flushes again.
  void end_step();

  /// Index of the step being written (= number of finished steps).
  int64_t current_step() const;
  const std::filesystem::path& path() const;

  /// Closes the file (flushing). Further writes throw; close() itself is idempotent.
  /// A writer closed (or destroyed) before start_swmr() deletes its ".partial" file.
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mxsim::trace
