// Device runtime of the HIP backend (include/mxsim/hip/device.hpp): device
// discovery, owned device memory, synchronization, each runtime call checked.
#include "check.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>
#include <mutex>
#include <string>
#include <vector>

namespace mxsim::hip {

bool available(std::string* reason) {
  int n = 0;
  const hipError_t e = hipGetDeviceCount(&n);
  if (e != hipSuccess) {
    if (reason) {
      *reason = std::string("hipGetDeviceCount: ") + hipGetErrorName(e) + ": " + hipGetErrorString(e);
      // The runtime says "insufficient driver" also when there is no driver at all (a machine
      // without a GPU): say both, so a new user is not sent to upgrade a driver they lack.
      if (e == hipErrorInsufficientDriver) *reason += " (no GPU driver on this machine, or one too old for this runtime)";
    }
    (void)hipGetLastError();  // clear the (non-sticky) error state
    return false;
  }
  if (n <= 0) {
    if (reason) *reason = "hipGetDeviceCount reported 0 devices";
    return false;
  }
  return true;
}

const char* platform() { return MXSIM_GPU_VENDOR; }

void select_device(int index) {
  int n = 0;
  MXSIM_HIP_CHECK(hipGetDeviceCount(&n));
  if (index < 0 || index >= n)
    throw Error("mxsim::hip: device " + std::to_string(index) + " asked for, the runtime sees " + std::to_string(n) +
                " (device indices 0 to " + std::to_string(n - 1) + ")");
  MXSIM_HIP_CHECK(hipSetDevice(index));
}

DeviceGuard::DeviceGuard(int index) {
  MXSIM_HIP_CHECK(hipGetDevice(&previous_));
  if (index != previous_) select_device(index);
}
DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (hipGetDevice(&now) == hipSuccess && now != previous_) (void)hipSetDevice(previous_);
}

DeviceInfo device_info() {
  int dev = 0;
  MXSIM_HIP_CHECK(hipGetDevice(&dev));
  hipDeviceProp_t prop;
  MXSIM_HIP_CHECK(hipGetDeviceProperties(&prop, dev));
  DeviceInfo d;
  d.name = prop.name;
  d.cc_major = prop.major;
  d.cc_minor = prop.minor;
  d.multiprocessors = prop.multiProcessorCount;
  d.global_mem = prop.totalGlobalMem;
  d.l2_bytes = size_t(prop.l2CacheSize);
  d.shared_per_block_optin = size_t(MXSIM_PROP_SHARED_OPTIN(prop));
  MXSIM_HIP_CHECK(hipDriverGetVersion(&d.driver_version));
  MXSIM_HIP_CHECK(hipRuntimeGetVersion(&d.runtime_version));
  return d;
}

// ---- the cached allocator behind DeviceBuffer --------------------------------
// hipMalloc costs microseconds and hipFree synchronises the whole device, so a
// training step that allocates and frees its temporaries would be bound by the
// allocator (PyTorch's caching allocator exists for the same reason). Freed
// blocks are kept per size class and handed out again. Reuse is safe because
// every launch of this library runs in order on one stream or on the legacy
// default stream, which orders itself with the blocking streams we create:
// work that still reads a freed block is queued before any work that reuses
// it. MXSIM_GPU_CACHE=0 turns the cache off (each buffer its own hipMalloc).
namespace {

struct BlockCache {
  std::mutex mu;
  std::map<std::pair<int, size_t>, std::vector<void*>> free_blocks;  // (device, size class) -> blocks
  bool enabled = [] {
    const char* e = std::getenv("MXSIM_GPU_CACHE");
    return !(e && std::string(e) == "0");
  }();
  // Size classes: multiples of 512 bytes up to 1 MiB, then of 1 MiB.
  static size_t round_up(size_t bytes) {
    const size_t q = bytes <= (size_t(1) << 20) ? 512 : (size_t(1) << 20);
    return (bytes + q - 1) / q * q;
  }
  void release_all() {
    std::lock_guard<std::mutex> g(mu);
    for (auto& [key, v] : free_blocks)
      for (void* p : v) (void)hipFree(p);
    free_blocks.clear();
  }
};
BlockCache& cache() {
  static BlockCache* c = new BlockCache;  // never destroyed: buffers may outlive static destruction
  return *c;
}

}  // namespace

