// Per-dataset and per-step difference summaries of trace::compare.
#pragma once
#include "mxsim/trace/compare.hpp"
#include "mxsim/trace/reader.hpp"

namespace mxsim::trace {

/// Fills r.per_dataset and r.per_step from the common datasets (r.common) over
/// the compared rows (r.alignment, r.steps_compared), reading each dataset in blocks of rows;
/// steps are named by r.step_of.
void fill_difference_details(const Reader& a, const Reader& b, CompareResult& r);

}  // namespace mxsim::trace
