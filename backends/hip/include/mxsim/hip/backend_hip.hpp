// The HIP backend as an mxsim::Backend (core/include/mxsim/backend.hpp): the
// whole training step on one GPU, bit-identical to the CPU emulator.
//
// Every tensor handle it hands out lives in device memory for its whole life;
// the host sees data only through Backend::upload / download (trace rows,
// snapshots, checkpoints) and the few bytes the ops that return host values
// copy back (amax, sums, statistics, the routing counts the host turns into
// m_splits). All work runs in order on one stream the backend owns; ops
// returning a host value synchronise it.
//
// The arithmetic of every op is the emulator's: the kernels call the same
// MXSIM_HD sources (core/include/mxsim/hd/*.hpp), and every reduction has the
// fixed order of docs/numerics.md (hd/reduce.hpp's tree sum; order-free
// maxima, minima and exact integer counts; sequential folds inside one row),
// never one that depends on the launch shape or on atomics. `mxsim verify` and tests/test_gpu_backend.cpp
// compare each op with the emulator bit for bit.
//
// Plain C++ (no vendor runtime types), so host code compiled by g++ includes it.
//
// Errors: make_backend() throws mxsim::hip::Error when no GPU is usable (its
// message says why: call available() first for a reason without a throw);
// a device allocation that fails throws OutOfMemory naming the tensor and
// the bytes asked for; bad shapes throw std::invalid_argument naming the op
// and the operand, as the emulator does.
#pragma once
#include <memory>

#include "mxsim/backend.hpp"
#include "mxsim/hip/device.hpp"

namespace mxsim::hip {

/// A Backend on the current GPU (device 0 unless hipSetDevice chose
/// another). Throws Error when no device is usable.
std::unique_ptr<Backend> make_backend();

}  // namespace mxsim::hip
