// The NCCL communicator of one process per GPU (mxsim/hip/comm.hpp) against the contract of
// sim/parallel.hpp, bit for bit: the device rank-order sum of reduce_scatter on hand values at
// P = 3 (order, NaN canonicalisation, signed zeros, subnormals), and every collective of a
// one-rank communicator on hand values and against make_virtual_comm on the emulator; a missing
// library is an error naming it. Skips with the reason where no GPU or no NCCL library is usable
// (this build machine); the coordinator runs it on the GPU machine (scripts/gpu-device-run.sh,
// stage nccl). Multi-GPU runs (P >= 2 processes) are not tested here: one GPU is lent.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/sim/parallel.hpp"

#ifdef MXSIM_HAVE_GPU
#include "mxsim/hip/backend_hip.hpp"
#include "mxsim/hip/comm.hpp"
#include "mxsim/hip/device.hpp"
#include "gpu_test_util.hpp"  // REQUIRE_GPU
#endif

using namespace mxsim;

namespace {

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }
float f(uint32_t b) { return std::bit_cast<float>(b); }

[[maybe_unused]] std::vector<uint32_t> bits_of(const std::vector<float>& v) {
  std::vector<uint32_t> b;
  for (float x : v) b.push_back(bits(x));
  return b;
}

template <class T>
Tensor up(Backend& be, DType dt, const std::vector<T>& v, Shape s) {
  Tensor t = be.alloc(dt, s);
  be.upload(t, std::span<const T>(v));
  return t;
}

// The hand cases of the rank-order sum, P = 3, one column per case: the copies of ranks 0, 1, 2
// and the result of ((r0 + r1) + r2) with a NaN result canonical.
constexpr float u = 0x1p-24f;
const uint32_t kPayloadNan = 0x7FA00001u, kCanonical = 0x7FC00000u;
struct SumCase {
  float r0, r1, r2, want;
};
const SumCase kSums[] = {
    {1.0f, u, u, 1.0f},                                // 1 + 2^-24 ties to 1, twice (any other order: 1 + 2^-23)
    {u, u, 1.0f, 1.0f + 0x1p-23f},                     // 2^-24 + 2^-24 = 2^-23 first, then exact
    {-0.0f, -0.0f, -0.0f, -0.0f},                      // -0 + -0 = -0 (RNE)
    {-0.0f, 0.0f, -0.0f, 0.0f},                        // -0 + +0 = +0
    {0x1p-149f, 0x1p-149f, 0.0f, 0x1p-148f},           // subnormals kept (no flush to zero)
    {f(kPayloadNan), 1.0f, 2.0f, f(kCanonical)},       // a NaN operand: the result is the canonical NaN
    {INFINITY, -INFINITY, 0.0f, f(kCanonical)},        // inf - inf
    {3.0e38f, 3.0e38f, -3.0e38f, INFINITY},            // overflow to inf, then inf - x = inf
};

}  // namespace

#ifdef MXSIM_HAVE_GPU

#define REQUIRE_NCCL()                                                                     \
  do {                                                                                     \
    REQUIRE_GPU();                                                                         \
    std::string why_;                                                                      \
    if (!::mxsim::hip::nccl_available(&why_)) GTEST_SKIP() << "no NCCL library: " << why_; \
  } while (0)

// The kernel on the hand cases, and the virtual comm's host sum of the same copies (rank s's
// buffer holds its copy of rank 0's shard; P = 3 shards of one column each).
TEST(NcclComm, RankOrderSumKernelIsTheContractsSum) {
  REQUIRE_GPU();
  const size_t n = std::size(kSums);
  std::vector<float> g(3 * n), want;
  for (size_t i = 0; i < n; ++i) {
    g[i] = kSums[i].r0;
    g[n + i] = kSums[i].r1;
    g[2 * n + i] = kSums[i].r2;
    want.push_back(kSums[i].want);
  }
  hip::DeviceBuffer dg(g.size() * 4, "gathered"), dout(n * 4, "out");
  dg.upload(g.data(), g.size() * 4);
  hip::sum_in_rank_order_device(dg.as<float>(), 3, n, dout.as<float>());
  std::vector<float> got(n);
  dout.download(got.data(), n * 4);
  EXPECT_EQ(bits_of(got), bits_of(want));

  auto emu = emu::make_emu_backend();
  auto vc = sim::make_virtual_comm(*emu, 3);
  std::vector<Tensor> in, out;
  for (int s = 0; s < 3; ++s) {
    std::vector<float> buf(3 * n, 0.0f);  // rank s: its copy of shard 0, zeros in shards 1 and 2
    for (size_t i = 0; i < n; ++i) buf[i] = g[size_t(s) * n + i];
    in.push_back(up(*emu, DType::f32, buf, {3 * n}));
    out.push_back(emu->alloc(DType::f32, {n}));
  }
  vc->reduce_scatter(in, out);
  EXPECT_EQ(bits_of(emu->download<float>(out[0])), bits_of(want));

  // one rank: the copy as it is, a payload NaN included (no add, nothing to canonicalise)
  hip::sum_in_rank_order_device(dg.as<float>(), 1, n, dout.as<float>());
  dout.download(got.data(), n * 4);
  EXPECT_EQ(bits_of(got), bits_of(std::vector<float>(g.begin(), g.begin() + long(n))));
}

