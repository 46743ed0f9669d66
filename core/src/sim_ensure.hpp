// Internal to the simulator's sources: a workspace tensor reused across calls.
#pragma once
#include "mxsim/backend.hpp"

namespace mxsim::sim {

/// (Re)allocate `t` unless it already is a tensor of this dtype and shape:
/// the workspace keeps its buffers across micro-batches of equal shapes.
inline Tensor& ensure(Backend& be, Tensor& t, DType dt, Shape s) {
  if (t.empty() || t.dtype() != dt || !(t.shape() == s)) t = be.alloc(dt, s);
  return t;
}
inline Tensor& ensure(Backend& be, Tensor& t, Shape s) { return ensure(be, t, DType::f32, s); }

}  // namespace mxsim::sim
