// The progress display of `mxsim train` (train_progress.hpp).
#include "train_progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace mxsim::cli {

int terminal_columns(std::FILE* f) {
  winsize ws{};
  if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto t = static_cast<long long>(std::min(seconds, 1e9));
  char b[48];
  if (t >= 3600)
    std::snprintf(b, sizeof b, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(b, sizeof b, "%lld:%02lld", t / 60, t % 60);
  return b;
}

namespace {

std::string printf_string(const char* fmt, auto... v) {
  char b[128];
  std::snprintf(b, sizeof b, fmt, v...);
  return b;
}

/// One terminal line of at most `max` characters. The fields the line cannot do without (step,
/// loss, the test accuracy of an evaluation, steps/s, elapsed time, ETA) stay; when the width is
/// short the learning rate goes first, then the accuracy, then the fields are parted by one space
/// instead of two, then the step and the rate take their short forms ("3/100", "12.3/s"); a line
/// still too long is cut at its end. A bar comes first
/// when at least 10 cells of it fit.
std::string terminal_line(const sim::StepInfo& s, double rate, double elapsed, double eta, size_t max) {
  struct Field {
    std::string text, short_text;  // short_text "": no short form
    int drop;                      // 0: kept; otherwise dropped in increasing order
  };
  const std::string steps = printf_string("%lld/%lld", (long long)s.step, (long long)s.total);
  std::vector<Field> f{{"step " + steps, steps, 0}, {printf_string("loss %.4f", s.loss), "", 0}};
  if (s.test_accuracy >= 0) f.push_back({printf_string("test %.4f", s.test_accuracy), "", 0});
  f.push_back({printf_string("acc %.3f", s.accuracy), "", 2});
  f.push_back({printf_string("lr %.2e", s.lr), "", 1});
  f.push_back({printf_string("%.1f steps/s", rate), printf_string("%.1f/s", rate), 0});
  f.push_back({"elapsed " + format_duration(elapsed), "", 0});
  f.push_back({"eta " + format_duration(eta), "", 0});
  const char* sep = "  ";
  const auto join = [&] {
    std::string line;
    for (const Field& x : f) {
      if (!line.empty()) line += sep;
      line += x.text;
    }
    return line;
  };
  std::string line = join();
  for (int d = 1; d <= 2 && line.size() > max; ++d) {
    std::erase_if(f, [d](const Field& x) { return x.drop == d; });
    line = join();
  }
  if (line.size() > max) {
    sep = " ";
    line = join();
  }
  for (Field& x : f) {
    if (line.size() <= max) break;
    if (!x.short_text.empty()) x.text = x.short_text;
    line = join();
  }
  constexpr size_t kMinBar = 10, kMaxBar = 30;
  if (line.size() + kMinBar + 3 <= max) {
    const size_t w = std::min(kMaxBar, max - line.size() - 3);
    const size_t fill = std::min(w, size_t(double(w) * double(s.step) / double(std::max<int64_t>(1, s.total))));
    std::string bar(w + 3, ' ');  // "[###   ] "
    bar.front() = '[';
    bar[w + 1] = ']';
    std::fill_n(bar.begin() + 1, fill, '#');
    line.insert(0, bar);
  }
  if (line.size() > max) line.resize(max);
  return line;
}

}  // namespace

TrainProgress::TrainProgress(std::FILE* log, bool tty, std::chrono::steady_clock::time_point start)
    : log_(log), tty_(tty), start_(start), last_line_(start) {}

void TrainProgress::step(const sim::StepInfo& s) {
  const auto now = std::chrono::steady_clock::now();
  if (first_step_ < 0) first_step_ = s.step - 1;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = double(s.step - first_step_) / std::max(elapsed, 1e-9);  // mean over this run
  const double eta = double(s.total - s.step) / rate;
  if (tty_) {
    // The last column is left free: a line filling it would wrap on some terminals.
    const size_t max = size_t(std::max(1, terminal_columns(log_) - 1));
    std::fprintf(log_, "\r%s\x1b[K", terminal_line(s, rate, elapsed, eta, max).c_str());
    open_line_ = s.test_accuracy < 0;  // an evaluation stays on its own line
    if (!open_line_) std::fputc('\n', log_);
    std::fflush(log_);
    return;
  }
  constexpr double kQuietSeconds = 10;
  const bool due = s.step == first_step_ + 1 || s.step % 50 == 0 || s.step == s.total || s.test_accuracy >= 0 ||
                   std::chrono::duration<double>(now - last_line_).count() >= kQuietSeconds;
  if (!due) return;
  last_line_ = now;
  std::fprintf(log_, "step %lld/%lld loss %.4f acc %.3f lr %.3e %.2f steps/s elapsed %s eta %s", (long long)s.step,
               (long long)s.total, s.loss, s.accuracy, s.lr, rate, format_duration(elapsed).c_str(),
               format_duration(eta).c_str());
  if (s.test_accuracy >= 0) std::fprintf(log_, " test_accuracy %.4f", s.test_accuracy);
  std::fputc('\n', log_);  // stdout is line-buffered when it is not a terminal (cmd_train), stderr unbuffered
}

void TrainProgress::finish() {
  if (tty_ && open_line_) std::fputc('\n', log_);
  open_line_ = false;
  std::fflush(log_);
}

}  // namespace mxsim::cli
