// Checkpoint completeness and counter ranges (docs/trace-format.md "Checkpoints"): every entry
// of a checkpoint is required -- state groups that exist only once the run made them carry a
// required present/<group> flag -- so a file missing any one entry is refused naming it, never
// re-seeded silently; counters read from the file (step, de-oscillation step, window, snap
// counts, flags, flip counts) are range-checked on load. The bad checkpoints are made by hand:
// a good one read entry by entry and written back with one entry dropped or changed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/trainer.hpp"
#include "mxsim/trace/checkpoint.hpp"

using namespace mxsim;
using namespace mxsim::sim;

namespace {

std::string tmp(const std::string& n) {
  return (std::filesystem::temp_directory_path() / ("mxsim_ckc_" + std::to_string(::getpid()) + "_" + n)).string();
}

// MXFP4 experts with de-oscillation from step 2 in windows of 3 steps: after 5 steps the file
// has de-osc state, oscillation metrics and fc1's / fc2's snap counts.
Config config() {
  return parse_config(default_config_text(),
                      {"run.epochs=1", "run.max_steps=8", "run.train_limit=1024", "run.test_limit=100", "model.d_model=32",
                       "model.d_ff=64", "model.experts=4", "model.top_k=2", "batch.global_batch=128",
                       "batch.num_microbatches=2", "deosc.period=3", "deosc.start_step=2", "deosc.ratio=1.0",
                       "recipe.fc2=fp8_delayed", "trace.snapshot_steps=[]"},
                      "ckc");
}

using Value = std::variant<std::string, trace::Array<float>, trace::Array<uint8_t>, trace::Array<uint64_t>, uint64_t,
                           int64_t, float, double>;
using Entries = std::map<std::string, Value>;

/// Every entry of a checkpoint with its kind (the reader refuses a getter of another kind).
Entries read_all(const std::string& path) {
  trace::Checkpoint c(path);
  Entries e;
  for (const std::string& n : c.names()) {
    const auto try_get = [&](auto get) {
      try {
        e.emplace(n, get());
        return true;
      } catch (const std::exception&) {
        return false;
      }
    };
    const bool ok = try_get([&] { return Value(c.get_string(n)); }) || try_get([&] { return Value(c.get_f32(n)); }) ||
                    try_get([&] { return Value(c.get_u8(n)); }) || try_get([&] { return Value(c.get_u64_array(n)); }) ||
                    try_get([&] { return Value(c.get_u64(n)); }) || try_get([&] { return Value(c.get_i64(n)); }) ||
                    try_get([&] { return Value(c.get_f32_scalar(n)); }) || try_get([&] { return Value(c.get_f64(n)); });
    EXPECT_TRUE(ok) << "cannot read entry " << n;
  }
  return e;
}

void write_all(const Entries& e, const std::string& path) {
  trace::CheckpointWriter w;
  for (const auto& [n, v] : e) {
    if (auto* s = std::get_if<std::string>(&v)) w.put_string(n, *s);
    else if (auto* a = std::get_if<trace::Array<float>>(&v)) w.put(n, a->data.data(), a->shape);
    else if (auto* b = std::get_if<trace::Array<uint8_t>>(&v)) w.put(n, b->data.data(), b->shape);
    else if (auto* u = std::get_if<trace::Array<uint64_t>>(&v)) w.put(n, u->data.data(), u->shape);
    else if (auto* x = std::get_if<uint64_t>(&v)) w.put_u64(n, *x);
    else if (auto* i = std::get_if<int64_t>(&v)) w.put_i64(n, *i);
    else if (auto* f = std::get_if<float>(&v)) w.put_f32(n, *f);
    else w.put_f64(n, std::get<double>(v));
  }
  w.commit(path);
}

struct Fixture {
  Config cfg = config();
  std::unique_ptr<Backend> be = emu::make_emu_backend();
  std::string ck = tmp("good.h5");
  Entries good;
  Fixture() {
    TrainOptions o;
    o.threads = 1;
    o.evaluate = false;
    o.checkpoint_path = ck;
    o.stop_after = 5;
    train(cfg, *be, o);
    good = read_all(ck);
  }
  ~Fixture() { std::filesystem::remove(ck); }
  /// The error of resuming from these entries ("no error" when the resume runs).
  std::string resume_error(const Entries& e) {
    const std::string p = tmp("bad.h5");
    write_all(e, p);
    TrainOptions o;
    o.threads = 1;
    o.evaluate = false;
    o.resume_path = p;
    std::string r = "no error";
    try {
      train(cfg, *be, o);
    } catch (const std::exception& ex) {
      r = ex.what();
    }
    std::filesystem::remove(p);
    return r;
  }
};

bool has(const std::string& s, const std::string& w) { return s.find(w) != std::string::npos; }

}  // namespace

