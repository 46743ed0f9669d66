// mxsim GPU platform header: picks the vendor mapping. Include this, never a
// vendor runtime header directly. CMake defines MXSIM_GPU_NVIDIA or
// MXSIM_GPU_AMD (cmake/gpu.cmake); without either the compiler decides.
#pragma once
#if defined(MXSIM_GPU_NVIDIA) || (!defined(MXSIM_GPU_AMD) && defined(__CUDACC__))
#include "vendors/cuda.h"
#else
#include "vendors/hip.h"
#endif
