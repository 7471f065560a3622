// Package bench measures what a retry costs: BenchmarkCall compares a bare
// call, raw failsafe-go, failsafe-go instrumented by hand with OpenTelemetry,
// and retrace's chain with no-op, sampled and unsampled tracing, on the
// success path and on a call that fails three times; Simulate replays a
// retry storm in virtual time under four strategies; Amplification counts
// what nested retry layers make of one request. RESULTS.md has the figures
// and the commands that reproduce them (scripts/bench.sh).
package bench
