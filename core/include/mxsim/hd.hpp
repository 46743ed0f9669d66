// MXSIM_HD: marks functions that compile for both host and device.
//
// Scalar codecs (formats, rounding, scale rules, Philox) are shared source:
// the CPU emulator and the GPU kernels include the same headers, so both
// sides run literally the same arithmetic (docs/architecture.md,
// "Shared op sources").
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

// Random123 knows nvcc (features/nvccfeatures.h) but not HIP-Clang: without
// these, hipcc sees Philox as host-only and pulls x86 SSE helpers into the
// device pass. Same choices as nvccfeatures.h makes for the device; Philox4x32
// itself uses no SSE, so host bits are unchanged. Must precede any Random123
// include (philox.hpp includes this header first).
#if defined(__HIPCC__) && !defined(__CUDACC__)
#ifndef R123_CUDA_DEVICE
#define R123_CUDA_DEVICE __host__ __device__
#endif
#define R123_USE_SSE 0
#define R123_USE_AES_NI 0
#define R123_USE_SSE4_1 0
#define R123_USE_SSE4_2 0
#define R123_USE_MULHILO64_ASM 0
#define R123_USE_GNU_UINT128 0
#endif
