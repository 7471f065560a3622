// Package telemetry holds the names retrace writes on spans and events: the
// retrace.* keys users query in Jaeger (retrace.outcome=failed_exhausted,
// retrace.error.class=fatal), their values, and the OpenTelemetry
// semantic-convention keys (gen_ai.*, http.*, error.type) retrace sets. It is
// names only: no behaviour, and it imports no retrace package, so that any
// package can use it.
package telemetry

// The README's attribute tables are generated from this package's keys and
// events and their comments.
//go:generate go run ../internal/cmd/attrtable -readme ../README.md
