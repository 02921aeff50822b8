#!/usr/bin/env bash
# Installs what GPU Lab needs to build, test and run, from Debian/Ubuntu packages (only what is
# missing). The CUDA toolkit is optional and not installed here: with it in /usr/local/cuda the CUDA
# backend is built as well. python3-dev and pybind11-dev build GPU Lab's torch (python/).
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config qt6-base-dev libqcustomplot-dev libopenblas-dev
          zlib1g-dev dataset-fashion-mnist python3-dev pybind11-dev "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  echo "install-deps: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
