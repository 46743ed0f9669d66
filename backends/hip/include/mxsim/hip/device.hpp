// Device runtime of the HIP backend: errors, device discovery, owned device
// memory, synchronization. Plain C++ (no vendor runtime types), so host code
// compiled by g++ can include it; `stream` arguments elsewhere are a
// hipStream_t (cudaStream_t on NVIDIA) cast to void*, nullptr for the default
// stream.
//
// Errors: every runtime call is checked. A failure throws mxsim::hip::Error
// whose message names the call, the file:line and the runtime's error name
// and string; an allocation that fails throws OutOfMemory, which also names
// the tensor and the bytes asked for.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mxsim::hip {

/// A runtime call failed (message: call, location, error name and string).
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A device allocation failed; the message names the tensor and the size.
struct OutOfMemory : Error {
  OutOfMemory(const std::string& msg, size_t bytes_asked) : Error(msg), bytes(bytes_asked) {}
  size_t bytes;  ///< bytes asked for
};

/// True when at least one GPU is usable. Otherwise false, and *reason (when
/// given) says why, e.g. "hipGetDeviceCount: cudaErrorNoDevice: no
/// CUDA-capable device is detected". Never throws.
bool available(std::string* reason = nullptr);

/// "nvidia" or "amd": the platform this library was compiled for.
const char* platform();

/// Makes device `index` (0-based, of those the runtime sees) the current one of the calling
/// thread, before make_backend() (a process of `mxsim launch` takes the device of its rank).
/// Throws Error naming the index and the device count when there is no such device.
void select_device(int index);

struct DeviceInfo {
  std::string name;                ///< e.g. "NVIDIA H200"
  int cc_major = 0, cc_minor = 0;  ///< compute capability (NVIDIA) / gfx major.minor (AMD)
  int multiprocessors = 0;         ///< SMs (NVIDIA) / CUs (AMD)
  size_t global_mem = 0;           ///< bytes
  size_t l2_bytes = 0;
  size_t shared_per_block_optin = 0;  ///< largest dynamic shared memory one block may ask for, bytes
  int driver_version = 0;          ///< as the runtime reports it (CUDA: 1000*major + 10*minor)
  int runtime_version = 0;
};
/// Properties of the current device. Throws Error when there is none.
DeviceInfo device_info();

/// Owning device allocation, move-only. Blocks come from a cache of freed
/// blocks when one of the size class is free, else from hipMalloc
/// (MXSIM_GPU_CACHE=0: always hipMalloc / hipFree); see device.hip. `what` names
/// the tensor for error messages (kept by value).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// Allocates `bytes` (none for 0). Throws OutOfMemory naming `what` and
  /// the size when the device cannot provide them, Error for other failures.
  explicit DeviceBuffer(size_t bytes, std::string_view what = "device buffer");
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  template <typename T> T* as() const { return static_cast<T*>(p_); }
  size_t size() const { return n_; }
  const std::string& what() const { return what_; }
  void upload(const void* src, size_t bytes);    ///< host -> device, synchronous
  void download(void* dst, size_t bytes) const;  ///< device -> host, synchronous
  /// Every byte set to `byte` (synchronous; tests poison outputs with 0xFF).
  void fill(uint8_t byte);

 private:
  void release() noexcept;  ///< back to the block cache of its device (or hipFree)
  void* p_ = nullptr;
  size_t n_ = 0;
  int device_ = 0;  ///< the device it was allocated on: the cache hands it out there only
  std::string what_;
};

/// Device memory grown on demand and kept between calls (as ggml's backends own their compute
/// buffers): calls on one stream reuse it in stream order, so none waits for the device before it
/// returns, and growing waits for that stream first, since its earlier launches may still read the
/// old contents. One workspace serves one stream on one device. Users: the tensor-core GEMMs'
/// K-major operand images, and the quantizer's amax words of views that bring none (the C
/// interface's tensors over a caller's memory). A HipBackend owns one per its stream; calls
/// without one take the process's (stream_workspace).
class StreamWorkspace {
 public:
  StreamWorkspace() = default;
  StreamWorkspace(const StreamWorkspace&) = delete;
  StreamWorkspace& operator=(const StreamWorkspace&) = delete;
  /// At least `bytes` of device memory, valid until the next get(); may wait for `stream`.
  /// Throws OutOfMemory naming `what` when the device cannot grow it.
  uint8_t* get(size_t bytes, void* stream, std::string_view what);
  size_t bytes() const { return buf_.size(); }
  /// Held by a call from its get() through its last launch that reads the memory: two host
  /// threads on one stream do not interleave a growth, or each other's contents, with the
  /// other's launches. Not recursive: a call holding it calls no other user of the workspace.
  std::mutex& mutex() { return mu_; }

 private:
  std::mutex mu_;
  DeviceBuffer buf_;
};

/// Independent workspaces of one stream, for memory that is live at the same time.
enum class WorkspaceSlot : int {
  Kernels = 0,  ///< the GEMMs' operand images, the quantizer's amax words (never in one call together)
  Staging = 1,  ///< the C interface's float32 copy of a 16-bit input, live across the quantizer's call
};

/// The process's workspace of (current device, `stream`, `slot`), kept until exit, for calls
/// that bring none. The reference stays valid (each workspace is allocated once, never moved).
StreamWorkspace& stream_workspace(void* stream, WorkspaceSlot slot = WorkspaceSlot::Kernels);

/// Makes `index` the calling thread's current device for its lifetime and restores the
/// previous one after (the C interface runs on a caller's tensor without moving the caller's,
/// e.g. torch's, current device; as TransformerEngine's and DeepGEMM's device guards).
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

/// Synchronous copies between host memory and device memory not owned by a
/// DeviceBuffer (views into a tensor's storage).
void copy_to_host(void* dst, const void* d_src, size_t bytes);
void copy_to_device(void* d_dst, const void* src, size_t bytes);
/// The same after the work queued on `stream` (a caller's hipStream_t / cudaStream_t as void*),
/// waiting for that stream only.
void copy_to_host(void* dst, const void* d_src, size_t bytes, void* stream);

/// A stream of the current device that does not wait for the legacy default stream, as a
/// caller's side stream (torch.cuda.Stream): the caller's side of the C interface in tests.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* get() const { return s_; }
  /// `bytes` bytes at d = byte, queued on this stream.
  void fill_async(void* d, uint8_t byte, size_t bytes) const;
  /// `bytes` device bytes from src to dst, queued on this stream.
  void copy_async(void* dst, const void* src, size_t bytes) const;
  void synchronize() const;

 private:
  void* s_ = nullptr;
};

/// hipDeviceSynchronize, then throws Error on any pending launch error.
void synchronize();

}  // namespace mxsim::hip
