#!/usr/bin/env bash
# Runs on the GPU machine over the bundle scripts/gpu-pack.sh made here
# (carry .gpu-build/dev.tar.xz and .gpu-build/data). Checks the GPU backend
# against the emulator and times it beside the PyTorch peer, in one call:
#   tests   the GPU GoogleTest suites (test_gpu_gemm only with GEMM_TESTS=1)
#   verify  mxsim verify --backend hip (every op on seeded adversarial inputs)
#   runs    whole training runs on both backends, compared by mxsim compare:
#           the default config (all its steps, unless DEFAULT_STEPS is set), each
#           recipe for RECIPE_STEPS steps (RUNS: only these names of scripts/run-table.sh),
#           and checkpoints crossing backends
#   peers   bench/peers/moe_step_peer.py (PyTorch eager, BF16 _grouped_mm)
#   nccl    the NCCL communicator: test_nccl_comm, then the default config through
#           `mxsim launch -n 1 -- train --backend hip` (one process, NCCL, parallel.ranks=1)
#           for NCCL_STEPS steps (default 300) against the emulator's single-process run,
#           compared by mxsim compare ("result: identical" expected)
#   torch   mxsim.torch on CUDA tensors against the emulator, and its benchmarks
#   example examples/torch/moe_fashion_mnist.py --config ${EXAMPLE_CONFIG:-large} for
#           EXAMPLE_STEPS steps (default 12) without and with the recorder, beside
#           moe_step_peer.py's BF16 _grouped_mm and MXFP4 fake-quant steps of that config
#           (EXAMPLE_PROFILE=1: one more recorded run under cProfile, example-profile.txt, and
#           one under torch.profiler, example-torchprof.txt;
#           the recorded trace comes back as example.h5 when under 60 MB)
# Also: memcheck (compute-sanitizer over kernel suites and the Backend suite),
# bench (mxsim_gpu_bench), gemm (grouped GEMM vs PyTorch), profile, kernels,
# large, steps (see below).
# STAGES (default "tests verify runs nccl peers") picks stages. Writes to $OUT
# (default ./out): summary.md (the table), tests.txt, verify.txt, runs.txt,
# peers.csv, env.txt. Exit status: non-zero when any check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out}"
mkdir -p "$OUT"
STAGES="${STAGES:-tests verify runs nccl peers}"
RECIPE_STEPS="${RECIPE_STEPS:-100}"
dev=/tmp/mxsim-dev
rm -rf "$dev" && mkdir -p "$dev" && tar -C "$dev" -xJf .gpu-build/dev.tar.xz
export LD_LIBRARY_PATH="$dev/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0
mx="$dev/bin/mxsim"
data="--set 'run.data_dir=\"$PWD/.gpu-build/data\"'"
work=/tmp/mxsim-runs && rm -rf "$work" && mkdir -p "$work"
summary="$OUT/summary.md"
rc=0
has() { [[ " $STAGES " == *" $1 "* ]]; }
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  lscpu | grep -E 'Model name|^CPU\(s\)'
  "$mx" --version; "$mx" info | head -20
  ldd "$mx"
} >"$OUT/env.txt" 2>&1
echo "# mxsim GPU backend on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F)" >"$summary"

if has tests; then
  echo -e "\n## GPU test suites\n\n| suite | result |\n|---|---|" >>"$summary"
  suites=(test_gpu_codec test_gpu_quantize test_gpu_math test_gpu_backend test_gpu_ops)
  if [ -n "${GEMM_TESTS:-}" ]; then
    # test_gpu_gemm in 8 gtest shards at once (its emulator reference is single-threaded CPU work).
    pids=()
    for ((i = 0; i < 8; ++i)); do
      GTEST_TOTAL_SHARDS=8 GTEST_SHARD_INDEX=$i timeout 200 "$dev/bin/test_gpu_gemm" --gtest_color=no >"$work/gemm$i.txt" 2>&1 &
      pids+=($!)
    done
    g=0; for p in "${pids[@]}"; do wait "$p" || g=1; done; rc=$((rc | g))
    cat "$work"/gemm?.txt >>"$OUT/tests.txt"
    echo "| test_gpu_gemm (8 shards) | exit $g: $(cat "$work"/gemm?.txt | grep -c '^\[       OK \]') ok, $(cat "$work"/gemm?.txt | grep -c '^\[  FAILED  \] .*(') failed |" >>"$summary"
  fi
  for t in "${suites[@]}"; do
    timeout 300 "$dev/bin/$t" --gtest_color=no >"$work/$t.txt" 2>&1
    r=$?; rc=$((rc | r))
    cat "$work/$t.txt" >>"$OUT/tests.txt"
    echo "| $t | exit $r: $(grep -E '^\[  (PASSED|FAILED) ' "$work/$t.txt" | tr '\n' ' ') |" >>"$summary"
  done
