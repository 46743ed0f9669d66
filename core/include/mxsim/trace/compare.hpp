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

struct FirstDifference {
  int64_t step = -1;            ///< first step (row) whose bits differ
  std::string dataset;          ///< first dataset (by name) differing at that step
  uint64_t element = 0;         ///< flat index of the first differing element in that row
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

struct CompareResult {
  uint64_t steps_a = 0, steps_b = 0;   ///< complete steps in each file
  uint64_t steps_compared = 0;         ///< min(steps_a, steps_b)
  std::vector<std::string> common;     ///< series/snapshots present in both with same dtype/shape
  std::vector<std::string> only_a, only_b, mismatched;  ///< absent in one; or dtype/shape differ
  std::vector<ScalarFinal> finals;     ///< every scalar series (per-step shape {}) of either run
  std::vector<ConfigDiff> config_diffs;
  std::optional<FirstDifference> first_difference;  ///< empty: all common data bit-identical
  std::vector<DatasetDifference> per_dataset;       ///< every common dataset, by name
  std::vector<StepDifference> per_step;             ///< steps where some common dataset's bits differ, ascending
  /// True when no common data differs in the compared steps, both files hold the same
  /// datasets (names, dtypes, shapes) and the same number of complete steps. Config
  /// differences are reported but do not count (the data decides).
  bool identical() const {
    return !first_difference && only_a.empty() && only_b.empty() && mismatched.empty() && steps_a == steps_b;
  }
};

/// Compares every common series row by row over the first min(steps) complete steps (and
/// snapshots of steps < min(steps)), exact bits. Works on live files (SWMR read).
/// Throws TraceError naming the file: missing, not an mxsim trace; or "no common series".
CompareResult compare(const std::filesystem::path& a, const std::filesystem::path& b);

class Reader;
/// The same comparison over two open readers (an application that already holds a Reader of
/// each file, such as the inspector, compares without opening the files again). `a` and `b`
/// may be the same reader. Throws TraceError "no common series" as above.
CompareResult compare(const Reader& a, const Reader& b);

}  // namespace mxsim::trace
