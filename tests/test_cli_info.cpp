// `mxsim info` runs and reports version, build options, backends, formats and recipes.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace {
std::string run_info(int& rc, const std::string& env = "") {
  const std::string cmd = env + std::string(" '") + MXSIM_BINARY_DIR + "/cli/mxsim' info 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  while (p && std::fgets(buf, sizeof buf, p)) out += buf;
  rc = p ? ::pclose(p) : -1;
  return out;
}
}  // namespace

TEST(CliInfo, ReportsBuildBackendsFormatsRecipes) {
  int rc = 0;
  const std::string out = run_info(rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find(std::string("mxsim ") + MXSIM_VERSION), std::string::npos) << out;
  for (const char* want : {"-ffp-contract=off", "compiler:", "build type:", "GPU platform:", "backends: emu",
                           "e2m1", "e4m3fnuz", "e8m0", "mxfp4_2d", "fp8_block2d", "nvfp4"})
    EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
#ifdef MXSIM_HAVE_GPU
  EXPECT_NE(out.find("hip"), std::string::npos) << out;
#endif
}

// The CPU dispatch lines: the path in use and the kernel of every GEMM class
// and the quantizer; MXSIM_CPU_PATH=scalar (every CPU runs it) switches every
// kernel to the portable one; a bad value is an error naming it, exit 1.
TEST(CliInfo, ReportsCpuPathAndKernels) {
  int rc = 0;
  std::string out = run_info(rc);
  EXPECT_EQ(rc, 0) << out;
  for (const char* want : {"cpu path:", "cpu paths:", "mx-exact", "mx-f13", "fp8-chunk128", "bf16-f25", "quantize"})
    EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
  out = run_info(rc, "MXSIM_CPU_PATH=scalar");
  EXPECT_EQ(rc, 0) << out;
  for (const char* want : {"cpu path:      scalar (forced", "scalar-int8", "scalar-fused", "scalar-quantize"})
    EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
  out = run_info(rc, "MXSIM_CPU_PATH=sse9");
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("MXSIM_CPU_PATH='sse9' is not a CPU path"), std::string::npos) << out;
  EXPECT_EQ(out.find("formats:"), std::string::npos) << "nothing printed before the error\n" << out;
}
