#!/usr/bin/env bash
# Runs on the device machine (NVIDIA H200) over binaries built here with
# `cmake --preset gpu-sm90a` and packed by scripts/gpu-pack.sh into
# .gpu-build/dev (carried by the run tool). Writes logs and the timing table
# to $OUT (default ./out). See docs/gpu.md.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out}"
mkdir -p "$OUT"
dev=.gpu-build/dev
export LD_LIBRARY_PATH="$PWD/$dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  ldd "$dev/test_gpu_codec"
  cuobjdump --list-elf "$dev/mxsim_gpu_bench" 2>&1 | head -5
} 2>&1 | tee "$OUT/env.txt"
rc=0
timeout 300 "$dev/test_gpu_codec" --gtest_color=no 2>&1 | tee "$OUT/test_gpu_codec.txt"
rc=$((rc | PIPESTATUS[0]))
timeout 300 "$dev/test_gpu_math" --gtest_color=no 2>&1 | tee "$OUT/test_gpu_math.txt"
rc=$((rc | PIPESTATUS[0]))
if command -v compute-sanitizer >/dev/null; then
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 "$dev/test_gpu_codec" --gtest_color=no \
    --gtest_filter='GpuMxQuantize.*:GpuCodec.DecodeEvery*:GpuCodec.PublishedValues:GpuCodec.StochasticUses*' \
    >"$OUT/memcheck.txt" 2>&1
  mc=$?
  echo "compute-sanitizer memcheck exit: $mc"; tail -3 "$OUT/memcheck.txt"
  rc=$((rc | mc))
fi
timeout 200 "$dev/mxsim_gpu_bench" "${BENCH_N:-268435456}" 30 "$OUT/gpu_bench.md" 2>&1 | tee "$OUT/bench.txt"
rc=$((rc | PIPESTATUS[0]))
echo "gpu-device-run: exit $rc"
exit $rc
