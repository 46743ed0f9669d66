// Test and probe knobs of the grouped GEMMs (mxsim/hip/gemm.hpp): what the
// GPU test suites, the GEMM benchmark and the wgmma probe read or set to
// assert which kernel ran. Not for callers of the GEMMs: nothing here changes
// a result.
#pragma once
#include <cstddef>

namespace mxsim::hip {

/// Grouped-GEMM kernel launches this process made, by kind (tests assert
/// that the kernel they force is the one that ran). A tiled launch covers up
/// to 16 groups of one call; a wgmma launch is one batch of up to 16 groups
/// (its fmaf kernel and exact-steps twin together; the image kernels are
/// not counted).
struct GemmLaunchCounts {
  size_t tiled = 0;  ///< the CUDA-core / portable tiled and lanes kernels
  size_t wgmma = 0;  ///< the Hopper tensor-core kernels
  /// Of the E8M0 wgmma launches (mx-exact; mx-f13 under WgmmaHardware),
  /// those whose scale range sent the work to the exact-steps twin instead
  /// of the fmaf kernel. Read from the current device, which it waits for;
  /// counts of launches on other devices are not included.
  size_t wgmma_exact_steps = 0;
  /// Operand sides of bf16-f25 wgmma launches that the kernel read in place
  /// from the operand's storage (K-major, groups one after another in
  /// memory, 16-byte aligned rows) instead of from an operand image. Counted
  /// on the host, for launches on every device.
  size_t bf16_in_place_sides = 0;
};
GemmLaunchCounts gemm_launch_counts();

/// For tests: caps the persistent CTAs of the Hopper tensor-core kernels
/// (0, the default: one per SM), so that a launch of a few tiles runs
/// several tiles per CTA. Applies to launches made after the call.
void set_wgmma_max_ctas(unsigned n);

}  // namespace mxsim::hip
