// Virtual-rank simulation: the communicator's collectives (hand values), the distributed
// optimizer's flat layout, the parallel.* config checks, multi-rank training against one rank
// (trace bits), and the shard-edge de-oscillation QDQ (hand-derived MXFP4 values).
#include <gtest/gtest.h>

#include <bit>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/dist_optimizer.hpp"
#include "mxsim/sim/model.hpp"
#include "mxsim/sim/parallel.hpp"
#include "mxsim/sim/recipe.hpp"
#include "mxsim/sim/trainer.hpp"
#include "sim_parallel_test_config.hpp"
#include "mxsim/trace/compare.hpp"

using namespace mxsim;
using namespace mxsim::sim;

namespace {

std::string tmp(const std::string& n) {
  return (std::filesystem::temp_directory_path() / ("mxsim_par_" + std::to_string(::getpid()) + "_" + n)).string();
}

Tensor up(Backend& be, std::vector<float> v, Shape s) {
  Tensor t = be.alloc(DType::f32, s);
  be.upload(t, std::span<const float>(v));
  return t;
}

}  // namespace

// ---------------------------------------------------------------- collectives

// 1 + 2^-24 rounds to 1 (a tie to even), so summing in rank order gives 1 where any order that
// adds the two small terms first gives 1 + 2^-23: the result pins the order, not only the sum.
TEST(VirtualComm, ReduceScatterSumsInRankOrder) {
  auto be = emu::make_emu_backend();
  auto comm = make_virtual_comm(*be, 3);
  const float u = 0x1p-24f;
  // each rank's buffer: 3 shards of 2 elements
  std::vector<Tensor> in = {up(*be, {1, 0, 1, 5, 0, 2}, {6}), up(*be, {u, 1, u, 0, 3, 0}, {6}),
                            up(*be, {u, u, u, 0, 0, -2}, {6})};
  std::vector<Tensor> out = {be->alloc(DType::f32, {2}), be->alloc(DType::f32, {2}), be->alloc(DType::f32, {2})};
  comm->reduce_scatter(in, out);
  // rank 0: elements 0, 1: (1 + u) + u = 1;  (0 + 1) + u = 1
  EXPECT_EQ(be->download<float>(out[0]), (std::vector<float>{1.0f, 1.0f}));
  // rank 1: elements 2, 3: (1 + u) + u = 1;  5
  EXPECT_EQ(be->download<float>(out[1]), (std::vector<float>{1.0f, 5.0f}));
  // rank 2: elements 4, 5: 3;  (2 + 0) + -2 = +0
  const auto r2 = be->download<float>(out[2]);
  EXPECT_EQ(r2[0], 3.0f);
  EXPECT_EQ(std::bit_cast<uint32_t>(r2[1]), 0u);
  // the other order would give 1 + 2^-23: check that it is a different float
  EXPECT_NE(1.0f + (u + u), 1.0f);
}

TEST(VirtualComm, AllToAllVOrdersRowsBySource) {
  auto be = emu::make_emu_backend();
  auto comm = make_virtual_comm(*be, 2);
  // rank 0 sends rows a0 a1 to itself and a2 to rank 1; rank 1 sends b0 to rank 0 and b1 b2 to itself
  std::vector<Tensor> send = {up(*be, {10, 11, 20, 21, 30, 31}, {3, 2}), up(*be, {40, 41, 50, 51, 60, 61}, {3, 2})};
  const auto recv = comm->all_to_all_v(send, {{2, 1}, {1, 2}});
  ASSERT_EQ(recv.size(), 2u);
  EXPECT_EQ(be->download<float>(recv[0]), (std::vector<float>{10, 11, 20, 21, 40, 41}));
  EXPECT_EQ(be->download<float>(recv[1]), (std::vector<float>{30, 31, 50, 51, 60, 61}));
  // counts: chunks of 2 per destination, received per source
  const auto c = comm->all_to_all_counts({{1, 2, 3, 4}, {5, 6, 7, 8}});
  EXPECT_EQ(c[0], (std::vector<int64_t>{1, 2, 5, 6}));
  EXPECT_EQ(c[1], (std::vector<int64_t>{3, 4, 7, 8}));
  EXPECT_THROW(comm->all_to_all_v(send, {{2, 2}, {1, 2}}), std::invalid_argument);  // splits != rows
  EXPECT_THROW(comm->all_to_all_counts({{1, 2, 3}, {1, 2, 3}}), std::invalid_argument);
}

