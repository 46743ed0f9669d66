// Bit comparison of two traces (used by `mxsim compare`).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace mxsim::trace {

struct ScalarFinal {
  std::string name;
  std::optional<double> a, b;   ///< last complete value (empty: absent in that run or 0 steps)
};

struct ConfigDiff {
  std::string key;              ///< dotted TOML key
  std::string a, b;             ///< value as TOML text, "" when absent
};

/// Steps in the results below are named by CompareResult::step_of: the global optimizer step
/// (/train/step, 1-based) where rows are paired by global step, A's trace row (0-based) where
/// they are paired by index (see Alignment).
struct FirstDifference {
  int64_t step = -1;            ///< first step whose bits differ (global step, or row: see above)
  std::string dataset;          ///< first dataset (by name) differing at that step
  uint64_t element = 0;         ///< flat index of the first differing element in that row
  uint64_t row_a = 0, row_b = 0;  ///< the trace rows of A and B holding that step
};

/// How one common dataset differs over the compared steps.
struct DatasetDifference {
  std::string dataset;
  int64_t first_step = -1;      ///< first step (series row or snapshot step) whose bits differ; -1: none
  uint64_t element = 0;         ///< flat index of the first differing element in that row
  uint64_t steps_differing = 0; ///< rows (or snapshots) whose bits differ
  /// Largest |a - b| over the compared elements, as double: +inf where exactly one side is
  /// NaN (or the two are infinities of opposite sign), 0 where bits differ but values do not
  /// (NaN payloads, -0 vs +0).
  double max_abs_diff = 0;
};

/// The largest difference at one step over every common dataset.
struct StepDifference {
  int64_t step = 0;
  double max_abs_diff = 0;      ///< as DatasetDifference::max_abs_diff, over all datasets at this step
  std::string dataset;          ///< the dataset where it occurs (first by name on ties)
};

/// How the rows of A and B were paired.
///
/// By global step when both traces hold a usable /train/step (i64 scalar series whose complete
/// rows are consecutive, first_step + row): A's row row_a + i is compared with B's row
/// row_b + i for i < steps_compared, that is the global steps both traces cover (a run resumed
/// from a checkpoint after step c starts at global step c + 1, row 0). Otherwise by index
/// (row i with row i, row_a = row_b = 0) and `note` says why.
struct Alignment {
  bool by_global_step = false;
  int64_t first_step_a = -1, first_step_b = -1;  ///< /train/step of row 0; -1: none usable in that file
  uint64_t row_a = 0, row_b = 0;                 ///< first compared row of each file
  std::string note;                              ///< why rows are paired by index; "" when by global step
};

struct CompareResult {
  uint64_t steps_a = 0, steps_b = 0;   ///< complete steps in each file
  uint64_t steps_compared = 0;         ///< rows compared: the common global steps, or min(steps_a, steps_b)
  Alignment alignment;
  std::vector<std::string> common;     ///< series/snapshots present in both with same dtype/shape
                                       ///< (snapshots: and the same snapshot steps within the compared steps)
  std::vector<std::string> only_a, only_b, mismatched;  ///< absent in one; or dtype/shape differ
  /// Snapshots in one file only none of whose snapshot steps lies in the compared steps (a
  /// resumed run declares only the snapshots of its own steps): listed, not counted.
  std::vector<std::string> only_a_outside, only_b_outside;
  std::vector<ScalarFinal> finals;     ///< every scalar series (per-step shape {}) of either run
  std::vector<ConfigDiff> config_diffs;
  std::optional<FirstDifference> first_difference;  ///< empty: all common data bit-identical
  std::vector<DatasetDifference> per_dataset;       ///< every common dataset, by name
  std::vector<StepDifference> per_step;             ///< steps where some common dataset's bits differ, ascending
  /// The step name (see FirstDifference) of the i-th compared row.
  int64_t step_of(uint64_t i) const {
    return alignment.by_global_step ? alignment.first_step_a + int64_t(alignment.row_a + i) : int64_t(i);
  }
  /// Whether the two traces end at the same step: by global step, the same last global step
  /// (a resumed run's trace against the uninterrupted run's); by index, the same row count.
  bool same_end() const {
    if (!alignment.by_global_step) return steps_a == steps_b;
    return alignment.first_step_a + int64_t(steps_a) == alignment.first_step_b + int64_t(steps_b);
  }
  /// True when no common data differs in the compared steps, both files hold the same
  /// datasets (names, dtypes, shapes; snapshots outside the compared steps aside) and they
  /// end at the same step (same_end: with equal first steps, the same number of complete
  /// steps). Config differences are reported but do not count (the data decides).
  bool identical() const {
    return !first_difference && only_a.empty() && only_b.empty() && mismatched.empty() && same_end();
  }
};

/// Compares every common series row by row over the compared steps (Alignment: the global
/// steps both traces cover, or the first min(steps) rows), and the snapshots of those steps,
/// exact bits. Works on live files (SWMR read).
/// Throws TraceError naming the file: missing, not an mxsim trace; or "no common series".
CompareResult compare(const std::filesystem::path& a, const std::filesystem::path& b);

class Reader;
/// The same comparison over two open readers (an application that already holds a Reader of
/// each file, such as the inspector, compares without opening the files again). `a` and `b`
/// may be the same reader. Throws TraceError "no common series" as above.
CompareResult compare(const Reader& a, const Reader& b);

}  // namespace mxsim::trace
