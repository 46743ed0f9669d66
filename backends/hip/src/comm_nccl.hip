// The communicator of one process per GPU over NCCL / RCCL (include/mxsim/hip/comm.hpp): the
// library opened with dlopen at first use, the collectives as grouped send / receive on the
// backend's stream, and the rank-order sum kernel of reduce_scatter.
#include "backend_hip_impl.hpp"
#include "ccl.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <type_traits>

#include "mxsim/bits.hpp"
#include "mxsim/hip/comm.hpp"

namespace mxsim::hip {

// ---------------------------------------------------------------- the rank-order sum

namespace {

__global__ void sum_in_rank_order_kernel(const float* __restrict__ g, size_t P, size_t n, float* __restrict__ out) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float a = g[i];  // rank 0's copy as it is (the virtual comm's acc = in_0)
    for (size_t s = 1; s < P; ++s) a = canonical_nan(__fadd_rn(a, g[s * n + i]));  // docs/numerics.md: canonical NaNs
    out[i] = a;
  }
}

}  // namespace

void sum_in_rank_order_device(const float* gathered, size_t P, size_t n, float* out, void* stream) {
  if (n == 0) return;
  if (P == 0) throw std::invalid_argument("sum_in_rank_order_device: P must be >= 1");
  constexpr unsigned kThreads = 256;
  hipLaunchKernelGGL(sum_in_rank_order_kernel, dim3(detail::grid_for(n, kThreads)), dim3(kThreads), 0,
                     detail::stream_of(stream), gathered, P, n, out);
  MXSIM_HIP_CHECK_LAUNCH("sum_in_rank_order_kernel");
}

#if MXSIM_HAVE_CCL_HEADER

// ---------------------------------------------------------------- the library

namespace {

/// The entry points the communicator calls, resolved once from the library.
struct Ccl {
  decltype(&ncclGetVersion) GetVersion = nullptr;
  decltype(&ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&ncclCommInitRank) CommInitRank = nullptr;
  decltype(&ncclCommDestroy) CommDestroy = nullptr;
  decltype(&ncclCommAbort) CommAbort = nullptr;
  decltype(&ncclGetErrorString) GetErrorString = nullptr;
  decltype(&ncclGroupStart) GroupStart = nullptr;
  decltype(&ncclGroupEnd) GroupEnd = nullptr;
  decltype(&ncclSend) Send = nullptr;
  decltype(&ncclRecv) Recv = nullptr;
  decltype(&ncclAllGather) AllGather = nullptr;
  const char* (*GetLastError)(ncclComm_t) = nullptr;  // optional (NCCL >= 2.13)
  std::string error;  ///< why the library is unusable ("" when loaded)
};

std::string library_name() {
  const char* e = std::getenv("MXSIM_NCCL_LIBRARY");
  return e && *e ? e : MXSIM_CCL_LIBRARY;
}

const Ccl& ccl() {
  static const Ccl c = [] {
    Ccl c;
    const std::string name = library_name();
    void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);  // never closed: the process keeps it
    if (!h) {
      const char* why = dlerror();
      c.error = "cannot load the " MXSIM_CCL_NAME " library '" + name + "' (" + (why ? why : "unknown reason") +
                "); set MXSIM_NCCL_LIBRARY to its path (with PyTorch's wheels: nvidia/nccl/lib/libnccl.so.2 under "
                "python3's site-packages)";
      return c;
    }
    auto sym = [&](auto& f, const char* s) {
      f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(h, s));
      if (!f && c.error.empty()) c.error = "the " MXSIM_CCL_NAME " library '" + name + "' has no " + s;
    };
    sym(c.GetVersion, "ncclGetVersion");
    sym(c.GetUniqueId, "ncclGetUniqueId");
    sym(c.CommInitRank, "ncclCommInitRank");
    sym(c.CommDestroy, "ncclCommDestroy");
    sym(c.CommAbort, "ncclCommAbort");
    sym(c.GetErrorString, "ncclGetErrorString");
    sym(c.GroupStart, "ncclGroupStart");
    sym(c.GroupEnd, "ncclGroupEnd");
    sym(c.Send, "ncclSend");
    sym(c.Recv, "ncclRecv");
    sym(c.AllGather, "ncclAllGather");
    c.GetLastError = reinterpret_cast<const char* (*)(ncclComm_t)>(dlsym(h, "ncclGetLastError"));
    return c;
  }();
  return c;
}

