// The reference-trace comparison as a test: a short training run (every
// recipe on some linear, de-oscillation with snaps, stochastic rounding,
// snapshots, evaluation; tests/golden/sim/small.toml) must write a trace
// bit-identical (mxsim::trace::compare, as `mxsim compare`) to the one checked
// in. tests/golden/sim/README.md says where that trace came from and how it is
// regenerated, deliberately, when the numerics change on purpose.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <boost/iostreams/copy.hpp>
#include <boost/iostreams/filter/gzip.hpp>
#include <boost/iostreams/filtering_stream.hpp>

#include "mxsim/emu/backend_emu.hpp"
#include "mxsim/sim/config.hpp"
#include "mxsim/sim/trainer.hpp"
#include "mxsim/trace/compare.hpp"
#include "test_util.hpp"

using namespace mxsim;

namespace {
std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  if (!f) throw std::runtime_error(p.string() + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void gunzip(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) throw std::runtime_error(from.string() + ": cannot open");
  boost::iostreams::filtering_istream z;
  z.push(boost::iostreams::gzip_decompressor());
  z.push(in);
  std::ofstream out(to, std::ios::binary);
  boost::iostreams::copy(z, out);
}
}  // namespace

TEST(SimGolden, SmallRunMatchesCheckedInTrace) {
  const std::filesystem::path dir = std::filesystem::path(MXSIM_SOURCE_DIR) / "tests/golden/sim";
  const sim::Config c = sim::parse_config(slurp(dir / "small.toml"), {}, (dir / "small.toml").string());
  test::TempDir tmp("sim_golden");
  const std::filesystem::path golden = tmp.p / "golden.h5", run = tmp.p / "run.h5";
  gunzip(dir / "small.h5.gz", golden);
  auto be = emu::make_emu_backend();
  sim::TrainOptions o;
  o.trace_path = run.string();
  o.threads = 2;
  sim::train(c, *be, o);
  const trace::CompareResult r = trace::compare(golden, run);
  EXPECT_EQ(r.steps_a, 12u);
  EXPECT_EQ(r.steps_b, 12u);
  EXPECT_GT(r.common.size(), 100u);  // every series and snapshot of the run was compared
  EXPECT_TRUE(r.only_a.empty() && r.only_b.empty() && r.mismatched.empty());
  ASSERT_FALSE(r.first_difference) << "first difference at trace row " << r.first_difference->row_a << ", "
                                   << r.first_difference->dataset << " element " << r.first_difference->element
                                   << " (regenerate only for an intended change: tests/golden/sim/README.md)";
  EXPECT_TRUE(r.identical());
}
