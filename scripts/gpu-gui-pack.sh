#!/usr/bin/env bash
# Builds mxsim-inspector, its Qt Test suites and mxsim with the GPU backend
# here (cmake --preset gpu-gui-sm90a: sm_90a only, into .gpu-build-gui) and
# packs them, with the Qt 6 runtime they need, for a GPU machine that has no Qt
# (the device machine: Ubuntu 24.04, glibc 2.39, the NVIDIA driver) into
#   .gpu-build-gui/gui.tar.xz
#     bin/      mxsim, mxsim-inspector, test_gui_* (stripped)
#     lib/      every shared library ldd names except the machine's own: glibc
#               (libc, libm, libdl, libpthread, librt, libresolv, ld-linux),
#               libstdc++, libgcc_s and the driver's libcuda. Qt 6, QCustomPlot,
#               ICU 72 (Ubuntu 24.04 has 74), HDF5, X11/xcb, glib, fontconfig,
#               freetype, harfbuzz, ... all come from this Debian 12 machine;
#               the machine's newer glibc runs them.
#     plugins/platforms/libqoffscreen.so   Qt's offscreen platform (no display)
#     fonts/, etc/fonts.conf               one sans and one mono font, and a
#               fontconfig file naming only them (a bare image has no fonts)
#     data/     the first TRAIN_IMAGES (2048) training and TEST_IMAGES (500)
#               test images of Fashion-MNIST as IDX files (gzip): all that the
#               gui tests' tiny runs (run.train_limit=2048, test_limit=500) read
#     env.sh    `. env.sh` sets LD_LIBRARY_PATH, QT_PLUGIN_PATH,
#               QT_QPA_PLATFORM=offscreen, FONTCONFIG_FILE, MXSIM_DATA_DIR, MXSIM_CLI
#     gpu-gui-device-run.sh   a copy of the runner (usable without the repository)
# Carry it (run tool: carry [".gpu-build-gui/gui.tar.xz"]) and run
# scripts/gpu-gui-device-run.sh there. The run tool carries 64 MiB in all (the
# tracked files too): the script fails when the bundle and the tracked files
# exceed MAX_MIB (default 60).
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD/..}"
B=.gpu-build-gui
if [ ! -f $B/CMakeCache.txt ]; then
  launch=()
  command -v ccache >/dev/null && launch=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  cmake --preset gpu-gui-sm90a "${launch[@]}"
fi
tests=()
for src in tests/gui/test_gui_*.cpp; do tests+=("$(basename "$src" .cpp)"); done
cmake --build $B -j"${JOBS:-2}" --target mxsim mxsim-inspector "${tests[@]}"

