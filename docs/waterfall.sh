#!/usr/bin/env bash
# Generates docs/waterfall-503.png, the README's picture of the always-503
# waterfall: the demo's always-503 scenario (go run ./examples/agent), drawn
# by retrace explain -html and photographed by headless Chromium. The PNG is
# this script's output: regenerate it by running the script, never edit it.
#
#   docs/waterfall.sh        # needs Go and Chromium (Debian's package chromium)
#
# RETRACE_CHROMIUM names Chromium's binary when it is not chromium or
# chromium-browser on PATH. The picture must stay under 300 KB.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

chromium=${RETRACE_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$chromium" ]; then
  echo "docs/waterfall.sh: no Chromium: install Debian's package chromium, or set RETRACE_CHROMIUM to its binary" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

go run ./examples/agent -scenario always-503 -quiet -otlp-file "$work/always-503.json" >/dev/null
# Built, then run in the work directory, so that the page names its input
# always-503.json rather than a temporary path.
go build -o "$work/retrace" ./cmd/retrace
(cd "$work" && ./retrace explain -otlp-file always-503.json -html waterfall.html)

# The window is as tall as the page's header and its 31 rows. The proxy
# refuses every connection: the page needs none.
"$chromium" --headless --no-sandbox --disable-gpu --hide-scrollbars \
  --force-device-scale-factor=1 --window-size=1280,1200 \
  --user-data-dir="$work/profile" --proxy-server=http://127.0.0.1:9 \
  --screenshot="$work/waterfall.png" "file://$work/waterfall.html" >"$work/chromium.log" 2>&1 ||
  { cat "$work/chromium.log" >&2; exit 1; }

size=$(stat -c %s "$work/waterfall.png")
if [ "$size" -ge $((300 * 1024)) ]; then
  echo "docs/waterfall.sh: the picture is $size bytes; it must stay under 300 KB" >&2
  exit 1
fi
cp "$work/waterfall.png" "$repo/docs/waterfall-503.png"
echo "docs/waterfall-503.png: $size bytes"
