#!/usr/bin/env bash
# Runs on the GPU machine (no Qt, no fonts, no display) over the bundle
# scripts/gpu-gui-pack.sh made here (carry .gpu-build-gui/gui.tar.xz): the
# inspector and its Qt Test suites with the bundle's Qt runtime and the
# offscreen platform, run mode and live follow on the GPU backend, and
# `mxsim-inspector --render` of a trace written on the GPU.
#   ldd      every binary and the offscreen plugin resolve every library, from
#            the bundle or (glibc, libstdc++, libgcc_s) the machine
#   help     --help / --version without a display
#   tests    every test_gui_* suite; test_gui_run's stepPauseResumeStopOnGpu and
#            test_gui_follow's mxsimTrainOnGpuInAnotherProcess must PASS (not
#            SKIP) unless REQUIRE_GPU=0
#   render   the default model for 16 steps (2048 images, fc1 and fc2 snapshots)
#            with `mxsim train` on --backend hip and on --backend emu: mxsim
#            compare says identical; --render of each (the CSVs of every view
#            identical) and of the Compare view of the two (no difference)
#   report   `mxsim report` of the GPU trace: exit 0, index.html's every image
#            written (curves, overviews, every layer's views: at least 17)
# REQUIRE_GPU=0 GPU_BACKEND=emu check this script on a machine without a GPU.
# Writes to $OUT (default ./out): gui-summary.md, gui-env.txt (nvidia-smi, OS,
# ldd), gui-tests/<suite>.txt, render-hip/ (PNG + CSV of every view),
# render-compare/, report-hip/, gui-runs.txt. Exit status: non-zero when any check failed.
set -uo pipefail
# The bundle: $GUI_BUNDLE, else .gpu-build-gui/gui.tar.xz of the current folder (the run tool's
# repository root) or of this script's repository. The bundle holds a copy of this script, so
# `tar -xJOf .gpu-build-gui/gui.tar.xz gpu-gui-device-run.sh | bash` works without the repository.
bundle="${GUI_BUNDLE:-.gpu-build-gui/gui.tar.xz}"
[ -f "$bundle" ] || bundle="$(dirname "$0")/../.gpu-build-gui/gui.tar.xz"
mkdir -p "${OUT:-out}/gui-tests"
OUT=$(cd "${OUT:-out}" && pwd)
REQUIRE_GPU="${REQUIRE_GPU:-1}"
GPU_BACKEND="${GPU_BACKEND:-hip}"  # emu: a check of this script on a machine without a GPU
B="${GUI_DIR:-/tmp/mxsim-gui}"
rm -rf "$B" && mkdir -p "$B"
tar -C "$B" -xJf "$bundle" || { echo "cannot unpack $bundle" >&2; exit 1; }
# shellcheck source=/dev/null
. "$B/env.sh"
summary="$OUT/gui-summary.md"
work=/tmp/mxsim-gui-runs && rm -rf "$work" && mkdir -p "$work"/{hip,emu}
rc=0
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo "# mxsim-inspector on ${gpu_name:-no GPU}, $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-?}"), $(date -u +%F)" >"$summary"

