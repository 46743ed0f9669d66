#!/usr/bin/env bash
# Quick start 1/2: install what is missing, build, run the main job with its
# embedded default configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
if build/cli/mxsim train --help >/dev/null 2>&1; then
  exec build/cli/mxsim train "$@"
fi
exec build/cli/mxsim info
