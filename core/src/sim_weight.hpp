// Internal to the simulator's sources: the scale of a per-tensor FP32 operand (fp8_current,
// fp8_delayed) at its use, shared by Weight (sim_weight.cpp) and Model's activations
// (sim_model.cpp).
#pragma once
#include "mxsim/backend.hpp"
#include "mxsim/sim/model.hpp"

namespace mxsim::sim::detail {

/// The spec of operand `role` of `w` at its use, for a per-tensor FP32 spec: fp8_delayed takes
/// the scale of the role's DelayedScaling (computed at the end of the previous step); current
/// scaling takes QuantSpec::whole_tensor_scale, the scale of the whole tensor's amax found by the
/// quantizer where the tensor lives (per-group wgrad slices and the groups of W share one scale,
/// as Turbo does; the bits of with_current_scale on that amax). Other specs pass through.
/// Records and checks nothing (a peek at a tensor whose amax another use checks).
QuantSpec resolved_spec(Backend& be, const Weight& w, Role role, QuantSpec s, const Tensor& x);
/// The same for a use in training or evaluation: queues this use's amax for fp8_delayed's
/// history (Weight::pending_amax) and, under current scaling, for the deferred non-finite
/// check (Weight::current_checks), or reads it at once where the weight has none or evaluates,
/// throwing std::runtime_error (current_amax_error) for a non-finite one.
QuantSpec resolve(Backend& be, Weight& w, Role role, QuantSpec s, const Tensor& x);
/// "<weight>: operand <role> has a non-finite amax (<amax>); FP8 current scaling has no finite scale".
std::string current_amax_error(const std::string& weight, Role role, float amax);

}  // namespace mxsim::sim::detail