// Every collective of a one-rank communicator (send and receive to itself through NCCL) on
// hand values, and the same bits as the virtual comm with one rank on the emulator.
TEST(NcclComm, OneRankCollectivesMatchTheVirtualComm) {
  REQUIRE_NCCL();
  auto be = hip::make_backend();
  auto comm = hip::make_nccl_comm(*be, 0, 1, hip::nccl_unique_id(0));
  auto emu = emu::make_emu_backend();
  auto vc = sim::make_virtual_comm(*emu, 1);
  ASSERT_EQ(comm->size(), 1);
  ASSERT_EQ(comm->local_ranks(), std::vector<int>{0});

  const std::vector<std::vector<int64_t>> counts = {{5, -3, 1LL << 40}};
  EXPECT_EQ(comm->all_to_all_counts(counts), counts);
  EXPECT_EQ(vc->all_to_all_counts(counts), counts);

  const std::vector<float> rows = {1.5f, -0.0f, f(kPayloadNan), 0x1p-149f, 7.0f, -2.25f};  // [3, 2]
  const std::vector<std::vector<int64_t>> splits = {{3}};
  {
    const std::vector<Tensor> send = {up(*be, DType::f32, rows, {3, 2})};
    const std::vector<Tensor> got = comm->all_to_all_v(send, splits);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].shape(), Shape({3, 2}));
    const std::vector<Tensor> esend = {up(*emu, DType::f32, rows, {3, 2})};
    const std::vector<Tensor> want = vc->all_to_all_v(esend, splits);
    EXPECT_EQ(bits_of(be->download<float>(got[0])), bits_of(rows));
    EXPECT_EQ(bits_of(be->download<float>(got[0])), bits_of(emu->download<float>(want[0])));
  }
  {  // no rows at all: a [0, C] tensor
    const std::vector<Tensor> send = {be->alloc(DType::f32, {0, 4})};
    const std::vector<Tensor> got = comm->all_to_all_v(send, {{0}});
    EXPECT_EQ(got[0].shape(), Shape({0, 4}));
  }
  {
    std::vector<Tensor> in = {up(*be, DType::f32, rows, {6})}, out = {be->alloc(DType::f32, {6})};
    comm->reduce_scatter(in, out);
    std::vector<Tensor> ein = {up(*emu, DType::f32, rows, {6})}, eout = {emu->alloc(DType::f32, {6})};
    vc->reduce_scatter(ein, eout);
    EXPECT_EQ(bits_of(be->download<float>(out[0])), bits_of(rows));
    EXPECT_EQ(bits_of(be->download<float>(out[0])), bits_of(emu->download<float>(eout[0])));
  }
  {  // all_gather moves bytes: f32 and i64
    std::vector<Tensor> in = {up(*be, DType::f32, rows, {6})}, out = {be->alloc(DType::f32, {6})};
    comm->all_gather(in, out);
    EXPECT_EQ(bits_of(be->download<float>(out[0])), bits_of(rows));
    const std::vector<int64_t> iv = {-1, 1LL << 62};
    std::vector<Tensor> iin = {up(*be, DType::i64, iv, {2})}, iout = {be->alloc(DType::i64, {2})};
    comm->all_gather(iin, iout);
    EXPECT_EQ(be->download<int64_t>(iout[0]), iv);
  }
}

