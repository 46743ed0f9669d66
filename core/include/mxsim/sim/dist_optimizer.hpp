// The distributed optimizer of the virtual-rank simulation (Megatron-LM's DistributedOptimizer,
// ZeRO stage 2 in shape) and the shard-edge de-oscillation QDQ that Primus computes on it
// (training-mechanics.md §6 "Sharding approximation"; docs/simulator.md "Parallel simulation").
//
// Layout: every weight's flat [G, N, K] range in one buffer in model order (FlatLayout,
// sim/parallel.hpp): P equal contiguous shards of ceil(total / P) elements, the buffer padded
// with zeros at its end. Rank r owns its shard of the FP32 master, the Adam moments and the
// reduced main_grad; the Weight's tensors hold the whole tensors on every rank (rank r reads and
// updates only its pieces, then the all-gathers below give every rank everyone's), so trace,
// checkpoint and metrics see the gathered values in a process that drives one rank too.
//
// One step: (1) every rank's gradient buffer holds the gradient elements that rank computed
// (an expert's weight groups on the rank that owns the expert, grad_owner; the dense layers,
// computed once for the whole micro-batch, from rank 0) and +0 elsewhere; (2) reduce_scatter
// sums them in rank order into each rank's shard (exact: main_grad is never -0, since it starts
// at +0 and every add is RNE, so g + (+0) = g for every element); (3) AdamW (Backend::adamw,
// per element) on each rank's shard; (4) all_gather of the BF16 model shards into every rank's
// full model copy (Megatron's parameter all-gather), and of the FP32 master and Adam moments
// (which Megatron keeps sharded; here every rank runs de-oscillation, the metrics and the trace
// over whole tensors). Per element the arithmetic is that of P = 1, hence the same bits.
#pragma once
#include <memory>
#include <vector>

#include "mxsim/backend.hpp"
#include "mxsim/sim/model.hpp"
#include "mxsim/sim/parallel.hpp"

namespace mxsim::sim {

/// The flat layout of `ws` (model order) over P ranks.
FlatLayout flat_layout_of(const std::vector<Weight*>& ws, int ranks);

/// The rank that computes group g of w's gradient: the expert's owner for grouped weights
/// (G experts, G / P consecutive ones per rank), rank 0 for plain linears (G = 1).
int grad_owner(const Weight& w, size_t g, int ranks);

class DistributedOptimizer {
 public:
  /// ws in model order (the layout's parameter order); be and comm must outlive this.
  DistributedOptimizer(Backend& be, Comm& comm, const std::vector<Weight*>& ws);
  const FlatLayout& layout() const { return layout_; }
  /// One AdamW step of every weight (the step above): reads main_grad, writes master, m, v and
  /// the model copy.
  void step(const Backend::AdamW& h);

 private:
  Backend& be_;
  Comm& comm_;
  std::vector<Weight*> ws_;
  FlatLayout layout_;
};

/// De-oscillation's Q of weight p of `layout` (its Weight w) as the ranks of a sharded run
/// compute it (Primus weight_deosc.py): for every rank r and every group g that r's piece of w
/// touches, the rows of g the piece covers are widened to whole 32-row tile bands
/// [32 floor(r0 / 32), min(N, 32 ceil((r1 + 1) / 32))); a zero-filled [band rows, K] buffer receives
/// bf16(master) at the piece's elements only (other ranks' elements stay 0), is quantized to MXFP4
/// (mxfp4_weight_spec: 32x32 tiles, EVEN, RNE) and dequantized, and the piece's elements are read
/// back into q (f32, w's shape). Tiles wholly inside a piece match the full-tensor QDQ; a boundary
/// tile's scale can differ when the zeros lower its amax. With one rank, q is the full QDQ.
void shard_edge_qdq(Backend& be, Weight& w, const FlatLayout& layout, size_t p, Tensor& q);

}  // namespace mxsim::sim
