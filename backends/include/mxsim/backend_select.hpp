// A Backend by name, for every program that lets its user choose one (the
// CLI's --backend, the inspector's run mode): one place that knows which
// backends this build has and why a GPU cannot be used.
#pragma once
#include <memory>
#include <string>

#include "mxsim/backend.hpp"

namespace mxsim {

/// "emu": the CPU emulator (always). "hip": the GPU backend (backends/hip);
/// nullptr with *why set when this build has no GPU backend, no usable GPU
/// is present (the runtime's reason, e.g. "hipGetDeviceCount: ... no GPU
/// driver on this machine"), or setting it up fails. Any other name: nullptr,
/// *why names the choices. Never throws for these cases.
std::unique_ptr<Backend> make_backend(const std::string& name, std::string* why);

/// Whether make_backend("hip") would find a usable GPU; *why says why not.
bool gpu_backend_usable(std::string* why);

}  // namespace mxsim