TEST(VirtualComm, AllGatherConcatenatesInRankOrder) {
  auto be = emu::make_emu_backend();
  auto comm = make_virtual_comm(*be, 2);
  std::vector<Tensor> in = {up(*be, {1, 2}, {2}), up(*be, {3, 4}, {2})};
  std::vector<Tensor> out = {be->alloc(DType::f32, {4}), be->alloc(DType::f32, {4})};
  comm->all_gather(in, out);
  for (const Tensor& t : out) EXPECT_EQ(be->download<float>(t), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_THROW(make_virtual_comm(*be, 0), std::invalid_argument);
}

TEST(FlatLayout, EqualShardsPaddedAtTheEnd) {
  const FlatLayout l({4, 3, 3}, 4);  // 10 elements -> shards of 3, padded to 12
  EXPECT_EQ(l.shard(), 3u);
  EXPECT_EQ(l.padded(), 12u);
  EXPECT_EQ(l.piece(0, 0), (Range{0, 3}));
  EXPECT_EQ(l.piece(0, 1), (Range{3, 4}));
  EXPECT_EQ(l.piece(1, 1), (Range{0, 2}));  // flat 4, 5
  EXPECT_EQ(l.piece(1, 2), (Range{2, 3}));  // flat 6
  EXPECT_EQ(l.piece(2, 2), (Range{0, 2}));  // flat 7, 8
  EXPECT_EQ(l.piece(2, 3), (Range{2, 3}));  // flat 9; 10, 11 padding
  EXPECT_TRUE(l.piece(2, 0).empty());
  EXPECT_EQ(split_even(10, 4, 0), (Range{0, 3}));
  EXPECT_EQ(split_even(10, 4, 3), (Range{8, 10}));
}

// ---------------------------------------------------------------- config

TEST(SimParallelConfig, BadRanksAreRefusedNamingTheKey) {
  auto refuses = [](std::vector<std::string> s, const std::string& what) {
    try {
      parse_config(default_config_text(), s, "t");
      ADD_FAILURE() << "accepted " << s[0];
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("parallel.ranks"), std::string::npos) << m;
      EXPECT_NE(m.find(what), std::string::npos) << m;
    }
  };
  refuses({"parallel.ranks=0"}, ">= 1");
  refuses({"parallel.ranks=3"}, "divisor of model.experts (8");
  refuses({"parallel.ranks=2000"}, "<= 1024");
  refuses({"parallel.ranks=2", "recipe.fc1=\"fp8_current\""}, "per-tensor scaling");
  refuses({"parallel.ranks=2", "recipe.fc2=\"fp8_delayed\""}, "per-tensor scaling");
  refuses({"parallel.ranks=2", "recipe.mxfp4_sr_grad=true"}, "stochastic rounding");
  const Config c = parse_config(default_config_text(), {"parallel.ranks=8", "parallel.deosc_shard_edge=true"});
  EXPECT_EQ(c.ranks, 8);
  EXPECT_TRUE(c.deosc_shard_edge);
  EXPECT_EQ(parse_config(to_toml(c)).ranks, 8);
}

// ---------------------------------------------------------------- training

namespace {

Config tiny(std::vector<std::string> extra) { return ::mxsim::sim::test::tiny_parallel_config(std::move(extra)); }

/// The trace of a tiny run with these overrides.
std::string run(const std::string& name, std::vector<std::string> extra) {
  auto be = emu::make_emu_backend();
  TrainOptions o;
  o.trace_path = tmp(name + ".h5");
  const TrainResult r = train(tiny(std::move(extra)), *be, o);
  EXPECT_EQ(r.steps, 5);
  return o.trace_path;
}

void expect_identical(const std::string& a, const std::string& b) {
  const trace::CompareResult c = trace::compare(a, b);
  EXPECT_TRUE(c.identical()) << a << " vs " << b << ": first difference in "
                             << (c.first_difference ? c.first_difference->dataset : std::string("(none)"));
  EXPECT_GT(c.common.size(), 40u);  // series and snapshots (weights, main_grad, wgrad_mb, maps)
}

}  // namespace

