// Internal: scratch memory of the fast GEMM kernels, kept per calling thread
// and reused from call to call.
//
// Why: glibc hands large freed blocks back to the kernel (munmap above its
// mmap threshold, or a heap trim once the free top of the heap passes its
// trim threshold), so packing buffers allocated per call are page-faulted and
// zeroed by the kernel again on every call. The direct MX-exact wgrad of
// bench_gemm (8 x 512 tokens, N = K = 1024) re-faulted 8 MiB, about 2,000
// pages, per call: about a sixth of its CPU time, more with two threads
// faulting at once. With the arena the pages are faulted once per thread and
// again only when a larger problem needs more.
#pragma once
#include <cstddef>
#include <memory>
#include <new>

namespace mxsim::emu::gemm {

/// Byte offsets of several arrays in one scratch block, each 64-byte aligned.
struct ScratchLayout {
  size_t bytes = 0;
  template <class T>
  size_t add(size_t count) {
    const size_t off = (bytes + 63) & ~size_t(63);
    bytes = off + count * sizeof(T);
    return off;
  }
};

/// The calling thread's scratch arena, grown to at least `bytes` (64-byte
/// aligned, contents unspecified). Valid until the next call on this thread;
/// the arena keeps its largest size until the thread exits. One arena per
/// thread, so GEMMs called from several threads at once never share it.
inline std::byte* thread_scratch(size_t bytes) {
  struct Free {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  thread_local std::unique_ptr<std::byte[], Free> arena;
  thread_local size_t cap = 0;
  if (bytes > cap) {
    arena.reset();  // the old block first: peak memory is the new size, not both
    cap = 0;        // so a bad_alloc below leaves no arena claiming the old size
    arena.reset(static_cast<std::byte*>(::operator new[](bytes, std::align_val_t{64})));
    cap = bytes;
  }
  return arena.get();
}

template <class T>
T* scratch_at(std::byte* base, size_t off) {
  return reinterpret_cast<T*>(base + off);
}

}  // namespace mxsim::emu::gemm
