#!/usr/bin/env bash
# Packs the GPU tests and benchmark from .gpu-build (cmake --preset gpu-sm90a)
# into .gpu-build/dev for the device machine, with the few shared libraries
# they need that a bare CUDA image lacks (ldd decides; glibc, libstdc++,
# libgcc and the driver's libcuda are left to the machine). Fails if a GPU
# test needs toml++, HDF5 or Boost (they must stay free of them).
set -euo pipefail
cd "$(dirname "$0")/.."
tests=(test_gpu_codec test_gpu_quantize test_gpu_gemm test_gpu_math test_gpu_ops)
cmake --build .gpu-build -j2 --target "${tests[@]}" mxsim_gpu_bench
dev=.gpu-build/dev
rm -rf "$dev" && mkdir -p "$dev/lib"
for t in "${tests[@]}"; do cp ".gpu-build/tests/$t" "$dev/"; done
cp .gpu-build/backends/hip/mxsim_gpu_bench "$dev/"
for b in "${tests[@]/#/$dev/}" "$dev"/mxsim_gpu_bench; do
  if ldd "$b" | grep -Eq 'libtomlplusplus|libhdf5|libboost'; then
    echo "gpu-pack: $b needs toml++/HDF5/Boost:" >&2; ldd "$b" >&2; exit 1
  fi
  ldd "$b" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|libdl.so*|libpthread.so*|librt.so*|libcuda.so*) ;;
      *) cp -L "$lib" "$dev/lib/" ;;
    esac
  done
done
du -sh "$dev"; ls "$dev" "$dev/lib"
