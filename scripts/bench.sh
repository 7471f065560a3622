#!/usr/bin/env bash
# Regenerates bench/RESULTS.md: the micro-benchmarks and the two nested retry
# layers (BenchmarkCall, BenchmarkTwoLayers; ${COUNT:-30} rounds of
# ${BENCHTIME:-300ms} each), benchstat, the retry storm, its plot, and the
# amplification table. Takes several minutes, more with a larger COUNT.
# Run it on a quiet machine: the figures are only as steady as the machine.
# On a shared one, many short rounds beat a few long ones: each round runs
# a comparison's variants within seconds of each other, and the medians of
# many rounds shrug off the rounds a neighbour's build slowed.
set -euo pipefail
cd "$(dirname "$0")/.."

count="${COUNT:-30}"
if [[ ! $count =~ ^[1-9][0-9]*$ ]]; then
	echo "bench.sh: COUNT must be a positive integer, not '$count'" >&2
	exit 2
fi
benchtime="${BENCHTIME:-300ms}"
if [[ ! $benchtime =~ ^[1-9][0-9]*(ns|us|ms|s|x)$ ]]; then
	echo "bench.sh: BENCHTIME must be a go test -benchtime (300ms, 1s, 1000x), not '$benchtime'" >&2
	exit 2
fi
# The command that writes bench/out/bench.txt. It is run from this string,
# so the page states exactly the command that ran (-bench-cmd). It runs the
# whole set $count times, once per round, rather than each benchmark $count
# times in a row: the machine's drift (a neighbour, a frequency step) then
# falls on every variant of a comparison alike, not on one of them.
bench_cmd="for round in \$(seq $count); do go test -run '^\$' -bench 'BenchmarkCall|BenchmarkTwoLayers' -benchtime $benchtime -count 1 ./bench; done"

mkdir -p bench/out
eval "$bench_cmd" | tee bench/out/bench.txt
(cd tools/bench && go tool benchstat ../../bench/out/bench.txt) > bench/out/benchstat.txt
go run ./bench/cmd/results -bench-cmd "$bench_cmd"
(cd tools/bench && go run ./plot ../../bench/storm.csv ../../bench/storm.png)
echo "wrote bench/RESULTS.md and bench/storm.png"
