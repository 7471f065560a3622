#!/usr/bin/env bash
# Regenerates bench/RESULTS.md: the micro-benchmarks and the two nested retry
# layers (BenchmarkCall, BenchmarkTwoLayers; ${COUNT:-10} rounds), benchstat,
# the retry storm, its plot, and the amplification table. Takes several
# minutes, more with a larger COUNT.
# Run it on a quiet machine: the figures are only as steady as the machine.
set -euo pipefail
cd "$(dirname "$0")/.."

count="${COUNT:-10}"
if [[ ! $count =~ ^[1-9][0-9]*$ ]]; then
	echo "bench.sh: COUNT must be a positive integer, not '$count'" >&2
	exit 2
fi
# The command that writes bench/out/bench.txt. It is run from this string,
# so the page states exactly the command that ran (-bench-cmd). It runs the
# whole set $count times, once per round, rather than each benchmark $count
# times in a row: the machine's drift (a neighbour, a frequency step) then
# falls on every variant of a comparison alike, not on one of them.
bench_cmd="for round in \$(seq $count); do go test -run '^\$' -bench 'BenchmarkCall|BenchmarkTwoLayers' -count 1 ./bench; done"

mkdir -p bench/out
eval "$bench_cmd" | tee bench/out/bench.txt
(cd tools/bench && go tool benchstat ../../bench/out/bench.txt) > bench/out/benchstat.txt
go run ./bench/cmd/results -bench-cmd "$bench_cmd"
(cd tools/bench && go run ./plot ../../bench/storm.csv ../../bench/storm.png)
echo "wrote bench/RESULTS.md and bench/storm.png"
