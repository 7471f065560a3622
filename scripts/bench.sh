#!/usr/bin/env bash
# Regenerates bench/RESULTS.md: the micro-benchmarks (-count 10), benchstat,
# the retry storm, its plot, and the amplification table. Takes ~5 minutes.
# Run it on a quiet machine: the figures are only as steady as the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/out
go test -run '^$' -bench 'BenchmarkCall' -count "${COUNT:-10}" ./bench | tee bench/out/bench.txt
(cd tools/bench && go tool benchstat ../../bench/out/bench.txt) > bench/out/benchstat.txt
go run ./bench/cmd/results
(cd tools/bench && go run ./plot ../../bench/storm.csv ../../bench/storm.png)
echo "wrote bench/RESULTS.md and bench/storm.png"
