#!/usr/bin/env bash
# Configure and build mxsim into build/ (Release, Ninja). Extra arguments go to
# the CMake configure step, e.g. scripts/build.sh -DMXSIM_GPU=off
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$(nproc)"
