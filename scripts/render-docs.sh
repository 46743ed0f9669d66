#!/usr/bin/env bash
# Renders every view of mxsim-inspector and the report's SQNR overview on real
# default-run traces into docs/images/ (PNG, 1280x800) under Xvfb with Qt's xcb platform.
#
#   scripts/render-docs.sh            # writes the traces below if missing, then renders
#   BUILD=build-cpu TRACES=/tmp/docs scripts/render-docs.sh   # another build tree's binaries, traces elsewhere
#
# Traces (kept in $TRACES, default build/docs/, reused when present):
#   default.h5   the default run (examples/default.toml, 702 steps) with fc1 snapshots at
#                every global step from 280 to 320 (trace rows 279-319; a de-oscillation
#                window ends at step 300); its watched elements (trace.watch_elements, the
#                default) are recorded at every step
#   short_a.h5   the default config for 30 steps (fc1 snapshot at step 2, trace row 1);
#                short_b.h5 the same without the wgrad Hadamard transform (the pair the
#                Compare view shows)
#   torch.h5     examples/torch/moe_fashion_mnist.py (mxsim.torch modules, WeightDeOsc and the
#                Recorder) for 200 steps on the CPU, snapshots at step 151, 4 watched elements: a recorder's trace
#                with the model's own module names (needs Debian's python3-torch, $BUILD/python)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=$BUILD/cli/mxsim
INSPECTOR=$BUILD/gui/mxsim-inspector
[ -x "$BIN" ] && [ -x "$INSPECTOR" ] || cmake --build "$BUILD" --target mxsim mxsim-inspector
TRACES=${TRACES:-build/docs}
mkdir -p "$TRACES" docs/images
THREADS=${THREADS:-2}
DEFAULT=${DEFAULT_TRACE:-$TRACES/default.h5}
STEPS="[$(seq -s ', ' 280 320)]"
[ -f "$DEFAULT" ] || "$BIN" train --threads "$THREADS" --trace "$DEFAULT" --set "trace.snapshot_steps=$STEPS"
SHORT=(--set run.max_steps=30 --set "trace.snapshot_steps=[2]")
[ -f "$TRACES/short_a.h5" ] || "$BIN" train --threads "$THREADS" --trace "$TRACES/short_a.h5" "${SHORT[@]}"
[ -f "$TRACES/short_b.h5" ] || "$BIN" train --threads "$THREADS" --trace "$TRACES/short_b.h5" "${SHORT[@]}" \
  --set recipe.mxfp4_hadamard_wgrad=false
if [ ! -f "$TRACES/torch.h5" ]; then
  PYTHONPATH="$BUILD/python" python3 examples/torch/moe_fashion_mnist.py --steps 200 --device cpu \
    --deosc-start 50 --deosc-period 50 --snapshot-steps 151 --watch-elements 0,1,2,3 \
    --trace "$TRACES/torch.h5" >/dev/null
fi
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
render() { xvfb-run -a -s "-screen 0 1280x800x24" env QT_QPA_PLATFORM=xcb "$INSPECTOR" --render "$@" -o "$OUT"; }
render "$DEFAULT" --views curves,quant,data --row 300 --layer fc1 --tensor w --dataset /train/tokens_per_expert
# the report's overview across layers (what `mxsim report` writes as overview-sqnr.png)
render "$DEFAULT" --views overview
# the oscillation view on a watched element (trace.watch_elements: its timeline has every step)
render "$DEFAULT" --views osc --row 300 --layer fc1 --expert 0 --element 0,1
render "$DEFAULT" --views accum --row 300 --layer fc1 --expert 2
render "$TRACES/short_a.h5" "$TRACES/short_b.h5" --views compare --row 1 --layer fc1 --expert 6 \
  --dataset /snap/fc1/master
render "$TRACES/torch.h5" --views osc,accum,quant --row 150 --layer experts_fc1 --tensor w --expert 0 --element 0,1
# file names of --render: view, layer, tensor
cp "$OUT/curves.png" docs/images/inspector-curves.png
cp "$OUT/quant-fc1-w.png" docs/images/inspector-quant.png
cp "$OUT/osc-fc1.png" docs/images/inspector-osc.png
cp "$OUT/accum-fc1.png" docs/images/inspector-accum.png
cp "$OUT/compare.png" docs/images/inspector-compare.png
cp "$OUT/data.png" docs/images/inspector-data.png
cp "$OUT/overview-sqnr.png" docs/images/report-overview-sqnr.png
cp "$OUT/osc-experts_fc1.png" docs/images/torch-recorder-osc.png
cp "$OUT/accum-experts_fc1.png" docs/images/torch-recorder-accum.png
cp "$OUT/quant-experts_fc1-w.png" docs/images/torch-recorder-quant.png
echo "docs/images/inspector-{curves,quant,osc,accum,compare,data}.png, report-overview-sqnr.png and" \
  "torch-recorder-{osc,accum,quant}.png written"