// Every entry is required: the file rewritten whole resumes; without any one entry it is
// refused naming that entry. The groups that exist only once made are flagged present.
TEST(SimCheckpointComplete, EveryEntryRequired) {
  Fixture f;
  for (const char* n : {"present/deosc/state/fc1", "present/osc/fc1", "present/osc/fc2", "present/snaps_total/fc1",
                        "deosc/state/fc1/prev", "osc/fc1/flips", "osc/fc2/window", "snaps_total/fc1",
                        "model/fc2/delayed/dy/history"})
    ASSERT_TRUE(f.good.count(n)) << n << " not in the checkpoint: the config no longer makes it";
  EXPECT_EQ(std::get<uint64_t>(f.good.at("present/deosc/state/fc1")), 1u);
  EXPECT_EQ(std::get<uint64_t>(f.good.at("present/deosc/state/embed")), 0u);  // bf16: never eligible
  EXPECT_FALSE(f.good.count("deosc/state/embed/prev"));
  EXPECT_EQ(f.resume_error(f.good), "no error");
  size_t n = 0;
  for (const auto& [name, v] : f.good) {
    Entries e = f.good;
    e.erase(name);
    const std::string err = f.resume_error(e);
    EXPECT_TRUE(has(err, "'" + name + "'")) << "without " << name << ": " << err;
    ++n;
  }
  EXPECT_GT(n, 60u);
}

// Counters read from the file are range-checked before any arithmetic uses them; each refusal
// names the entry.
TEST(SimCheckpointComplete, CountersRangeChecked) {
  Fixture f;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const auto with = [&](const std::string& name, Value v) {
    Entries e = f.good;
    EXPECT_TRUE(e.count(name)) << name;
    e[name] = v;
    return f.resume_error(e);
  };
  struct Case {
    std::string name;
    Value v;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"step", uint64_t(kMax), "checkpoint step 9223372036854775807 is past this run's 8 steps"},
      {"step", ~uint64_t(0), "checkpoint step 18446744073709551615 is past this run's 8 steps"},
      {"deosc/global_step", kMax, "'deosc/global_step' is 9223372036854775807, outside [5, 5]"},
      {"deosc/global_step", int64_t(4), "'deosc/global_step' is 4, outside [5, 5]"},
      {"deosc/state/fc1/step", kMax, "'deosc/state/fc1/step' is 9223372036854775807, outside [0, 2]"},
      {"deosc/state/fc1/step", int64_t(-1), "'deosc/state/fc1/step' is -1, outside [0, 2]"},
      {"osc/fc1/window", kMax, "'osc/fc1/window' is 9223372036854775807, outside [0, 2]"},
      {"osc/fc2/window", int64_t(3), "'osc/fc2/window' is 3, outside [0, 2]"},
      {"snaps_total/fc1", kMax, "'snaps_total/fc1' is 9223372036854775807, outside [0, "},
      {"snaps_total/fc1", int64_t(-1), "'snaps_total/fc1' is -1, outside [0, "},
      {"present/osc/fc1", uint64_t(2), "'present/osc/fc1' is 2, expected 0 or 1"},
      {"deosc/state/fc1/seeded", uint64_t(7), "'deosc/state/fc1/seeded' is 7, expected 0 or 1"},
      {"deosc/built", ~uint64_t(0), "'deosc/built' is 18446744073709551615, expected 0 or 1"},
  };
  for (const Case& c : cases) {
    const std::string err = with(c.name, c.v);
    EXPECT_TRUE(has(err, c.want)) << c.name << ": " << err;
  }
  // A flip count above the u32 the metrics keep (stored widened to u64).
  auto flips = std::get<trace::Array<uint64_t>>(f.good.at("osc/fc1/flips"));
  flips.data.back() = uint64_t(1) << 32;
  const std::string err = with("osc/fc1/flips", flips);
  EXPECT_TRUE(has(err, "'osc/fc1/flips' element " + std::to_string(flips.data.size() - 1) + " is 4294967296")) << err;
}

// Resuming a checkpoint of a finished run (its config, so its step count, is the run's own)
// has nothing to do: refused naming the file and the step, before any trace is created --
// not a zero-step run reporting "test accuracy -1".
TEST(SimCheckpointComplete, FinishedRunRefusedOnResume) {
  const Config cfg = config();
  auto be = emu::make_emu_backend();
  TrainOptions o;
  o.threads = 1;
  o.evaluate = false;
  o.checkpoint_path = tmp("done.h5");
  EXPECT_EQ(train(cfg, *be, o).steps, 8);
  TrainOptions r = o;
  r.checkpoint_path.clear();
  r.resume_path = o.checkpoint_path;
  r.trace_path = tmp("done_trace.h5");
  try {
    train(cfg, *be, r);
    FAIL() << "resumed a finished run";
  } catch (const std::runtime_error& e) {
    EXPECT_TRUE(has(e.what(), o.checkpoint_path + ": checkpoint is at step 8, the last of this run's 8 steps: the run "
                              "is complete, nothing to resume"))
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(r.trace_path));
  std::filesystem::remove(o.checkpoint_path);
}
