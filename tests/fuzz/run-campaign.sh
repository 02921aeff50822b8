#!/usr/bin/env bash
# A long fuzzing campaign for one target: builds the `fuzz` preset (clang, CPU-only) if needed and
# runs the target on its corpus until it has done RUNS executions or SECONDS seconds.
#   tests/fuzz/run-campaign.sh fuzz_lesson [runs=10000000] [jobs=1] [seconds=0: no limit]
# Corpus: build-fuzz/tests/fuzz/corpus/<target> (kept between campaigns); crashes:
# build-fuzz/tests/fuzz/artifacts/; log: build-fuzz/tests/fuzz/<target>.log (and fuzz-<n>.log per job).
# A crash is a bug: copy the reproducer to tests/fuzz/crashes/ and run it with `<target> <file>`.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${1:?usage: $0 fuzz_lesson|fuzz_idx|fuzz_state_dict [runs] [jobs] [seconds]}
runs=${2:-10000000}
jobs=${3:-1}
seconds=${4:-0}
[ -f build-fuzz/build.ninja ] || cmake --preset fuzz
cmake --build build-fuzz --target "$target"
src=tests/fuzz
out=build-fuzz/tests/fuzz
mkdir -p "$out/corpus/$target" "$out/artifacts"
case $target in
  fuzz_lesson) seeds=(lessons/01-device-setup lessons/02-same-device-rule lessons/03-training-loop $src/crashes); dict=(-dict=$src/lesson.dict) ;;
  fuzz_idx) seeds=($src/seeds/idx $src/crashes); dict=() ;;
  fuzz_state_dict) seeds=($src/seeds/state_dict $src/crashes); dict=() ;;
  *) echo "unknown target $target" >&2; exit 2 ;;
esac
args=(-runs="$runs" -rss_limit_mb=2048 -timeout=10 -max_len=65536 -report_slow_units=1
      -print_final_stats=1 -artifact_prefix="$out/artifacts/$target-" "${dict[@]}")
[ "$seconds" -gt 0 ] && args+=(-max_total_time="$seconds")
if [ "$jobs" -gt 1 ]; then args+=(-jobs="$jobs" -workers="$jobs"); fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
echo "fuzzing $target: ${args[*]}"
build-fuzz/bin/"$target" "${args[@]}" "$out/corpus/$target" "${seeds[@]}" 2>&1 | tee "$out/$target.log"
