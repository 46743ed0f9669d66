// The place of a process in a run of one process per rank (the variables mxsim launch sets) and
// the unique-id exchange through the rendezvous folder: values, the atomic publish, the timeout
// and every malformed variable named.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cli_test_util.hpp"
#include "mxsim/sim/process_group.hpp"

using namespace mxsim::sim;
using mxsim::test::EnvVar;
using mxsim::test::TempDir;

namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

std::vector<uint8_t> id_bytes() {
  std::vector<uint8_t> id(128);
  for (size_t i = 0; i < id.size(); ++i) id[i] = uint8_t(i * 37 + 1);
  return id;
}

}  // namespace

TEST(ProcessPlace, AbsentWithoutAWorldSize) {
  unsetenv("MXSIM_WORLD_SIZE");
  EXPECT_FALSE(process_place_from_env().has_value());
}

TEST(ProcessPlace, ReadsTheLaunchersVariables) {
  TempDir d("place");
  EnvVar s("MXSIM_WORLD_SIZE", "4"), r("MXSIM_RANK", "3"), f("MXSIM_RENDEZVOUS", d.p.string().c_str()),
      t("MXSIM_RENDEZVOUS_TIMEOUT", "2.5");
  const auto p = process_place_from_env();
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->rank, 3);
  EXPECT_EQ(p->size, 4);
  EXPECT_EQ(p->rendezvous, d.p.string());
  EXPECT_EQ(p->timeout_s, 2.5);
}

TEST(ProcessPlace, MalformedVariablesAreNamed) {
  TempDir d("place");
  const std::string dir = d.p.string();
  struct Case {
    const char *size, *rank, *folder, *timeout, *expect;
  } cases[] = {{"two", "0", dir.c_str(), "1", "MXSIM_WORLD_SIZE='two': expected an integer"},
               {"0", "0", dir.c_str(), "1", "MXSIM_WORLD_SIZE=0: expected 1 to 1024"},
               {"2", "2", dir.c_str(), "1", "MXSIM_RANK=2: expected 0 to 1 (MXSIM_WORLD_SIZE=2)"},
               {"2", "-1", dir.c_str(), "1", "MXSIM_RANK=-1: expected 0 to 1"},
               {"2", "", dir.c_str(), "1", "MXSIM_RANK='': expected an integer"},
               {"2", "1", "/nonexistent/rdv", "1", "MXSIM_RENDEZVOUS='/nonexistent/rdv': expected the launcher's folder"},
               {"2", "1", dir.c_str(), "0", "MXSIM_RENDEZVOUS_TIMEOUT='0': expected a positive number of seconds"},
               {"2", "1", dir.c_str(), "1s", "MXSIM_RENDEZVOUS_TIMEOUT='1s'"}};
  for (const Case& c : cases) {
    EnvVar s("MXSIM_WORLD_SIZE", c.size), r("MXSIM_RANK", c.rank), f("MXSIM_RENDEZVOUS", c.folder),
        t("MXSIM_RENDEZVOUS_TIMEOUT", c.timeout);
    EXPECT_NE(error_of([] { process_place_from_env(); }).find(c.expect), std::string::npos) << c.expect;
  }
}

// A rank waiting before rank 0 publishes receives the id; rank 0 leaves no temporary behind.
TEST(UniqueIdExchange, AWaitingRankReceivesRankZerosId) {
  TempDir d("rdv");
  const ProcessPlace r0{0, 3, d.p.string(), 10}, r2{2, 3, d.p.string(), 10};
  std::vector<uint8_t> got;
  std::thread waiter([&] { got = await_unique_id(r2, 128); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  publish_unique_id(r0, id_bytes());
  waiter.join();
  EXPECT_EQ(got, id_bytes());
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(d.p)) {
    ++files;
    EXPECT_EQ(e.path().filename(), "unique-id");
  }
  EXPECT_EQ(files, 1u);
}

// Only the final name counts: a temporary in the folder is not an id, and waiting ends with an
// error naming the rank, the folder and the timeout.
TEST(UniqueIdExchange, NoIdInTimeIsAnErrorNamingTheRank) {
  TempDir d("rdv");
  mxsim::test::write_bytes(d.p / ".mxsim-1-0.tmp", std::string(64, 'x'));
  const ProcessPlace r1{1, 2, d.p.string(), 0.2};
  const std::string e = error_of([&] { await_unique_id(r1, 128); });
  EXPECT_NE(e.find("rank 1 of 2: no unique id from rank 0 in " + d.p.string() + " after 0.2 s"), std::string::npos) << e;
}

TEST(UniqueIdExchange, AnIdOfAnotherSizeIsRefused) {
  TempDir d("rdv");
  publish_unique_id({0, 2, d.p.string(), 1}, std::vector<uint8_t>(100, 7));
  const std::string e = error_of([&] { await_unique_id({1, 2, d.p.string(), 1}, 128); });
  EXPECT_NE(e.find("holds 100 bytes; a unique id has 128"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { publish_unique_id({1, 2, d.p.string(), 1}, id_bytes()); }).find("rank 1 is not rank 0"),
            std::string::npos);
}
