#!/usr/bin/env bash
# Cold start: wall time from launching gpulab to its first lesson on screen (and the process gone
# again), the median of 5 launches. Target: under 1 second.
#   tests/bench/cold_start.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
export QT_QPA_PLATFORM=${QT_QPA_PLATFORM:-offscreen}
times=()
for i in 1 2 3 4 5; do
  start=$(date +%s%N)
  "$build/bin/gpulab" --open device-setup --quit-when-shown 2>/dev/null
  end=$(date +%s%N)
  times+=($(( (end - start) / 1000000 )))
done
median=$(printf '%s\n' "${times[@]}" | sort -n | sed -n 3p)
echo "cold start to the first lesson shown: median ${median} ms of (${times[*]}) (target < 1000 ms) -> $([ "$median" -lt 1000 ] && echo OK || echo TOO SLOW)"
