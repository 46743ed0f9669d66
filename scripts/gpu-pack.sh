#!/usr/bin/env bash
# Packs the GPU tests and benchmark from .gpu-build (cmake --preset gpu-sm90a)
# into .gpu-build/dev for the device machine, with the few shared libraries
# they need that a bare CUDA image lacks (ldd decides; glibc, libstdc++,
# libgcc and the driver's libcuda are left to the machine).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build .gpu-build -j2 --target test_gpu_codec test_gpu_math mxsim_gpu_bench
dev=.gpu-build/dev
rm -rf "$dev" && mkdir -p "$dev/lib"
cp .gpu-build/tests/test_gpu_codec .gpu-build/tests/test_gpu_math .gpu-build/backends/hip/mxsim_gpu_bench "$dev/"
for b in "$dev"/test_gpu_codec "$dev"/test_gpu_math "$dev"/mxsim_gpu_bench; do
  ldd "$b" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|libdl.so*|libpthread.so*|librt.so*|libcuda.so*) ;;
      *) cp -L "$lib" "$dev/lib/" ;;
    esac
  done
done
du -sh "$dev"; ls "$dev" "$dev/lib"
