#!/usr/bin/env bash
# Compiles backends/hip/src/gemm_sm90.hip as the GPU build does (its command
# from .gpu-build/compile_commands.json) with ptxas' report, and fails when a
# tensor-core GEMM kernel other than the exact-steps twins (kExact, the slow
# path for scales near the FP32 range ends) spills registers or has its wgmma
# pipeline serialised by ptxas (C7514 / C7515). Either costs the kernel a
# large share of its speed without changing a bit, so no test would notice.
# scripts/gpu-pack.sh runs it. Usage: scripts/sm90-ptxas-check.sh [build dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-.gpu-build}"
cmd=$(python3 - "$build" <<'PY'
import json, sys
for e in json.load(open(sys.argv[1] + "/compile_commands.json")):
    if e["file"].endswith("gemm_sm90.hip"):
        print(e["directory"])
        print(e["command"].split(" -o ")[0] + " -o /dev/null -Xptxas -v --generate-code=arch=compute_90a,code=[sm_90a]")
        break
PY
)
[ -n "$cmd" ] || { echo "sm90-ptxas-check: gemm_sm90.hip not in $build/compile_commands.json" >&2; exit 1; }
dir=$(head -n1 <<<"$cmd") cmd=$(tail -n +2 <<<"$cmd")
report=$(cd "$dir" && eval "$cmd" 2>&1) || { echo "$report" >&2; exit 1; }
# Kernel instantiations: ..._gemm_sm90_kernelILNS2_4ModeE<m>...ELb<tileB>ELb<exact>EEE...
# Every entry line resets the kernel in hand, so that a spill report of any
# other kernel in the file is never charged to the GEMM compiled before it.
bad=$(awk '
  /Compiling entry function/ { name = ""; exact = 0 }
  /Compiling entry function/ && /gemm_sm90_kernel/ { name = $0; exact = (name ~ /ELb1EEEv/) }
  /C751[45]/ && /gemm_sm90_kernel/ && !/ELb1EEEv/ { print "serialised wgmma pipeline: " $0 }
  /spill stores/ && name != "" && !exact && $5 != "0" { print "spills (" $5 " bytes): " name }
' <<<"$report")
if [ -n "$bad" ]; then
  echo "sm90-ptxas-check: $bad" >&2
  exit 1
fi
echo "sm90-ptxas-check: every tensor-core GEMM kernel (but the exact-steps twins) is free of spills and serialisation"