TEST(NcclComm, BadArgumentsNameTheCollectiveAndTheRank) {
  REQUIRE_NCCL();
  auto be = hip::make_backend();
  auto comm = hip::make_nccl_comm(*be, 0, 1, hip::nccl_unique_id(0));
  auto msg = [](auto&& fn) {
    try {
      fn();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no std::invalid_argument)");
  };
  Tensor t = be->alloc(DType::f32, {3, 2});
  std::vector<Tensor> two = {t, t};
  EXPECT_NE(msg([&] { comm->all_gather(two, two); })
                .find("all_gather: 2 entries for 1 local rank (rank 0 of 1)"),
            std::string::npos);
  EXPECT_NE(msg([&] { comm->all_to_all_v(std::vector<Tensor>{t}, {{2}}); })
                .find("all_to_all_v: rank 0 has splits summing to 2 rows, it sends 3"),
            std::string::npos);
  Tensor small = be->alloc(DType::f32, {4});
  std::vector<Tensor> out = {small};
  EXPECT_NE(msg([&] { comm->reduce_scatter(std::vector<Tensor>{t}, out); }).find("reduce_scatter: rank 0 has f32"),
            std::string::npos);
  auto emu = emu::make_emu_backend();
  EXPECT_NE(msg([&] { hip::make_nccl_comm(*emu, 0, 1, hip::nccl_unique_id(0)); }).find("the backend is emu"),
            std::string::npos);
  EXPECT_NE(msg([&] { hip::make_nccl_comm(*be, 1, 1, hip::nccl_unique_id(0)); }).find("rank 1 of 1"),
            std::string::npos);
}

// Every entry point resolves and the version is the library's (needs the library, not a GPU).
TEST(NcclComm, TheLibraryLoadsWithEveryEntryPoint) {
  std::string why;
  if (!hip::nccl_available(&why)) GTEST_SKIP() << "no NCCL library: " << why;
  const std::string v = hip::nccl_version();
  EXPECT_TRUE(v.rfind("NCCL 2.", 0) == 0 || v.rfind("RCCL 2.", 0) == 0) << v;
}

// In a fresh process (the library is opened once per process): MXSIM_NCCL_LIBRARY naming a file
// that does not exist makes every entry point fail with the path and the variable named.
TEST(NcclComm, AMissingLibraryIsAnErrorNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("MXSIM_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
        std::string why;
        const bool ok = hip::nccl_available(&why);
        std::string thrown;
        try {
          hip::nccl_unique_id(3);
        } catch (const std::runtime_error& e) {
          thrown = e.what();
        }
        std::fprintf(stderr, "%s\n%s\n", why.c_str(), thrown.c_str());
        std::exit(ok ? 1 : 0);
      },
      testing::ExitedWithCode(0),
      "cannot load the (NCCL|RCCL) library '/nonexistent/libnccl.so.2'.*MXSIM_NCCL_LIBRARY.*\nrank 3: cannot load");
}

#else

TEST(NcclComm, RankOrderSumKernelIsTheContractsSum) { GTEST_SKIP() << "this build has no GPU backend (MXSIM_GPU=off)"; }
TEST(NcclComm, OneRankCollectivesMatchTheVirtualComm) { GTEST_SKIP() << "this build has no GPU backend (MXSIM_GPU=off)"; }
TEST(NcclComm, BadArgumentsNameTheCollectiveAndTheRank) { GTEST_SKIP() << "this build has no GPU backend (MXSIM_GPU=off)"; }
TEST(NcclComm, AMissingLibraryIsAnErrorNamingIt) { GTEST_SKIP() << "this build has no GPU backend (MXSIM_GPU=off)"; }
TEST(NcclComm, TheLibraryLoadsWithEveryEntryPoint) { GTEST_SKIP() << "this build has no GPU backend (MXSIM_GPU=off)"; }

#endif

// The hand cases themselves, on the host: the contract's sum in FP32 (this machine's IEEE adds,
// -ffp-contract=off) gives the expected bits, so the GPU test compares against true values.
TEST(NcclComm, HandCasesAreTheFp32RankOrderSum) {
  for (const SumCase& c : kSums) {
    float a = c.r0;
    for (float x : {c.r1, c.r2}) {
      a = a + x;
      if (a != a) a = f(kCanonical);
    }
    EXPECT_EQ(bits(a), bits(c.want)) << c.r0 << " " << c.r1 << " " << c.r2;
  }
}
