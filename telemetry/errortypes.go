package telemetry

import "strconv"

// ErrorTypeOther is the conventions' error.type for an error of no known
// type.
const ErrorTypeOther = "_OTHER"

// metricErrorTypes are the error.type values a metric attribute may take:
// retrace's own names (the README lists them), and the error codes and
// types OpenAI's and Anthropic's APIs document. A span carries a provider's
// code as it is; a metric stream per code would grow without bound with a
// provider (or an attacker) that invents codes, so a metric carries only
// these, the HTTP statuses, and ErrorTypeOther for the rest.
var metricErrorTypes = map[string]bool{
	// retrace's
	"stream_dropped": true, "malformed_response": true, "stream_error": true, "response_too_large": true,
	"event_too_large": true, "connection_reset": true, "connection_refused": true, "connection_closed": true,
	"unexpected_eof": true, "eof": true, "timeout": true, "dns_error": true, "tls_error": true,
	"network_error": true, "attempt_timeout": true, "circuit_open": true, "bulkhead_full": true,
	"rate_limited": true, "budget_exhausted": true, "body_not_rewindable": true, "invalid_arguments": true,
	"step_limit": true, "context.Canceled": true, "context.DeadlineExceeded": true, "panic": true,
	"error_panicked": true, "classifier_panic": true, "errors.ErrUnsupported": true, "layer_config": true,
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
// ErrorTypeOther otherwise, so that a metric has a bounded number of streams
// whatever the codes a provider sends.
func MetricErrorType(errorType string) string {
	if metricErrorTypes[errorType] {
		return errorType
	}
	if len(errorType) == 3 {
		if n, err := strconv.Atoi(errorType); err == nil && n >= 100 && n < 600 {
			return errorType
		}
	}
	return ErrorTypeOther
}
