#!/usr/bin/env bash
# The install test (issue 8): GPU Lab's .deb installed with apt into a fresh Debian 12 root, then
# the programs run there, as a learner's machine would run them.
#
#   tests/install/deb_install_test.sh [BUILD_DIR]      (default: build)
#   tests/install/deb_install_test.sh --deb FILE.deb   (test a given package)
#
# 1. The package: BUILD_DIR/packages/gpulab_*.deb, made afresh with cpack (BUILD_DIR must be built).
# 2. A Debian 12 root: debootstrap --variant=minbase bookworm into a temporary folder. The packages
#    debootstrap fetches are kept as a tarball in the cache folder, and apt's downloads in the root
#    are kept there too, so a second run fetches almost nothing.
# 3. apt-get install ./gpulab_*.deb inside the root (chroot): its Depends must be enough (no
#    Recommends are installed; that they resolve is checked with a simulated install).
# 4. Checks: the installed files; no build-tree RUNPATH; `gpulab-cli devices`; the lesson
#    `gpulab-cli lesson device-setup --quick`; `gpulab-cli --version` and `gpulab --version` where
#    they exist (SKIP otherwise); the GUI starts and quits (offscreen); with python3-gpulab (built with
#    GPU Lab's torch), `import gpulab` and `gpulab-cli run` of a training script, without a GPU and on
#    the emulated GPU; purging removes everything.
#
# Needs root (debootstrap, chroot, mounts) and the network (deb.debian.org): exits 77 (skipped) when
# either is missing. Not part of the default ctest runs (CONFIGURATIONS install); run it with
#   ctest --test-dir BUILD_DIR -C install -L install --output-on-failure
# Environment: GPULAB_INSTALL_TEST_CACHE (default ~/.cache/gpulab-install-test),
# GPULAB_INSTALL_TEST_MIRROR (default http://deb.debian.org/debian), GPULAB_INSTALL_TEST_KEEP=1
# (keep the root for inspection; its path is printed).
set -euo pipefail

