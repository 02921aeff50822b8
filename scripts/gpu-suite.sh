#!/usr/bin/env bash
# Everything issue 7 asks of a GPU machine, in one command, with a log per stage and a summary.
# Runs inside a CUDA build directory (bash .device/run.sh does the cd; see ../shared/gpu-run):
#
#   bash .device/run.sh bash "$PWD/scripts/gpu-suite.sh" "$OUT" [STAGE...]
#
# Stages (default: all, in this order):
#   info      nvidia-smi, gpulab-cli devices
#   ctest     the whole suite with the GPU usable (the slow Fashion-MNIST check included)
#   sanitize  compute-sanitizer memcheck over every GPU-using suite, racecheck/synccheck over the kernels
#   lessons   every lesson headless on the GPU (full runs, not --quick)
#   bench     tests/bench/compare_pytorch.py (training loops), amp_bench.py (mixed precision) and gpu_bench.py (GEMM, copies,
#             bandwidth): GPU Lab against PyTorch on the same GPU
#   record    re-records resources/reference-runs/ into OUT/reference-runs
# Each stage has its own time limit so one hang cannot eat the device time of the others.
set -uo pipefail
out=${1:?usage: gpu-suite.sh OUTDIR [STAGE...]}
shift
stages=${*:-info ctest sanitize lessons bench}
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' CMakeCache.txt)
mkdir -p "$out"
summary="$out/summary.txt"
cli=./bin/gpulab-cli

stage() {  # stage NAME LIMIT_S COMMAND...: runs COMMAND with a limit, logs it, records pass/fail
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  printf '%-28s rc=%-3s %4ss  %s\n' "$name" "$rc" "$((SECONDS - start))" "$*" | tee -a "$summary"
}

for s in $stages; do
  case $s in
    info)
      stage nvidia-smi 30 nvidia-smi
      stage devices 60 "$cli" devices ;;
    ctest)
      stage ctest 300 ctest --output-on-failure --timeout 150
      grep -E "tests passed|tests failed|\*\*\*|Failed|SKIP|PASS|FAIL!" "$out/ctest.log" | head -80 > "$out/ctest-brief.log" ;;
    sanitize)
      for t in ${SANITIZE_SUITES:-test_cuda_parity test_device_rule test_memory test_data test_training}; do
        # A speed claim cannot hold with every access instrumented: its test runs unsanitised in ctest.
        fns=$("bin/$t" -functions | sed 's/()$//' | grep -vx 'devicesLabMeasuresMatmul')
        # shellcheck disable=SC2086
        stage "memcheck-$t" 240 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 99 --print-limit 30 "bin/$t" $fns
      done
      stage racecheck-test_cuda_parity 240 compute-sanitizer --tool racecheck --error-exitcode 99 --print-limit 30 bin/test_cuda_parity
      stage synccheck-test_cuda_parity 240 compute-sanitizer --tool synccheck --error-exitcode 99 --print-limit 30 bin/test_cuda_parity
      grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|Totals" "$out"/memcheck-*.log "$out"/racecheck-*.log "$out"/synccheck-*.log > "$out/sanitizer-brief.log" 2>/dev/null ;;
    lessons)
      for id in $("$cli" lessons | cut -f1); do
        stage "lesson-$id" 90 "$cli" lesson "$id"
      done ;;
    bench)
      stage bench-training 150 python3 "$src/tests/bench/compare_pytorch.py" --cli "$cli" --device cuda
      [ -e "$src/tests/bench/gpu_bench.py" ] &&
        stage bench-gpu 300 python3 "$src/tests/bench/gpu_bench.py" --bench ./bin/gpulab-bench-gpu --json "$out/gpu_bench.json"
      stage bench-amp 240 python3 "$src/tests/bench/amp_bench.py" --bench ./bin/gpulab-bench-amp --device cuda --json "$out/amp.json" ;;
    record)
      stage record 420 bash "$src/scripts/record-reference-runs.sh" "$cli" "$out/reference-runs" ;;
    *) echo "gpu-suite.sh: unknown stage '$s'" | tee -a "$summary" ;;
  esac
done
