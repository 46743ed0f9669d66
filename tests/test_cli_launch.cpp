// mxsim launch's process handling, with /bin/sh stubs in place of the ranks (--program): the
// place every rank gets (environment, the private rendezvous folder, removed afterwards), a
// unique id passed through that folder, a failing or signalled rank stopping the others (their
// processes are gone when the launcher returns) and being named, SIGKILL after the grace
// period, a signal to the launcher, and the usage errors. `mxsim train` as a rank on this
// machine (no GPU here) fails naming its rank.
#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <filesystem>
#include <string>

#include "cli_test_util.hpp"

using mxsim::test::CliRun;
using mxsim::test::CliSandbox;
using mxsim::test::EnvVar;

namespace {

/// `mxsim launch LAUNCH --program /bin/sh -- -c 'SCRIPT'` in the sandbox (SCRIPT without single quotes).
CliRun launch_sh(const CliSandbox& sb, const std::string& launch, const std::string& script) {
  return sb.mxsim("launch " + launch + " --program /bin/sh -- -c '" + script + "'");
}

/// Whether a process of this pid exists (kill with signal 0).
bool process_exists(const std::string& pid_text) {
  const pid_t pid = pid_t(std::stol(pid_text));
  return kill(pid, 0) == 0 || errno != ESRCH;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

TEST(CliLaunch, EveryRankGetsItsPlaceAndAPrivateFolderRemovedAfterwards) {
  CliSandbox sb;
  unsetenv("NCCL_NVLS_ENABLE");
  const CliRun r = launch_sh(sb, "-n 3 --timeout 7",
                             "echo \"$MXSIM_RANK $MXSIM_WORLD_SIZE $MXSIM_RENDEZVOUS_TIMEOUT $NCCL_NVLS_ENABLE\" > "
                             "place.$MXSIM_RANK; stat -c %a \"$MXSIM_RENDEZVOUS\" > mode.$MXSIM_RANK; "
                             "echo \"$MXSIM_RENDEZVOUS\" > dir.$MXSIM_RANK");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string dir = trim(sb.slurp_text("dir.0"));
  for (int k = 0; k < 3; ++k) {
    const std::string s = std::to_string(k);
    EXPECT_EQ(trim(sb.slurp_text("place." + s)), s + " 3 7 0");  // NCCL_NVLS_ENABLE forced to 0
    EXPECT_EQ(trim(sb.slurp_text("mode." + s)), "700");
    EXPECT_EQ(trim(sb.slurp_text("dir." + s)), dir);
  }
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
}

TEST(CliLaunch, AnNcclNvlsSettingOfTheEnvironmentIsKept) {
  CliSandbox sb;
  {
    EnvVar e("NCCL_NVLS_ENABLE", "0");
    const CliRun r = launch_sh(sb, "-n 1", "echo $NCCL_NVLS_ENABLE > v");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(trim(sb.slurp_text("v")), "0");
    EXPECT_EQ(r.err, "");
  }
  EnvVar e("NCCL_NVLS_ENABLE", "1");
  const CliRun r = launch_sh(sb, "-n 1", "echo $NCCL_NVLS_ENABLE > v");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(trim(sb.slurp_text("v")), "1");
  EXPECT_NE(r.err.find("warning: NCCL_NVLS_ENABLE=1 kept"), std::string::npos) << r.err;
}

// Rank 0 publishes an id as the real exchange does (a temporary renamed onto unique-id); the
// others poll the shared folder and read it.
TEST(CliLaunch, TheRanksShareTheRendezvousFolder) {
  CliSandbox sb;
  const CliRun r = launch_sh(
      sb, "-n 3",
      "f=$MXSIM_RENDEZVOUS/unique-id; if [ $MXSIM_RANK = 0 ]; then sleep 0.3; echo id-$$ > $f.tmp; mv $f.tmp $f; "
      "cp $f got.0; else i=0; while [ ! -f $f ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; "
      "cp $f got.$MXSIM_RANK; fi");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string id = sb.slurp_text("got.0");
  EXPECT_EQ(id.rfind("id-", 0), 0u) << id;
  EXPECT_EQ(sb.slurp_text("got.1"), id);
  EXPECT_EQ(sb.slurp_text("got.2"), id);
}

TEST(CliLaunch, AFailingRankIsNamedAndTheOthersAreStopped) {
  CliSandbox sb;
  const CliRun r = launch_sh(sb, "-n 3",
                             "echo $$ > pid.$MXSIM_RANK; if [ $MXSIM_RANK = 1 ]; then sleep 0.3; exit 3; fi; "
                             "exec sleep 600");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("rank 1 (pid " + trim(sb.slurp_text("pid.1")) + ") exited with status 3; stopping the other ranks"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("mxsim launch: failed: rank 1"), std::string::npos) << r.err;
  for (const char* k : {"0", "2"}) EXPECT_FALSE(process_exists(sb.slurp_text(std::string("pid.") + k))) << "rank " << k;
}

// A rank killed by a signal is named; a rank that ignores SIGTERM is killed after --grace.
TEST(CliLaunch, ASignalledRankIsNamedAndAnUnresponsiveOneKilledAfterTheGrace) {
  CliSandbox sb;
  const CliRun r = launch_sh(sb, "-n 2 --grace 1",
                             "echo $$ > pid.$MXSIM_RANK; if [ $MXSIM_RANK = 1 ]; then sleep 0.3; kill -9 $$; fi; "
                             "trap \"\" TERM; while true; do sleep 1; done");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("rank 1 (pid " + trim(sb.slurp_text("pid.1")) + ") was killed by signal 9"), std::string::npos)
      << r.err;
  EXPECT_FALSE(process_exists(sb.slurp_text("pid.0")));
}

TEST(CliLaunch, ASignalToTheLauncherStopsEveryRank) {
  CliSandbox sb;
  const std::string bin = std::string(MXSIM_BINARY_DIR) + "/cli/mxsim";
  const std::string cmd = "cd '" + sb.p.string() + "' && ('" + bin +
                          "' launch -n 2 --program /bin/sh -- -c 'echo $$ > pid.$MXSIM_RANK; exec sleep 600' "
                          "2>err & l=$!; while [ ! -f pid.0 ] || [ ! -f pid.1 ]; do sleep 0.05; done; kill -TERM $l; "
                          "wait $l; echo $? > rc)";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_EQ(trim(sb.slurp_text("rc")), "1");
  EXPECT_NE(sb.slurp_text("err").find("the launcher received signal 15"), std::string::npos) << sb.slurp_text("err");
  for (const char* k : {"0", "1"}) EXPECT_FALSE(process_exists(sb.slurp_text(std::string("pid.") + k))) << "rank " << k;
}

TEST(CliLaunch, AProgramThatCannotRunIsNamed) {
  CliSandbox sb;
  const CliRun r = sb.mxsim("launch -n 2 --program /nonexistent/prog -- x");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("cannot run /nonexistent/prog"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mxsim launch: failed: rank "), std::string::npos) << r.err;
}

TEST(CliLaunch, UsageErrors) {
  CliSandbox sb;
  for (const char* a : {"launch -- train", "launch -n 0 -- train", "launch -n 1025 -- train", "launch -n 2",
                        "launch -n 2 --", "launch -n x -- train", "launch -n 2 --timeout 0 -- train"}) {
    const CliRun r = sb.mxsim(a);
    EXPECT_EQ(r.rc, 2) << a << ": " << r.err;
    EXPECT_NE(r.err.find("mxsim launch: usage error:"), std::string::npos) << a << ": " << r.err;
  }
}

// Ranks of `mxsim train`: the emulator is refused (usage, exit 2); --backend hip without a usable
// GPU or NCCL fails; either way the failing rank is named by itself and by the launcher.
TEST(CliLaunch, TrainRanksNameThemselvesWhenTheyFail) {
  CliSandbox sb;
  const CliRun emu = sb.mxsim("launch -n 2 -- train --backend emu");
  EXPECT_EQ(emu.rc, 1);
  EXPECT_NE(emu.err.find("of 2: --backend emu: a run of one process per rank"), std::string::npos) << emu.err;
  EXPECT_NE(emu.err.find("exited with status 2"), std::string::npos) << emu.err;
  const CliRun bad = sb.mxsim("launch -n 1 -- train --set parallel.ranks=2");
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.err.find("rank 0 of 1: "), std::string::npos) << bad.err;
}

// A rank's environment that mxsim launch did not make is a usage error naming the variable.
TEST(CliLaunch, TrainRefusesAMalformedPlace) {
  CliSandbox sb;
  EnvVar size("MXSIM_WORLD_SIZE", "2");
  EnvVar rank("MXSIM_RANK", "5");
  EnvVar dir("MXSIM_RENDEZVOUS", sb.p.string().c_str());
  const CliRun r = sb.mxsim("train --set run.max_steps=1");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("MXSIM_RANK=5: expected 0 to 1"), std::string::npos) << r.err;
}