const Ccl& loaded(int rank) {
  const Ccl& c = ccl();
  if (!c.error.empty()) throw std::runtime_error("rank " + std::to_string(rank) + ": " + c.error);
  return c;
}

std::string rank_of(int rank, int size) { return "rank " + std::to_string(rank) + " of " + std::to_string(size); }

[[noreturn]] void fail(const char* call, ncclResult_t r, int rank, int size, ncclComm_t comm) {
  const Ccl& c = ccl();
  std::string m = std::string(MXSIM_CCL_NAME) + ": " + rank_of(rank, size) + ": " + call + " failed: " +
                  c.GetErrorString(r);
  if (c.GetLastError) {
    const char* last = c.GetLastError(comm);
    if (last && *last) m += " (" + std::string(last) + ")";
  }
  throw std::runtime_error(m);
}

}  // namespace

bool nccl_available(std::string* why) {
  const Ccl& c = ccl();
  if (c.error.empty()) return true;
  if (why) *why = c.error;
  return false;
}

std::string nccl_version() {
  const Ccl& c = loaded(0);
  int v = 0;
  if (const ncclResult_t r = c.GetVersion(&v); r != ncclSuccess) fail("ncclGetVersion", r, 0, 1, nullptr);
  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9
  return std::string(MXSIM_CCL_NAME " ") + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

std::vector<uint8_t> nccl_unique_id(int rank) {
  const Ccl& c = loaded(rank);
  ncclUniqueId id;
  static_assert(sizeof id == kNcclIdBytes, "ncclUniqueId is 128 bytes");
  if (const ncclResult_t r = c.GetUniqueId(&id); r != ncclSuccess) fail("ncclGetUniqueId", r, rank, 0, nullptr);
  std::vector<uint8_t> b(kNcclIdBytes);
  std::memcpy(b.data(), &id, kNcclIdBytes);
  return b;
}

// ---------------------------------------------------------------- the communicator

namespace {

class NcclComm final : public sim::Comm {
 public:
  NcclComm(HipBackend& be, int rank, int size, const ncclUniqueId& id)
      : be_(be), c_(loaded(rank)), rank_(rank), P_(size), ranks_{rank} {
    if (const ncclResult_t r = c_.CommInitRank(&comm_, size, id, rank); r != ncclSuccess) {
      comm_ = nullptr;
      fail("ncclCommInitRank", r, rank, size, nullptr);
    }
  }
  ~NcclComm() override {
    if (!comm_) return;
    if (broken_) {
      (void)c_.CommAbort(comm_);  // a peer may be gone: do not wait for it
      return;
    }
    (void)hipStreamSynchronize(be_.stream());
    (void)c_.CommDestroy(comm_);
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int size() const override { return P_; }
  const std::vector<int>& local_ranks() const override { return ranks_; }

  std::vector<std::vector<int64_t>> all_to_all_counts(const std::vector<std::vector<int64_t>>& send) override {
    one_entry(send.size(), "all_to_all_counts");
    const size_t P = size_t(P_);
    if (send[0].size() % P != 0)
      bad("all_to_all_counts", "sends " + std::to_string(send[0].size()) + " counts; expected " + std::to_string(P) +
                                   " chunks of the same size");
    agree(int64_t(send[0].size()), "all_to_all_counts", "counts");
    return {exchange_i64(send[0], send[0].size() / P)};
  }

  std::vector<Tensor> all_to_all_v(std::span<const Tensor> send,
                                   const std::vector<std::vector<int64_t>>& splits) override {
    one_entry(send.size(), "all_to_all_v");
    one_entry(splits.size(), "all_to_all_v (splits)");
    const size_t P = size_t(P_);
    const Tensor& t = send[0];
    if (t.dtype() != DType::f32 || t.rank() != 2)
      bad("all_to_all_v", std::string("sends ") + name_of(t.dtype()) + " " + t.shape().str() + "; expected f32 [rows, C]");
    if (splits[0].size() != P)
      bad("all_to_all_v", "has " + std::to_string(splits[0].size()) + " splits for " + std::to_string(P) + " ranks");
    const size_t C = t.dim(1);
    std::vector<size_t> start(P + 1, 0);
    for (size_t d = 0; d < P; ++d) {
      if (splits[0][d] < 0) bad("all_to_all_v", "has a negative split");
      start[d + 1] = start[d] + size_t(splits[0][d]);
    }
    if (start[P] != t.dim(0))
      bad("all_to_all_v", "has splits summing to " + std::to_string(start[P]) + " rows, it sends " + std::to_string(t.dim(0)));
    // (rows for d, C) to every d: the receiver's sizes, and a check of the columns
    std::vector<int64_t> head(2 * P);
    for (size_t d = 0; d < P; ++d) {
      head[2 * d] = splits[0][d];
      head[2 * d + 1] = int64_t(C);
    }
    const std::vector<int64_t> got = exchange_i64(head, 2);
    size_t rows = 0;
    for (size_t s = 0; s < P; ++s) {
      if (size_t(got[2 * s + 1]) != C)
        bad("all_to_all_v", "receives rows of " + std::to_string(got[2 * s + 1]) + " columns from rank " +
                                std::to_string(s) + ", it sends rows of " + std::to_string(C));
      rows += size_t(got[2 * s]);
    }
    Tensor recv = be_.alloc(DType::f32, {rows, C});
    const float* src = start[P] ? be_.f32(t, "all_to_all_v", "send") : nullptr;
    float* dst = rows ? be_.f32(recv, "all_to_all_v", "recv") : nullptr;
    group("all_to_all_v", [&] {
      size_t at = 0;
      for (size_t p = 0; p < P; ++p) {
        const size_t out = size_t(splits[0][p]) * C, in = size_t(got[2 * p]) * C;
        if (out) check(c_.Send(src + start[p] * C, out, ncclFloat32, int(p), comm_, be_.stream()), "ncclSend");
        if (in) check(c_.Recv(dst + at * C, in, ncclFloat32, int(p), comm_, be_.stream()), "ncclRecv");
        at += size_t(got[2 * p]);
      }
    });
    return {recv};
  }

  void reduce_scatter(std::span<const Tensor> in, std::span<Tensor> out) override {
    one_entry(in.size(), "reduce_scatter");
    one_entry(out.size(), "reduce_scatter (out)");
    const size_t P = size_t(P_), n = out[0].numel();
    if (in[0].dtype() != DType::f32 || out[0].dtype() != DType::f32 || in[0].numel() != n * P)
      bad("reduce_scatter", std::string("has ") + name_of(in[0].dtype()) + " " + in[0].shape().str() + " in, " +
                                name_of(out[0].dtype()) + " " + out[0].shape().str() + " out; expected f32 of P x " +
                                std::to_string(n) + " and " + std::to_string(n) + " elements");
    agree(int64_t(n), "reduce_scatter", "shard elements");
    if (n == 0) return;
    Tensor gathered = be_.alloc(DType::f32, {P, n});  // row s: rank s's copy of this rank's shard
    const float* src = be_.f32(in[0], "reduce_scatter", "in");
    float* g = be_.f32(gathered, "reduce_scatter", "gathered");
    group("reduce_scatter", [&] {
      for (size_t p = 0; p < P; ++p) {
        check(c_.Send(src + p * n, n, ncclFloat32, int(p), comm_, be_.stream()), "ncclSend");
        check(c_.Recv(g + p * n, n, ncclFloat32, int(p), comm_, be_.stream()), "ncclRecv");
      }
    });
    sum_in_rank_order_device(g, P, n, be_.f32(out[0], "reduce_scatter", "out"), be_.stream_ptr());
  }

  void all_gather(std::span<const Tensor> in, std::span<Tensor> out) override {
    one_entry(in.size(), "all_gather");
    one_entry(out.size(), "all_gather (out)");
    const size_t P = size_t(P_), b = in[0].bytes();
    if (in[0].dtype() != out[0].dtype() || out[0].numel() != in[0].numel() * P)
      bad("all_gather", std::string("has ") + name_of(in[0].dtype()) + " " + in[0].shape().str() + " in, " +
                            name_of(out[0].dtype()) + " " + out[0].shape().str() + " out; expected " +
                            std::to_string(in[0].numel()) + " and P x " + std::to_string(in[0].numel()) +
                            " elements of one dtype");
    agree(int64_t(b), "all_gather", "bytes");
    if (b == 0) return;
    check(c_.AllGather(be_.raw(in[0], "all_gather", "in"), be_.raw(out[0], "all_gather", "out"), b, ncclUint8, comm_,
                       be_.stream()),
          "ncclAllGather");
  }

 private:
  /// P chunks of c int64 (chunk d for rank d) -> P chunks of c (chunk s from rank s).
  std::vector<int64_t> exchange_i64(const std::vector<int64_t>& send, size_t c) {
    const size_t P = size_t(P_);
    std::vector<int64_t> recv(P * c);
    if (c == 0) return recv;
    Tensor ds = be_.alloc(DType::i64, {P * c}), dr = be_.alloc(DType::i64, {P * c});
    be_.upload(ds, std::span<const int64_t>(send));
    const int64_t* s = be_.data<int64_t>(ds, "exchange", "send");
    int64_t* r = be_.data<int64_t>(dr, "exchange", "recv");
    group("counts exchange", [&] {
      for (size_t p = 0; p < P; ++p) {
        check(c_.Send(s + p * c, c, ncclInt64, int(p), comm_, be_.stream()), "ncclSend");
        check(c_.Recv(r + p * c, c, ncclInt64, int(p), comm_, be_.stream()), "ncclRecv");
      }
    });
    be_.download(dr, recv.data(), recv.size() * sizeof(int64_t));
    return recv;
  }
  /// Every rank passes its value of a size that must be the same everywhere; throws naming the
  /// first rank whose value differs from this rank's.
  void agree(int64_t v, const char* op, const char* what) {
    const size_t P = size_t(P_);
    Tensor mine = be_.alloc(DType::i64, {1}), all = be_.alloc(DType::i64, {P});
    be_.upload(mine, std::span<const int64_t>(&v, 1));
    check(c_.AllGather(be_.raw(mine, op, "size"), be_.raw(all, op, "sizes"), 1, ncclInt64, comm_, be_.stream()),
          "ncclAllGather");
    std::vector<int64_t> got(P);
    be_.download(all, got.data(), P * sizeof(int64_t));
    for (size_t s = 0; s < P; ++s)
      if (got[s] != v)
        bad(op, "has " + std::to_string(v) + " " + what + ", rank " + std::to_string(s) + " " +
                    std::to_string(got[s]) + " (the same on every rank expected)");
  }
  template <class F>
  void group(const char* op, F&& body) {
    check(c_.GroupStart(), "ncclGroupStart");
    try {
      body();
    } catch (...) {
      (void)c_.GroupEnd();
      throw;
    }
    check(c_.GroupEnd(), (std::string("ncclGroupEnd (") + op + ")").c_str());
  }
  void check(ncclResult_t r, const char* call) {
    if (r == ncclSuccess) return;
    broken_ = true;
    fail(call, r, rank_, P_, comm_);
  }
  void one_entry(size_t got, const char* op) const {
    if (got != 1)
      throw std::invalid_argument(std::string(op) + ": " + std::to_string(got) + " entries for 1 local rank (" +
                                  rank_of(rank_, P_) + ")");
  }
  [[noreturn]] void bad(const char* op, const std::string& what) const {
    throw std::invalid_argument(std::string(op) + ": rank " + std::to_string(rank_) + " " + what);
  }

  HipBackend& be_;
  const Ccl& c_;
  int rank_, P_;
  std::vector<int> ranks_;
  ncclComm_t comm_ = nullptr;
  bool broken_ = false;
};

}  // namespace

std::unique_ptr<sim::Comm> make_nccl_comm(Backend& be, int rank, int size, std::span<const uint8_t> id) {
  auto* hb = dynamic_cast<HipBackend*>(&be);
  if (!hb)
    throw std::invalid_argument("make_nccl_comm: the backend is " + be.name() +
                                "; NCCL moves the hip backend's device tensors");
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("make_nccl_comm: " + rank_of(rank, size) + ": expected 0 <= rank < size");
  if (id.size() != kNcclIdBytes)
    throw std::invalid_argument("make_nccl_comm: unique id of " + std::to_string(id.size()) + " bytes, expected " +
                                std::to_string(kNcclIdBytes));
  ncclUniqueId u;
  std::memcpy(&u, id.data(), kNcclIdBytes);
  hb->synchronize();  // the backend's uploads so far are done before NCCL's setup
  return std::make_unique<NcclComm>(*hb, rank, size, u);
}

#else  // no RCCL headers in this build

namespace {
const char* kNoCcl = "this mxsim was built without the " MXSIM_CCL_NAME " headers (rccl/rccl.h)";
}
bool nccl_available(std::string* why) {
  if (why) *why = kNoCcl;
  return false;
}
std::string nccl_version() { throw std::runtime_error(kNoCcl); }
std::vector<uint8_t> nccl_unique_id(int) { throw std::runtime_error(kNoCcl); }
std::unique_ptr<sim::Comm> make_nccl_comm(Backend&, int, int, std::span<const uint8_t>) {
  throw std::runtime_error(kNoCcl);
}

#endif

}  // namespace mxsim::hip
