#!/usr/bin/env bash
# Takes the README's screenshot: runs the app in a virtual X server (Xvfb) at 1280x800 and captures
# the screen. Needs xvfb and imagemagick (apt-get install xvfb imagemagick).
#   scripts/screenshot.sh [BUILD_DIR] [OUTPUT]     (defaults: build, resources/screenshot.png)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
output=${2:-resources/screenshot.png}
command -v xvfb-run >/dev/null && command -v import >/dev/null || { echo "screenshot.sh: install xvfb and imagemagick"; exit 2; }
xvfb-run -a -s "-screen 0 1280x800x24" bash -c "
  '$build/bin/gpulab' & app=\$!
  sleep \${GPULAB_SCREENSHOT_DELAY:-3}
  import -window root '$output'
  kill \$app"
echo "screenshot.sh: wrote $output"