// Experts per rank through the all-to-all, AdamW per flat shard: the same bits as one rank, for
// the unfused MXFP4 bridge, the fused BF16 accumulate-into-main_grad path and one micro-batch.
TEST(SimParallelTrain, RanksGiveTheTraceOfOneRank) {
  const std::vector<std::vector<std::string>> variants = {
      {}, {"recipe.fc1=\"bf16\"", "recipe.fc2=\"mxfp8\""}, {"batch.num_microbatches=1"}};
  for (size_t k = 0; k < variants.size(); ++k) {
    const std::vector<std::string>& v = variants[k];
    const std::string tag = "_v" + std::to_string(k);
    const std::string one = run("p1" + tag, v);
    for (const char* P : {"2", "4"}) {
      std::vector<std::string> w = v;
      w.push_back(std::string("parallel.ranks=") + P);
      expect_identical(one, run(std::string("p") + P + tag, w));
    }
  }
}

// Shard-edge off is the default; on, with one rank (one shard covering every weight) it changes
// no Q and no decision and the remaining data equals the plain run's.
TEST(SimParallelTrain, ShardEdgeWithOneRankChangesNothing) {
  const std::string plain = run("se0", {}), edge = run("se1", {"parallel.deosc_shard_edge=true"});
  const trace::CompareResult c = trace::compare(plain, edge);
  EXPECT_FALSE(c.first_difference.has_value());
  EXPECT_TRUE(c.only_a.empty());
  EXPECT_EQ(c.only_b.size(), 4u);  // fc1, fc2: shard_edge_qdiff, shard_edge_changed
  for (const auto& f : c.finals) {
    if (f.name.find("shard_edge") != std::string::npos) {
      EXPECT_EQ(f.b.value_or(-1), 0.0) << f.name;
    }
  }
}

// ---------------------------------------------------------------- shard-edge QDQ by hand

namespace {

/// A hand-made MXFP4 weight [1, N, 32] (bf16-exact values) of layer fc1.
Weight hand_weight(Backend& be, size_t N, const std::vector<float>& v) {
  Weight w;
  w.name = "fc1";
  w.layer = Layer::Fc1;
  w.G = 1;
  w.N = N;
  w.K = 32;
  w.recipe = LinearRecipe(make_recipe("mxfp4", RecipeConfig{}));
  w.master = up(be, v, {1, N, 32});
  w.model = be.alloc(DType::f32, {1, N, 32});
  be.round_bf16(w.master, w.model);
  return w;
}

}  // namespace

// One 32x32 tile split by two ranks at row 16. Every element 0.3125 except one 4.0 in rank 1's
// rows. MXFP4 EVEN scale (OCP MX v1.0 §6.3): 2^(floor(log2 amax) - 2), E2M1 grid 0, 0.5, 1,
// 1.5, 2, 3, 4, 6, RNE.
//   full tile: amax 4 -> scale 1; 0.3125 lies between 0 and 0.5, nearer 0.5 -> 0.5; 4 -> 4.
//   rank 0's band (its rows, zeros for rank 1's): amax 0.3125 -> scale 2^-4; 0.3125 / 2^-4 = 5,
//     a tie between 4 and 6, to the even code (4) -> 0.25.
//   rank 1's band: amax 4 -> scale 1, as the full tile.
TEST(ShardEdgeQdq, ZeroFillChangesTheScaleOfABoundaryTile) {
  auto be = emu::make_emu_backend();
  std::vector<float> v(32 * 32, 0.3125f);
  v[20 * 32 + 7] = 4.0f;
  Weight w = hand_weight(*be, 32, v);
  Tensor q, full;
  shard_edge_qdq(*be, w, FlatLayout({1024}, 2), 0, q);
  mxfp4_forward_qdq(*be, w.master, full);
  const auto qe = be->download<float>(q), qf = be->download<float>(full);
  for (size_t i = 0; i < 1024; ++i) {
    const float want_full = i == 20 * 32 + 7 ? 4.0f : 0.5f;
    EXPECT_EQ(qf[i], want_full) << i;
    EXPECT_EQ(qe[i], i < 512 ? 0.25f : want_full) << i;
  }
  // one rank: the whole tensor is one piece, the full QDQ
  shard_edge_qdq(*be, w, FlatLayout({1024}, 1), 0, q);
  EXPECT_EQ(be->download<float>(q), qf);
}

