// What this build of mxsim is: its version and the commit it was built from.
#pragma once

namespace mxsim {

/// The project version (CMake project(VERSION), e.g. "0.1.0").
const char* version();
/// `git describe --always --dirty --abbrev=12` of the mxsim source tree,
/// taken when the library was built (cmake/build_commit.cmake; refreshed on
/// every build, rewritten only when it changes), or "unknown" for a build
/// outside a git checkout. It describes mxsim's own sources, never the
/// repository a user runs mxsim from.
const char* build_commit();

}  // namespace mxsim
