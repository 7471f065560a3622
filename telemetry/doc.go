// Package telemetry holds the names retrace writes on spans, events and
// metrics: the retrace.* keys users query in Jaeger
// (retrace.outcome=failed_exhausted, retrace.error.class=fatal), their
// values (the outcomes a layer ends with among them), and the names of the
// metrics it records. The OpenTelemetry semantic-convention keys retrace
// also sets (gen_ai.*, http.*, error.type) are the conventions' own
// (go.opentelemetry.io/otel/semconv); the README's attribute table says
// where retrace sets each. It is names only: no behaviour, and it imports no
// retrace package, so that any package can use it. How retrace makes its
// instruments (units, bucket boundaries) is internal, and an adapter's own
// names are the adapter's (contrib/mcp's MCP keys).
package telemetry

// The README's attribute tables are generated from this package's keys and
// events and their comments, and internal/semconv's.
//go:generate go run ../internal/cmd/attrtable -readme ../README.md
