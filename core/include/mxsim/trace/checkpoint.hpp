// Checkpoint I/O: named FP32 / uint8 / uint64 arrays and scalars in one HDF5 file, written
// atomically (temp file in the same directory, fsync, rename over the final path), with
// Fletcher-32 checksums on every array so a corrupted payload is detected on load.
//
//   CheckpointWriter w;
//   w.put("model/fc1/master", master.data(), {64, 784});      // FP32 array with shape
//   w.put_u64("step", 1200);  w.put_f64("loss_scale", 1.0);  w.put_string("config", toml);
//   w.commit("run.ckpt");      // nothing at run.ckpt until this returns
//   Checkpoint c("run.ckpt");  auto m = c.get_f32("model/fc1/master");  // m.shape == {64, 784}
//
// Names are HDF5 paths relative to the root ("a/b/c"); parent groups are created.
// Errors: missing file, not a checkpoint, corrupt data, missing name, dtype mismatch -> TraceError
// naming the file and the entry.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mxsim/trace/common.hpp"

namespace mxsim::trace {

template <class T>
struct Array {
  std::vector<uint64_t> shape;  ///< as put(); {} for a 1-element scalar-like array
  std::vector<T> data;          ///< row-major, prod(shape) elements
};

class CheckpointWriter {
 public:
  CheckpointWriter();
  ~CheckpointWriter();
  /// Arrays: `data` holds prod(shape) elements (copied now). Duplicate names throw.
  void put(const std::string& name, const float* data, const std::vector<uint64_t>& shape);
  void put(const std::string& name, const uint8_t* data, const std::vector<uint64_t>& shape);
  void put(const std::string& name, const uint64_t* data, const std::vector<uint64_t>& shape);
  /// Scalars (stored as 0-d datasets).
  void put_u64(const std::string& name, uint64_t v);
  void put_i64(const std::string& name, int64_t v);
  void put_f64(const std::string& name, double v);
  void put_f32(const std::string& name, float v);
  void put_string(const std::string& name, const std::string& v);
  /// Writes everything to `path` atomically. Throws TraceError (temp file removed).
  void commit(const std::filesystem::path& path) const;

 public:
  struct Item;  ///< internal

 private:
  std::map<std::string, std::shared_ptr<Item>> items_;
  void add(const std::string& name, std::shared_ptr<Item> item);
};

class Checkpoint {
 public:
  /// Opens and validates (mxsim_checkpoint_format attribute). Throws TraceError.
  explicit Checkpoint(const std::filesystem::path& path);
  ~Checkpoint();
  Checkpoint(Checkpoint&&) noexcept;

  bool has(const std::string& name) const;
  std::vector<std::string> names() const;  ///< every entry, sorted
  Array<float> get_f32(const std::string& name) const;
  Array<uint8_t> get_u8(const std::string& name) const;
  Array<uint64_t> get_u64_array(const std::string& name) const;
  uint64_t get_u64(const std::string& name) const;
  int64_t get_i64(const std::string& name) const;
  double get_f64(const std::string& name) const;
  float get_f32_scalar(const std::string& name) const;
  std::string get_string(const std::string& name) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mxsim::trace
