// Package instrument is how retrace's own code makes its tracers and
// instruments: the instrumentation scope's version and schema, the metrics'
// units and histogram bucket boundaries, and the bound on the error.type
// values a metric carries. It is plumbing, not names a user reads: the
// metric names and attribute keys a user queries are package telemetry's.
// contrib modules use it too (an internal package is importable from
// anywhere under the module's path).
package instrument

import (
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/retrace-go/retrace/telemetry"
)

// Version is retrace's version, the instrumentation scope's version on
// every span and instrument it makes.
const Version = "0.6.0"

// SchemaURL is the OpenTelemetry semantic conventions' schema that
// retrace's standard names (gen_ai.*, http.*, server.*, error.type) follow:
// that of the release package telemetry takes its convention keys from.
// 1.41.0 is the last release with the GenAI conventions in the main
// repository; they match the names there.
const SchemaURL = semconv.SchemaURL

// The metrics' units, in UCUM as the conventions write them.
const (
	UnitSeconds    = "s"
	UnitToken      = "{token}"
	UnitCall       = "{call}"
	UnitAttempt    = "{attempt}"
	UnitTransition = "{transition}"
	UnitRefusal    = "{refusal}"
	UnitState      = "{state}"
)

// Histogram bucket boundaries, each a fresh slice. The GenAI ones are the
// conventions' advice; retrace's own fit what they measure: a handful of
// attempts, and backoffs from a few milliseconds to a minute.
func DurationBuckets() []float64 {
	return []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
}

func TokenBuckets() []float64 {
	return []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
}

func AttemptBuckets() []float64 { return []float64{1, 2, 3, 4, 5, 6, 8, 10, 16, 32} }

func RetryDelayBuckets() []float64 {
	return []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64}
}

// metricErrorTypes are the error.type values a metric attribute may take:
// retrace's own names (the README lists them), and the error codes and
// types OpenAI's and Anthropic's APIs document. A span carries a provider's
// code as it is; a metric stream per code would grow without bound with a
// provider (or an attacker) that invents codes, so a metric carries only
// these, the HTTP statuses, and telemetry.ErrorTypeOther for the rest.
var metricErrorTypes = map[string]bool{
	// retrace's
	"stream_dropped": true, "malformed_response": true, "stream_error": true, "response_too_large": true,
	"event_too_large": true, "connection_reset": true, "connection_refused": true, "connection_closed": true,
	"unexpected_eof": true, "eof": true, "timeout": true, "dns_error": true, "tls_error": true,
	"network_error": true, "attempt_timeout": true, "circuit_open": true, "bulkhead_full": true,
	"rate_limited": true, "budget_exhausted": true, "body_not_rewindable": true, "invalid_arguments": true,
	"step_limit": true, "context.Canceled": true, "context.DeadlineExceeded": true, "panic": true,
	"error_panicked": true, "classifier_panic": true, "errors.ErrUnsupported": true,
	// OpenAI's
	"invalid_api_key": true, "insufficient_quota": true, "rate_limit_exceeded": true, "server_error": true,
	"context_length_exceeded": true, "invalid_request_error": true, "model_not_found": true,
	"invalid_image": true, "billing_hard_limit_reached": true, "access_terminated": true,
	"unsupported_country_region_territory": true, "tokens": true, "requests": true,
	// Anthropic's
	"authentication_error": true, "billing_error": true, "permission_error": true, "not_found_error": true,
	"request_too_large": true, "rate_limit_error": true, "api_error": true, "timeout_error": true,
	"overloaded_error": true,
}

// MetricErrorType is errorType as a metric attribute carries it: itself when
// it is one of the known error types or an HTTP status (100–599),
// telemetry.ErrorTypeOther otherwise, so that a metric has a bounded number
// of streams whatever the codes a provider sends.
func MetricErrorType(errorType string) string {
	if metricErrorTypes[errorType] {
		return errorType
	}
	if len(errorType) == 3 {
		if n, err := strconv.Atoi(errorType); err == nil && n >= 100 && n < 600 {
			return errorType
		}
	}
	return telemetry.ErrorTypeOther
}

// MaxAttempts reads a layer span's limit from its attributes: its
// retrace.max_attempts, else, on the outermost span of a retrying layer
// (one with retrace.attempts and retrace.calls), its
// retrace.calls.worst_case, which a limit equal to it is left out for;
// false when the span states no limit (a layer that does not retry, or
// whose limit is unknown). It is the one reading of that rule, for what
// reads retrace's spans back (the console tree, retrace explain).
func MaxAttempts(attrs map[attribute.Key]attribute.Value) (int64, bool) {
	if m, ok := attrs[telemetry.MaxAttempts]; ok {
		return m.AsInt64(), true
	}
	_, retrying := attrs[telemetry.Attempts]
	_, outermost := attrs[telemetry.Calls]
	if w, ok := attrs[telemetry.CallsWorstCase]; ok && retrying && outermost {
		return w.AsInt64(), true
	}
	return 0, false
}
