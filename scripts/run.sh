#!/usr/bin/env bash
# Quick start 1/2: install what the main job needs, build only `mxsim`, run the main job with its
# embedded default configuration.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh main
scripts/build.sh --main
# The main job: `mxsim train` on the embedded default (examples/default.toml);
# arguments go to it (e.g. --trace run.h5, --set recipe.fc1=bf16). It ends with
# the summary table; a failure exits non-zero with the error on stderr.
exec build/cli/mxsim train "$@"
