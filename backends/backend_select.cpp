// make_backend / gpu_backend_usable (mxsim/backend_select.hpp).
#include "mxsim/backend_select.hpp"

#include <exception>

#include "mxsim/emu/backend_emu.hpp"
#if MXSIM_HAVE_HIP_BACKEND
#include "mxsim/hip/backend_hip.hpp"
#include "mxsim/hip/device.hpp"
#endif

namespace mxsim {

bool gpu_backend_usable(std::string* why) {
#if MXSIM_HAVE_HIP_BACKEND
  std::string r;
  if (mxsim::hip::available(&r)) return true;
  if (why) *why = r;
  return false;
#else
  if (why) *why = "this mxsim was built without a GPU backend";
  return false;
#endif
}

std::unique_ptr<Backend> make_backend(const std::string& name, std::string* why) {
  std::string r;
  if (name == "emu") return emu::make_emu_backend();
  if (name == "hip") {
    if (!gpu_backend_usable(&r)) {
      if (why) *why = r;
      return nullptr;
    }
#if MXSIM_HAVE_HIP_BACKEND
    try {  // a runtime failure while setting up (stream creation, ...) is a reason, not a crash
      return mxsim::hip::make_backend();
    } catch (const std::exception& e) {
      if (why) *why = e.what();
      return nullptr;
    }
#endif
  }
  if (why) *why = "unknown backend '" + name + "' (expected emu or hip)";
  return nullptr;
}

}  // namespace mxsim
