#!/usr/bin/env bash
# Configure and build mxsim into build/ (Release, Ninja).
#   scripts/build.sh [--main] [configure arguments ...]
# --main builds only what the main job needs: the `mxsim` target (with the GPU
# backend it links where nvcc or hipcc is found), no tests, benchmarks,
# inspector, Python module or AMD compile check (run.sh). Without it,
# everything (test.sh). Both set the four MXSIM_BUILD_* switches explicitly,
# so the one build/ directory serves both in turn. Extra arguments go to the
# configure step after them, e.g. scripts/build.sh -DMXSIM_GPU=off
# Compiles go through ccache when it is installed (CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
parts=ON
target=()
if [ "${1:-}" = --main ]; then
  shift
  parts=OFF
  target=(--target mxsim)
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DMXSIM_BUILD_TESTS=$parts -DMXSIM_BUILD_BENCH=$parts -DMXSIM_BUILD_GUI=$parts -DMXSIM_BUILD_PYTHON=$parts \
  "$@" >/dev/null
cmake --build build -j"$(nproc)" "${target[@]}"
