#!/usr/bin/env bash
# Quick start 2/2: install what is missing, build, run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
# With MXSIM_SANITIZE=1 it also runs the sanitizer suite and bounded fuzzing (scripts/sanitize.sh).
if [ "${MXSIM_SANITIZE:-0}" = 1 ]; then
  scripts/sanitize.sh
fi
