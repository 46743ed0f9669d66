// The CPU emulator implementation of mxsim::Backend (core/include/mxsim/backend.hpp).
#pragma once
#include <memory>

#include "mxsim/backend.hpp"

namespace mxsim::emu {

/// Creates the CPU emulator backend (name() == "emu"); never fails.
std::unique_ptr<Backend> make_emu_backend();

}  // namespace mxsim::emu
