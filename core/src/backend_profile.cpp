// ProfilingBackend (backend_profile.hpp): forwards, synchronises, times.
#include "mxsim/backend_profile.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <type_traits>
#include <vector>

namespace mxsim {

ProfilingBackend::ProfilingBackend(std::unique_ptr<Backend> inner, Mode mode) : mode_(mode), inner_(std::move(inner)) {}

template <class F>
decltype(auto) ProfilingBackend::timed(Slot s, F&& f) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto charge = [&] {
    if (mode_ == Mode::Device) inner_->synchronize();
    stats_[s].seconds += std::chrono::duration<double>(clock::now() - t0).count();
    ++stats_[s].calls;
  };
  if constexpr (std::is_void_v<std::invoke_result_t<F>>) {
    f();
    charge();
  } else {
    decltype(auto) r = f();
    charge();
    return r;
  }
}

const char* ProfilingBackend::slot_name(Slot s) {
  static const char* const names[kSlots] = {
#define MXSIM_X(Family, id, name, label, Ret, params, args) label,
      MXSIM_BACKEND_OPS(MXSIM_X) MXSIM_BACKEND_DEFAULTED_OPS(MXSIM_X)
#undef MXSIM_X
  };
  return names[s];
}

double ProfilingBackend::total_seconds() const {
  return std::accumulate(stats_.begin(), stats_.end(), 0.0, [](double a, const Stat& b) { return a + b.seconds; });
}

std::string ProfilingBackend::report() const {
  std::vector<int> order;
  for (int s = 0; s < kSlots; ++s)
    if (stats_[size_t(s)].calls) order.push_back(s);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return stats_[size_t(a)].seconds > stats_[size_t(b)].seconds; });
  const double total = total_seconds();
  std::string out;
  char line[160];
  std::snprintf(line, sizeof line, "%-28s %10s %12s %12s %7s\n", "op", "calls", "total ms", "mean us", "share");
  out += line;
  for (int s : order) {
    const Stat& st = stats_[size_t(s)];
    std::snprintf(line, sizeof line, "%-28s %10llu %12.2f %12.2f %6.1f%%\n", slot_name(Slot(s)),
                  static_cast<unsigned long long>(st.calls), st.seconds * 1e3, st.seconds * 1e6 / double(st.calls),
                  total > 0 ? 100.0 * st.seconds / total : 0.0);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-28s %10s %12.2f\n", "all ops", "", total * 1e3);
  out += line;
  return out;
}

// The wrapped backend's implementation, after this front door's checks (Backend is our friend).
#define MXSIM_X(Family, id, name, label, Ret, params, args)                                       \
  static_assert(sizeof(label) <= 29, "the report's op column is 28 characters wide: " label);      \
  auto ProfilingBackend::name##_impl params -> Ret {                                              \
    return timed(k_##id, [&]() -> Ret { return inner_->name##_impl args; });                      \
  }
MXSIM_BACKEND_OPS(MXSIM_X)
MXSIM_BACKEND_DEFAULTED_OPS(MXSIM_X)
#undef MXSIM_X

}  // namespace mxsim
