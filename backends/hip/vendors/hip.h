// mxsim platform header, AMD: the HIP runtime itself (ROCm; Debian ships
// HIP 5.2 with clang 15, enough for gfx90a). The project's code uses HIP
// names, so nothing needs mapping here beyond the few mxsim macros that
// vendors/cuda.h also defines.
#pragma once
#include <hip/hip_runtime.h>

#define MXSIM_GPU_VENDOR "amd"

// Shuffles within groups of 32 lanes: HIP's width argument splits the
// 64-lane CDNA wavefront into two independent halves.
#define MXSIM_SHFL_XOR32(v, m) __shfl_xor((v), (m), 32)
#define MXSIM_SHFL_DOWN32(v, d) __shfl_down((v), (d), 32)
#define MXSIM_SHFL32(v, l) __shfl((v), (l), 32)
// Orders shared-memory accesses among the lanes of one warp (a wavefront's
// lanes run in lockstep; the fence keeps the compiler from reordering).
#define MXSIM_SYNCWARP() (__builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "wavefront"), __builtin_amdgcn_wave_barrier())

// No packed BF16 FMA on CDNA2: the BF16 quantizer takes its per-element path.
#define MXSIM_HAS_PACKED_BF16 0
#define MXSIM_BYTE_PERM(x, y, s) __byte_perm((x), (y), (s))

// Largest dynamic shared memory a block may use (bytes): HIP 5.2 reports no
// separate opt-in limit; CDNA's LDS is 64 KiB per workgroup.
#define MXSIM_PROP_SHARED_OPTIN(prop) ((prop).sharedMemPerBlock)
