// One list of the training state a checkpoint holds, walked by a visitor that
// either saves or loads: save and resume read the same list, so an entry
// cannot be written without being read back (docs/simulator.md "Checkpoints";
// entry names from trace/schema.hpp's ckpt:: builders).
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "mxsim/backend_tensor.hpp"

namespace mxsim::sim {

class StateIO {
 public:
  virtual ~StateIO() = default;
  /// True while resuming (values flow file -> state), false while saving.
  virtual bool loading() const = 0;
  /// A group of entries that exists only once the run made it (trace/schema.hpp ckpt::*_group).
  /// Its presence is itself a required u64 entry, present/<group> (0 or 1): saving writes
  /// `present_now` there and returns it; loading returns what the file says, and a missing or
  /// out-of-range flag is refused naming it. Every entry of a present group is then required.
  virtual bool present(const std::string& group, bool present_now) = 0;
  /// A backend tensor: f32 stored with its shape (which must match on load);
  /// u8 stored flat; u32 stored flat, widened to u64.
  virtual void tensor(const std::string& name, Tensor& t) = 0;
  virtual void u64(const std::string& name, uint64_t& v) = 0;
  virtual void i64(const std::string& name, int64_t& v) = 0;
  virtual void flag(const std::string& name, bool& v) = 0;  ///< stored as u64 0 / 1
  virtual void f32(const std::string& name, float& v) = 0;
  virtual void f32s(const std::string& name, std::vector<float>& v) = 0;
  virtual void text(const std::string& name, std::string& v) = 0;
  /// The checkpoint file, for error messages.
  virtual const std::string& path() const = 0;
};

/// Loading: refuses a counter read from the file outside [lo, hi], naming the entry (a value at
/// INT64_MAX would overflow the arithmetic that advances it). Saving: nothing to check.
inline void check_range(const StateIO& io, const std::string& name, int64_t v, int64_t lo, int64_t hi) {
  if (!io.loading() || (v >= lo && v <= hi)) return;
  throw std::runtime_error(io.path() + ": checkpoint entry '" + name + "' is " + std::to_string(v) + ", outside [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

}  // namespace mxsim::sim
