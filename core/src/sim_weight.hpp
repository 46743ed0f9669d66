// Internal to the simulator's sources: the scale of a per-tensor FP32 operand (fp8_current,
// fp8_delayed) at its use, shared by Weight (sim_weight.cpp) and Model's activations
// (sim_model.cpp).
#pragma once
#include "mxsim/backend.hpp"
#include "mxsim/sim/model.hpp"

namespace mxsim::sim::detail {

/// Resolve a per-tensor FP32 spec's scale for operand `role` of `w`:
/// fp8_delayed takes the scale of the role's DelayedScaling (computed at the
/// end of the previous step); current scaling takes the amax of the whole
/// tensor now (so per-group wgrad slices share one scale, as Turbo does).
/// Other specs pass through. Records no amax (a peek). Throws std::runtime_error
/// naming the layer and operand for a non-finite amax under current scaling.
QuantSpec resolved_spec(Backend& be, const Weight& w, Role role, QuantSpec s, const Tensor& x);
/// The same, queueing this use's amax for fp8_delayed's history (Weight::pending_amax).
QuantSpec resolve(Backend& be, Weight& w, Role role, QuantSpec s, const Tensor& x);

}  // namespace mxsim::sim::detail
