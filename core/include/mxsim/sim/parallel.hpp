// Parallel simulation over P ranks: the communicator the simulator's multi-rank code path talks
// through, and the flat layout of the distributed optimizer's shards (docs/simulator.md
// "Parallel simulation").
//
// Collectives and their arithmetic (the contract every implementation meets, bit for bit):
//   all_to_all_counts  every rank sends one count per destination (the m_splits exchange that
//                      Megatron's token dispatcher performs before the grouped GEMMs); no arithmetic.
//   all_to_all_v       rows of an [rows, C] f32 tensor: rank s sends its send_splits[s][d] rows
//                      (consecutive, destination order) to rank d; rank d receives them ordered by
//                      source rank. A copy: no arithmetic.
//   reduce_scatter     every rank holds a flat f32 buffer of P * shard elements; rank r receives
//                      elements [r * shard, (r + 1) * shard) summed over the ranks IN RANK ORDER:
//                      out = in_0; out = fl32(out + in_1); ...; out = fl32(out + in_{P-1})
//                      (IEEE FP32 add, RNE, a NaN result canonical as docs/numerics.md
//                      requires; "gather, then sum in rank order"). An implementation
//                      over NCCL must not use ncclReduceScatter, whose summation order (ring or
//                      tree, chosen at run time) is unspecified: it gathers the P copies of each
//                      shard (grouped ncclSend/ncclRecv) and sums them in rank order on its device.
//   all_gather         rank r contributes its shard; every rank receives the P shards concatenated in
//                      rank order. A copy.
//
// Who drives which rank: a Comm serves the ranks of one process (local_ranks()). The in-process
// implementation (make_virtual_comm) drives all P ranks from one thread, one after another, as
// virtual ranks sharing one Backend; the one over NCCL with one process per GPU
// (mxsim::hip::make_nccl_comm, mxsim/hip/comm.hpp; processes started by `mxsim launch`) drives
// its own rank (NCCL also lets one process drive several devices inside ncclGroupStart/End,
// which is the same shape). Every collective therefore takes and returns one entry per LOCAL rank, in
// local_ranks() order; a caller written against this interface runs unchanged on either.
//
// Error behaviour: wrong entry counts, shapes, dtypes or splits throw std::invalid_argument naming
// the collective and the rank.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mxsim/backend.hpp"

namespace mxsim::sim {

/// A half-open range [begin, end) of flat element (or row) indices.
struct Range {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  bool operator==(const Range&) const = default;
};

/// Rank r's share of n items split into P contiguous parts, the first n % P parts one item
/// larger (the token shards of the expert-parallel dispatch). P >= 1, 0 <= r < P.
Range split_even(size_t n, int P, int r);

/// The distributed optimizer's flat buffer (Megatron-LM's DistributedOptimizer layout): every
/// parameter's elements in one flat FP32 buffer, parameters in the order given (the simulator
/// uses model order: embed, router, fc1, fc2, head), each contiguous, row-major; the buffer is
/// padded with zeros to a multiple of P and cut into P equal contiguous shards of
/// shard = ceil(total / P) elements: rank r owns [r * shard, (r + 1) * shard). A parameter may
/// straddle shards at any element; its piece on rank r is the intersection of its range with r's.
class FlatLayout {
 public:
  FlatLayout() = default;
  /// numels: elements of each parameter, in buffer order. Throws std::invalid_argument for P < 1.
  FlatLayout(std::vector<size_t> numels, int ranks);
  int ranks() const { return ranks_; }
  size_t total() const { return total_; }    ///< sum of the parameters' elements
  size_t padded() const { return padded_; }  ///< ranks * shard
  size_t shard() const { return shard_; }    ///< elements per rank
  size_t params() const { return offset_.size(); }
  /// Flat offset of parameter p in the buffer.
  size_t offset(size_t p) const { return offset_[p]; }
  size_t numel(size_t p) const { return numel_[p]; }
  /// Rank r's range of the flat buffer.
  Range shard_range(int r) const { return {size_t(r) * shard_, size_t(r + 1) * shard_}; }
  /// Parameter p's piece on rank r, in the parameter's own flat indices (empty if none).
  Range piece(size_t p, int r) const;

 private:
  std::vector<size_t> offset_, numel_;
  size_t total_ = 0, padded_ = 0, shard_ = 0;
  int ranks_ = 1;
};

/// The communicator (see the header comment for each collective's contract).
class Comm {
 public:
  virtual ~Comm() = default;
  /// P, the number of ranks.
  virtual int size() const = 0;
  /// The ranks this process drives, ascending.
  virtual const std::vector<int>& local_ranks() const = 0;
  /// send[i]: P chunks of c counts (the same c everywhere), chunk d for rank d (e.g. the tokens
  /// per local expert of rank d). Returns recv[i]: P chunks of c, chunk s from rank s.
  virtual std::vector<std::vector<int64_t>> all_to_all_counts(const std::vector<std::vector<int64_t>>& send) = 0;
  /// send[i]: f32 [rows_i, C] (rank 2, the same C everywhere), rows grouped by destination;
  /// send_splits[i][d] rows go to rank d (sum = rows_i). Returns per local rank a new tensor
  /// [sum over s of the rows s sends it, C], ordered by source rank.
  virtual std::vector<Tensor> all_to_all_v(std::span<const Tensor> send,
                                           const std::vector<std::vector<int64_t>>& send_splits) = 0;
  /// in[i]: f32 with P * out[i].numel() elements; out[i]: f32, rank local_ranks()[i]'s shard,
  /// summed in rank order.
  virtual void reduce_scatter(std::span<const Tensor> in, std::span<Tensor> out) = 0;
  /// in[i]: f32 shard of local rank i (the same size everywhere); out[i]: f32 with P times as many
  /// elements, the shards in rank order.
  virtual void all_gather(std::span<const Tensor> in, std::span<Tensor> out) = 0;
};

/// P virtual ranks in this process, every buffer in `be` (which must outlive the Comm): the
/// collectives are copies through Backend::copy_range, and reduce_scatter's rank-order sum is
/// computed on the host in FP32 (staged through download / upload). Throws std::invalid_argument
/// for ranks < 1.
std::unique_ptr<Comm> make_virtual_comm(Backend& be, int ranks);

}  // namespace mxsim::sim