stage=$B/pack
rm -rf "$stage" && mkdir -p "$stage"/{bin,lib,plugins/platforms,fonts,etc,data}
cp $B/cli/mxsim $B/gui/mxsim-inspector "$stage/bin/"
for t in "${tests[@]}"; do cp "$B/tests/gui/$t" "$stage/bin/"; done
qt_plugins=$(qtpaths6 --query QT_INSTALL_PLUGINS 2>/dev/null || echo /usr/lib/x86_64-linux-gnu/qt6/plugins)
cp "$qt_plugins/platforms/libqoffscreen.so" "$stage/plugins/platforms/"
for b in "$stage"/bin/*; do
  [ "$(readelf -SW "$b" | grep -c nv_fatbin)" -gt 0 ] || { echo "gpu-gui-pack: $b has no GPU code (built without the GPU backend?)" >&2; exit 1; }
done

# The machine's own libraries (never carried): glibc, the C++ runtime, the driver.
machine_lib() {
  case "$1" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libresolv.so*|libutil.so*|ld-linux*|libstdc++.so*|libgcc_s.so*|libcuda.so*|libnvidia-*) return 0 ;;
  esac
  return 1
}
for b in "$stage"/bin/* "$stage"/plugins/platforms/*.so; do
  ldd "$b" | awk '/=> \// {print $3}' | while read -r lib; do
    machine_lib "$(basename "$lib")" || cp -Ln "$lib" "$stage/lib/"
  done
done
strip --strip-unneeded "$stage"/bin/* "$stage"/lib/* "$stage"/plugins/platforms/*.so

# Fonts: fontconfig's choice here for sans-serif (regular, bold) and monospace.
for pat in sans-serif sans-serif:bold monospace; do cp -n "$(fc-match -f '%{file}' "$pat")" "$stage/fonts/"; done
cat >"$stage/etc/fonts.conf" <<'EOF'
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<!-- The bundle's fonts only (relative: to this file's folder); the cache in $XDG_CACHE_HOME. -->
<fontconfig>
  <dir prefix="relative">../fonts</dir>
  <cachedir prefix="xdg">fontconfig</cachedir>
</fontconfig>
EOF

# The leading images of each split, as IDX files with their counts rewritten
# (the same bytes as the first N of the full files).
data_dir="${MXSIM_DATA_DIR:-/usr/share/datasets/fashion-mnist}"
python3 - "$data_dir" "$stage/data" "${TRAIN_IMAGES:-2048}" "${TEST_IMAGES:-500}" <<'PY'
import gzip, struct, sys
src, dst, n_train, n_test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for split, n in (("train", n_train), ("t10k", n_test)):
    for kind, rank, item in (("images-idx3", 3, 784), ("labels-idx1", 1, 1)):
        name = f"{split}-{kind}-ubyte"
        with gzip.open(f"{src}/{name}.gz", "rb") as f:
            raw = f.read()
        magic, count = struct.unpack(">II", raw[:8])
        header = 4 + 4 * rank
        if count < n:
            sys.exit(f"{src}/{name}.gz: {count} items, fewer than {n}")
        out = raw[:4] + struct.pack(">I", n) + raw[8:header] + raw[header:header + n * item]
        with open(f"{dst}/{name}.gz", "wb") as g:
            g.write(gzip.compress(out, 9, mtime=0))
PY

cat >"$stage/env.sh" <<'EOF'
# . env.sh: the environment of the bundle's programs (no Qt, no fonts, no display on the machine).
_b=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)
export LD_LIBRARY_PATH="$_b/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export QT_PLUGIN_PATH="$_b/plugins" QT_QPA_PLATFORM_PLUGIN_PATH="$_b/plugins/platforms" QT_QPA_PLATFORM=offscreen
export FONTCONFIG_FILE="$_b/etc/fonts.conf" XDG_CACHE_HOME="${XDG_CACHE_HOME:-/tmp/mxsim-gui-cache}"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp/mxsim-gui-runtime}"
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
export MXSIM_DATA_DIR="$_b/data" MXSIM_CLI="$_b/bin/mxsim"
export PATH="$_b/bin:$PATH"
unset _b
EOF

# Self-check: with only the bundle on the library path, every library of every
# binary resolves, and what resolves outside the bundle is the machine's own.
bad=0
for b in "$stage"/bin/* "$stage"/plugins/platforms/*.so "$stage"/lib/*; do
  out=$(env -i LD_LIBRARY_PATH="$stage/lib" ldd "$b" 2>&1) || true
  if grep -q 'not found' <<<"$out"; then echo "gpu-gui-pack: $b: $(grep 'not found' <<<"$out")" >&2; bad=1; fi
  while read -r lib; do
    case "$lib" in "$stage"/lib/*) continue ;; esac
    machine_lib "$(basename "$lib")" || { echo "gpu-gui-pack: $b loads $lib from outside the bundle" >&2; bad=1; }
  done < <(awk '/=> \// {print $3}' <<<"$out")
done
[ $bad = 0 ] || exit 1

cp scripts/gpu-gui-device-run.sh "$stage/"
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner -cf - bin lib plugins fonts etc data env.sh gpu-gui-device-run.sh |
  xz -9 -T"${JOBS:-2}" >$B/gui.tar.xz
bundle=$(stat -c %s $B/gui.tar.xz)
tracked=$(git ls-files -z | xargs -0 stat -c %s | awk '{s += $1} END {print s}')
du -sh "$stage"/{bin,lib,plugins,fonts,data}
echo "gpu-gui-pack: $B/gui.tar.xz $((bundle / 1024)) KiB, with the tracked files $(((bundle + tracked) / 1024)) KiB (limit ${MAX_MIB:-60} MiB)"
[ $((bundle + tracked)) -le $((${MAX_MIB:-60} * 1024 * 1024)) ] || { echo "gpu-gui-pack: over ${MAX_MIB:-60} MiB" >&2; exit 1; }
