// Package telemetry holds the names retrace puts on spans, the ones users
// query in Jaeger (retrace.outcome=failed_exhausted, retrace.error.class=fatal),
// and small helpers that record a classified failure the same way everywhere.
// It uses the OpenTelemetry API only; telemetry/setup builds the SDK.
package telemetry