fi

# memcheck: a subset of the kernel suites under compute-sanitizer (slow: not in the default STAGES).
if has memcheck && command -v compute-sanitizer >/dev/null; then
  m=0
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$dev/bin/test_gpu_codec" --gtest_color=no \
    --gtest_filter='GpuMxQuantize.*:GpuCodec.DecodeEvery*:GpuCodec.PublishedValues' >"$work/memcheck.txt" 2>&1 || m=1
  timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 "$dev/bin/test_gpu_quantize" --gtest_color=no \
    --gtest_filter='GpuQuantize.GroupedColwise*:GpuQuantize.BothOrientations*:GpuQuantize.Errors*' >>"$work/memcheck.txt" 2>&1 || m=1
  timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$dev/bin/test_gpu_backend" --gtest_color=no \
    >>"$work/memcheck.txt" 2>&1 || m=1
  rc=$((rc | m))
  echo -e "\n## compute-sanitizer memcheck (exit $m)\n\n\`\`\`" >>"$summary"
  grep -E 'ERROR SUMMARY' "$work/memcheck.txt" >>"$summary"; echo '```' >>"$summary"
  cat "$work/memcheck.txt" >>"$OUT/tests.txt"
fi

# gemm: the grouped GEMMs on the MoE shapes (mxsim_gpu_gemm_bench, bits
# checked against the tiled kernels) and their PyTorch peers
# (bench/peers/gemm_peers.py), in one call; scripts/gemm-table.py joins them.
if has gemm; then
  timeout 300 "$dev/bin/mxsim_gpu_gemm_bench" ${GEMM_BENCH_ARGS:-} --csv "$OUT/gemm.csv" >"$work/gemm_bench.txt" 2>&1 || rc=1
  PYTHONUNBUFFERED=1 timeout 200 python3 bench/peers/gemm_peers.py >"$OUT/gemm_peers.csv" 2>&1 || rc=1
  python3 scripts/gemm-table.py "$OUT/gemm.csv" "$OUT/gemm_peers.csv" >"$OUT/gemm.md" 2>&1 || rc=1
  echo -e "\n## Grouped GEMM vs PyTorch\n" >>"$summary"; cat "$OUT/gemm.md" >>"$summary"
  tail -5 "$work/gemm_bench.txt" >>"$OUT/tests.txt"
fi

# bench: the codec kernels beside a device-to-device copy (mxsim_gpu_bench).
if has bench; then
  timeout 200 "$dev/bin/mxsim_gpu_bench" "${BENCH_N:-268435456}" 30 "$OUT/gpu_bench.md" >"$work/bench.txt" 2>&1 || rc=1
fi

if has verify; then
  timeout 300 "$mx" verify --backend hip --cases "${VERIFY_CASES:-20}" --seed "${VERIFY_SEED:-1}" >"$OUT/verify.txt" 2>&1
  r=$?; rc=$((rc | r))
  echo -e "\n## mxsim verify --backend hip --cases ${VERIFY_CASES:-20} (exit $r)\n\n\`\`\`" >>"$summary"
  tail -1 "$OUT/verify.txt" >>"$summary"
  echo '```' >>"$summary"
fi

# train NAME BACKEND ARGS...: one run, its trace, log and wall time.
train() {
  local name=$1 be=$2; shift 2
  local t0=$(date +%s.%N)
  eval "\"$mx\" train --backend $be $data $* --trace \"$work/$name.$be.h5\"" >"$work/$name.$be.log" 2>&1
  local r=$?
  echo "$name $be exit $r wall $(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $t0}") s" >>"$work/times.txt"
  return $r
}
compare() {  # compare NAME: emu vs hip traces of one run
  "$mx" compare "$work/$1.emu.h5" "$work/$1.hip.h5" >"$work/$1.compare.txt" 2>&1
  local r=$?
  echo "| $1 | $(grep -m1 -E '^compared ' "$work/$1.compare.txt" | cut -c1-150) | $r |" >>"$summary"
  return $r
}

