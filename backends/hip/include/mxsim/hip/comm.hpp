// The communicator of a run of one process per GPU (sim/parallel.hpp's Comm) over NCCL (RCCL
// on AMD, through the same API names; backends/hip/ccl.h), for the HIP backend's device
// tensors. Plain C++ (no vendor runtime types), so host code compiled by g++ includes it.
//
// Each process drives one rank: local_ranks() = {rank}, every collective takes and returns one
// entry. The collectives and their arithmetic are the contract of sim/parallel.hpp, bit for bit
// that of make_virtual_comm:
//   all_to_all_counts  grouped ncclSend / ncclRecv of c int64 per peer (c checked equal on every
//                      rank by an ncclAllGather first)
//   all_to_all_v       the rows each peer will send are exchanged first (with the column count,
//                      checked equal), then the rows by grouped ncclSend / ncclRecv
//   reduce_scatter     never ncclReduceScatter (its ring/tree order is chosen at run time): the
//                      P copies of this rank's shard are gathered by grouped ncclSend / ncclRecv
//                      into a [P, shard] buffer, then summed on the device in rank order,
//                      out = in_0; out = canonical_nan(fl32(out + in_s)) for s = 1 .. P-1
//                      (sum_in_rank_order_device)
//   all_gather         ncclAllGather of the bytes (any dtype), shards in rank order
// Send and receive to the rank itself go through NCCL too (inside the group), so P = 1 runs
// the same calls. Everything is queued on the backend's stream, in order with its kernels;
// counts that the host needs (receive sizes) synchronise it.
//
// The library is opened with dlopen at first use: MXSIM_NCCL_LIBRARY (a file name or path)
// when set, else libnccl.so.2 (librccl.so.1 on AMD) through the loader's search path. With
// PyTorch's pip wheels it is nvidia/nccl/lib/libnccl.so.2 under python3's site-packages.
//
// Errors: a library that cannot be loaded (or lacks an entry point) throws std::runtime_error
// naming the library, the loader's reason and MXSIM_NCCL_LIBRARY; a failed NCCL call throws
// std::runtime_error naming the call, this rank and size, NCCL's error string and its last
// error text. Wrong entry counts, dtypes, shapes or splits throw std::invalid_argument naming
// the collective and the rank, as the virtual comm does; so do sizes that differ between ranks
// where the collective checks them (counts per peer, columns, shard sizes, gathered bytes).
// After an NCCL error the communicator is aborted (ncclCommAbort) when destroyed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mxsim/backend.hpp"
#include "mxsim/sim/parallel.hpp"

namespace mxsim::hip {

/// Bytes of a unique id (ncclUniqueId).
inline constexpr size_t kNcclIdBytes = 128;

/// Whether the collective library can be loaded (dlopen + every entry point); *why otherwise.
/// Never throws.
bool nccl_available(std::string* why = nullptr);

/// "NCCL 2.28.3" (or RCCL's): the loaded library's version. Throws as make_nccl_comm.
std::string nccl_version();

/// A new unique id (ncclGetUniqueId), to be created by rank 0 and passed to every rank
/// (sim/process_group.hpp carries it). rank: this process's rank, for error messages.
std::vector<uint8_t> nccl_unique_id(int rank);

/// Rank `rank` of `size` (ncclCommInitRank on the current device, which must be the backend's)
/// over `be`, which must be the HIP backend (make_backend()) and outlive the Comm. id: the
/// kNcclIdBytes of nccl_unique_id on rank 0. Blocks until every rank has joined. Throws
/// std::invalid_argument for another backend, a bad rank or size, or an id of another size.
std::unique_ptr<sim::Comm> make_nccl_comm(Backend& be, int rank, int size, std::span<const uint8_t> id);

/// The rank-order sum of reduce_scatter on device arrays: gathered [P, n] f32 (row s: rank s's
/// copy), out [n]: out[i] = gathered[0][i], then out[i] = canonical_nan(out[i] + gathered[s][i])
/// for s = 1 .. P-1, each add one IEEE FP32 add with RNE (subnormals kept). Asynchronous on
/// `stream` (a hipStream_t cast to void*, nullptr: the default stream).
void sum_in_rank_order_device(const float* gathered, size_t P, size_t n, float* out, void* stream = nullptr);

}  // namespace mxsim::hip
