#!/usr/bin/env bash
# Takes the README's screenshot: the app in a virtual X server (Xvfb) at 1280x800, mid-run on the
# training-loop lesson (Fashion-MNIST, live plots, next to the run recorded on a real GPU), captured
# with ImageMagick.
# Needs xvfb and imagemagick (apt-get install xvfb imagemagick).
#   scripts/screenshot.sh [BUILD_DIR] [OUTPUT]     (defaults: build, resources/screenshot.png)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
output=${2:-resources/screenshot.png}
command -v xvfb-run >/dev/null && command -v import >/dev/null || { echo "screenshot.sh: install xvfb and imagemagick"; exit 2; }
export QT_QPA_PLATFORM=xcb
xvfb-run -a -s "-screen 0 1280x800x24" bash -c "
  '$build/bin/gpulab' --open training-loop --run-index 2 --run --compare & app=\$!
  sleep \${GPULAB_SCREENSHOT_DELAY:-4}
  import -window root '$output'
  kill \$app"
echo "screenshot.sh: wrote $output"
