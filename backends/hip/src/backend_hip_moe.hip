// HIP Backend ops: router softmax / top-k, MoE routing, permutation, combine
// and their backward, auxiliary loss, activations (docs/numerics.md §6).
// PLACEHOLDER: being written (see backend_hip_impl.hpp for the family layout).
#include "backend_hip_impl.hpp"
