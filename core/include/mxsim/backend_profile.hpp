// ProfilingBackend: a Backend that forwards every op to another one and
// measures it: calls and wall time per op, by default with the backend
// synchronised after each op so that a GPU's asynchronous work is charged to
// the op that queued it (Mode::Host times the calls alone). Results are the
// wrapped backend's, bit for bit; only the timing of the run changes (in
// Device mode every op becomes a synchronisation point).
//
//   auto be = std::make_unique<ProfilingBackend>(emu::make_emu_backend());
//   ... train with *be ...
//   std::cout << be->report();   // one line per op, most time first
//
// `mxsim train --profile` does this and prints the table after the summary.
#pragma once
#include <array>
#include <chrono>
#include <memory>
#include <string>

#include "mxsim/backend.hpp"

namespace mxsim {

class ProfilingBackend final : public Backend {
 public:
  /// What an op's time is: Device = until its work is done (the backend is
  /// synchronised after every op, so a GPU's queued work is charged to the
  /// op that queued it); Host = the backend's own part of the call
  /// (allocation, launches, and any wait the op makes of its own accord;
  /// the operand checks of core's front door run outside the timing),
  /// nothing added: the host-side cost of driving the backend.
  enum class Mode : uint8_t { Device, Host };
  explicit ProfilingBackend(std::unique_ptr<Backend> inner, Mode mode = Mode::Device);

  /// Per op: calls, total and mean wall time (ms), share of the total; rows
  /// with at least one call, most time first.
  std::string report() const;
  /// Total wall time spent inside the wrapped backend's ops, seconds.
  double total_seconds() const;

  std::string name() const override { return inner_->name(); }
  std::string device() const override { return inner_->device(); }
  void set_threads(int n) override { inner_->set_threads(n); }
  void synchronize() override { inner_->synchronize(); }

 protected:
  // Every op of both lists (backend_ops.hpp), forwarded to the wrapped backend's <name>_impl and timed.
  MXSIM_BACKEND_OPS(MXSIM_BACKEND_DECLARE_IMPL)
  MXSIM_BACKEND_DEFAULTED_OPS(MXSIM_BACKEND_DECLARE_IMPL)

 private:
  // Timed slots: one per row of the op lists (the GEMM and transfer forms apart).
  enum Slot : uint8_t {
#define MXSIM_X(Family, id, name, label, Ret, params, args) k_##id,
    MXSIM_BACKEND_OPS(MXSIM_X) MXSIM_BACKEND_DEFAULTED_OPS(MXSIM_X)
#undef MXSIM_X
    kSlots
  };
  struct Stat {
    uint64_t calls = 0;
    double seconds = 0;
  };
  /// Runs f, synchronises, charges the wall time to slot s.
  template <class F>
  decltype(auto) timed(Slot s, F&& f);
  static const char* slot_name(Slot s);

  Mode mode_;
  std::unique_ptr<Backend> inner_;
  std::array<Stat, kSlots> stats_{};
};

}  // namespace mxsim
