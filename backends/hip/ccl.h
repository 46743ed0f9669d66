// mxsim collective-library header: NCCL on NVIDIA, RCCL on AMD. Include this,
// never nccl.h / rccl.h directly. RCCL implements the NCCL API under the same
// names (ncclSend, ncclUniqueId, ...), so the code is written once against
// those; only the header's location and the library's file name differ.
// The library itself is opened with dlopen at first use (src/comm_nccl.hip):
// the header gives the types and the functions' signatures only, so no mxsim
// binary links against it.
#pragma once
#include "gpu.h"

#if defined(MXSIM_GPU_NVIDIA) || (!defined(MXSIM_GPU_AMD) && defined(__CUDACC__))
#include <nccl.h>
#define MXSIM_CCL_LIBRARY "libnccl.so.2"
#define MXSIM_CCL_NAME "NCCL"
#define MXSIM_HAVE_CCL_HEADER 1
#elif __has_include(<rccl/rccl.h>)
#include <rccl/rccl.h>
#define MXSIM_CCL_LIBRARY "librccl.so.1"
#define MXSIM_CCL_NAME "RCCL"
#define MXSIM_HAVE_CCL_HEADER 1
#else
// Debian's ROCm packages lack RCCL: the AMD build compiles the communicator
// as a stub whose every entry point says so.
#define MXSIM_CCL_LIBRARY "librccl.so.1"
#define MXSIM_CCL_NAME "RCCL"
#define MXSIM_HAVE_CCL_HEADER 0
#endif
