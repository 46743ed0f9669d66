// Bit comparison of two traces (see mxsim/trace/compare.hpp).
#include "mxsim/trace/compare.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>

#include <toml++/toml.h>

#include "mxsim/io/tensor_file.hpp"
#include "mxsim/io/toml_nesting.hpp"
#include "mxsim/trace/reader.hpp"
#include "mxsim/trace/schema.hpp"
#include "trace_compare_details.hpp"

namespace mxsim::trace {

namespace {

std::map<std::string, std::string> flatten_toml(const std::string& text) {
  std::map<std::string, std::string> out;
  toml::table t;
  try {
    // A config nested deeper than any mxsim writes is compared as text: parsing (and walking)
    // it would recurse once per level.
    io::check_toml_nesting(text, "config_toml");
    t = toml::parse(text);
  } catch (const std::exception&) {
    out["(config_toml text)"] = text;  // unparsable: compare as one opaque value
    return out;
  }
  std::function<void(const toml::table&, const std::string&)> walk = [&](const toml::table& tb, const std::string& pre) {
    for (const auto& [k, v] : tb) {
      const std::string key = pre.empty() ? std::string(k.str()) : pre + "." + std::string(k.str());
      if (const auto* sub = v.as_table()) {
        walk(*sub, key);
      } else {
        std::ostringstream s;
        v.visit([&](const auto& node) { s << node; });
        out[key] = s.str();
      }
    }
  };
  walk(t, "");
  return out;
}

std::optional<double> last_value(const Reader& r, const DatasetInfo& in) {
  const uint64_t k = r.steps_completed();
  if (k == 0) return std::nullopt;
  auto raw = r.read_raw(in.name, in.dtype, k - 1, 1);
  auto get = [&](auto v) {
    std::memcpy(&v, raw.data(), sizeof v);
    return double(v);
  };
  switch (in.dtype) {
    case DType::f32: return get(float{});
    case DType::f64: return get(double{});
    case DType::u8: return get(uint8_t{});
    case DType::i32: return get(int32_t{});
    case DType::u32: return get(uint32_t{});
    case DType::i64: return get(int64_t{});
    case DType::u64: return get(uint64_t{});
  }
  return std::nullopt;
}

/// The global step of row 0 when /train/step is usable (an i64 scalar series whose complete
/// rows hold first, first + 1, ...); else -1 and `why` says what is wrong.
int64_t first_global_step(const Reader& r, std::string& why) {
  if (!r.has(schema::kTrainStep)) {
    why = std::string("no ") + schema::kTrainStep;
    return -1;
  }
  const auto& in = r.info(schema::kTrainStep);
  if (in.snapshot || in.dtype != DType::i64 || !in.row_shape.empty()) {
    why = std::string(schema::kTrainStep) + " is not an i64 scalar series";
    return -1;
  }
  if (r.steps_completed() == 0) {
    why = "no complete steps";
    return -1;
  }
  const auto v = r.read_series<int64_t>(schema::kTrainStep, 0, r.steps_completed());
  if (v[0] < 0 || v[0] > (int64_t(1) << 62)) {  // also keeps first + rows far from overflow
    why = std::string(schema::kTrainStep) + " starts at " + std::to_string(v[0]) + ", not a step";
    return -1;
  }
  for (std::size_t i = 1; i < v.size(); ++i)
    if (v[i] != v[0] + int64_t(i)) {
      why = std::string(schema::kTrainStep) + " is not consecutive (row " + std::to_string(i) + " holds " +
            std::to_string(v[i]) + " after " + std::to_string(v[i - 1]) + ")";
      return -1;
    }
  return v[0];
}

/// Pairs the rows of a and b (see Alignment) and sets res.steps_compared.
void align(const Reader& a, const Reader& b, CompareResult& res) {
  Alignment& al = res.alignment;
  std::string why_a, why_b;
  al.first_step_a = first_global_step(a, why_a);
  al.first_step_b = first_global_step(b, why_b);
  if (al.first_step_a >= 0 && al.first_step_b >= 0) {
    al.by_global_step = true;
    const int64_t lo = std::max(al.first_step_a, al.first_step_b);
    const int64_t hi = std::min(al.first_step_a + int64_t(res.steps_a), al.first_step_b + int64_t(res.steps_b));  // exclusive
    if (hi > lo) {
      res.steps_compared = uint64_t(hi - lo);
      al.row_a = uint64_t(lo - al.first_step_a);
      al.row_b = uint64_t(lo - al.first_step_b);
    }
    return;
  }
  res.steps_compared = std::min(res.steps_a, res.steps_b);
  std::string why;
  if (!why_a.empty() && why_a == why_b)
    why = why_a + " in A and B";
  else {
    if (!why_a.empty()) why = why_a + " in A";
    if (!why_b.empty()) why += (why.empty() ? "" : ", ") + why_b + " in B";
  }
  al.note = why + ": rows paired by index, steps are trace rows (0-based)";
}

/// The declared snapshot steps (trace rows) of `in` that lie in the compared rows
/// [first, first + n), as compared indices (row - first).
std::vector<int64_t> snapshots_in_window(const DatasetInfo& in, uint64_t first, uint64_t n) {
  std::vector<int64_t> out;
  for (int64_t s : in.snapshot_steps)
    if (s >= int64_t(first) && uint64_t(s) - first < n) out.push_back(s - int64_t(first));
  return out;
}

}  // namespace

CompareResult compare(const std::filesystem::path& pa, const std::filesystem::path& pb) {
  Reader a(pa);
  // The same file on both sides: one Reader serves both (two Readers of one file share their
  // HDF5 ids anyway, see trace_reader.cpp), and the data is read once.
  std::error_code ec;
  std::optional<Reader> bo;
  if (!std::filesystem::equivalent(pa, pb, ec)) bo.emplace(pb);
  return compare(a, bo ? *bo : a);
}

CompareResult compare(const Reader& a, const Reader& b) {
  CompareResult res;
  res.steps_a = a.steps_completed();
  res.steps_b = b.steps_completed();
  align(a, b, res);
  const uint64_t n = res.steps_compared;
  const uint64_t row_a = res.alignment.row_a, row_b = res.alignment.row_b;

  // Snapshot steps are trace rows: a dataset's snapshots are compared at the compared steps
  // both declare, so a run that covers fewer steps (a resumed run) does not make it mismatched.
  for (const auto& ia : a.datasets()) {
    if (!b.has(ia.name)) {
      if (ia.snapshot && snapshots_in_window(ia, row_a, n).empty())
        res.only_a_outside.push_back(ia.name);
      else
        res.only_a.push_back(ia.name);
      continue;
    }
    const auto& ib = b.info(ia.name);
    if (ia.dtype != ib.dtype || ia.row_shape != ib.row_shape || ia.snapshot != ib.snapshot ||
        (ia.snapshot && snapshots_in_window(ia, row_a, n) != snapshots_in_window(ib, row_b, n)))
      res.mismatched.push_back(ia.name);
    else
      res.common.push_back(ia.name);
  }
  for (const auto& ib : b.datasets())
    if (!a.has(ib.name)) {
      if (ib.snapshot && snapshots_in_window(ib, row_b, n).empty())
        res.only_b_outside.push_back(ib.name);
      else
        res.only_b.push_back(ib.name);
    }
  if (res.common.empty())
    throw TraceError(a.path().string() + " and " + b.path().string() + ": no common series (nothing to compare)");

  // Final scalar metrics of either run.
  std::map<std::string, ScalarFinal> finals;
  for (int side = 0; side < 2; ++side) {
    const Reader& r = side == 0 ? a : b;
    for (const auto& in : r.datasets())
      if (!in.snapshot && in.row_shape.empty()) {
        auto& f = finals[in.name];
        f.name = in.name;
        (side == 0 ? f.a : f.b) = last_value(r, in);
      }
  }
  for (auto& [k, v] : finals) res.finals.push_back(v);

  // Config differences.
  auto ca = flatten_toml(a.config_toml()), cb = flatten_toml(b.config_toml());
  for (const auto& [k, v] : ca) {
    auto it = cb.find(k);
    if (it == cb.end() || it->second != v) res.config_diffs.push_back({k, v, it == cb.end() ? "" : it->second});
  }
  for (const auto& [k, v] : cb)
    if (!ca.count(k)) res.config_diffs.push_back({k, "", v});
  std::sort(res.config_diffs.begin(), res.config_diffs.end(), [](auto& x, auto& y) { return x.key < y.key; });

  // First differing (step, dataset): minimum step, ties broken by dataset name (sorted order).
  // `step` is the compared index here (row_a + step in A, row_b + step in B).
  std::optional<FirstDifference> best;
  auto consider = [&](int64_t step, const std::string& name, uint64_t elem) {
    if (!best || step < best->step) best = FirstDifference{step, name, elem};
  };
  constexpr uint64_t kBlockBytes = 16u << 20;
  for (const auto& name : res.common) {
    const auto& in = a.info(name);
    const uint64_t row_bytes = in.row_bytes();  // >= 1: the reader refuses zero dimensions
    const std::size_t es = dtype_size(in.dtype);
    auto first_diff = [&](const std::vector<unsigned char>& x, const std::vector<unsigned char>& y, uint64_t row) {
      const unsigned char* px = x.data() + row * row_bytes;
      const unsigned char* py = y.data() + row * row_bytes;
      for (uint64_t e = 0; e < in.row_elems(); ++e)
        if (std::memcmp(px + e * es, py + e * es, es) != 0) return e;
      return uint64_t(0);
    };
    if (!in.snapshot) {
      const uint64_t block = std::max<uint64_t>(1, kBlockBytes / std::max<uint64_t>(1, row_bytes));
      const uint64_t limit = best ? std::min<uint64_t>(n, uint64_t(best->step) + 1) : n;
      for (uint64_t r0 = 0; r0 < limit; r0 += block) {
        const uint64_t cnt = std::min(block, limit - r0);
        auto x = a.read_raw(name, in.dtype, row_a + r0, cnt), y = b.read_raw(name, in.dtype, row_b + r0, cnt);
        if (x == y) continue;
        for (uint64_t r = 0; r < cnt; ++r)
          if (std::memcmp(x.data() + r * row_bytes, y.data() + r * row_bytes, row_bytes) != 0) {
            consider(int64_t(r0 + r), name, first_diff(x, y, r));
            break;
          }
        break;
      }
    } else {
      for (int64_t s : snapshots_in_window(in, row_a, n)) {
        if (best && s >= best->step) break;
        auto x = a.read_snapshot_raw(name, in.dtype, int64_t(row_a) + s),
             y = b.read_snapshot_raw(name, in.dtype, int64_t(row_b) + s);
        if (x != y) {
          consider(s, name, first_diff(x, y, 0));
          break;
        }
      }
    }
  }
  if (best) {
    const uint64_t i = uint64_t(best->step);
    best->row_a = row_a + i;
    best->row_b = row_b + i;
    best->step = res.step_of(i);
  }
  res.first_difference = best;
  fill_difference_details(a, b, res);
  return res;
}

}  // namespace mxsim::trace
