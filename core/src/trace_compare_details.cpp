// Per-dataset first difference and largest difference per step (see
// trace_compare_details.hpp and mxsim/trace/compare.hpp).
#include "trace_compare_details.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

namespace mxsim::trace {
namespace {

double value_at(const unsigned char* p, DType t) {
  auto get = [&](auto v) {
    std::memcpy(&v, p, sizeof v);
    return double(v);
  };
  switch (t) {
    case DType::f32: return get(float{});
    case DType::f64: return get(double{});
    case DType::u8: return get(uint8_t{});
    case DType::i32: return get(int32_t{});
    case DType::u32: return get(uint32_t{});
    case DType::i64: return get(int64_t{});
    case DType::u64: return get(uint64_t{});
  }
  return 0;
}

/// |a - b| by the rule of DatasetDifference::max_abs_diff.
double abs_diff(double a, double b) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na || nb) return na && nb ? 0.0 : std::numeric_limits<double>::infinity();
  if (a == b) return 0.0;  // also -0 vs +0 and equal infinities
  return std::fabs(a - b);
}

}  // namespace

void fill_difference_details(const Reader& a, const Reader& b, CompareResult& r) {
  const uint64_t n = r.steps_compared;
  const uint64_t row_a = r.alignment.row_a, row_b = r.alignment.row_b;
  std::map<int64_t, StepDifference> steps;
  auto note_row = [&](DatasetDifference& d, int64_t step, const unsigned char* x, const unsigned char* y,
                      uint64_t elems, DType t) {
    const size_t es = dtype_size(t);
    if (std::memcmp(x, y, elems * es) == 0) return;
    double row_max = 0;
    bool first = true;
    for (uint64_t e = 0; e < elems; ++e) {
      if (std::memcmp(x + e * es, y + e * es, es) == 0) continue;
      if (first && d.first_step < 0) {
        d.first_step = step;
        d.element = e;
      }
      first = false;
      row_max = std::max(row_max, abs_diff(value_at(x + e * es, t), value_at(y + e * es, t)));
    }
    ++d.steps_differing;
    d.max_abs_diff = std::max(d.max_abs_diff, row_max);
    auto [it, fresh] = steps.try_emplace(step, StepDifference{step, row_max, d.dataset});
    if (!fresh && row_max > it->second.max_abs_diff) it->second = StepDifference{step, row_max, d.dataset};
  };
  constexpr uint64_t kBlockBytes = 16u << 20;
  for (const auto& name : r.common) {  // sorted by name: ties in per_step keep the first name
    const auto& in = a.info(name);
    DatasetDifference d;
    d.dataset = name;
    const uint64_t elems = in.row_elems();
    const uint64_t row_bytes = elems * dtype_size(in.dtype);
    if (!in.snapshot) {
      const uint64_t block = std::max<uint64_t>(1, kBlockBytes / std::max<uint64_t>(1, row_bytes));
      for (uint64_t r0 = 0; r0 < n; r0 += block) {
        const uint64_t cnt = std::min(block, n - r0);
        const auto x = a.read_raw(name, in.dtype, row_a + r0, cnt), y = b.read_raw(name, in.dtype, row_b + r0, cnt);
        if (x == y) continue;
        for (uint64_t q = 0; q < cnt; ++q)
          note_row(d, r.step_of(r0 + q), x.data() + q * row_bytes, y.data() + q * row_bytes, elems, in.dtype);
      }
    } else {
      for (int64_t s : in.snapshot_steps) {  // trace rows of A; B's row holds the same step
        if (s < int64_t(row_a) || uint64_t(s) - row_a >= n) continue;
        const uint64_t i = uint64_t(s) - row_a;
        const auto x = a.read_snapshot_raw(name, in.dtype, s), y = b.read_snapshot_raw(name, in.dtype, int64_t(row_b + i));
        if (x.size() == y.size())
          note_row(d, r.step_of(i), x.data(), y.data(), x.size() / dtype_size(in.dtype), in.dtype);
      }
    }
    r.per_dataset.push_back(std::move(d));
  }
  for (auto& [s, v] : steps) r.per_step.push_back(std::move(v));
}

}  // namespace mxsim::trace