DeviceBuffer::DeviceBuffer(size_t bytes, std::string_view what) : n_(bytes), what_(what) {
  if (!bytes) return;
  MXSIM_HIP_CHECK(hipGetDevice(&device_));
  BlockCache& c = cache();
  const size_t cls = c.enabled ? BlockCache::round_up(bytes) : bytes;
  if (c.enabled) {
    std::lock_guard<std::mutex> g(c.mu);
    auto it = c.free_blocks.find({device_, cls});
    if (it != c.free_blocks.end() && !it->second.empty()) {
      p_ = it->second.back();
      it->second.pop_back();
      return;
    }
  }
  hipError_t e = hipMalloc(&p_, cls);
  if (e == hipErrorOutOfMemory && c.enabled) {  // give the cached blocks back and try once more
    (void)hipGetLastError();
    c.release_all();
    e = hipMalloc(&p_, cls);
  }
  if (e == hipErrorOutOfMemory) {
    (void)hipGetLastError();
    p_ = nullptr;
    throw OutOfMemory("mxsim::hip: out of device memory: " + what_ + " asked for " + std::to_string(bytes) +
                          " bytes (hipMalloc at " __FILE__ ": " + hipGetErrorName(e) + ": " + hipGetErrorString(e) + ")",
                      bytes);
  }
  if (e != hipSuccess) {
    p_ = nullptr;
    detail::fail(e, ("hipMalloc of " + std::to_string(bytes) + " bytes for " + what_).c_str(), __FILE__, __LINE__);
  }
}
void DeviceBuffer::release() noexcept {
  if (!p_) return;
  BlockCache& c = cache();
  if (c.enabled) {
    try {
      std::lock_guard<std::mutex> g(c.mu);
      c.free_blocks[{device_, BlockCache::round_up(n_)}].push_back(p_);
      p_ = nullptr;
      return;
    } catch (...) {  // no memory for the free list: really free it
    }
  }
  (void)hipFree(p_);
  p_ = nullptr;
}
DeviceBuffer::~DeviceBuffer() { release(); }
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : p_(o.p_), n_(o.n_), device_(o.device_), what_(std::move(o.what_)) {
  o.p_ = nullptr;
  o.n_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    p_ = o.p_;
    n_ = o.n_;
    device_ = o.device_;
    what_ = std::move(o.what_);
    o.p_ = nullptr;
    o.n_ = 0;
  }
  return *this;
}
void DeviceBuffer::upload(const void* src, size_t bytes) {
  if (bytes > n_)
    throw std::invalid_argument("DeviceBuffer::upload: " + std::to_string(bytes) + " bytes into " + what_ + " of " +
                                std::to_string(n_));
  if (bytes) MXSIM_HIP_CHECK(hipMemcpy(p_, src, bytes, hipMemcpyHostToDevice));
}
void DeviceBuffer::download(void* dst, size_t bytes) const {
  if (bytes > n_)
    throw std::invalid_argument("DeviceBuffer::download: " + std::to_string(bytes) + " bytes from " + what_ + " of " +
                                std::to_string(n_));
  if (bytes) MXSIM_HIP_CHECK(hipMemcpy(dst, p_, bytes, hipMemcpyDeviceToHost));
}
void DeviceBuffer::fill(uint8_t byte) {
  if (n_) MXSIM_HIP_CHECK(hipMemset(p_, byte, n_));
}

void copy_to_host(void* dst, const void* d_src, size_t bytes) {
  if (bytes) MXSIM_HIP_CHECK(hipMemcpy(dst, d_src, bytes, hipMemcpyDeviceToHost));
}
void copy_to_host(void* dst, const void* d_src, size_t bytes, void* stream) {
  if (!bytes) return;
  const auto s = static_cast<hipStream_t>(stream);
  MXSIM_HIP_CHECK(hipMemcpyAsync(dst, d_src, bytes, hipMemcpyDeviceToHost, s));
  MXSIM_HIP_CHECK(hipStreamSynchronize(s));
}
void copy_to_device(void* d_dst, const void* src, size_t bytes) {
  if (bytes) MXSIM_HIP_CHECK(hipMemcpy(d_dst, src, bytes, hipMemcpyHostToDevice));
}

uint8_t* StreamWorkspace::get(size_t bytes, void* stream, std::string_view what) {
  if (bytes > buf_.size()) {
    MXSIM_HIP_CHECK(hipStreamSynchronize(detail::stream_of(stream)));  // its launches may still read the old contents
    buf_ = DeviceBuffer();  // freed before the larger one is taken: both need not fit at once
    buf_ = DeviceBuffer(std::max<size_t>(bytes + bytes / 4, 4096), what);  // a few words need no growth after
  }
  return buf_.as<uint8_t>();
}

StreamWorkspace& stream_workspace(void* stream, WorkspaceSlot slot) {
  // A list searched in order (a process has a few streams), of pointers that never move.
  // Not a std::map of the workspaces: Debian's hipcc (clang 15) crashes instantiating one for
  // the device side of this file (the implicit members of a map node holding a std::mutex).
  struct Entry {
    int device;
    void* stream;
    WorkspaceSlot slot;
    StreamWorkspace* workspace;  // kept until exit, as the block cache
  };
  static std::mutex mu;
  static std::vector<Entry> all;  // guarded by mu
  int dev = 0;
  MXSIM_HIP_CHECK(hipGetDevice(&dev));
  const std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : all)
    if (e.device == dev && e.stream == stream && e.slot == slot) return *e.workspace;
  all.push_back({dev, stream, slot, new StreamWorkspace});
  return *all.back().workspace;
}

Stream::Stream() {
  hipStream_t s = nullptr;
  MXSIM_HIP_CHECK(hipStreamCreateWithFlags(&s, hipStreamNonBlocking));
  s_ = s;
}
Stream::~Stream() { (void)hipStreamDestroy(static_cast<hipStream_t>(s_)); }
void Stream::fill_async(void* d, uint8_t byte, size_t bytes) const {
  if (bytes) MXSIM_HIP_CHECK(hipMemsetAsync(d, byte, bytes, static_cast<hipStream_t>(s_)));
}
void Stream::copy_async(void* dst, const void* src, size_t bytes) const {
  if (bytes) MXSIM_HIP_CHECK(hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToDevice, static_cast<hipStream_t>(s_)));
}
void Stream::synchronize() const { MXSIM_HIP_CHECK(hipStreamSynchronize(static_cast<hipStream_t>(s_))); }

void synchronize() {
  MXSIM_HIP_CHECK(hipDeviceSynchronize());
  MXSIM_HIP_CHECK(hipGetLastError());
}

}  // namespace mxsim::hip
