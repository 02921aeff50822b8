#!/bin/sh
# ctest script: runs a lesson in full (`gpulab-cli lesson ID --json`, every run block with the lesson's
# own parameters) and fails unless the measurement NAME of its run number RUN is at least MIN -- a claim
# the lesson makes about its own runs ("this CNN reaches 0.92 in this run's epochs"), checked as a
# learner would get it. Plain sh, as check_fashion_accuracy.sh.
#   check_lesson_measurement.sh CLI LESSON RUN NAME MIN
cli=$1 lesson=$2 run=$3 name=$4 min=$5
out=$("$cli" lesson "$lesson" --json) || { echo "gpulab-cli lesson $lesson failed ($?)"; exit 1; }
# The measurement lines after the '"event":"run","index":RUN' line and before the next run.
value=$(printf '%s\n' "$out" | awk -v run="$run" -v name="$name" '
  /"event":"run"/ { inside = index($0, "\"index\":" run ",") > 0 }
  inside && /"event":"measurement"/ && index($0, "\"name\":\"" name "\"") > 0 {
    sub(/.*"value":/, ""); sub(/[,}].*/, ""); print; exit }')
printf '%s\n' "$out" | grep -E '"event":"(epoch|device)"'
echo "$lesson, run $run: $name = ${value:-none} (required: at least $min)"
[ -n "$value" ] && awk -v a="$value" -v m="$min" 'BEGIN { exit !(a >= m) }' || { echo "$name ${value:-none} is below $min"; exit 1; }
