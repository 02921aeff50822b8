#!/usr/bin/env bash
# Packs only what one GPU call needs -- the named binaries of a CUDA build, the engine libraries, the
# shared libraries they load that a bare CUDA machine lacks, and Fashion-MNIST -- into .device/, with
# a runner that unpacks them there. ../shared/gpu-run/pack.sh packs every library of every binary
# (Qt Widgets, X11, fonts: about 35 MiB), which leaves no room for Fashion-MNIST (26 MiB as xz) under
# the 64 MiB a call may carry; this bundle of seven binaries was 21 MiB (2026-11-26).
#
#   scripts/pack-for-gpu.sh BUILD_DIR BINARY...      (from the project root; BINARY as bin/NAME, or python:
#                                                    GPU Lab's torch and the Python it was built for)
#   e.g. scripts/pack-for-gpu.sh build-gpu bin/gpulab-cli bin/gpulab-bench-gpu bin/test_cuda_graph
#   scripts/pack-for-gpu.sh BUILD_DIR --suite        what scripts/gpu-suite.sh runs: every binary but
#                                                    the window's, the ctest files, GPU Lab's Python
#                                                    package and the Python it was built for (below)
# GPULAB_PACK_FASHION_MNIST=0 leaves Fashion-MNIST out (26 MiB as xz). A call carries 64 MiB with the
# working tree (9 MiB): the suite's bundle (~33 MiB) and Fashion-MNIST do not fit together, so the
# suite runs without it (its Fashion-MNIST tests and lessons say so and are left for a call that
# packs a few binaries with the data). The window's binaries (those linking Qt Widgets: the app, its
# tests, gpulab-bench-gui) draw on the CPU and run in CI; with them would come Qt Gui, Widgets,
# QCustomPlot and X11 (~8 MiB as xz).
#
# GPU Lab's torch is an extension module for Debian's Python (3.11); a GPU machine has another Python
# (3.12, with PyTorch). --suite packs Debian's interpreter and standard library (~3 MiB as xz); the
# runner unpacks them in /tmp/gpulab-python-packed and writes, at the path the build names, a python3
# that sets PYTHONHOME for itself alone, so the machine's python3 keeps its own, and PyTorch, for the
# comparisons. The build names that path when it is configured with a link made here:
#   mkdir -p /tmp/gpulab-python/bin && ln -sf /usr/bin/python3.11 /tmp/gpulab-python/bin/python3
#   cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
#         -DPython3_EXECUTABLE=/tmp/gpulab-python/bin/python3
#
# Then a device call with carry [".device"] runs, from the repository root there:
#   bash .device/unpack.sh COMMAND...     (COMMAND runs in the build folder, recreated at its path here)
# The runner sets LD_LIBRARY_PATH (the packed libraries, then the machine's CUDA libraries: the
# toolkit's, or the nvidia-* wheels beside PyTorch), QT_QPA_PLATFORM=offscreen,
# GPULAB_FASHION_MNIST_DIR and, when GPU Lab's torch travels, GPULAB_PYTHON; the source tree's path
# of this machine leads to the copy there (the tests name its files).
# In a script of your own run through it, never call a bare `wait` while output goes through
# `exec > >(tee ...)`: bash waits for the tee too, for ever (a whole call was lost to this on
# 2026-11-26); wait for the pids you started.
set -euo pipefail
build=${1:?usage: pack-for-gpu.sh BUILD_DIR BINARY... | --suite}
shift
[ $# -gt 0 ] || { echo "pack-for-gpu.sh: name the binaries to pack (bin/gpulab-cli ...), or --suite" >&2; exit 2; }
root=$(git rev-parse --show-toplevel)
cd "$root"
build_abs=$(cd "$build" && pwd)
out="$root/.device"
grep -qxF '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
rm -rf "$out" && mkdir -p "$out/stage/lib" "$out/fm"

if [ "$1" = "--suite" ]; then
  # Every binary, and the files ctest reads (each folder's CTestTestfile.cmake; tests/trace.json and the
  # like are written by the tests themselves).
  set -- $(cd "$build_abs" && for f in $(find bin -maxdepth 1 -type f -perm -u+x | sort); do
             ldd "$f" 2>/dev/null | grep -q libQt6Widgets || echo "$f"; done)
  [ -d "$build_abs/python/gpulab" ] && set -- "$@" python
fi
# ctest's files always travel: a call may run some of the tests it names (`ctest -R ...`).
set -- "$@" $(cd "$build_abs" && find . -name CTestTestfile.cmake -not -path '*/CMakeFiles/*' | sed 's#^\./##' | sort -u)
elves=$(cd "$build_abs" && for f in "$@" lib/*.so python/gpulab/*.so; do [ -f "$f" ] && file -L "$f" | grep -q ELF && echo "$f"; done)

# The libraries the binaries and the engine load, minus the C runtime and what a CUDA machine has.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libcudnn|libnvidia|libnvrtc|libnvJitLink|libcufft|libcurand|libcusolver|libcusparse|libnccl|libgpulab)'
needed() { ldd "$@" 2>/dev/null | awk '/=> \//{print $1" "$3}' | sort -u | grep -Ev "$skip" | awk '{print $2}' | sort -u; }
libs=$(cd "$build_abs" && needed $elves)
for l in $libs; do cp -L "$l" "$out/stage/lib/"; done
tar -C "$out/stage" -cJf "$out/rt.tar.xz" . && rm -rf "$out/stage"
tar -C "$build_abs" -cJf "$out/build.tar.xz" --exclude=CMakeFiles --exclude='__pycache__' "$@" lib CMakeCache.txt

# The Python GPU Lab's torch was built for: its interpreter, its standard library without tests, caches,
# Tk or the static library, and the libraries its extension modules load.
python=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$build_abs/CMakeCache.txt")
if printf '%s\n' "$@" | grep -qx python && [ -d "$build_abs/python/gpulab" ] && [ -n "$python" ]; then
  real=$(readlink -f "$python")
  version=$("$real" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  stage=$(mktemp -d)
  mkdir -p "$stage/bin" "$stage/so" "$stage/lib"
  cp -L "$real" "$stage/bin/python$version"
  tar -C /usr/lib -cf - --exclude=test --exclude=tests --exclude=__pycache__ --exclude=idlelib --exclude=tkinter \
      --exclude=turtledemo --exclude=ensurepip --exclude=lib2to3 --exclude="config-$version*" --exclude=pydoc_data \
      --exclude=site-packages --exclude=dist-packages "python$version" | tar -C "$stage/lib" -xf -
  # The extension modules' libraries, but for those GPU Lab's torch never imports (Tk, databases,
  # terminals, readline, NIS; OpenSSL, as hashlib falls back on Python's own hashes: ~2 MiB as xz).
  for l in $(needed "$real" $(ls /usr/lib/"python$version"/lib-dynload/*.so |
             grep -Ev '/_(tkinter|sqlite3|dbm|gdbm|curses|curses_panel|crypt|ssl|hashlib)\.|/(readline|nis)\.')); do
    cp -Ln "$l" "$stage/so/"
  done
  printf '%s\n' "$python" > "$stage/path"
  tar -C "$stage" -cJf "$out/python.tar.xz" . && rm -rf "$stage"
fi
if [ "${GPULAB_PACK_FASHION_MNIST:-1}" != 0 ]; then
  for f in /usr/share/datasets/fashion-mnist/*.gz; do
    [ -e "$f" ] && gzip -dc "$f" | xz -6 -T2 > "$out/fm/$(basename "$f" .gz).xz"
  done
fi
printf 'BUILD_ABS=%q\nSRC_ABS=%q\n' "$build_abs" "$root" > "$out/paths.env"
git rev-parse --short HEAD > "$out/commit"

cat > "$out/unpack.sh" <<'RUNNER'
#!/usr/bin/env bash
# Runs ON the GPU machine: unpacks the bundle (once per machine), then runs the command in the build folder.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/paths.env"
rt=/tmp/gpulab-rt
pids=()
if [ ! -d "$rt/lib" ]; then mkdir -p "$rt" && { tar -C "$rt" -xJf "$here/rt.tar.xz" & pids+=($!); }; fi
if [ ! -x "$BUILD_ABS/bin" ]; then mkdir -p "$BUILD_ABS" && { tar -C "$BUILD_ABS" -xJf "$here/build.tar.xz" & pids+=($!); }; fi
mkdir -p /tmp/fm
for f in "$here"/fm/*.xz; do
  [ -e "$f" ] && [ ! -e "/tmp/fm/$(basename "${f%.xz}")" ] && { xz -dc "$f" > "/tmp/fm/$(basename "${f%.xz}")" & pids+=($!); }
done
if [ -e "$here/python.tar.xz" ] && [ ! -d /tmp/gpulab-python-packed ]; then
  mkdir -p /tmp/gpulab-python-packed && { tar -C /tmp/gpulab-python-packed -xJf "$here/python.tar.xz" & pids+=($!); }
fi
[ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
# The tests name files of the source tree by the path it had where it was built: lead it here.
repo=$(cd "$here/.." && pwd)
if [ -n "${SRC_ABS:-}" ] && [ "$SRC_ABS" != "$repo" ] && [ ! -e "$SRC_ABS/CMakeLists.txt" ]; then
  mkdir -p "$(dirname "$SRC_ABS")"; rmdir "$SRC_ABS" 2>/dev/null || true
  [ -e "$SRC_ABS" ] || ln -s "$repo" "$SRC_ABS"
fi
# GPU Lab's Python, at the path the build names, its home set for itself alone (the machine's python3
# keeps its own, and its PyTorch).
if [ -d /tmp/gpulab-python-packed/bin ]; then
  py=/tmp/gpulab-python-packed
  wrapper=$(cat "$py/path")
  mkdir -p "$(dirname "$wrapper")"
  rm -f "$wrapper"  # where it is a link (to the Python it was built with, on a build machine), not through it
  printf '#!/bin/sh\nPYTHONHOME=%s LD_LIBRARY_PATH=%s/so${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s "$@"\n' \
    "$py" "$py" "$(ls "$py"/bin/python3.*)" > "$wrapper"
  chmod +x "$wrapper"
  export GPULAB_PYTHON=$wrapper
fi
cuda_dirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -d "$d" ] && cuda_dirs="$cuda_dirs:$d"; done
py_nv=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]) + "/nvidia")' 2>/dev/null || true)
if [ -n "$py_nv" ]; then for d in "$py_nv"/*/lib; do cuda_dirs="$cuda_dirs:$d"; done; fi
export LD_LIBRARY_PATH="$rt/lib${cuda_dirs}" QT_QPA_PLATFORM=offscreen GPULAB_FASHION_MNIST_DIR=/tmp/fm
export GPULAB_COMMIT=$(cat "$here/commit")
cd "$BUILD_ABS"
exec "$@"
RUNNER
du -sh "$out"/* | sed 's/^/pack-for-gpu.sh: /'
echo "pack-for-gpu.sh: on the GPU machine run: bash .device/unpack.sh COMMAND..."
