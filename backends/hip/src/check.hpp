// Internal: checked runtime calls of the HIP backend. Every call goes through
// MXSIM_HIP_CHECK, which throws mxsim::hip::Error naming the call, the
// file:line and the runtime's error name and string (device.hpp).
#pragma once
#include "gpu.h"

#include <algorithm>
#include <cstddef>
#include <string>

#include "mxsim/hip/device.hpp"

namespace mxsim::hip::detail {

[[noreturn]] inline void fail(hipError_t e, const char* call, const char* file, int line) {
  throw Error(std::string("mxsim::hip: ") + call + " failed at " + file + ":" + std::to_string(line) + ": " +
              hipGetErrorName(e) + ": " + hipGetErrorString(e));
}

inline hipStream_t stream_of(void* s) { return static_cast<hipStream_t>(s); }

/// Grid for a grid-stride loop over `items` with `threads` per block (>= 1
/// block; capped, the loop covers the rest).
inline unsigned grid_for(size_t items, unsigned threads) {
  const size_t g = (items + threads - 1) / threads;
  return unsigned(std::min<size_t>(std::max<size_t>(g, 1), size_t(1) << 30));
}

}  // namespace mxsim::hip::detail

#define MXSIM_HIP_CHECK(call)                                                                     \
  do {                                                                                            \
    const hipError_t mxsim_e_ = (call);                                                           \
    if (mxsim_e_ != hipSuccess) ::mxsim::hip::detail::fail(mxsim_e_, #call, __FILE__, __LINE__);  \
  } while (0)
// After a launch: configuration errors surface here (named by the kernel),
// execution errors at the next synchronizing call.
#define MXSIM_HIP_CHECK_LAUNCH(kernel_name)                                                       \
  do {                                                                                            \
    const hipError_t mxsim_e_ = hipGetLastError();                                                \
    if (mxsim_e_ != hipSuccess) ::mxsim::hip::detail::fail(mxsim_e_, "launch of " kernel_name, __FILE__, __LINE__); \
  } while (0)
