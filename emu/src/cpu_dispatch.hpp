// Internal: the one CPU dispatch point of the fast kernels (public side:
// mxsim/emu/cpu_path.hpp). Kernels ask cpu_path() which path to run and
// record what they ran with note_kernel().
#pragma once
#include "mxsim/emu/cpu_path.hpp"

namespace mxsim::emu {

/// Kernel names (docs/numerics.md §5.6); kernel_name() returns these.
namespace kernel {
inline constexpr const char* kMxVnniDirect = "avx512-vnni-direct";
inline constexpr const char* kMxVnniPanel = "avx512-vnni-panel";
inline constexpr const char* kMxAvx2 = "avx2-maddubs";
inline constexpr const char* kMxScalar = "scalar-int8";
inline constexpr const char* kFusedAvx512 = "avx512-fused";
inline constexpr const char* kFusedAvx2 = "avx2-fused";
inline constexpr const char* kFusedScalar = "scalar-fused";
inline constexpr const char* kNvfp4Avx512 = "avx512-nvfp4";
inline constexpr const char* kNvfp4Avx2 = "avx2-nvfp4";
inline constexpr const char* kNvfp4Scalar = "scalar-nvfp4";
inline constexpr const char* kQuantAvx512 = "avx512-quantize";
inline constexpr const char* kQuantAvx2 = "avx2-quantize";
inline constexpr const char* kQuantScalar = "scalar-quantize";
}  // namespace kernel

/// Records that a fast call of slot s ran kernel `name` (one of the above).
void note_kernel(KernelSlot s, const char* name);

/// CPU features beyond a path's baseline that single kernels use.
bool cpu_has_avx512_vnni();
bool cpu_has_avx512_vbmi();

}  // namespace mxsim::emu
