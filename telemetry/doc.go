// Package telemetry holds the names retrace writes on spans, events and
// metrics: the retrace.* keys users query in Jaeger
// (retrace.outcome=failed_exhausted, retrace.error.class=fatal), their
// values, the OpenTelemetry semantic-convention keys (gen_ai.*, http.*,
// error.type) retrace sets, and the names of the metrics it records. It is
// names only: no behaviour, and it imports no retrace package, so that any
// package can use it. How retrace makes its instruments (units, bucket
// boundaries) is internal, and an adapter's own names are the adapter's
// (contrib/mcp's MCP keys).
package telemetry

// The README's attribute tables are generated from this package's keys and
// events and their comments.
//go:generate go run ../internal/cmd/attrtable -readme ../README.md