# ldd: nothing missing; outside the bundle only the machine's own libraries.
{
  nvidia-smi 2>&1 | head -15
  cat /etc/os-release
  ldd --version | head -1
  mxsim --version; mxsim info 2>&1 | sed -n '/^backends/p'
  echo "---- ldd mxsim-inspector"; ldd "$B/bin/mxsim-inspector"
} >"$OUT/gui-env.txt" 2>&1
missing=0 outside=""
for b in "$B"/bin/* "$B"/plugins/platforms/*.so; do
  out=$(ldd "$b" 2>&1)
  if grep -q 'not found' <<<"$out"; then echo "$b: $(grep 'not found' <<<"$out" | tr -s ' \t\n' ' ')" >>"$OUT/gui-env.txt"; missing=1; fi
  outside+=$(awk -v b="$B/lib/" '/=> \// && index($3, b) != 1 {print $3}' <<<"$out")$'\n'
done
outside=$(sort -u <<<"$outside" | grep . | tr '\n' ' ')
rc=$((rc | missing))
echo -e "\n## Libraries\n\n- ldd over bin/* and the offscreen plugin: $([ $missing = 0 ] && echo 'every library found' || echo 'MISSING (gui-env.txt)')\n- from the machine: $outside" >>"$summary"

# help: --help and --version without a display and without QT_QPA_PLATFORM.
h=0
env -u DISPLAY -u WAYLAND_DISPLAY -u QT_QPA_PLATFORM mxsim-inspector --help 2>/dev/null | grep -Eq 'Usage: .*mxsim-inspector' || h=1
env -u DISPLAY -u WAYLAND_DISPLAY -u QT_QPA_PLATFORM mxsim-inspector --version 2>/dev/null | grep -Eq '^mxsim-inspector [0-9]' || h=1
rc=$((rc | h))
echo "- --help / --version without a display: $([ $h = 0 ] && echo ok || echo FAILED)" >>"$summary"

# tests: every suite; the GPU cases must pass here.
echo -e "\n## Qt Test suites (offscreen platform, the bundle's Qt)\n\n| suite | exit | totals |\n|---|---|---|" >>"$summary"
for t in "$B"/bin/test_gui_*; do
  n=$(basename "$t")
  t0=$(date +%s)
  (cd "$work" && timeout 600 "$t") >"$OUT/gui-tests/$n.txt" 2>&1
  r=$?; rc=$((rc | r))
  echo "| $n | $r | $(grep -m1 '^Totals' "$OUT/gui-tests/$n.txt" | cut -c1-90), $(($(date +%s) - t0)) s |" >>"$summary"
done
echo -e "\n$(grep -h -m1 '^Config:' "$OUT"/gui-tests/*.txt | head -1)\n\nGPU cases:\n" >>"$summary"
for c in test_gui_run:GuiRun::stepPauseResumeStopOnGpu test_gui_follow:GuiFollow::mxsimTrainOnGpuInAnotherProcess; do
  line=$(grep -E "^(PASS|FAIL!|SKIP) +: ${c#*:}\(\)" "$OUT/gui-tests/${c%%:*}.txt" | head -1)
  echo "- ${line:-${c#*:}: not run}" >>"$summary"
  grep -A1 -E "^FAIL! +: ${c#*:}\(\)" "$OUT/gui-tests/${c%%:*}.txt" | sed -n '2s/^/  /p' >>"$summary"
  grep -h -E "^QINFO +: ${c#*:}\(\)" "$OUT/gui-tests/${c%%:*}.txt" | sed 's/^/  /' >>"$summary"
  [[ "$line" == PASS* ]] || [ "$REQUIRE_GPU" = 0 ] || rc=1
done

# render: a trace written on the GPU, and the same run on the emulator.
args=(--set run.max_steps=16 --set run.train_limit=2048 --set run.test_limit=500 --set "run.data_dir=\"$MXSIM_DATA_DIR\""
      --set 'trace.snapshot_steps=[1,8,16]' --set 'trace.snapshot_layers=["fc1","fc2"]')
echo -e "\n## mxsim-inspector --render of a trace written by mxsim train --backend hip\n" >>"$summary"
(cd "$work/hip" && timeout 300 mxsim train --backend "$GPU_BACKEND" "${args[@]}" --trace run.h5) >"$work/hip.log" 2>&1
r1=$?
(cd "$work/emu" && timeout 300 mxsim train --backend emu --threads 0 "${args[@]}" --trace run.h5) >"$work/emu.log" 2>&1
r2=$?
mxsim compare "$work/emu/run.h5" "$work/hip/run.h5" >"$work/compare.txt" 2>&1
r3=$?
echo "- mxsim train --backend $GPU_BACKEND: exit $r1 ($(grep -m1 '^summary' "$work/hip.log" | cut -c1-100)); --backend emu: exit $r2; mxsim compare: exit $r3, $(grep -m1 '^result' "$work/compare.txt")" >>"$summary"
rc=$((rc | r1 | r2 | r3))
(cd "$work/hip" && timeout 300 mxsim-inspector --render run.h5 -o "$OUT/render-hip") >"$work/render-hip.txt" 2>&1
r4=$?
(cd "$work/emu" && timeout 300 mxsim-inspector --render run.h5 -o "$work/render-emu") >"$work/render-emu.txt" 2>&1
r5=$?
pngs=$(find "$OUT/render-hip" -name '*.png' -size +10k 2>/dev/null | wc -l)
csv_diff=$(for f in "$OUT"/render-hip/*.csv; do cmp -s "$f" "$work/render-emu/$(basename "$f")" || basename "$f"; done | tr '\n' ' ')
(cd "$work" && timeout 300 mxsim-inspector --render hip/run.h5 emu/run.h5 --views compare -o "$OUT/render-compare") >"$work/render-compare.txt" 2>&1
r6=$?
first=$(grep -m1 '^first_difference' "$OUT/render-compare/compare.csv" 2>/dev/null)
r7=0; [[ "$first" == "first_difference,,-1,"* ]] || r7=1
r8=0; [ "$pngs" -ge 6 ] && [ -z "$csv_diff" ] || r8=1
rc=$((rc | r4 | r5 | r6 | r7 | r8))
echo "- --render of the GPU trace: exit $r4, $pngs PNGs over 10 KiB (every view of every layer, and the overviews); CSVs differing from the emulator trace's render: ${csv_diff:-none}" >>"$summary"
echo "- --render hip/run.h5 emu/run.h5 --views compare: exit $r6, compare.csv: ${first:-missing} ($([ $r7 = 0 ] && echo 'no difference' || echo 'DIFFERENCE'))" >>"$summary"
# report: `mxsim report` of the GPU trace (the inspector found beside mxsim in bin/): exit 0, an
# index.html whose every <img> exists, and at least one image per quantized layer and operand.
(cd "$work/hip" && timeout 300 mxsim report run.h5 -o "$OUT/report-hip") >"$work/report-hip.txt" 2>&1
r9=$?
imgs=$(grep -o '<img src="[^"]*"' "$OUT/report-hip/index.html" 2>/dev/null | sed 's/<img src="//;s/"$//')
nimg=$(grep -c . <<<"$imgs")
absent=$(for i in $imgs; do [ -s "$OUT/report-hip/$i" ] || echo "$i"; done | tr '\n' ' ')
r10=0; [ "$nimg" -ge 17 ] && [ -z "$absent" ] || r10=1
rc=$((rc | r9 | r10))
echo "- mxsim report run.h5 (GPU trace): exit $r9, index.html lists $nimg images, missing: ${absent:-none}" >>"$summary"
for f in "$work"/*.log "$work"/*.txt; do echo "==== $f"; tail -25 "$f"; done >"$OUT/gui-runs.txt"
echo "gpu-gui-device-run: exit $rc" | tee -a "$summary"
cat "$summary"
exit $rc
