// One process per rank, on the CPU: P threads, each with its own emulator backend and a Comm
// that drives only its own rank (local_ranks() = {r}), exchanging host copies through shared
// memory: the shape of the NCCL communicator of `mxsim launch`, without NCCL. The simulator's
// multi-rank code path must give rank 0 the trace of the virtual-rank run (itself the trace of
// one rank), and every rank the whole final weights; only rank 0 writes the trace and checkpoints.
#include <gtest/gtest.h>

#include <barrier>
#include <bit>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "mxsim/bits.hpp"
#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/parallel.hpp"
#include "mxsim/sim/trainer.hpp"
#include "sim_parallel_test_config.hpp"
#include "mxsim/trace/compare.hpp"
#include "test_util.hpp"

using namespace mxsim;
using namespace mxsim::sim;

namespace {

/// A path in this test program's temporary folder (removed at exit).
std::string tmp(const std::string& n) {
  static const mxsim::test::TempDir dir("proc");
  return (dir.p / n).string();
}

/// What the ranks of one collective deposit, one slot per rank.
struct Hub {
  explicit Hub(int P) : P(P), bar(P), bytes(size_t(P)), counts(size_t(P)), cols(size_t(P)) {}
  int P;
  std::barrier<> bar;
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<std::vector<int64_t>> counts;  // all_to_all_counts' send, or all_to_all_v's splits
  std::vector<size_t> cols;
};

/// Rank r of P over a Hub: deposit, wait for all, read, wait again (so no slot is overwritten
/// while another rank still reads it). The arithmetic is the contract of sim/parallel.hpp.
class ThreadComm final : public Comm {
 public:
  ThreadComm(Hub& h, Backend& be, int r) : h_(h), be_(be), ranks_{r} {}
  int size() const override { return h_.P; }
  const std::vector<int>& local_ranks() const override { return ranks_; }

  std::vector<std::vector<int64_t>> all_to_all_counts(const std::vector<std::vector<int64_t>>& send) override {
    const size_t P = size_t(h_.P), r = size_t(ranks_[0]), c = send.at(0).size() / P;
    h_.counts[r] = send[0];
    h_.bar.arrive_and_wait();
    std::vector<int64_t> recv(P * c);
    for (size_t s = 0; s < P; ++s)
      for (size_t j = 0; j < c; ++j) recv[s * c + j] = h_.counts[s].at(r * c + j);
    h_.bar.arrive_and_wait();
    return {recv};
  }

  std::vector<Tensor> all_to_all_v(std::span<const Tensor> send,
                                   const std::vector<std::vector<int64_t>>& splits) override {
    const size_t P = size_t(h_.P), r = size_t(ranks_[0]);
    h_.bytes[r] = bytes_of(send[0]);
    h_.counts[r] = splits.at(0);
    h_.cols[r] = send[0].dim(1);
    h_.bar.arrive_and_wait();
    const size_t C = h_.cols[r], row = C * sizeof(float);
    size_t rows = 0;
    for (size_t s = 0; s < P; ++s) rows += size_t(h_.counts[s][r]);
    std::vector<uint8_t> out(rows * row);
    size_t at = 0;
    for (size_t s = 0; s < P; ++s) {
      size_t first = 0;
      for (size_t d = 0; d < r; ++d) first += size_t(h_.counts[s][d]);
      const size_t n = size_t(h_.counts[s][r]);
      if (n) std::memcpy(out.data() + at * row, h_.bytes[s].data() + first * row, n * row);
      at += n;
    }
    h_.bar.arrive_and_wait();
    Tensor t = be_.alloc(DType::f32, {rows, C});
    be_.upload(t, out.data(), out.size());
    return {t};
  }

  void reduce_scatter(std::span<const Tensor> in, std::span<Tensor> out) override {
    const size_t P = size_t(h_.P), r = size_t(ranks_[0]), n = out[0].numel();
    h_.bytes[r] = bytes_of(in[0]);
    h_.bar.arrive_and_wait();
    std::vector<float> acc(n);
    for (size_t s = 0; s < P; ++s)
      for (size_t i = 0; i < n; ++i) {
        float x;
        std::memcpy(&x, h_.bytes[s].data() + (r * n + i) * sizeof(float), sizeof x);
        acc[i] = s == 0 ? x : canonical_nan(acc[i] + x);
      }
    h_.bar.arrive_and_wait();
    be_.upload(out[0], std::span<const float>(acc));
  }

  void all_gather(std::span<const Tensor> in, std::span<Tensor> out) override {
    const size_t P = size_t(h_.P), r = size_t(ranks_[0]);
    h_.bytes[r] = bytes_of(in[0]);
    h_.bar.arrive_and_wait();
    std::vector<uint8_t> all;
    for (size_t s = 0; s < P; ++s) all.insert(all.end(), h_.bytes[s].begin(), h_.bytes[s].end());
    h_.bar.arrive_and_wait();
    be_.upload(out[0], all.data(), all.size());
  }