// The zero fill leaves every scale alone: a boundary at a tile-band edge (64 rows, 2 ranks:
// row 32), and a boundary inside a tile whose two halves each hold the tile's amax.
TEST(ShardEdgeQdq, ZeroFillThatKeepsTheScalesChangesNothing) {
  auto be = emu::make_emu_backend();
  std::vector<float> v(64 * 32, 0.3125f);
  v[40 * 32] = 4.0f;  // in the second band only: the first band's scale is 2^-4 either way
  Weight a = hand_weight(*be, 64, v);
  Tensor q, full;
  shard_edge_qdq(*be, a, FlatLayout({2048}, 2), 0, q);
  mxfp4_forward_qdq(*be, a.master, full);
  const auto qa = be->download<float>(q);
  EXPECT_EQ(qa, be->download<float>(full));
  EXPECT_EQ(qa[0], 0.25f);  // scale 2^-4: 5 -> 4 (tie to even)
  EXPECT_EQ(qa[40 * 32 + 1], 0.5f);

  std::vector<float> u(32 * 32, 0.3125f);
  u[3 * 32] = 4.0f;   // rank 0's rows
  u[30 * 32] = 4.0f;  // rank 1's rows
  Weight b = hand_weight(*be, 32, u);
  shard_edge_qdq(*be, b, FlatLayout({1024}, 2), 0, q);
  mxfp4_forward_qdq(*be, b.master, full);
  EXPECT_EQ(be->download<float>(q), be->download<float>(full));
}

// A snap decision the shard edge changes. Tile as in ZeroFillChangesTheScaleOfABoundaryTile,
// period 1 (seed, then every observation ends a window), ratio 2. Step 2 moves element (0, 0)
// from 0.3125 to 0.375 (dist_w = 0.0625):
//   full Q: scale 1; 0.375 -> 0.5 as before: dist_q = 0, ratio 0 -> no snap.
//   shard-edge Q: rank 0's amax is 0.375 -> scale 2^-4, 0.375 / 2^-4 = 6 -> 0.375; it was 0.25:
//     dist_q = 0.125, ratio 2 >= 2 -> snap.
// Every other element did not move (dist_w = 0): no snap either way. One decision differs; the
// 512 elements of rank 0 have a shard-edge Q other than the full one at both steps.
TEST(ShardEdgeDeOsc, CountsTheSnapDecisionsTheZeroFillChanges) {
  auto be = emu::make_emu_backend();
  std::vector<float> v(32 * 32, 0.3125f);
  v[20 * 32 + 7] = 4.0f;
  for (int P : {2, 1}) {
    Weight w = hand_weight(*be, 32, v);
    const FlatLayout layout({1024}, P);
    DeOsc d(1, 2.0f, 1);
    d.set_shard_edge(&layout, {{"fc1", 0}});
    std::vector<Weight*> ws = {&w};
    EXPECT_TRUE(d.step(*be, ws, Step(1)).empty());  // seeds
    EXPECT_EQ(d.edge_last().at("fc1").qdiff, P == 2 ? 512 : 0);
    std::vector<float> m = v;
    m[0] = 0.375f;
    be->upload(w.master, std::span<const float>(m));
    const auto snapped = d.step(*be, ws, Step(2));
    EXPECT_EQ(snapped.at("fc1"), P == 2 ? 1 : 0) << P;
    EXPECT_EQ(d.edge_last().at("fc1").changed, P == 2 ? 1 : 0) << P;
    EXPECT_EQ(d.edge_last().at("fc1").qdiff, P == 2 ? 512 : 0) << P;
  }
}
