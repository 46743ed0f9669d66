// The one CPU dispatch point (mxsim/emu/cpu_path.hpp): which path the fast
// GEMM and quantize kernels run, chosen once per process from the CPU's
// features and MXSIM_CPU_PATH, and a record of the kernel each slot last ran.
#include "cpu_dispatch.hpp"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mxsim::emu {

namespace {

bool has(const char* f) {
  // __builtin_cpu_supports needs a string literal; the few names used here.
  const std::string_view s(f);
  if (s == "avx2") return __builtin_cpu_supports("avx2");
  if (s == "fma") return __builtin_cpu_supports("fma");
  if (s == "avx512f") return __builtin_cpu_supports("avx512f");
  if (s == "avx512bw") return __builtin_cpu_supports("avx512bw");
  if (s == "avx512dq") return __builtin_cpu_supports("avx512dq");
  if (s == "avx512vl") return __builtin_cpu_supports("avx512vl");
  if (s == "avx512vnni") return __builtin_cpu_supports("avx512vnni");
  if (s == "avx512vbmi") return __builtin_cpu_supports("avx512vbmi");
  return false;
}

/// The features each path's kernels are compiled for (their target attributes).
std::vector<const char*> needs(CpuPath p) {
  switch (p) {
    case CpuPath::Avx512: return {"avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl"};
    case CpuPath::Avx2: return {"avx2", "fma"};
    case CpuPath::Scalar: return {};
  }
  return {};
}

std::mutex g_mu;
std::atomic<int> g_path{-1};  // CpuPath, or -1 before the first choice
std::string g_error;          // a bad MXSIM_CPU_PATH, reported on every call
std::atomic<const char*> g_last[kNumKernelSlots];

CpuPath best() {
  for (CpuPath p : {CpuPath::Avx512, CpuPath::Avx2})
    if (cpu_supports(p)) return p;
  return CpuPath::Scalar;
}

}  // namespace

const char* cpu_path_name(CpuPath p) {
  switch (p) {
    case CpuPath::Scalar: return "scalar";
    case CpuPath::Avx2: return "avx2";
    case CpuPath::Avx512: return "avx512";
  }
  return "?";
}

bool cpu_supports(CpuPath p, std::string* why) {
  std::string missing;
  for (const char* f : needs(p))
    if (!has(f)) missing += std::string(missing.empty() ? "" : " ") + f;
  if (!missing.empty() && why) *why = "CPU lacks " + missing;
  return missing.empty();
}

CpuPath cpu_path() {
  const int v = g_path.load(std::memory_order_acquire);
  if (v >= 0) return CpuPath(v);
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_path.load() >= 0) return CpuPath(g_path.load());
  if (!g_error.empty()) throw std::invalid_argument(g_error);
  CpuPath p = best();
  if (const char* e = std::getenv("MXSIM_CPU_PATH"); e && *e) {
    const std::string_view s(e);
    bool found = false;
    for (CpuPath q : {CpuPath::Avx512, CpuPath::Avx2, CpuPath::Scalar})
      if (s == cpu_path_name(q)) p = q, found = true;
    std::string why;
    if (!found) g_error = "MXSIM_CPU_PATH='" + std::string(s) + "' is not a CPU path (avx512, avx2 or scalar)";
    else if (!cpu_supports(p, &why)) g_error = "MXSIM_CPU_PATH=" + std::string(s) + ": this " + why;
    if (!g_error.empty()) throw std::invalid_argument(g_error);
  }
  g_path.store(int(p), std::memory_order_release);
  return p;
}

void set_cpu_path(CpuPath p) {
  std::string why;
  if (!cpu_supports(p, &why))
    throw std::invalid_argument(std::string("set_cpu_path(") + cpu_path_name(p) + "): this " + why);
  std::lock_guard<std::mutex> lk(g_mu);
  g_error.clear();
  g_path.store(int(p), std::memory_order_release);
}

const char* kernel_slot_name(KernelSlot s) {
  switch (s) {
    case KernelSlot::MxExact: return "mx-exact";
    case KernelSlot::MxF13: return "mx-f13";
    case KernelSlot::Fp8Chunk: return "fp8-chunk128";
    case KernelSlot::Bf16: return "bf16-f25";
    case KernelSlot::Nvfp4: return "nvfp4-exact";
    case KernelSlot::Quantize: return "quantize";
  }
  return "?";
}

bool cpu_has_avx512_vnni() {
  static const bool ok = cpu_supports(CpuPath::Avx512) && has("avx512vnni");
  return ok;
}
bool cpu_has_avx512_vbmi() {
  static const bool ok = cpu_supports(CpuPath::Avx512) && has("avx512vbmi");
  return ok;
}

const char* kernel_name(KernelSlot s, CpuPath p) {
  using namespace kernel;
  switch (s) {
    case KernelSlot::MxExact:
      if (p == CpuPath::Avx512) {
        // AVX-512 without VNNI (Skylake-SP) runs the AVX2 integer kernel.
        if (cpu_has_avx512_vnni()) return cpu_has_avx512_vbmi() ? kMxVnniDirect : kMxVnniPanel;
        return kMxAvx2;
      }
      return p == CpuPath::Avx2 ? kMxAvx2 : kMxScalar;
    case KernelSlot::MxF13:
    case KernelSlot::Fp8Chunk:
    case KernelSlot::Bf16:
      return p == CpuPath::Avx512 ? kFusedAvx512 : p == CpuPath::Avx2 ? kFusedAvx2 : kFusedScalar;
    case KernelSlot::Nvfp4:
      return p == CpuPath::Avx512 ? kNvfp4Avx512 : p == CpuPath::Avx2 ? kNvfp4Avx2 : kNvfp4Scalar;
    case KernelSlot::Quantize:
      return p == CpuPath::Avx512 ? kQuantAvx512 : p == CpuPath::Avx2 ? kQuantAvx2 : kQuantScalar;
  }
  return "?";
}

void note_kernel(KernelSlot s, const char* name) { g_last[int(s)].store(name, std::memory_order_relaxed); }
const char* last_kernel(KernelSlot s) { return g_last[int(s)].load(std::memory_order_relaxed); }
void clear_last_kernel(KernelSlot s) { g_last[int(s)].store(nullptr, std::memory_order_relaxed); }

}  // namespace mxsim::emu
