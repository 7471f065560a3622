#!/usr/bin/env bash
# The Temporal CLI's dev server without Docker: built from the Go module
# proxy in its own tools module (tools/temporal, never the library's go.mod),
# kept between runs, and run on 127.0.0.1 only, in memory.
#
#   scripts/temporal.sh build   # build once (minutes the first time), print the binary's path
#   scripts/temporal.sh run     # run the dev server in the foreground: frontend 127.0.0.1:7233, no UI
#   scripts/temporal.sh path    # the binary's path, built or not
#
# The binary is kept in $RETRACE_CACHE (default ~/.cache/retrace); tests and
# the demo find it there, or through RETRACE_TEMPORAL_BIN.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version="v1.5.1" # github.com/temporalio/cli, as tools/temporal/go.mod requires it
cache="${RETRACE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/retrace}"
bin="$cache/temporal-$version"

build() {
  if [ -x "$bin" ]; then
    echo "$bin"
    return
  fi
  mkdir -p "$cache"
  echo "building the Temporal CLI $version from the Go module proxy (minutes the first time)..." >&2
  # A dev server for a test's few workflows: built without the compiler's
  # optimizations and without debug information, which takes a fifth less
  # CPU on a fresh machine, as Jaeger's build does.
  (cd "$root/tools/temporal" && go build -trimpath "-gcflags=all=-N -l" "-ldflags=-s -w" -o "$bin.tmp.$$" github.com/temporalio/cli/cmd/temporal)
  mv "$bin.tmp.$$" "$bin"
  echo "$bin"
}

case "${1:-}" in
  build) build ;;
  run) exec "$(build)" server start-dev --headless --ip 127.0.0.1 --log-level warn ;;
  path) echo "$bin" ;;
  *) echo "usage: $0 build|run|path" >&2; exit 2 ;;
esac
