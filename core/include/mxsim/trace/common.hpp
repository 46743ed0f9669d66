// Shared types of the HDF5 trace and checkpoint I/O (docs/trace-format.md is the layout).
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace mxsim::trace {

/// Any trace/checkpoint I/O failure. what() names the file path, the object inside it
/// where relevant, and HDF5's own error message (innermost first), e.g.
/// "run.h5: /train/loss: append: H5Dwrite failed: ... (No space left on device)".
class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
  /// A failure to read the stored data of `dataset` (a damaged chunk, a failed checksum):
  /// readers that go on without that dataset report it by name (the inspector, --render).
  TraceError(const std::string& what, std::string dataset) : std::runtime_error(what), dataset_(std::move(dataset)) {}
  /// The dataset whose stored data could not be read; "" for every other failure (a missing
  /// file, a wrong dtype, no common series, ...).
  const std::string& dataset() const { return dataset_; }

 private:
  std::string dataset_;
};

/// Element types of series, snapshots and checkpoint arrays. Stored little-endian
/// (H5T_IEEE_F32LE, H5T_STD_U8LE, ...); bits are stored and read back unchanged.
enum class DType : uint8_t { f32, f64, u8, i32, u32, i64, u64 };

const char* dtype_name(DType t);     ///< "f32", "f64", "u8", ...
std::size_t dtype_size(DType t);     ///< bytes per element

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  else if constexpr (std::is_same_v<T, double>) return DType::f64;
  else if constexpr (std::is_same_v<T, uint8_t>) return DType::u8;
  else if constexpr (std::is_same_v<T, int32_t>) return DType::i32;
  else if constexpr (std::is_same_v<T, uint32_t>) return DType::u32;
  else if constexpr (std::is_same_v<T, int64_t>) return DType::i64;
  else if constexpr (std::is_same_v<T, uint64_t>) return DType::u64;
  else static_assert(sizeof(T) == 0, "unsupported trace element type");
}

/// Where a run came from; stored as root attributes of the trace (see docs/trace-format.md).
struct Provenance {
  std::string version;       ///< mxsim version (MXSIM_VERSION)
  std::string git_describe;  ///< mxsim::build_commit(): the commit mxsim was built from, "unknown" outside git
  std::string backend;       ///< "emu" or "hip"
  uint64_t seed = 0;         ///< the run's seed
  std::string date;          ///< UTC start time, ISO 8601 "2025-01-31T12:34:56Z"
  std::string host;          ///< gethostname()
  /// What wrote the trace: kProducerSimulator (`mxsim train`) or kProducerRecorder
  /// (mxsim.torch.Recorder in a user's PyTorch run). Traces written before the attribute
  /// existed read as the simulator's (it was the only writer).
  std::string producer;
  std::string model;         ///< the recorded model's class ("" for the simulator's own model)
};
inline constexpr const char* kProducerSimulator = "mxsim train";
inline constexpr const char* kProducerRecorder = "mxsim.torch.Recorder";

/// Fills producer (kProducerSimulator), version (MXSIM_VERSION), git_describe (mxsim::build_commit(), recorded when mxsim
/// was built: no git process runs, and the current directory plays no part), date (now,
/// UTC) and host.
Provenance make_provenance(const std::string& backend, uint64_t seed);

}  // namespace mxsim::trace
