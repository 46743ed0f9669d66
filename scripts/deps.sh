#!/usr/bin/env bash
# Install the Debian packages mxsim needs, only those missing. Idempotent and
# quiet when nothing is missing. Run by run.sh and test.sh.
#   scripts/deps.sh main   what building `mxsim` and running the main job need
#   scripts/deps.sh        (or `all`) that plus the tests, benchmarks, the
#                          inspector, the Python module and the AMD compile check
# run.sh installs the first set only: Qt, ROCm's hipcc and Clang are most of
# the download on a fresh machine and the main job needs none of them.
set -euo pipefail

MXSIM_MAIN_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libboost-dev libboost-program-options-dev libboost-iostreams-dev
  libxtensor-dev libxsimd-dev libtomlplusplus-dev nlohmann-json3-dev
  libhdf5-dev librandom123-dev zlib1g-dev
  dataset-fashion-mnist
)
MXSIM_TEST_PACKAGES=(
  libgtest-dev libgmock-dev libbenchmark-dev
  hdf5-tools libopenblas-dev libomp-dev libmpfr-dev
  qt6-base-dev libqcustomplot-dev xvfb xauth fonts-dejavu-core
  python3 python3-h5py python3-numpy python3-dev python3-pytest pybind11-dev
  python3-torch libdlpack-dev
  help2man bash-completion
  hipcc libamdhip64-dev
  clang libclang-rt-14-dev
)

case "${1:-all}" in
  main) wanted=("${MXSIM_MAIN_PACKAGES[@]}") ;;
  all) wanted=("${MXSIM_MAIN_PACKAGES[@]}" "${MXSIM_TEST_PACKAGES[@]}") ;;
  *) echo "usage: scripts/deps.sh [main|all]" >&2; exit 2 ;;
esac

missing=()
for p in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "mxsim: installing missing packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "mxsim: not root and sudo is not installed; as root, run:" >&2
      echo "  apt-get update && apt-get install --no-install-recommends ${missing[*]}" >&2
      exit 1
    fi
    SUDO="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
