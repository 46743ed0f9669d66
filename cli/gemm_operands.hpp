// `mxsim gemm --a A... --b B...`: one GEMM on given operands (codes + scales
// read by quantized_inputs.hpp, or BF16 arrays), computed by the emulator's
// grouped fprop (docs/numerics.md §5) and written as .npy. docs/cli.md "gemm".
#pragma once
#include "common.hpp"

namespace mxsim::cli {

/// Adds the operand-mode options (--a, --b, --a-tensor, --b-tensor, --layout,
/// --elem-dtype, --a-elem-dtype, --b-elem-dtype, --block-size, --m-splits,
/// --accumulate, --out-dtype, --impl, -o) to `opts`.
void add_operand_options(po::options_description& opts);

/// True when the command line asks for the operand mode (--a or --b given).
bool operand_mode(const Parsed& p);

/// Runs the operand mode on parsed options; returns the exit status. Throws
/// UsageError (exit 2) for bad option text and std::runtime_error (exit 1,
/// nothing written) for files, shapes, m_splits or operand pairs the contract
/// rejects.
int run_gemm_operands(const Parsed& p);

}  // namespace mxsim::cli
