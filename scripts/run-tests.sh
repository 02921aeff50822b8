#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine, builds GPU Lab (default preset) and runs every test.
# GPULAB_CUDA_ARCHITECTURES (e.g. "75") narrows the CUDA architectures to save build time.
set -euo pipefail
cd "$(dirname "$0")/.."
# python3-torch: the reference the tests compare with (the memory history export, GPU Lab's torch).
scripts/install-deps.sh python3-torch
cmake --preset default ${GPULAB_CUDA_ARCHITECTURES:+-DCMAKE_CUDA_ARCHITECTURES=$GPULAB_CUDA_ARCHITECTURES}
cmake --build --preset default
# Two tests at a time on a machine without a GPU (the timed ones still run alone: RUN_SERIAL); one at
# a time beside a GPU, whose memory the out-of-memory lessons fill on purpose.
jobs=2
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then jobs=1; fi
ctest --preset default -j "$jobs"
