#!/usr/bin/env bash
# Runs on the device machine (NVIDIA H200) over binaries built here with
# `cmake --preset gpu-sm90a` and packed by scripts/gpu-pack.sh into
# .gpu-build/dev (carried by the run tool). Writes logs, the per-class GEMM
# tally and the timing table to $OUT (default ./out). See docs/gpu.md.
#   GEMM_SHARDS (default 8): test_gpu_gemm runs as that many gtest shards at
#   once (its emulator reference is single-threaded CPU work).
#   SKIP_BENCH=1 skips mxsim_gpu_bench.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out}"
mkdir -p "$OUT"
dev=.gpu-build/dev
export LD_LIBRARY_PATH="$PWD/$dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  for t in test_gpu_codec test_gpu_quantize test_gpu_gemm test_gpu_math; do echo "== ldd $t"; ldd "$dev/$t"; done
  cuobjdump --list-elf "$dev/test_gpu_gemm" 2>&1 | head -8
} >"$OUT/env.txt" 2>&1
head -3 "$OUT/env.txt"
rc=0
gpu_tests=(test_gpu_codec test_gpu_quantize test_gpu_math)
[ -x "$dev/test_gpu_backend" ] && gpu_tests+=(test_gpu_backend)  # verify_backends(emu, hip), when packed
for t in "${gpu_tests[@]}"; do
  timeout 300 "$dev/$t" --gtest_color=no >"$OUT/$t.txt" 2>&1
  r=$?; rc=$((rc | r))
  echo "$t exit $r: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$t.txt" | tr '\n' ' ')"
  grep -E '^\[gpu\]' "$OUT/$t.txt"
done
# test_gpu_gemm in parallel shards; each writes its own log.
n=${GEMM_SHARDS:-8}
pids=()
for ((i = 0; i < n; ++i)); do
  GTEST_TOTAL_SHARDS=$n GTEST_SHARD_INDEX=$i timeout 400 "$dev/test_gpu_gemm" --gtest_color=no >"$OUT/gemm_shard$i.txt" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; r=$?; rc=$((rc | r)); done
cat "$OUT"/gemm_shard*.txt >"$OUT/test_gpu_gemm.txt"
rm -f "$OUT"/gemm_shard*.txt
echo "test_gpu_gemm: $(grep -c '^\[       OK \]' "$OUT/test_gpu_gemm.txt") ok, $(grep -c '^\[  FAILED  \] .*(' "$OUT/test_gpu_gemm.txt") failed, $(grep -c '^\[  SKIPPED \] .*(' "$OUT/test_gpu_gemm.txt") skipped"
awk '/^\[gpu-tally\]/ { for (i = 2; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
       e[v["class"]] += v["elements"]; m[v["class"]] += v["mismatches"]; r[v["class"]] += v["runs"] }
     END { for (c in e) printf "gemm %-13s %5d runs %11d elements compared %d mismatches\n", c, r[c], e[c], m[c] }' \
  "$OUT/test_gpu_gemm.txt" | sort | tee "$OUT/gemm_tally.txt"
grep -E '^\[  FAILED  \]|Failure' "$OUT/test_gpu_gemm.txt" | head -20
if command -v compute-sanitizer >/dev/null; then
  f='GpuMxQuantize.*:GpuCodec.DecodeEvery*:GpuCodec.PublishedValues'
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$dev/test_gpu_codec" --gtest_color=no \
    --gtest_filter="$f" >"$OUT/memcheck.txt" 2>&1
  m1=$?
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 "$dev/test_gpu_quantize" --gtest_color=no \
    --gtest_filter='GpuQuantize.GroupedColwise*:GpuQuantize.BothOrientations*:GpuQuantize.Errors*' >>"$OUT/memcheck.txt" 2>&1
  m2=$?
  g=$(seq -s: -f 'AllPairs/GpuGemmPairs.EveryFormAndModeMatchesEmulatorReference/%g' 0 5 74)  # trial 0 of each pair
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$dev/test_gpu_gemm" --gtest_color=no \
    --gtest_filter="GpuGemm.*:$g" >>"$OUT/memcheck.txt" 2>&1
  m3=$?
  echo "compute-sanitizer memcheck exit: codec $m1 quantize $m2 gemm $m3"
  grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) ' "$OUT/memcheck.txt"
  rc=$((rc | m1 | m2 | m3))
fi
if [ -z "${SKIP_BENCH:-}" ]; then
  timeout 200 "$dev/mxsim_gpu_bench" "${BENCH_N:-268435456}" 30 "$OUT/gpu_bench.md" >"$OUT/bench.txt" 2>&1
  r=$?; rc=$((rc | r)); echo "bench exit $r"
fi
echo "gpu-device-run: exit $rc"
exit $rc
