#include "mxsim/build_info.hpp"

#include "mxsim_build_commit.h"  // generated in the build tree

namespace mxsim {

const char* version() { return MXSIM_VERSION; }
const char* build_commit() { return MXSIM_BUILD_COMMIT; }

}  // namespace mxsim
