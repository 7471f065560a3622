#!/usr/bin/env bash
# fuzz: every fuzz target of the core module, explored beyond its seed
# corpus for a while (coverage-guided, without the race detector). A failure
# prints the input that broke it, and the go command writes it under the
# package's testdata/fuzz, where `go test` then runs it as a regression.
#
#   scripts/fuzz.sh                  every target, RETRACE_FUZZTIME each (default 30s)
#   scripts/fuzz.sh -without-sdks    only the targets whose test binary needs no
#                                    provider SDK (minutes less of compiling)
#
# A fuzzing build instruments every package of the test binary, the
# standard library's included: a target whose tests import openai-go or
# anthropic-sdk-go costs minutes of compiling before the first input. CI
# explores none of them (the fuzzing builds alone would cost minutes of its
# 20): it runs every target's seed corpus and committed regressions as
# tests (go test -race ./...). Run this script after touching a parser (the
# SSE decoder, ErrorFrom, the classifier, the redaction scanner) and before
# a release, and commit what it finds.
set -euo pipefail
cd "$(dirname "$0")/.."

without_sdks=false
case "${1:-}" in
  "") ;;
  -without-sdks) without_sdks=true ;;
  *) echo "usage: $0 [-without-sdks]" >&2; exit 2 ;;
esac
fuzztime="${RETRACE_FUZZTIME:-30s}"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

# The fuzzers build without the race detector (whatever GOFLAGS says): a
# fuzzing build is its own build mode anyway, and runs faster without it.
fuzz_once() {
  GOFLAGS="-mod=readonly -trimpath" go test -run '^$' -fuzz "^$2\$" -fuzztime "$fuzztime" -fuzzminimizetime 1s "$1" 2>&1 | tee "$log"
  return "${PIPESTATUS[0]}"
}

for dir in $(grep -rl --include='*_test.go' --exclude-dir=contrib --exclude-dir=examples --exclude-dir=tools '^func Fuzz' . | xargs -n1 dirname | sort -u); do
  targets=$(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go | sed 's/^func //' | sort -u)
  if $without_sdks && go list -test -deps "$dir" | grep -qE '^github.com/(openai/openai-go|anthropics/anthropic-sdk-go)'; then
    echo "-- $dir $(echo $targets): its tests import a provider SDK; seeds and regressions only (they ran as tests)"
    continue
  fi
  for target in $targets; do
    echo "-- $dir $target"
    if ! fuzz_once "$dir" "$target"; then
      # Go's fuzzing engine can end a run whose time is up with "context
      # deadline exceeded" while a worker minimizes, on a loaded machine,
      # without any failing input: that is its own deadline, not a finding,
      # and the target runs once more. A failing input is always written.
      if grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
        echo "-- $dir $target: the engine's deadline, no failing input; once more"
        fuzz_once "$dir" "$target"
      else
        exit 1
      fi
    fi
  done
done
