// Device runtime of the HIP backend (include/mxsim/hip/device.hpp): device
// discovery, owned device memory, synchronization, each runtime call checked.
#include "check.hpp"

#include <string>

namespace mxsim::hip {

bool available(std::string* reason) {
  int n = 0;
  const hipError_t e = hipGetDeviceCount(&n);
  if (e != hipSuccess) {
    if (reason) *reason = std::string("hipGetDeviceCount: ") + hipGetErrorName(e) + ": " + hipGetErrorString(e);
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

DeviceBuffer::DeviceBuffer(size_t bytes, std::string_view what) : n_(bytes), what_(what) {
  if (!bytes) return;
  const hipError_t e = hipMalloc(&p_, bytes);
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
DeviceBuffer::~DeviceBuffer() {
  if (p_) (void)hipFree(p_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_), what_(std::move(o.what_)) {
  o.p_ = nullptr;
  o.n_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (p_) (void)hipFree(p_);
    p_ = o.p_;
    n_ = o.n_;
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
void copy_to_device(void* d_dst, const void* src, size_t bytes) {
  if (bytes) MXSIM_HIP_CHECK(hipMemcpy(d_dst, src, bytes, hipMemcpyHostToDevice));
}

void synchronize() {
  MXSIM_HIP_CHECK(hipDeviceSynchronize());
  MXSIM_HIP_CHECK(hipGetLastError());
}

}  // namespace mxsim::hip
