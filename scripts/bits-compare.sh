#!/usr/bin/env bash
# Proof that a change kept every bit on the CPU: the runs of scripts/run-table.sh (the
# default config, each recipe for RECIPE_STEPS steps, a checkpoint pair) with two mxsim
# binaries on the emulator, each pair of traces compared by `mxsim compare`.
#
#   scripts/bits-compare.sh BEFORE_MXSIM AFTER_MXSIM [WORKDIR]
#
# BEFORE_MXSIM: a build of the commit before the change (e.g. from a clean clone of it).
# Traces of BEFORE are kept in WORKDIR (default /tmp/mxsim-bits), in a folder named by the
# binary's hash and the run lengths, and reused when present; AFTER's are made afresh. Environment: RECIPE_STEPS (default 60),
# DEFAULT_STEPS (default: all 702 steps), THREADS (default 2). Prints one table row per run;
# exit status 0 when every pair is identical, 1 otherwise.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BEFORE_MXSIM AFTER_MXSIM [WORKDIR]" >&2; exit 2; }
before=$(realpath "$1") after=$(realpath "$2") work=$(realpath -m "${3:-/tmp/mxsim-bits}")
cd "$(dirname "$0")/.."
RECIPE_STEPS="${RECIPE_STEPS:-60}"
threads="${THREADS:-2}"
source scripts/run-table.sh
# BEFORE's traces are kept per binary and run lengths, so a cached set is reused only for them.
key="$(sha256sum "$before" | cut -c1-12)-r$RECIPE_STEPS-d${DEFAULT_STEPS:-all}"
rm -rf "$work/after"
mkdir -p "$work/before-$key" "$work/after"
ln -sfn "before-$key" "$work/before"

# train WHO NAME ARGS...: one emulator run of binary WHO (before / after) into WHO/NAME.h5.
train() {
  local who=$1 name=$2; shift 2
  local mx=$before; [ "$who" = after ] && mx=$after
  [ "$who" = before ] && [ -s "$work/before/$name.h5" ] && return 0
  rm -f "$work/$who/$name.h5"
  eval "\"$mx\" train --backend emu --threads $threads $* --trace \"$work/$who/$name.h5\"" \
    >"$work/$who/$name.log" 2>&1 || { echo "$who $name: train failed, see $work/$who/$name.log" >&2; return 1; }
}
half=$((RECIPE_STEPS / 2))
rc=0
for who in before after; do
  for n in "${run_names[@]}"; do train "$who" "$n" "${run_args[$n]}" || rc=1; done
  train "$who" ck_half "$run_ckpt_args --stop-after $half --checkpoint $work/$who/ck.h5" || rc=1
  train "$who" ck_resumed "$run_ckpt_args --resume $work/$who/ck.h5" || rc=1
done
echo "| run | mxsim compare (before vs after) | exit |"
echo "|---|---|---|"
for n in "${run_names[@]}" ck_half ck_resumed; do
  "$after" compare "$work/before/$n.h5" "$work/after/$n.h5" >"$work/$n.compare.txt" 2>&1
  r=$?
  rc=$((rc | r))
  echo "| $n | $(grep -m1 -E '^(compared|result)' "$work/$n.compare.txt" | cut -c1-120) | $r |"
done
exit $rc
