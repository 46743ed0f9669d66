#!/usr/bin/env bash
# Builds the GPU binaries here (cmake --preset gpu-sm90a: sm_90a + sm_80, CUDA
# runtime static) and packs them for the device machine into
#   .gpu-build/dev.tar.xz   bin/ (mxsim, the GPU tests, the GPU benchmarks) and
#                           lib/ (the shared libraries a bare CUDA image lacks:
#                           ldd decides; glibc, libstdc++, libgcc and the
#                           driver's libcuda stay the machine's)
#                           and python/mxsim/libmxsim_c.so (the C interface that
#                           mxsim.torch loads; the package's .py files travel
#                           with the working tree)
#   .gpu-build/data/        Fashion-MNIST from run.data_dir: 20000 training and 2000 test images
# Carry both (run tool: carry [".gpu-build/dev.tar.xz", ".gpu-build/data"]) and
# run scripts/gpu-device-run.sh there. Fails if a GPU test links toml++, HDF5
# or Boost (the kernel tests must stay free of them; mxsim itself needs them),
# or if ptxas spilled or serialised a tensor-core GEMM kernel (sm90-ptxas-check.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
tests=(test_gpu_codec test_gpu_quantize test_gpu_gemm test_gpu_math test_gpu_backend test_gpu_ops test_nccl_comm)
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD/..}"
[ -f .gpu-build/CMakeCache.txt ] || cmake --preset gpu-sm90a
cmake --build .gpu-build -j"${JOBS:-2}" --target "${tests[@]}" mxsim mxsim_c mxsim_gpu_bench mxsim_gpu_gemm_bench
# Where Debian's hipcc is present, the same sources compiled for gfx90a, as scripts/test.sh's
# build does: a change checked with nvcc alone once broke that build (clang 15 crashed on it).
if command -v hipcc >/dev/null; then cmake --build .gpu-build -j"${JOBS:-2}" --target mxsim_hip_amd_check; fi
scripts/sm90-ptxas-check.sh .gpu-build  # the tensor-core GEMMs compiled without spills or serialised wgmma
stage=.gpu-build/dev
rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib" "$stage/python/mxsim"
cp .gpu-build/capi/libmxsim_c.so "$stage/python/mxsim/"
for t in "${tests[@]}"; do cp ".gpu-build/tests/$t" "$stage/bin/"; done
cp .gpu-build/cli/mxsim .gpu-build/backends/hip/mxsim_gpu_bench .gpu-build/backends/hip/mxsim_gpu_gemm_bench "$stage/bin/"
for b in "$stage"/bin/*; do
  case "$(basename "$b")" in
    test_gpu_codec|test_gpu_quantize|test_gpu_gemm|test_gpu_math)
      if ldd "$b" | grep -Eq 'libtomlplusplus|libhdf5|libboost'; then
        echo "gpu-pack: $b needs toml++/HDF5/Boost:" >&2; ldd "$b" >&2; exit 1
      fi ;;
  esac
  ldd "$b" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libstdc++.so*|libgcc_s.so*|libdl.so*|libpthread.so*|librt.so*|libcuda.so*) ;;
      *) cp -Ln "$lib" "$stage/lib/" ;;
    esac
  done
done
# Symbols are not needed there: stripped and packed with xz -9, the bundle and the data fit
# the run tool's 64 MiB carry limit together with the working tree (30 + 9 + 10 MiB on 2026-12-07).
strip --strip-unneeded "$stage"/bin/* "$stage"/lib/* "$stage"/python/mxsim/*.so 2>/dev/null || true
# PACK_BINS (names under bin/, default all) keeps the bundle under the run tool's 64 MiB
# carry limit with the data beside it: every binary holds the kernels for two arches.
if [ -n "${PACK_BINS:-}" ]; then
  bins=(); for b in $PACK_BINS; do bins+=("bin/$b"); done
else
  bins=(bin)
fi
# Written beside and renamed: a run that carries the bundle meanwhile takes the old one whole.
tar -C "$stage" -cf - "${bins[@]}" lib python | xz -T"${JOBS:-2}" -9 >.gpu-build/dev.tar.xz.part
mv -f .gpu-build/dev.tar.xz.part .gpu-build/dev.tar.xz
# The data: Fashion-MNIST's first DATA_IMAGES (default 20000: one step of examples/large.toml
# takes 16384) training images and first TEST_IMAGES (default 2000) test images. The full set
# (30 MiB) does not fit the carry limit beside the bundle and the working tree; the device runs
# compare backends and time steps, which need no more.
data_dir="${MXSIM_DATA_DIR:-/usr/share/datasets/fashion-mnist}"
rm -rf .gpu-build/data && mkdir -p .gpu-build/data
python3 - "$data_dir" .gpu-build/data "${DATA_IMAGES:-20000}" "${TEST_IMAGES:-2000}" <<'PY'
import gzip, sys
src, dst, n_train, n_test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for split, want in (("train", n_train), ("t10k", n_test)):
    for kind, head, item in (("images-idx3-ubyte", 16, 784), ("labels-idx1-ubyte", 8, 1)):
        name = f"{split}-{kind}.gz"
        raw = gzip.open(f"{src}/{name}").read()
        n = min(want, int.from_bytes(raw[4:8], "big"))  # IDX: magic, count (big-endian), then dims
        gzip.open(f"{dst}/{name}", "wb").write(raw[:4] + n.to_bytes(4, "big") + raw[8:head] + raw[head:head + n * item])
PY
du -sh .gpu-build/dev.tar.xz .gpu-build/data
