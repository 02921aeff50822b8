#!/usr/bin/env bash
# Packs only what one GPU call needs -- the named binaries of a CUDA build, the engine libraries, the
# shared libraries they load that a bare CUDA machine lacks, and Fashion-MNIST -- into .device/, with
# a runner that unpacks them there. ../shared/gpu-run/pack.sh packs every library of every binary
# (Qt Widgets, X11, fonts: about 35 MiB), which leaves no room for Fashion-MNIST (26 MiB as xz) under
# the 64 MiB a call may carry; this bundle of seven binaries was 21 MiB (2026-11-26).
#
#   scripts/pack-for-gpu.sh BUILD_DIR BINARY...      (from the project root; BINARY as bin/NAME)
#   e.g. scripts/pack-for-gpu.sh build-gpu bin/gpulab-cli bin/gpulab-bench-gpu bin/test_cuda_graph
#
# Then a device call with carry [".device"] runs, from the repository root there:
#   bash .device/unpack.sh COMMAND...     (COMMAND runs in the build folder, recreated at its path here)
# The runner sets LD_LIBRARY_PATH (the packed libraries, then the machine's CUDA libraries: the
# toolkit's, or the nvidia-* wheels beside PyTorch), QT_QPA_PLATFORM=offscreen and
# GPULAB_FASHION_MNIST_DIR. In a script of your own run through it, never call a bare `wait` while
# output goes through `exec > >(tee ...)`: bash waits for the tee too, for ever (a whole call was lost
# to this on 2026-11-26); wait for the pids you started.
set -euo pipefail
build=${1:?usage: pack-for-gpu.sh BUILD_DIR BINARY...}
shift
[ $# -gt 0 ] || { echo "pack-for-gpu.sh: name the binaries to pack (bin/gpulab-cli ...)" >&2; exit 2; }
root=$(git rev-parse --show-toplevel)
cd "$root"
build_abs=$(cd "$build" && pwd)
out="$root/.device"
grep -qxF '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
rm -rf "$out" && mkdir -p "$out/stage/lib" "$out/fm"

# The libraries the binaries and the engine load, minus the C runtime and what a CUDA machine has.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libcudnn|libnvidia|libnvrtc|libnvJitLink|libcufft|libcurand|libcusolver|libcusparse|libnccl|libgpulab)'
libs=$(cd "$build_abs" && ldd "$@" lib/*.so | awk '/=> \//{print $1" "$3}' | sort -u | grep -Ev "$skip" | awk '{print $2}' | sort -u)
for l in $libs; do cp -L "$l" "$out/stage/lib/"; done
tar -C "$out/stage" -cJf "$out/rt.tar.xz" . && rm -rf "$out/stage"
tar -C "$build_abs" -cJf "$out/build.tar.xz" "$@" lib CMakeCache.txt
for f in /usr/share/datasets/fashion-mnist/*.gz; do
  [ -e "$f" ] && gzip -dc "$f" | xz -6 -T2 > "$out/fm/$(basename "$f" .gz).xz"
done
printf 'BUILD_ABS=%q\n' "$build_abs" > "$out/paths.env"
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
[ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"
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
