#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine, builds GPU Lab (default preset) and runs every test.
# GPULAB_CUDA_ARCHITECTURES (e.g. "75") narrows the CUDA architectures to save build time.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset default ${GPULAB_CUDA_ARCHITECTURES:+-DCMAKE_CUDA_ARCHITECTURES=$GPULAB_CUDA_ARCHITECTURES}
cmake --build --preset default
ctest --preset default
