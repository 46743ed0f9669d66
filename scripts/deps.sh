#!/usr/bin/env bash
# Install the Debian packages mxsim needs, only those missing. Idempotent and
# quiet when nothing is missing. Sourced by run.sh and test.sh.
set -euo pipefail

MXSIM_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libboost-dev libboost-program-options-dev libboost-iostreams-dev
  libxtensor-dev libxsimd-dev libtomlplusplus-dev nlohmann-json3-dev
  libhdf5-dev hdf5-tools librandom123-dev libopenblas-dev libomp-dev libmpfr-dev zlib1g-dev
  dataset-fashion-mnist
  qt6-base-dev libqcustomplot-dev xvfb xauth fonts-dejavu-core
  python3 python3-h5py python3-numpy python3-dev python3-pytest pybind11-dev
  help2man bash-completion
  hipcc libamdhip64-dev
  clang libclang-rt-14-dev
)

missing=()
for p in "${MXSIM_PACKAGES[@]}"; do
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
