// MXSIM_HD: marks functions that compile for both host and device.
//
// Scalar codecs (formats, rounding, scale rules, Philox) are shared source:
// the CPU emulator and the GPU kernels include the same headers, so both
// sides run literally the same arithmetic (DESIGN.md, "Scalar codecs are
// shared source").
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MXSIM_HD __host__ __device__
#define MXSIM_DEVICE_COMPILER 1
#else
#define MXSIM_HD
#endif

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define MXSIM_DEVICE_CODE 1
#endif