SUITE=bookworm
MIRROR=${GPULAB_INSTALL_TEST_MIRROR:-http://deb.debian.org/debian}
CACHE=${GPULAB_INSTALL_TEST_CACHE:-${HOME:-/root}/.cache/gpulab-install-test}
SRC_DIR=$(cd "$(dirname "$0")/../.." && pwd)

BUILD_DIR=build
DEB=
while [[ $# -gt 0 ]]; do
  case $1 in
    --deb) DEB=$(realpath "$2"); shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) BUILD_DIR=$1; shift ;;
  esac
done

log() { printf '::: %s\n' "$*"; }
skip() { printf 'SKIP: %s\n' "$*"; exit 77; }

# --- preconditions ---------------------------------------------------------------------------------
[[ $(id -u) -eq 0 ]] || skip "the install test needs root (debootstrap, chroot); run it as root"
for tool in debootstrap chroot mount umount findmnt readelf; do
  command -v "$tool" >/dev/null || skip "'$tool' is missing (apt-get install debootstrap binutils util-linux)"
done
host=${MIRROR#*://}; host=${host%%/*}; port=80; [[ $MIRROR == https://* ]] && port=443
timeout 20 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null || skip "no network: $host:$port is unreachable"

# --- 1. the package --------------------------------------------------------------------------------
if [[ -z $DEB ]]; then
  BUILD_DIR=$(realpath "$BUILD_DIR")
  [[ -f $BUILD_DIR/CPackConfig.cmake ]] || { echo "FAIL: $BUILD_DIR is not a configured build (no CPackConfig.cmake)"; exit 1; }
  log "Packing $BUILD_DIR with cpack"
  rm -f "$BUILD_DIR"/packages/gpulab_*.deb
  (cd "$BUILD_DIR" && cpack -G DEB) | sed 's/^/    /'
  DEB=$(find "$BUILD_DIR/packages" -maxdepth 1 -name 'gpulab_*.deb' | head -n1)
fi
# A CUDA build also makes gpulab-cuda (the module); it is installed too, into a root that has no
# CUDA libraries, driver or GPU -- where GPU Lab must start, run on the CPU, and say why.
CUDA_DEB=$(find "$(dirname "$DEB")" -maxdepth 1 -name "gpulab-cuda_$(dpkg-deb --field "$DEB" Version)_*.deb" | head -n1)
# A build with GPU Lab's torch (python/) also makes python3-gpulab: installed too, and checked below.
PY_DEB=$(find "$(dirname "$DEB")" -maxdepth 1 -name "python3-gpulab_$(dpkg-deb --field "$DEB" Version)_*.deb" | head -n1)
[[ -f $DEB ]] || { echo "FAIL: no package at '$DEB'"; exit 1; }
log "Package: $DEB"
dpkg-deb --field "$DEB" Package Version Architecture Depends Recommends Suggests | sed 's/^/    /'

# --- 2. a fresh Debian 12 root ---------------------------------------------------------------------
mkdir -p "$CACHE/apt-archives/partial"
ARCH=$(dpkg --print-architecture)
TARBALL=$CACHE/debootstrap-$SUITE-minbase-$ARCH.tgz
ROOT=$(mktemp -d /tmp/gpulab-install-test.XXXXXX)
chmod 755 "$ROOT"  # it becomes "/": users such as apt's _apt must be able to enter it

cleanup() {
  local rc=$?
  # Unmount everything below the root (deepest first), and delete it only when nothing is mounted.
  findmnt -rn -o TARGET | grep -F "$ROOT/" | sort -r | while read -r m; do umount -l "$m" || true; done
  if [[ ${GPULAB_INSTALL_TEST_KEEP:-0} == 1 ]]; then
    echo "(root kept: $ROOT)"
  elif findmnt -rn -o TARGET | grep -qF "$ROOT/"; then
    echo "warning: something is still mounted under $ROOT; not deleting it"
  else
    rm -rf --one-file-system "$ROOT"
  fi
  exit $rc
}
trap cleanup EXIT

if [[ ! -s $TARBALL ]] || [[ -n $(find "$TARBALL" -mtime +30) ]]; then
  log "Downloading Debian $SUITE (minbase) into the cache: $TARBALL"
  rm -f "$TARBALL"
  debootstrap --variant=minbase --make-tarball="$TARBALL.part" "$SUITE" "$ROOT.tarball-work" "$MIRROR" > "$CACHE/make-tarball.log" 2>&1 \
    || { tail -n 20 "$CACHE/make-tarball.log"; rm -rf "$ROOT.tarball-work"; echo "FAIL: debootstrap --make-tarball"; exit 1; }
  rm -rf "$ROOT.tarball-work"
  mv "$TARBALL.part" "$TARBALL"
fi
log "debootstrap --variant=minbase $SUITE into $ROOT (from the cached tarball)"
t0=$SECONDS
debootstrap --variant=minbase --unpack-tarball="$TARBALL" "$SUITE" "$ROOT" "$MIRROR" > "$CACHE/debootstrap.log" 2>&1 \
  || { tail -n 20 "$CACHE/debootstrap.log"; echo "FAIL: debootstrap"; exit 1; }
log "  done in $((SECONDS - t0)) s"

mount -t proc proc "$ROOT/proc"
mount -t sysfs sysfs "$ROOT/sys"
mount --bind "$CACHE/apt-archives" "$ROOT/var/cache/apt/archives"
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
cat > "$ROOT/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb http://security.debian.org/debian-security $SUITE-security main
EOF
# No services start inside the root.
printf '#!/bin/sh\nexit 101\n' > "$ROOT/usr/sbin/policy-rc.d"
chmod +x "$ROOT/usr/sbin/policy-rc.d"
cp "$DEB" "$ROOT/tmp/"
PKG=/tmp/$(basename "$DEB")
CUDA_PKG=()
if [[ -n $CUDA_DEB ]]; then
  cp "$CUDA_DEB" "$ROOT/tmp/"
  CUDA_PKG=("/tmp/$(basename "$CUDA_DEB")")
fi
if [[ -n $PY_DEB ]]; then
  cp "$PY_DEB" "$ROOT/tmp/"
  CUDA_PKG+=("/tmp/$(basename "$PY_DEB")")
fi

in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }

# --- 3. apt-get install ----------------------------------------------------------------------------
log "apt-get update"
in_root apt-get update -q 2>&1 | tail -n 3 | sed 's/^/    /'
log "Recommends resolve (simulated install with recommends)"
in_root apt-get install -s -q "$PKG" > "$ROOT/tmp/simulate.log" 2>&1 \
  || { cat "$ROOT/tmp/simulate.log"; echo "FAIL: the package's dependencies or recommends do not resolve"; exit 1; }
grep -E '^Inst (dataset-fashion-mnist|qt6-wayland) ' "$ROOT/tmp/simulate.log" | sed 's/^/    /' || true
log "apt-get install --no-install-recommends $PKG"
t0=$SECONDS
in_root apt-get install -y -q --no-install-recommends "$PKG" "${CUDA_PKG[@]}" > "$ROOT/tmp/install.log" 2>&1 \
  || { tail -n 30 "$ROOT/tmp/install.log"; echo "FAIL: apt-get install"; exit 1; }
grep -E '^(Setting up gpulab|[0-9]+ upgraded)' "$ROOT/tmp/install.log" | sed 's/^/    /' || true
log "  done in $((SECONDS - t0)) s"

# --- 4. checks -------------------------------------------------------------------------------------
FAILS=0
pass() { printf 'PASS: %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*"; FAILS=$((FAILS + 1)); }
# expect DESCRIPTION COMMAND...: PASS or FAIL by the command's exit status.
expect() { local what=$1; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }
contains() { [[ $1 == *"$2"* ]]; }
# Runs a command in the root, shows its output indented, and records PASS/FAIL by its exit status.
check_run() {
  local what=$1; shift
  local out rc=0
  out=$(in_root "$@" 2>&1) || rc=$?
  printf '%s\n' "$out" | sed 's/^/    | /'
  if [[ $rc -eq 0 ]]; then pass "$what"; else fail "$what (exit status $rc)"; fi
  LAST_OUT=$out
}

log "Installed files"
APP_ID=io.github.gpulab.GpuLab
for f in /usr/bin/gpulab /usr/bin/gpulab-cli \
         /usr/share/applications/$APP_ID.desktop /usr/share/metainfo/$APP_ID.metainfo.xml \
         /usr/share/icons/hicolor/16x16/apps/$APP_ID.png /usr/share/icons/hicolor/32x32/apps/$APP_ID.png \
         /usr/share/icons/hicolor/48x48/apps/$APP_ID.png /usr/share/icons/hicolor/64x64/apps/$APP_ID.png \
         /usr/share/icons/hicolor/128x128/apps/$APP_ID.png /usr/share/icons/hicolor/256x256/apps/$APP_ID.png \
         /usr/share/icons/hicolor/scalable/apps/$APP_ID.svg \
         /usr/share/man/man1/gpulab.1.gz /usr/share/man/man1/gpulab-cli.1.gz \
         /usr/share/doc/gpulab/copyright /usr/share/doc/gpulab/changelog.Debian.gz; do
  if [[ -s $ROOT$f ]]; then pass "installed $f"; else fail "missing $f"; fi
done
if in_root gzip -t /usr/share/man/man1/gpulab.1.gz /usr/share/man/man1/gpulab-cli.1.gz; then
  pass "the man pages decompress"
else
  fail "a man page is not valid gzip"
fi

log "RUNPATH of the installed programs and libraries"
while read -r f; do
  rp=$(readelf -d "$ROOT$f" | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p')
  if [[ -z $rp ]]; then pass "$f: no RUNPATH"
  elif [[ $rp == *"$SRC_DIR"* || $rp == *openblas-pthread* || $rp == /* ]]; then fail "$f: build-tree or absolute RUNPATH '$rp'"
  else pass "$f: RUNPATH '$rp'"; fi
done < <(in_root dpkg -L gpulab ${PY_DEB:+python3-gpulab} | grep -E '^/usr/(bin/|lib/.*\.so)' | while read -r p; do [[ -f $ROOT$p ]] && echo "$p"; done)

log "gpulab-cli devices"
check_run "gpulab-cli devices" gpulab-cli devices
expect "devices names the CPU as the default device" contains "$LAST_OUT" "default device: cpu"
if [[ -n $CUDA_DEB ]]; then
  expect "the CUDA build says why it cannot use a GPU here" contains "$LAST_OUT" "CUDA module could not be loaded"
  expect "... naming the missing CUDA library" contains "$LAST_OUT" "cannot open shared object file"
fi

log "gpulab-cli lesson device-setup --quick"
check_run "gpulab-cli lesson device-setup --quick" gpulab-cli lesson device-setup --quick

if [[ -n $PY_DEB ]]; then
  log "python3-gpulab: import gpulab, and gpulab-cli run of a PyTorch script"
  check_run "python3 -c 'import gpulab'" python3 -c "import gpulab; print(gpulab, gpulab.__version__)"
  expect "the package says it is GPU Lab's torch" contains "$LAST_OUT" "GPU Lab"
  cat > "$ROOT/tmp/train.py" <<'PY'
import torch
import torch.nn as nn
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 4), torch.randn(32, 1)
for _ in range(5):
    optimizer.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
print(f"loss {loss.item():.4f} on {x.device}; cuda available: {torch.cuda.is_available()}")
PY
  check_run "gpulab-cli run (a training loop)" gpulab-cli run /tmp/train.py
  expect "the script trained without a GPU" contains "$LAST_OUT" "on cpu; cuda available: False"
  check_run "gpulab-cli run --emulated-gpu" gpulab-cli run --emulated-gpu /tmp/train.py
  expect "... and saw the emulated GPU" contains "$LAST_OUT" "cuda available: True"
fi

log "--version"
VERSION=$(dpkg-deb --field "$DEB" Version); VERSION=${VERSION%%-*}
# (The help texts are captured first: grep -q closing a pipe early would fail it under pipefail.)
CLI_HELP=$(in_root gpulab-cli --help 2>&1 || true)
# No display here (and no QT_QPA_PLATFORM): --help and --version must not need one.
GUI_HELP=$(in_root gpulab --help 2>&1 || true)
if [[ $CLI_HELP == *--version* ]]; then
  check_run "gpulab-cli --version" gpulab-cli --version
  expect "gpulab-cli --version names the package's version $VERSION" contains "$LAST_OUT" "$VERSION"
else
  echo "SKIP: gpulab-cli has no --version option yet (its --help lists none); not checked"
fi
if [[ $GUI_HELP == *--version* ]]; then
  check_run "gpulab --version (no display)" gpulab --version
  expect "gpulab --version names the package's version $VERSION" contains "$LAST_OUT" "$VERSION"
else
  echo "SKIP: gpulab has no --version option yet (its --help lists none); not checked"
fi

log "The GUI starts and quits (offscreen platform)"
if [[ $GUI_HELP == *--quit-when-shown* ]]; then
  check_run "gpulab --quit-when-shown" env QT_QPA_PLATFORM=offscreen gpulab --quit-when-shown
else
  echo "SKIP: gpulab has no --quit-when-shown option; the GUI start is not checked"
fi

log "apt-get purge gpulab"
if in_root apt-get purge -y -q gpulab > "$ROOT/tmp/purge.log" 2>&1; then pass "purge"; else tail -n 20 "$ROOT/tmp/purge.log"; fail "purge"; fi
left=$(ls -d "$ROOT"/usr/bin/gpulab* "$ROOT"/usr/share/applications/$APP_ID.desktop "$ROOT"/usr/lib/gpulab "$ROOT"/usr/lib/*/gpulab \
         "$ROOT"/usr/lib/python3/dist-packages/gpulab 2>/dev/null || true)
expect "nothing of gpulab is left after the purge${left:+ (left: $left)}" test -z "$left"

echo
if [[ $FAILS -eq 0 ]]; then echo "install test: all checks passed"; else echo "install test: $FAILS check(s) failed"; exit 1; fi
