#!/usr/bin/env bash
# Regenerates tests/golden/sim/small.h5.gz, the trace SimGolden.SmallRunMatchesCheckedInTrace
# compares a fresh run against. Run it ONLY when a change of numerics is intended
# (e.g. the project's own exp/log/erf replacing libm), and say so in the commit: the
# golden trace is what proves that a refactoring kept every bit.
#
# Usage (from the repository root, after building the mxsim target):
#   scripts/regen-golden-trace.sh [path/to/mxsim]        (default build/cli/mxsim)
set -euo pipefail
BIN=${1:-build/cli/mxsim}
DIR=tests/golden/sim
[ -x "$BIN" ] || { echo "regen-golden-trace: $BIN is not an executable (build the mxsim target first)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$BIN" train --threads 1 --config "$DIR/small.toml" --trace "$TMP/small.h5" > "$TMP/log" 2>&1 || { cat "$TMP/log" >&2; exit 1; }
gzip -9n -c "$TMP/small.h5" > "$DIR/small.h5.gz.new"   # -n: no name or time stamp in the header
mv "$DIR/small.h5.gz.new" "$DIR/small.h5.gz"
echo "wrote $DIR/small.h5.gz ($(stat -c %s "$DIR/small.h5.gz") bytes); the test now expects this run's bits"