 private:
  std::vector<uint8_t> bytes_of(const Tensor& t) {
    std::vector<uint8_t> b(t.bytes());
    be_.download(t, b.data(), b.size());
    return b;
  }
  Hub& h_;
  Backend& be_;
  std::vector<int> ranks_;
};

Config tiny(std::vector<std::string> extra) { return ::mxsim::sim::test::tiny_parallel_config(std::move(extra)); }

/// P threads, one rank each, every rank given the same options (as `mxsim launch` gives every
/// process the same command line), except that rank r > 0 gets its own trace and checkpoint
/// paths (base + ".rank<r>"), so that a test can see that it wrote neither. Returns each rank's
/// result.
std::vector<TrainResult> run_ranks(const Config& cfg, const TrainOptions& base) {
  const int P = cfg.ranks;
  Hub hub(P);
  std::vector<TrainResult> res(static_cast<size_t>(P));
  std::vector<std::exception_ptr> err(static_cast<size_t>(P));
  std::vector<std::thread> th;
  for (int r = 0; r < P; ++r)
    th.emplace_back([&, r] {
      try {
        auto be = emu::make_emu_backend();
        ThreadComm comm(hub, *be, r);
        TrainOptions o = base;
        o.comm = &comm;
        if (r > 0)
          for (std::string* p : {&o.trace_path, &o.checkpoint_path})
            if (!p->empty()) *p += ".rank" + std::to_string(r);
        res[size_t(r)] = train(cfg, *be, o);
      } catch (...) {
        err[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : th) t.join();
  for (auto& e : err)
    if (e) std::rethrow_exception(e);
  return res;
}

std::string virtual_run(const std::string& name, const Config& cfg) {
  auto be = emu::make_emu_backend();
  TrainOptions o;
  o.trace_path = tmp(name + ".h5");
  train(cfg, *be, o);
  return o.trace_path;
}

bool wgrad_operand_map(const std::string& dataset) {
  return dataset.find("/quant/x_wgrad/") != std::string::npos || dataset.find("/quant/dy_wgrad/") != std::string::npos;
}

// Bit-identical traces; at P >= 2 except the wgrad operands' block maps, which rank 0 of a
// process-mode run records for its own experts only (docs/simulator.md "Parallel simulation":
// a known gap). Everything else, those datasets' presence and shapes included, must match.
void expect_identical(const std::string& a, const std::string& b, bool all_of_it) {
  const trace::CompareResult c = trace::compare(a, b);
  if (all_of_it) {
    EXPECT_TRUE(c.identical()) << a << " vs " << b << ": first difference in "
                               << (c.first_difference ? c.first_difference->dataset : std::string("(none)"));
  } else {
    EXPECT_TRUE(c.only_a.empty() && c.only_b.empty() && c.mismatched.empty() && c.same_end()) << a << " vs " << b;
    size_t checked = 0;
    for (const trace::DatasetDifference& d : c.per_dataset) {
      if (wgrad_operand_map(d.dataset)) continue;
      ++checked;
      EXPECT_EQ(d.first_step, -1) << a << " vs " << b << ": " << d.dataset << " differs";
    }
    EXPECT_GT(checked, 40u);
  }
  EXPECT_GT(c.common.size(), 40u);  // series and snapshots (weights, main_grad, wgrad_mb, maps)
}

}  // namespace

// Rank 0's trace (series and snapshots; at P >= 2 all but the wgrad operands' block maps) is the
// virtual-rank run's bits at P = 1, 2 and 4, with
// the shard-edge option off and on; every rank ends with the whole final masters; no other rank
// writes the trace.
TEST(SimProcessMode, OneRankPerProcessGivesTheVirtualRankTrace) {
  for (const char* edge : {"false", "true"})
    for (const char* P : {"1", "2", "4"}) {
      const std::string tag = std::string(P) + "_" + edge;
      const Config cfg = tiny({std::string("parallel.ranks=") + P, std::string("parallel.deosc_shard_edge=") + edge});
      const std::string ref = virtual_run("virtual" + tag, cfg);
      TrainOptions o;
      o.trace_path = tmp("proc" + tag + ".h5");
      const std::vector<TrainResult> rs = run_ranks(cfg, o);
      expect_identical(ref, o.trace_path, std::string(P) == "1");
      for (size_t r = 1; r < rs.size(); ++r) {
        EXPECT_FALSE(std::filesystem::exists(o.trace_path + ".rank" + std::to_string(r))) << "rank " << r;
        ASSERT_EQ(rs[r].final_masters.size(), rs[0].final_masters.size());
        for (size_t l = 0; l < rs[0].final_masters.size(); ++l)
          EXPECT_TRUE(rs[r].final_masters[l] == rs[0].final_masters[l]) << "rank " << r << " layer " << l;
        EXPECT_EQ(rs[r].final_loss, rs[0].final_loss);
      }
    }
}

// A run stopped after 2 steps with a checkpoint (written by rank 0) and resumed by every rank
// from it ends with the uninterrupted virtual-rank run's final masters.
TEST(SimProcessMode, CheckpointOfRankZeroResumesEveryRank) {
  const Config cfg = tiny({"parallel.ranks=2", "trace.snapshot_steps=[]"});
  auto be = emu::make_emu_backend();
  const TrainResult whole = train(cfg, *be, TrainOptions{});
  TrainOptions first;
  first.checkpoint_path = tmp("ck.h5");
  first.stop_after = 2;
  run_ranks(cfg, first);
  EXPECT_TRUE(std::filesystem::exists(first.checkpoint_path));
  EXPECT_FALSE(std::filesystem::exists(first.checkpoint_path + ".rank1"));
  TrainOptions rest;
  rest.resume_path = first.checkpoint_path;
  for (const TrainResult& r : run_ranks(cfg, rest)) {
    EXPECT_EQ(r.steps, 3);
    ASSERT_EQ(r.final_masters.size(), whole.final_masters.size());
    for (size_t l = 0; l < whole.final_masters.size(); ++l) EXPECT_TRUE(r.final_masters[l] == whole.final_masters[l]);
  }
}

// The comm's size must be parallel.ranks: a clear error naming the key.
TEST(SimProcessMode, ProcessCountOtherThanRanksIsRefused) {
  Hub hub(1);
  auto be = emu::make_emu_backend();
  ThreadComm comm(hub, *be, 0);
  TrainOptions o;
  o.comm = &comm;
  try {
    train(tiny({"parallel.ranks=2"}), *be, o);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.ranks = 2 but the run has 1 processes"), std::string::npos) << e.what();
  }
}
