// The CPU emulator implementation of mxsim::Backend (core/include/mxsim/backend.hpp).
#pragma once
#include <memory>

#include "mxsim/backend.hpp"

namespace mxsim::emu {

/// Creates the emu backend (same as mxsim::make_emu_backend()).
std::unique_ptr<Backend> make_backend_emu();

}  // namespace mxsim::emu
