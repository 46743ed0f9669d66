// mxsim platform header, NVIDIA: the HIP runtime names the project uses,
// mapped onto the CUDA runtime.
//
// Pattern of ggml's ggml-cuda/vendors/hip.h, in the other direction: kernels
// and host glue are written once against HIP names; on NVIDIA they compile
// with nvcc through this header. Debian's HIP-on-NVIDIA headers
// (hip/nvidia_detail) target older CUDA and fail against CUDA 13, so we map
// only what we use. Add a name here when a new call is needed; never include
// <hip/hip_runtime.h> on this platform.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#define MXSIM_GPU_VENDOR "nvidia"

// Errors
#define hipError_t cudaError_t
#define hipSuccess cudaSuccess
#define hipErrorNoDevice cudaErrorNoDevice
#define hipErrorInsufficientDriver cudaErrorInsufficientDriver
#define hipErrorOutOfMemory cudaErrorMemoryAllocation
#define hipGetErrorName cudaGetErrorName
#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipPeekAtLastError cudaPeekAtLastError

// Devices
#define hipDeviceProp_t cudaDeviceProp
#define hipGetDeviceCount cudaGetDeviceCount
#define hipGetDevice cudaGetDevice
#define hipSetDevice cudaSetDevice
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipDriverGetVersion cudaDriverGetVersion
#define hipRuntimeGetVersion cudaRuntimeGetVersion
// Largest dynamic shared memory a block may opt in to (bytes).
#define MXSIM_PROP_SHARED_OPTIN(prop) ((prop).sharedMemPerBlockOptin)

// Memory
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpy cudaMemcpy
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemset cudaMemset
#define hipMemsetAsync cudaMemsetAsync
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
// Page-locked host memory (asynchronous device-to-host copies need it).
#define hipHostMalloc(p, n, flags) cudaMallocHost((p), (n))
#define hipHostFree cudaFreeHost

// Streams and events
#define hipStream_t cudaStream_t
#define hipStreamCreate cudaStreamCreate
#define hipStreamCreateWithFlags cudaStreamCreateWithFlags
#define hipStreamNonBlocking cudaStreamNonBlocking
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize
#define hipEvent_t cudaEvent_t
#define hipEventCreate cudaEventCreate
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventCreateWithFlags cudaEventCreateWithFlags
#define hipEventDisableTiming cudaEventDisableTiming
#define hipStreamWaitEvent cudaStreamWaitEvent
#define hipEventElapsedTime cudaEventElapsedTime

// Kernel attributes
#define hipFuncSetAttribute cudaFuncSetAttribute
#define hipFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize

// Kernel launch (HIP's macro form; <<<>>> works on both platforms too)
#define hipLaunchKernelGGL(kernel, grid, block, shmem, stream, ...) \
  kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)

// Warp shuffles within groups of 32 lanes (a CUDA warp; half an AMD CDNA
// wavefront of 64). All 32 lanes must take part.
#define MXSIM_SHFL_XOR32(v, m) __shfl_xor_sync(0xFFFFFFFFu, (v), (m), 32)
#define MXSIM_SHFL_DOWN32(v, d) __shfl_down_sync(0xFFFFFFFFu, (v), (d), 32)
#define MXSIM_SHFL32(v, l) __shfl_sync(0xFFFFFFFFu, (v), (l), 32)
// Orders shared-memory accesses among the 32 lanes of a warp.
#define MXSIM_SYNCWARP() __syncwarp()

// Two 16-bit lanes in one 32-bit register: the BF16 quantizer's packed path
// (codec.hip). fma.rn.bf16x2 rounds a*b+c once, RNE (sm_80+); the u16x2
// min/max are single instructions from sm_90 (PTX ISA 8.0), and __vmaxu2 /
// __vminu2 compute the same on older GPUs.
#define MXSIM_HAS_PACKED_BF16 1
__device__ inline uint32_t mxsim_fma_bf16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t d = 0;
#ifdef __CUDA_ARCH__
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
#endif
  return d;
}
__device__ inline uint32_t mxsim_max_u16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t d;
  asm("max.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return __vmaxu2(a, b);
#endif
}
__device__ inline uint32_t mxsim_min_u16x2(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t d;
  asm("min.u16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  return __vminu2(a, b);
#endif
}
#define MXSIM_BYTE_PERM(x, y, s) __byte_perm((x), (y), (s))

