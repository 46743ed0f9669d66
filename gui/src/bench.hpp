// `mxsim-inspector --bench TRACE.h5`: how long opening takes, how long a step
// change takes in each view (until its plots are redrawn), and the resident
// memory, on a real trace. Prints a table; the numbers in docs/inspector.md
// come from it.
#pragma once
#include <QString>

namespace mxsim::inspector {

struct BenchOptions {
  QString trace;
  int repeat = 20;  ///< step changes per view and step set
  int width = 1280, height = 800;
};

int bench(const BenchOptions& o);

}  // namespace mxsim::inspector
