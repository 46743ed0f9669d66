#!/usr/bin/env bash
# Compile-only check of the HIP backend for AMD gfx90a with Debian's hipcc
# (HIP 5.2, clang 15), as CI does without an AMD GPU. The normal build runs
# the same compile as target mxsim_hip_amd_check whenever hipcc is present;
# this script does it standalone. Usage: scripts/gpu-check-amd.sh [arch]
set -euo pipefail
cd "$(dirname "$0")/.."
arch="${1:-gfx90a}"
command -v hipcc >/dev/null || { echo "gpu-check-amd: hipcc not found (apt-get install hipcc libamdhip64-dev)" >&2; exit 1; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for src in backends/hip/src/*.hip; do
  hipcc -x hip -std=c++20 -O3 --offload-arch="$arch" -ffp-contract=off -DMXSIM_GPU_AMD=1 \
    -Ibackends/hip -Ibackends/hip/include -Icore/include -c "$src" -o "$out/$(basename "$src").o"
  echo "gpu-check-amd: $src compiles for $arch"
done
