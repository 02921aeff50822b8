#!/usr/bin/env bash
# Sets up a fresh Debian/Ubuntu machine, builds GPU Lab (default preset) and launches the app.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset default
cmake --build --preset default
exec build/bin/gpulab "$@"
