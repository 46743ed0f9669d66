#!/usr/bin/env bash
# A/B timing of the training step on the GPU machine: the same configs through two mxsim
# binaries (before and after a change), alternated A B A B so that clocks and temperature fall
# on both alike. Per-step time is the difference of a short and a long run of each config
# divided by the extra steps, so start-up (data, allocation, JIT) cancels.
#
#   scripts/gpu-step-ab.sh A_MXSIM B_MXSIM [REPS]
#   CONFIGS="default large" scripts/gpu-step-ab.sh ...   only these configs (names below)
#
# Configs: the default (mxfp4 experts), the default with fp8_current and with fp8_delayed
# experts, examples/large.toml (mxfp4) and large with fp8_current experts. Data: run.data_dir
# .gpu-build/data (scripts/gpu-pack.sh). The evaluations at epoch ends fall inside the difference
# (small: run.test_limit 500 / 64 images), alike for both binaries. Writes $OUT/step-ab.csv (run,
# binary, rep, steps, exit, wall_s), each run's log under $OUT/step-ab-logs/, and prints a
# Markdown table of the median ms/step of each binary and B / A.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: $0 A_MXSIM B_MXSIM [REPS]" >&2; exit 2; }
a=$1 b=$2 reps=${3:-3}
cd "$(dirname "$0")/.."
OUT="${OUT:-out}"
mkdir -p "$OUT"
csv="$OUT/step-ab.csv"
data="--set 'run.data_dir=\"$PWD/.gpu-build/data\"'"
echo "run,bin,rep,steps,exit,wall_s" >"$csv"
mkdir -p "$OUT/step-ab-logs"
fp8c="--set recipe.fc1=fp8_current --set recipe.fc2=fp8_current"
fp8d="--set recipe.fc1=fp8_delayed --set recipe.fc2=fp8_delayed"
# epochs: the device data subset (20000 images) holds one global batch of 16384, so large.toml's 8
# epochs would end every run at step 8, whatever max_steps says
large="--config examples/large.toml --set run.test_limit=64 --set run.epochs=1000"
# name short long args
configs=(
  "default 100 500 --set run.test_limit=500"
  "default_fp8_current 100 500 --set run.test_limit=500 $fp8c"
  "default_fp8_delayed 100 500 --set run.test_limit=500 $fp8d"
  "large 3 ${LARGE_LONG:-40} $large"
  # slow: FP8 per-tensor GEMMs on the tiled CUDA-core kernels (about 6 s a step on an H100)
  "large_fp8_current 3 8 $large $fp8c"
)
want=" ${CONFIGS:-default default_fp8_current default_fp8_delayed large large_fp8_current} "
one() {  # one NAME BIN_LABEL BIN REP STEPS ARGS...
  local name=$1 label=$2 mx=$3 rep=$4 n=$5; shift 5
  local t0=$(date +%s.%N)
  eval "timeout 300 \"$mx\" train --backend hip $data --set run.max_steps=$n $*" >"$OUT/step-ab-logs/$name-$label-$rep-$n.log" 2>&1
  local r=$?
  echo "$name,$label,$rep,$n,$r,$(awk "BEGIN {printf \"%.3f\", $(date +%s.%N) - $t0}")" >>"$csv"
}
for ((i = 1; i <= reps; ++i)); do
  for c in "${configs[@]}"; do
    read -r name short long args <<<"$c"
    [[ "$want" == *" $name "* ]] || continue
    for pair in "A $a" "B $b"; do
      read -r label mx <<<"$pair"
      one "$name" "$label" "$mx" "$i" "$short" "$args"
      one "$name" "$label" "$mx" "$i" "$long" "$args"
    done
  done
done
python3 - "$csv" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
sys.path.insert(0, "scripts")
from step_times import per_step
print("| config | A ms/step (samples; median) | B ms/step (samples; median) | B / A |")
print("|---|---|---|---|")
for name in dict.fromkeys(r["run"] for r in rows):
    a, b = per_step(rows, run=name, bin="A"), per_step(rows, run=name, bin="B")
    if not a or not b:
        bad = [r for r in rows if r["run"] == name and r["exit"] != "0"]
        print(f"| {name} | {'failed' if not a else ''} | {'failed' if not b else ''} | exits {[r['exit'] for r in bad]} |")
        continue
    ma, mb = statistics.median(a), statistics.median(b)
    f = lambda v: ", ".join(f"{x:.2f}" for x in v)
    ratio = f"{mb / ma:.3f}" if ma > 0 else "n/a"
    print(f"| {name} | {f(a)}; {ma:.2f} | {f(b)}; {mb:.2f} | {ratio} |")
PY