if has runs; then
  source scripts/run-table.sh
  [ -n "${RUNS:-}" ] && read -r -a run_names <<<"$RUNS"  # RUNS: a subset of the table's names
  # Emulator runs in the background, two threads each, while the GPU runs one after another.
  for n in "${run_names[@]}"; do train "$n" emu --threads 2 ${run_args[$n]} & done
  for n in "${run_names[@]}"; do train "$n" hip ${run_args[$n]}; done
  wait
  # Checkpoints across backends: the first half of a run on one backend
  # (--stop-after writes the checkpoint there), the rest on the other.
  C="$run_ckpt_args"
  half=$((RECIPE_STEPS / 2))
  train ck_full emu --threads 8 "$C" &
  train ck_half hip "$C --stop-after $half --checkpoint $work/ck_hip.h5"
  train ck_half emu --threads 8 "$C --stop-after $half --checkpoint $work/ck_emu.h5"
  wait
  train ck_hip_then_emu emu --threads 8 "$C --resume $work/ck_hip.h5" &
  train ck_emu_then_hip hip "$C --resume $work/ck_emu.h5"
  wait
  echo -e "\n## Whole runs: mxsim compare of --backend emu and --backend hip traces\n\n| run | mxsim compare | exit |\n|---|---|---|" >>"$summary"
  for n in "${run_names[@]}" ck_half; do compare "$n"; rc=$((rc | $?)); done
  for n in ck_hip_then_emu ck_emu_then_hip; do
    be=${n##*_then_}
    "$mx" compare "$work/ck_full.emu.h5" "$work/$n.$be.h5" >"$work/$n.compare.txt" 2>&1
    r=$?; rc=$((rc | r))
    echo "| $n (resumed run vs uninterrupted emu run) | $(grep -m1 -E '^compared ' "$work/$n.compare.txt" | cut -c1-150) | $r |" >>"$summary"
  done
  echo -e "\n## Wall time per run\n\n\`\`\`" >>"$summary"; sort "$work/times.txt" >>"$summary"; echo '```' >>"$summary"
  for f in "$work"/*.log "$work"/*.compare.txt; do echo "==== $f"; tail -30 "$f"; done >"$OUT/runs.txt"
  grep -h "steps/s" "$work/default.hip.log" "$work/default.emu.log" | tail -2 >>"$summary"
fi

# nccl: one process per GPU through NCCL. The library is PyTorch's (nvidia-nccl-cu13 wheel)
# unless MXSIM_NCCL_LIBRARY names one; mxsim opens it with dlopen only in this mode.
if has nccl; then
  if [ -z "${MXSIM_NCCL_LIBRARY:-}" ]; then
    MXSIM_NCCL_LIBRARY=$(python3 - <<'PY' 2>/dev/null
import glob, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
print(next((f for d in dirs for f in sorted(glob.glob(d + "/nvidia/nccl/lib/libnccl.so*"))), ""))
PY
)
    export MXSIM_NCCL_LIBRARY
  fi
  echo -e "\n## NCCL, one process per GPU (library: ${MXSIM_NCCL_LIBRARY:-not found})\n" >>"$summary"
  timeout 300 "$dev/bin/test_nccl_comm" --gtest_color=no >"$work/test_nccl_comm.txt" 2>&1
  r=$?; rc=$((rc | r))
  cat "$work/test_nccl_comm.txt" >>"$OUT/tests.txt"
  echo "- test_nccl_comm: exit $r: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$work/test_nccl_comm.txt" | tr '\n' ' ')" >>"$summary"
  # no BF16 shadow: a run of one process per rank is expert-parallel, which does not record it
  N="--set run.max_steps=${NCCL_STEPS:-300} --set parallel.ranks=1 --set trace.shadow_layers=[]"
  train nccl1 emu --threads 8 "$N" &
  t0=$(date +%s.%N)
  eval "timeout 600 \"$mx\" launch -n 1 -- train --backend hip $data $N --trace \"$work/nccl1.hip.h5\"" >"$work/nccl1.hip.log" 2>&1
  r=$?; rc=$((rc | r))
  echo "nccl1 hip (mxsim launch -n 1) exit $r wall $(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $t0}") s" >>"$work/times.txt"
  wait
  echo -e "\n| run | mxsim compare | exit |\n|---|---|---|" >>"$summary"
  compare nccl1; r=$?; rc=$((rc | r))
  tail -3 "$work/nccl1.compare.txt" >>"$summary"
  grep -h -E "^summary|processes" "$work/nccl1.hip.log" >>"$summary"
  for f in "$work/nccl1.hip.log" "$work/nccl1.emu.log" "$work/nccl1.compare.txt"; do echo "==== $f"; tail -30 "$f"; done >>"$OUT/runs.txt"
fi

# profile: the default config on the GPU with the per-op table (every op then
# synchronises), and its steps/s with and without the trace.
if has profile; then
  P="--set run.max_steps=${PROFILE_STEPS:-200}"
  eval "\"$mx\" train --backend hip $data $P --profile" >"$work/profile.log" 2>&1
  eval "\"$mx\" train --backend hip $data $P --profile-host" >"$work/profile_host.log" 2>&1
  eval "\"$mx\" train --backend hip $data $P" >"$work/notrace.log" 2>&1
  eval "\"$mx\" train --backend hip $data $P --trace \"$work/p.h5\"" >"$work/withtrace.log" 2>&1
  echo -e "\n## Profile (${PROFILE_STEPS:-200} steps of the default config)\n\n\`\`\`" >>"$summary"
  for f in notrace withtrace; do echo "$f: $(grep -m1 '^summary' "$work/$f.log")"; done >>"$summary"
  sed -n '/^backend ops/,$p' "$work/profile.log" | head -45 >>"$summary"
  echo >>"$summary"
  sed -n '/^backend ops/,$p' "$work/profile_host.log" | head -20 >>"$summary"
  echo '```' >>"$summary"
fi

# large: examples/large.toml (a real-size expert layer, MXFP4 experts) on the
# GPU for LARGE_STEPS steps with the per-op table, beside the PyTorch peer.
if has large; then
  eval "timeout ${LARGE_TIMEOUT:-240} \"$mx\" train --backend hip $data --config examples/large.toml --set run.max_steps=${LARGE_STEPS:-2} --profile" >"$work/large.log" 2>&1
  echo -e "\n## examples/large.toml on the GPU (${LARGE_STEPS:-2} steps, exit $?)\n\n\`\`\`" >>"$summary"
  grep -m1 '^summary' "$work/large.log" >>"$summary"
  sed -n '/^backend ops/,$p' "$work/large.log" | head -16 >>"$summary"
  echo '```' >>"$summary"
  PYTHONUNBUFFERED=1 timeout 200 python3 bench/peers/moe_step_peer.py --config large --mode both --steps 10 >>"$OUT/peers.csv" 2>&1
fi

# steps: the training step beside its PyTorch peer, in this call. Step time is
# the wall-clock difference of a long and a short run over their step
# difference (start-up cancels), STEP_REPS pairs each (default 3): the default
# config 200 vs 1000 steps without and with the default trace, the large
# config 3 vs 24 steps; then moe_step_peer.py STEP_REPS times (default config)
# and once (large, BF16 and fake-quant). Writes steps.csv (every run) and the
# table steps.md (medians, ratios).
if has steps; then
  reps=${STEP_REPS:-3}
  # run.epochs: the device data subset (scripts/gpu-pack.sh: 20000 images) is one global batch
  # of large.toml's 16384 per epoch, so its 8 epochs would stop both runs at step 8
  large_args="--config examples/large.toml --set run.test_limit=64 --set run.epochs=1000"
  echo "run,rep,steps,exit,wall_s" >"$OUT/steps.csv"
  step_run() {  # step_run NAME REP STEPS ARGS...
    local name=$1 rep=$2 n=$3; shift 3
    local t0=$(date +%s.%N)
    eval "timeout 300 \"$mx\" train --backend hip $data --set run.max_steps=$n $*" >"$work/step_$name.log" 2>&1
    local r=$?
    [ $r -eq 0 ] || rc=1
    echo "$name,$rep,$n,$r,$(awk "BEGIN {printf \"%.3f\", $(date +%s.%N) - $t0}")" >>"$OUT/steps.csv"
  }
  for ((i = 1; i <= reps; ++i)); do
    step_run default $i 200 --set run.test_limit=500
    step_run default $i 1000 --set run.test_limit=500
    step_run default_trace $i 200 --set run.test_limit=500 --trace "$work/st_a$i.h5"
    step_run default_trace $i 1000 --set run.test_limit=500 --trace "$work/st_b$i.h5"
    step_run large $i 3 $large_args
    step_run large $i 24 $large_args
  done
  : >"$work/step_peers.csv"
  for ((i = 1; i <= reps; ++i)); do
    PYTHONUNBUFFERED=1 timeout 150 python3 bench/peers/moe_step_peer.py --config default --mode bf16 --steps 200 >>"$work/step_peers.csv" 2>&1
  done
  PYTHONUNBUFFERED=1 timeout 200 python3 bench/peers/moe_step_peer.py --config large --mode both --steps 20 >>"$work/step_peers.csv" 2>&1
  grep -v '^config' "$work/step_peers.csv" >>"$OUT/peers.csv"
  python3 - "$OUT/steps.csv" "$work/step_peers.csv" >"$OUT/steps.md" <<'PY'
import csv, statistics, sys
runs = list(csv.DictReader(open(sys.argv[1])))
peers = {}
for line in open(sys.argv[2]):
    f = line.strip().split(",")
    if len(f) == 5 and f[0] != "config":
        peers.setdefault((f[0], f[1]), []).append(float(f[3]))
sys.path.insert(0, "scripts")
from step_times import per_step
print("| config | mxsim ms/step (samples; median) | PyTorch eager BF16 ms/step | ratio | fake-quant ms/step | ratio |")
print("|---|---|---|---|---|---|")
for name, cfg in (("default", "default"), ("default_trace", "default"), ("large", "large")):
    m = per_step(runs, run=name)
    if not m:
        print(f"| {name} | failed | | | | |")
        continue
    med = statistics.median(m)
    b = peers.get((cfg, "bf16"), [])
    q = peers.get((cfg, "fakequant"), [])
    bm = statistics.median(b) if b else float("nan")
    qm = statistics.median(q) if q else float("nan")
    print(f"| {name} | {', '.join(f'{x:.2f}' for x in m)}; {med:.2f} | {bm:.2f} | {med / bm:.2f}x | "
          + (f"{qm:.1f} | {med / qm:.2f}x |" if q else "| |"))
PY
  echo -e "\n## Training step beside the PyTorch peer (${reps} pairs each)\n" >>"$summary"; cat "$OUT/steps.md" >>"$summary"
fi

# kernels: Nsight Compute's duration of every kernel of KERNEL_STEPS steps of
# the default config, summed per kernel name and grid (no other metric: one
# replay per kernel), most time first (scripts/ncu-kernel-table.py);
# KERNEL_ARGS adds train options (e.g. a smaller run.test_limit).
if has kernels && command -v ncu >/dev/null; then
  eval "timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
    \"$mx\" train --backend hip $data --set run.max_steps=${KERNEL_STEPS:-2} ${KERNEL_ARGS:-}" >"$work/ncu.csv" 2>"$work/ncu.err"
  echo -e "\n## Kernel time (ncu, ${KERNEL_STEPS:-2} steps, exit $?)\n\n\`\`\`" >>"$summary"
  python3 scripts/ncu-kernel-table.py "$work/ncu.csv" "${KERNEL_STEPS:-2}" 2>&1 | head -60 >>"$summary"
  echo '```' >>"$summary"
  tail -5 "$work/ncu.err" >>"$OUT/tests.txt"
fi

# torch: mxsim.torch on CUDA tensors (tests/python/test_torch_cuda.py: the GPU's bytes against the
# emulator's through the same C interface; MXSIM_REAL_SIZE=1 adds the real-size case), then
# bench/peers/torch_layer_bench.py (call overhead, Python vs the C++ GEMM call, the expert
# layer's forward + backward beside torch._grouped_mm and MXFP4 fake quantization).
if has torch; then
  export MXSIM_C_LIBRARY="$dev/python/mxsim/libmxsim_c.so" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
  (cd tests/python && timeout "${TORCH_TEST_TIMEOUT:-400}" python3 -m pytest -q -p no:cacheprovider test_torch_cuda.py \
     >"$OUT/torch_tests.txt" 2>&1)
  r=$?; rc=$((rc | r))
  echo -e "\n## mxsim.torch on CUDA (pytest exit $r)\n\n\`\`\`" >>"$summary"; tail -3 "$OUT/torch_tests.txt" >>"$summary"; echo '```' >>"$summary"
  # the C++ GEMM runs right before and after each Python case (a clock drift shows, not biases)
  PYTHONUNBUFFERED=1 timeout 400 python3 bench/peers/torch_layer_bench.py --cpp-bench "$dev/bin/mxsim_gpu_gemm_bench" \
    >"$OUT/torch_bench.md" 2>&1 || rc=1
  cat "$OUT/torch_bench.md" >>"$summary"
  echo -e "\n## The same calls from C++ (mxsim_gpu_gemm_bench --overhead, host us per call)\n\n\`\`\`" >>"$summary"
  timeout 100 "$dev/bin/mxsim_gpu_gemm_bench" --overhead >>"$summary" 2>&1 || rc=1
  echo '```' >>"$summary"
fi

if has example; then
  export MXSIM_C_LIBRARY="$dev/python/mxsim/libmxsim_c.so" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
  cfg="${EXAMPLE_CONFIG:-large}" n="${EXAMPLE_STEPS:-12}"
  ex=(python3 examples/torch/moe_fashion_mnist.py --config "$cfg" --steps "$n" --data "$PWD/.gpu-build/data")
  [ -f .gpu-build/data/train-images-idx3-ubyte.gz ] || ex+=(--random-data)  # timings do not depend on the data
  echo -e "\n## examples/torch/moe_fashion_mnist.py --config $cfg, $n steps (median after 3)\n\n\`\`\`" >>"$summary"
  for mode in "--no-trace" "--trace $work/example.h5"; do
    # shellcheck disable=SC2086 -- mode is two words or one
    PYTHONUNBUFFERED=1 timeout 400 "${ex[@]}" $mode >"$work/example.txt" 2>&1 || rc=1
    tail -1 "$work/example.txt" >>"$summary"
  done
  if [ -n "${EXAMPLE_PROFILE:-}" ]; then  # where the recorder's host time goes: mxsim's functions, then the top by own time
    timeout 400 "${ex[@]:0:1}" -m cProfile -o "$work/example.prof" "${ex[@]:1}" --trace "$work/example-prof.h5" \
      >/dev/null 2>&1 || rc=1
    python3 -c 'import pstats, sys; p = pstats.Stats(sys.argv[1], stream=sys.stdout); p.sort_stats("cumulative").print_stats("mxsim|examples", 70); p.sort_stats("tottime").print_stats(40)' \
      "$work/example.prof" >"$OUT/example-profile.txt" 2>&1 || rc=1
    # and where its device time goes: torch.profiler over three recorded steps (mxsim's kernels by name)
    timeout 300 python3 bench/peers/profile_recorder.py -- "${ex[@]:2:2}" "${ex[@]:6}" --trace "$work/example-tprof.h5" \
      >"$OUT/example-torchprof.txt" 2>&1 || rc=1
  fi
  PYTHONUNBUFFERED=1 timeout 300 python3 bench/peers/moe_step_peer.py --config "$cfg" --mode both --steps 10 >>"$summary" 2>&1 || rc=1
  echo '```' >>"$summary"
  if [ -f "$work/example.h5" ]; then
    "$mx" compare "$work/example.h5" "$work/example.h5" | tail -1 >>"$summary"
    # the trace comes back (when small) for the inspector here: the GPU machine has no Qt
    [ "$(stat -c %s "$work/example.h5")" -lt 60000000 ] && cp "$work/example.h5" "$OUT/example.h5"
  fi
fi

if has peers; then
  PYTHONUNBUFFERED=1 timeout 300 python3 bench/peers/moe_step_peer.py --config default --mode bf16 --steps 50 >>"$OUT/peers.csv" 2>&1
  echo -e "\n## PyTorch eager peer (bench/peers/moe_step_peer.py)\n\n\`\`\`" >>"$summary"; cat "$OUT/peers.csv" >>"$summary"; echo '```' >>"$summary"
fi
echo "gpu-device-run: exit $rc" | tee -a "$summary"
cat "$summary"
exit $rc
