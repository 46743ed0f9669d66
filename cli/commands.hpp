// Sub-commands of the `mxsim` CLI. Each takes the arguments after its name
// and returns the process exit code (0 ok, 1 runtime error, 2 usage error).
#pragma once
#include <string>
#include <vector>

namespace mxsim::cli {

using Args = std::vector<std::string>;

int cmd_info(const Args& args);
int cmd_gemm(const Args& args);
int cmd_compare(const Args& args);
int cmd_quantize(const Args& args);
int cmd_train(const Args& args);
int cmd_dequantize(const Args& args);
int cmd_cast(const Args& args);
int cmd_verify(const Args& args);
int cmd_launch(const Args& args);
int cmd_report(const Args& args);

}  // namespace mxsim::cli
