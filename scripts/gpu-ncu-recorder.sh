#!/usr/bin/env bash
# On the GPU machine: Nsight Compute over the recorder's exact-order reductions
# (tree_warps_kernel: l2_norm D=1, osc D=6, quant_stats D=12) in two recorded steps of
# examples/torch/moe_fashion_mnist.py --config large, to tell what bounds them (memory
# throughput, warp stalls, occupancy). Run after scripts/gpu-device-run.sh has unpacked the
# bundle to /tmp/mxsim-dev. Writes $OUT/ncu-recorder.txt (the first 40 such launches, which
# span more than one step, so every D appears).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out}"
mkdir -p "$OUT"
dev=/tmp/mxsim-dev
export MXSIM_C_LIBRARY="$dev/python/mxsim/libmxsim_c.so" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
export LD_LIBRARY_PATH="$dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
timeout "${NCU_TIMEOUT:-200}" ncu --clock-control none --kernel-name-base demangled -k regex:tree_warps_kernel -c 40 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
  --section LaunchStats \
  python3 examples/torch/moe_fashion_mnist.py --config large --steps 2 --data "$PWD/.gpu-build/data" \
  --trace /tmp/ncu-recorder.h5 >"$OUT/ncu-recorder.txt" 2>&1
echo "gpu-ncu-recorder: exit $?"
