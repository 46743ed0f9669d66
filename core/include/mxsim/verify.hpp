// Op-by-op check of one Backend against another, bit for bit (`mxsim verify`,
// docs/cli.md; docs/gpu.md "Checking the GPU against the emulator").
//
// verify_backends generates seeded adversarial inputs for every op of
// mxsim::Backend (small random shapes, ragged and empty groups, NaN / Inf,
// extreme and special scales, saturating blocks, exact ties, rounding
// midpoints), uploads the same host bytes to both backends, runs the op on
// both, downloads both results and compares their BIT PATTERNS: any two
// elements that differ in one bit are a mismatch (a NaN against a NaN with
// other bits too). It is written against the abstract Backend only, so any
// pair of backends can be compared; the reference is normally the emulator.
//
// Inputs are valid for each op's contract (backend.hpp, docs/numerics.md);
// an input both backends refuse is not a mismatch (the row's note says so),
// one that only one backend refuses is (mismatches = 1, the message in note).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mxsim/backend.hpp"

namespace mxsim {

struct VerifyOptions {
  /// Seeded cases per op; each case may run several recipes / forms (one row each).
  int cases = 3;
  uint64_t seed = 1;
  /// Only this op (a verify_op_names() entry); empty: every op.
  std::string op;
};

/// One compared case.
struct VerifyRow {
  std::string op;      ///< verify_op_name of the Backend::Op
  std::string shape;   ///< the case's shapes ("[37, 200]", "G3 M57 N20 K77", ...)
  std::string recipe;  ///< spec / form / variant ("mxfp4/even cols", "fprop acc fp32-out", ...)
  uint64_t compared = 0;    ///< output elements compared (all outputs of the op together)
  uint64_t mismatches = 0;  ///< elements whose bit patterns differ
  /// Largest distance of a mismatching pair: f32 / f64 on the ordered line of
  /// bit patterns (-0 and +0 are neighbours, so any difference is >= 1),
  /// integers and bytes |a - b|.
  uint64_t max_ulp = 0;
  /// Index of the first mismatching element in the op's outputs concatenated
  /// in their documented order (e.g. quantize: data bytes, then scales, then
  /// tensor_scale_inv, then the layout fields); -1 when none.
  int64_t first_mismatch = -1;
  std::string note;  ///< why a row is special (a backend threw, ...); empty otherwise
};

/// Runs every op (or o.op) o.cases times on both backends and returns one row
/// per case.
/// Throws std::invalid_argument for an unknown o.op or o.cases < 1.
std::vector<VerifyRow> verify_backends(Backend& reference, Backend& candidate, const VerifyOptions& o);

/// Lower-case op names ("memory", "quantize", ..., "osc_metrics"), in Op order.
const char* verify_op_name(Backend::Op op);
std::vector<std::string> verify_op_names();
std::optional<Backend::Op> verify_op_from_name(std::string_view name);

}  // namespace mxsim
