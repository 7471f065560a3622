#!/usr/bin/env bash
# Jaeger v2 without Docker: built from the Go module proxy in its own tools
# module (tools/jaeger, never the library's go.mod), kept between runs, and run
# with memory storage on 127.0.0.1 only.
#
#   scripts/jaeger.sh build   # build once (minutes the first time), print the binary's path
#   scripts/jaeger.sh run     # run it in the foreground: OTLP 127.0.0.1:4317 (gRPC) and :4318 (HTTP),
#                             # the query API at http://127.0.0.1:16686/api/v3/ (no UI: see below)
#
# Built from the Go module proxy, Jaeger serves its query API but no UI: the
# UI's assets are not in the Go module (its ui/actual/ is empty), so
# http://127.0.0.1:16686 shows a placeholder page. See a trace through the API
# with retrace explain, as text or as one offline page with a waterfall:
#
#   go run ./cmd/retrace explain -jaeger http://127.0.0.1:16686 -trace ID -html trace.html
#
# Jaeger's UI comes with its image: docker compose -f docker-compose.otel.yml up.
#
# The binary is kept in $RETRACE_CACHE (default ~/.cache/retrace).
# RETRACE_JAEGER_VERSION builds another module version of Jaeger than the one
# tools/jaeger/go.mod pins, through a temporary copy of that go.mod (which
# stays as it is); a version that does not exist makes the build fail, which
# is how to check that CI fails without Jaeger.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
pinned="v1.76.0" # the module version of Jaeger 2.13, as tools/jaeger/go.mod requires it
version="${RETRACE_JAEGER_VERSION:-$pinned}"
cache="${RETRACE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/retrace}"
bin="$cache/jaeger-$version"

build() {
  if [ -x "$bin" ]; then
    echo "$bin"
    return
  fi
  mkdir -p "$cache"
  echo "building Jaeger $version from the Go module proxy (minutes the first time)..." >&2
  # A tool that serves the few traces of a demo or a test: built without
  # the compiler's optimizations and without debug information, which takes
  # a fifth less CPU on a fresh machine (a 2-core CI's first minutes).
  flags=(-trimpath "-gcflags=all=-N -l" "-ldflags=-s -w")
  if [ "$version" = "$pinned" ]; then
    (cd "$root/tools/jaeger" && go build "${flags[@]}" -o "$bin.tmp.$$" github.com/jaegertracing/jaeger/cmd/jaeger)
  else
    mod="$(mktemp -d)"
    trap 'rm -rf "$mod"' EXIT
    cp "$root/tools/jaeger/go.mod" "$root/tools/jaeger/go.sum" "$mod/"
    go mod edit -require="github.com/jaegertracing/jaeger@$version" "$mod/go.mod"
    (cd "$root/tools/jaeger" && go build "${flags[@]}" -mod=mod -modfile="$mod/go.mod" -o "$bin.tmp.$$" github.com/jaegertracing/jaeger/cmd/jaeger)
  fi
  mv "$bin.tmp.$$" "$bin"
  echo "$bin"
}

case "${1:-}" in
  build) build ;;
  run)
    jaeger="$(build)"
    # Said before Jaeger starts, so that nobody looks for a UI on 16686.
    cat >&2 <<'SAY'
jaeger: OTLP on 127.0.0.1:4317 (gRPC) and 127.0.0.1:4318 (HTTP); the query API on
http://127.0.0.1:16686/api/v3/ and no UI (built from the Go module proxy, Jaeger has
no UI assets). See a trace with retrace explain, as text or as an offline page:
  go run ./cmd/retrace explain -jaeger http://127.0.0.1:16686 -trace ID -html trace.html
SAY
    exec "$jaeger" --config "$root/tools/jaeger/config.yaml"
    ;;
  path) echo "$bin" ;;
  *) echo "usage: $0 build|run|path" >&2; exit 2 ;;
esac
