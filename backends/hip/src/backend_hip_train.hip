// HIP Backend ops: loss and metrics, l2 norm, AdamW, de-oscillation,
// oscillation metrics (docs/numerics.md §6).
// PLACEHOLDER: being written (see backend_hip_impl.hpp for the family layout).
#include "backend_hip_impl.hpp"
