// The progress display of `mxsim train` (docs/cli.md "mxsim train", Progress).
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "mxsim/sim/trainer.hpp"

namespace mxsim::cli {

/// Progress of a training run, written to `log` after every optimizer step.
///
/// On a terminal: one line, rewritten in place (`\r`, then erased to its end with `ESC [K`), that
/// fits the terminal's width (TIOCGWINSZ on `log`, read at every step so a resize is followed;
/// 80 columns when the width is unknown) and never reaches its last column, so it cannot wrap.
/// It holds the step, loss, steps/s, elapsed time and ETA, and as room allows the accuracy, the
/// learning rate and a bar; a step with an evaluation is kept on its own line with the test
/// accuracy.
///
/// Not a terminal (a file, a pipe): plain lines, written whole: the first step, every 50th, the
/// last, every evaluation, and any step 10 s or more after the previous line.
class TrainProgress {
 public:
  /// `start`: when the run began (elapsed time and steps/s count from it).
  TrainProgress(std::FILE* log, bool tty, std::chrono::steady_clock::time_point start);
  void step(const sim::StepInfo& s);
  /// Ends a terminal's progress line with a newline (nothing for plain lines).
  void finish();

 private:
  std::FILE* log_;
  bool tty_;
  bool open_line_ = false;  // a terminal line without its newline yet
  std::chrono::steady_clock::time_point start_, last_line_;
  int64_t first_step_ = -1;  // steps done before this process's first (a resumed run)
};

/// The terminal width of `f` (TIOCGWINSZ), or 80 when it has none.
int terminal_columns(std::FILE* f);

/// "m:ss", or "h:mm:ss" from an hour on; "?" for a negative or non-finite duration.
std::string format_duration(double seconds);

}  // namespace mxsim::cli
