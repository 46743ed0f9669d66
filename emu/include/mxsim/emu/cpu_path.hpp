// Which CPU code path the emulator's fast kernels use (docs/numerics.md §5.6).
//
// One dispatch point: the first fast GEMM or quantize call picks the fastest
// path this CPU can run, once per process, unless the environment variable
//   MXSIM_CPU_PATH=avx512 | avx2 | scalar
// forces one (any path the CPU can run; a path it cannot run, or another
// value, is an error: std::invalid_argument naming the variable, the value and
// the missing CPU features). Every path gives the same bits (the contract of
// docs/numerics.md §3, §5); only the speed differs.
//
//   avx512  AVX-512 F/BW/DQ/VL (MX-exact GEMM additionally uses VNNI, and VBMI
//           for its direct packing, where present)
//   avx2    AVX2 + FMA (x86-64-v3); no AVX-512 or AVX-VNNI instruction runs
//   scalar  portable C++ (the compiler's baseline x86-64 code)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mxsim::emu {

enum class CpuPath : uint8_t { Scalar, Avx2, Avx512 };

/// "scalar", "avx2", "avx512".
const char* cpu_path_name(CpuPath p);

/// True when this CPU can run path p; otherwise `why` (if given) receives the
/// missing features, e.g. "CPU lacks avx512bw avx512vl".
bool cpu_supports(CpuPath p, std::string* why = nullptr);

/// The path the fast kernels use now: MXSIM_CPU_PATH (read on the first call)
/// or the best path cpu_supports(). Throws std::invalid_argument for a bad
/// MXSIM_CPU_PATH (every later call throws the same).
CpuPath cpu_path();

/// Forces a path for this process from now on (tests and benchmarks run every
/// path this way). Throws std::invalid_argument if the CPU cannot run it.
/// Not meant to be changed while another thread runs a kernel.
void set_cpu_path(CpuPath p);

/// The kernel families the dispatch chooses between.
enum class KernelSlot : uint8_t { MxExact, MxF13, Fp8Chunk, Bf16, Nvfp4, Quantize };
inline constexpr int kNumKernelSlots = 6;
/// "mx-exact", "mx-f13", "fp8-chunk128", "bf16-f25", "nvfp4-exact" (the GEMM classes of
/// docs/numerics.md §5.2) or "quantize" (MX quantization, §3).
const char* kernel_slot_name(KernelSlot s);

/// Name of the kernel that path p runs for slot s on this CPU, e.g.
/// "avx512-vnni-direct", "avx2-maddubs", "scalar-int8" (the names of
/// docs/numerics.md §5.6). Rare inputs (NaN/Inf elements, extreme scales) are
/// finished by the exact scalar code whatever the kernel.
const char* kernel_name(KernelSlot s, CpuPath p);

/// The kernel that the last fast call of slot s actually ran in this process
/// (nullptr before the first, or since clear_last_kernel); tests clear it,
/// make one call, and assert it after forcing a path.
const char* last_kernel(KernelSlot s);
void clear_last_kernel(KernelSlot s);

}  // namespace mxsim::emu
