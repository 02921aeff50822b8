#!/usr/bin/env bash
# Re-records resources/reference-runs/: every lesson's runs, full length, on this machine's GPU, as the
# JSON stream `gpulab-cli lesson ID --json` prints, after a header naming the GPU, driver, CUDA
# version, date, command and commit. The app offers them to learners as overlays labelled
# "reference: <GPU>, recorded <date> — not your machine".
#
#   scripts/record-reference-runs.sh [CLI] [OUTDIR]      (defaults: build/bin/gpulab-cli, resources/reference-runs)
#
# On a bare GPU machine, through the packed build (scripts/pack-for-gpu.sh):
#   bash .device/unpack.sh bash "$PWD/scripts/record-reference-runs.sh" ./bin/gpulab-cli "$OUT/reference-runs"
# GPULAB_COMMIT names the commit when the tree has no .git (the packed copy has none).
# GPULAB_LESSON_TIMEOUT (seconds, default 600) bounds each lesson; GPULAB_LESSONS names a subset.
# A lesson that fails or times out is reported and left unrecorded (its old file stays); the others
# are still recorded, and the exit status is 1.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cli=${1:-$here/build/bin/gpulab-cli}
out=${2:-$here/resources/reference-runs}
commit=${GPULAB_COMMIT:-$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)}
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0) || { echo "record-reference-runs.sh: no NVIDIA GPU here (nvidia-smi failed)" >&2; exit 2; }
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0)
cuda=$("$cli" devices --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["driver_version"])')
"$cli" devices | grep -q '^default device: cuda' || { echo "record-reference-runs.sh: gpulab-cli cannot use the GPU:" >&2; "$cli" devices >&2; exit 2; }
date=$(date -u +%Y-%m-%d)
mkdir -p "$out"
failed=0
for id in ${GPULAB_LESSONS:-$("$cli" lessons | cut -f1)}; do
  tmp="$out/.$id.jsonl.tmp"
  python3 - "$id" "$gpu" "$driver" "$cuda" "$date" "$commit" > "$tmp" <<'PY'
import json, sys
lesson, gpu, driver, cuda, date, commit = sys.argv[1:]
print(json.dumps({"event": "reference", "lesson": lesson, "gpu": gpu, "driver": driver, "cuda": cuda, "date": date,
                  "command": f"gpulab-cli lesson {lesson} --json", "commit": commit}, ensure_ascii=False))
PY
  start=$SECONDS
  rc=0
  timeout --kill-after=10 "${GPULAB_LESSON_TIMEOUT:-600}" "$cli" lesson "$id" --json >> "$tmp" || rc=$?
  if [ "$rc" -eq 0 ]; then
    mv "$tmp" "$out/$id.jsonl"
    echo "recorded $out/$id.jsonl ($(wc -l < "$out/$id.jsonl") lines, $((SECONDS - start)) s)"
  else
    mv "$tmp" "$out/$id.failed-jsonl"
    echo "FAILED $id: rc=$rc after $((SECONDS - start)) s (its output: $out/$id.failed-jsonl)" >&2
    failed=1
  fi
done
exit "$failed"
