// A run of one process per rank (docs/simulator.md "Parallel simulation", "Process mode"): the
// place of this process in it, as `mxsim launch` passes it through the environment, and the
// exchange of the communicator's unique id (NCCL's ncclUniqueId: 128 opaque bytes that rank 0
// creates and every other rank needs before ncclCommInitRank).
//
// Environment (set by `mxsim launch` in every child; torchrun's RANK / WORLD_SIZE in shape):
//   MXSIM_RANK                 this process's rank r, 0 <= r < size
//   MXSIM_WORLD_SIZE           P, the number of processes (one per rank, rank r on device r)
//   MXSIM_RENDEZVOUS           a private folder (mkdtemp, mode 0700) the launcher made for this run
//   MXSIM_RENDEZVOUS_TIMEOUT   seconds the other ranks wait for rank 0's id (default 120)
//
// The exchange: rank 0 writes the id to <MXSIM_RENDEZVOUS>/unique-id through a temporary file
// renamed onto that name (io::AtomicOutputs), so a reader never sees a partial id; the others
// poll for the name every 10 ms until the timeout.
//
// Errors: a malformed variable throws std::invalid_argument naming it and its value; a missing
// id after the timeout, or one of the wrong size, throws std::runtime_error naming the rank,
// the folder and the timeout.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mxsim::sim {

struct ProcessPlace {
  int rank = 0, size = 1;
  std::string rendezvous;   ///< the launcher's private folder
  double timeout_s = 120;   ///< how long a rank waits for rank 0's id
};

/// The place of this process when MXSIM_WORLD_SIZE is set, std::nullopt otherwise (a
/// single-process run). Throws std::invalid_argument when a variable is malformed: rank or
/// size not an integer, size outside [1, 1024], rank outside [0, size), MXSIM_RENDEZVOUS unset
/// or not a folder, a timeout that is not a positive number of seconds.
std::optional<ProcessPlace> process_place_from_env();

/// Rank 0: writes `id` as <rendezvous>/unique-id, atomically. Throws std::logic_error on another
/// rank, io::IoError when the folder cannot take the file.
void publish_unique_id(const ProcessPlace& at, std::span<const uint8_t> id);

/// Ranks > 0: waits for rank 0's id of exactly `bytes` bytes and returns it. Throws
/// std::runtime_error naming this rank, the folder and the timeout when none arrives in time,
/// or naming the sizes when the file has another size.
std::vector<uint8_t> await_unique_id(const ProcessPlace& at, size_t bytes);

}  // namespace mxsim::sim
