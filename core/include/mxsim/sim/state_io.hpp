// One list of the training state a checkpoint holds, walked by a visitor that
// either saves or loads: save and resume read the same list, so an entry
// cannot be written without being read back (docs/simulator.md "Checkpoints";
// entry names from trace/schema.hpp's ckpt:: builders).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "mxsim/backend_tensor.hpp"

namespace mxsim::sim {

class StateIO {
 public:
  virtual ~StateIO() = default;
  /// True while resuming (values flow file -> state), false while saving.
  virtual bool loading() const = 0;
  /// An optional group of entries: saving, writes it iff `present_now`;
  /// loading, whether the file has the entry `probe` (the group's first).
  virtual bool present(const std::string& probe, bool present_now) = 0;
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

}  // namespace mxsim::sim
