// The simulator's one step index.
//
// Convention: a step is named by its global optimizer step n, 1-based: step n
// is the n-th AdamW update since initialisation, and every file names it so
// -- /train/step holds n, trace.snapshot_steps lists n's, a checkpoint's
// `step` is the last n it contains, de-oscillation's start_step compares
// against n. Everything else is derived here, in one place:
//   done_before()  = n - 1   optimizer steps applied when step n starts (the
//                            data-order position, the snapshot's weights)
//   sr_counter()   = (n - 1) * num_microbatches + mb   Philox step word of
//                            stochastic rounding (docs/numerics.md §2.5)
// A trace's rows are the writer's own 0-based counter (/steps): row r of a
// run that started at step n0 holds step n0 + r (a fresh run: n0 = 1).
#pragma once
#include <cstdint>

namespace mxsim::sim {

class Step {
 public:
  constexpr explicit Step(int64_t n) : n_(n) {}
  /// The global optimizer step (1-based).
  constexpr int64_t n() const { return n_; }
  /// Optimizer steps completed before this step began.
  constexpr int64_t done_before() const { return n_ - 1; }
  /// The Philox step word of micro-batch mb's stochastic rounding.
  constexpr uint64_t sr_counter(int mb, int num_microbatches) const {
    return uint64_t(n_ - 1) * uint64_t(num_microbatches) + uint64_t(mb);
  }
  constexpr Step next() const { return Step(n_ + 1); }
  constexpr bool operator==(const Step&) const = default;
  constexpr auto operator<=>(const Step&) const = default;

 private:
  int64_t n_;
};

}  // namespace mxsim::sim
