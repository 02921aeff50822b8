#!/usr/bin/env bash
# Takes the README's screenshots: the app in a virtual X server (Xvfb) at 1280x800, captured with
# ImageMagick, as a new learner sees it (a fresh settings folder):
#   resources/screenshot.png         mid-run on the training-loop lesson (Fashion-MNIST, live plots, next
#                                    to the run recorded on a real GPU)
#   resources/screenshot-memory.png  where GPU memory goes: the live stacked timeline by category
#   resources/screenshot-oom.png     out of memory: what memory held at the failed allocation
#   resources/screenshot-cell.png    a code cell run on the emulated GPU: its output and memory by category
# Needs xvfb and imagemagick (apt-get install xvfb imagemagick).
#   scripts/screenshot.sh [BUILD_DIR] [OUTPUT_DIR]     (defaults: build, resources)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
outdir=${2:-resources}
command -v xvfb-run >/dev/null && command -v import >/dev/null || { echo "screenshot.sh: install xvfb and imagemagick"; exit 2; }
export QT_QPA_PLATFORM=xcb
XDG_CONFIG_HOME=$(mktemp -d)
XDG_DATA_HOME=$XDG_CONFIG_HOME/data  # the progress file, edits of code cells included
export XDG_CONFIG_HOME XDG_DATA_HOME
trap 'rm -rf "$XDG_CONFIG_HOME"' EXIT

# shot OUTPUT DELAY_S GPULAB_ARGS...
shot() {
  local output=$1 delay=$2
  shift 2
  xvfb-run -a -s "-screen 0 1280x800x24" bash -c "
    '$build/bin/gpulab' $* & app=\$!
    sleep $delay
    import -window root '$output'
    kill \$app"
  echo "screenshot.sh: wrote $output"
}
shot "$outdir/screenshot.png" "${GPULAB_SCREENSHOT_DELAY:-4}" --open training-loop --run-index 2 --run --compare
shot "$outdir/screenshot-memory.png" 8 --open where-memory-goes --run --view memory
shot "$outdir/screenshot-oom.png" 12 --open out-of-memory --run --view oom-memory
shot "$outdir/screenshot-cell.png" 8 --open where-memory-goes --run-cell 3 --view cell-memory-categories
