#include "gemm_vnni.hpp"
namespace mxsim::emu::gemm {
bool vnni_available() { return false; }
bool run_mx_exact_vnni(const Panel&, const Panel&, Out, bool, Format) { return false; }
}  // namespace mxsim::emu::gemm
