// The trace's provenance names the commit mxsim was built from, whatever
// repository the process runs in (it once ran `git describe` in the current
// directory and recorded the user's own repository).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "mxsim/build_info.hpp"
#include "mxsim/trace/common.hpp"
#include "test_util.hpp"

namespace {
std::string sh(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[256];
  while (p && std::fgets(buf, sizeof buf, p)) out += buf;
  if (p) pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}
}  // namespace

TEST(Provenance, RecordsTheBuildCommitNotTheCurrentRepository) {
  mxsim::test::TempDir d("prov");
  const std::string repo = d.p.string();
  const std::string foreign = sh("cd '" + repo + "' && git init -q . && git -c user.email=t@t -c user.name=t commit -q "
                                 "--allow-empty -m x && git rev-parse --short=12 HEAD 2>/dev/null");
  if (foreign.size() != 12) GTEST_SKIP() << "git is not available to make a foreign repository";
  char old[4096];
  ASSERT_NE(getcwd(old, sizeof old), nullptr);
  ASSERT_EQ(chdir(repo.c_str()), 0);
  const auto p = mxsim::trace::make_provenance("emu", 1);
  ASSERT_EQ(chdir(old), 0);
  EXPECT_EQ(p.git_describe, mxsim::build_commit());
  EXPECT_EQ(p.git_describe.find(foreign), std::string::npos) << p.git_describe;
  EXPECT_EQ(p.version, mxsim::version());
  // The build commit is a commit of mxsim's own source tree (HEAD when built, so HEAD or
  // one of its ancestors once later commits are made), when the build is from a checkout.
  std::string c = mxsim::build_commit();
  if (const auto d = c.find("-dirty"); d != std::string::npos) c.resize(d);
  if (const auto g = c.rfind("-g"); g != std::string::npos) c = c.substr(g + 2);  // "tag-N-g<hash>"
  const std::string src = std::string("git -C '") + MXSIM_SOURCE_DIR + "' ";
  if (sh(src + "rev-parse --is-inside-work-tree 2>/dev/null") == "true") {
    EXPECT_EQ(sh(src + "merge-base --is-ancestor " + c + " HEAD 2>/dev/null && echo yes"), "yes") << mxsim::build_commit();
  } else {
    EXPECT_EQ(std::string(mxsim::build_commit()), "unknown");
  }
}
