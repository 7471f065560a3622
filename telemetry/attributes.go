package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/policies"
)

// The attribute keys of retrace's telemetry contract (DESIGN.md).
const (
	Layer            = attribute.Key("retrace.layer")             // layer span: runtime, session, model, tool, http, or the user's name
	Attempt          = attribute.Key("retrace.attempt")           // attempt span: 1-based attempt number
	Attempts         = attribute.Key("retrace.attempts")          // layer span: attempts made
	MaxAttempts      = attribute.Key("retrace.max_attempts")      // layer span: the limit
	RetryDelayMs     = attribute.Key("retrace.retry.delay_ms")    // attempt span: the backoff waited before this attempt
	RetryDepth       = attribute.Key("retrace.retry.depth")       // layer span: retrying layers enclosing this one (0 = outermost)
	ErrorClass       = attribute.Key("retrace.error.class")       // failed span: a policies.Class
	ErrorType        = attribute.Key("error.type")                // failed span: Classification.Type (OTel semantic convention)
	ErrorReason      = attribute.Key("retrace.error.reason")      // failed span: the rule that classified the error
	Outcome          = attribute.Key("retrace.outcome")           // layer span: a policies.Outcome
	Diagnosis        = attribute.Key("retrace.diagnosis")         // layer span: "failed after 3 attempts: …"
	Calls            = attribute.Key("retrace.calls")             // outermost layer span: leaf calls made beneath it
	CallsWorstCase   = attribute.Key("retrace.calls.worst_case")  // outermost layer span: product of the nested layers' max attempts
	Policy           = attribute.Key("retrace.policy")            // policy span: retry, circuit_breaker, bulkhead, timeout, budget
	CircuitState     = attribute.Key("retrace.circuit.state")     // breaker span (or attempt span): closed, open, half_open
	RetryAfterMs     = attribute.Key("retrace.retry_after_ms")    // failed span: the server's or breaker's hint
	BudgetLeft       = attribute.Key("retrace.budget.remaining")  // layer span: task retries left when the layer ended
	NestedLayers     = attribute.Key("retrace.nested.layers")     // nested-retry event: the retrying layers, outermost first
	Leaf             = attribute.Key("retrace.leaf")              // span of a call that reached the downstream (set by adapters)
	FaultInjected    = attribute.Key("retrace.fault.injected")    // attempt span: the fault that middleware.Faults injected
	ProviderRequests = attribute.Key("retrace.provider.requests") // demo: requests the provider received
)

// The values of retrace.policy.
const (
	PolicyRetry          = "retry"
	PolicyCircuitBreaker = "circuit_breaker"
	PolicyBulkhead       = "bulkhead"
	PolicyTimeout        = "timeout"
	PolicyBudget         = "budget"
)

// EventNestedRetry is the span event added to the outermost layer span when a
// retrying layer starts inside another: its attributes name the layers and
// the worst case of calls, before the calls happen.
const EventNestedRetry = "retrace.nested_retry"

// RecordFailure marks span as failed by err, classified as c: status Error
// with the redacted message, error.type, retrace.error.class, and the
// server's Retry-After hint. It records no stack or exception event: the
// message is already on the status. (The rule that decided the class is in
// the layer's diagnosis.)
func RecordFailure(span trace.Span, c policies.Classification, err error) {
	if !span.IsRecording() {
		return
	}
	var buf [3]attribute.KeyValue
	span.SetAttributes(AppendFailure(buf[:0], c)...)
	span.SetStatus(codes.Error, StatusMessage(err))
}

// AppendFailure appends a failure's attributes to attrs: retrace.error.class,
// error.type and, if the server gave one, its Retry-After hint.
func AppendFailure(attrs []attribute.KeyValue, c policies.Classification) []attribute.KeyValue {
	attrs = append(attrs, ErrorClass.String(string(c.Class)), ErrorType.String(orOther(c.Type)))
	if c.RetryAfter > 0 {
		attrs = append(attrs, RetryAfterMs.Int64(c.RetryAfter.Milliseconds()))
	}
	return attrs
}

// StatusMessage is err's text for a span status: redacted, at most 1 KiB.
func StatusMessage(err error) string {
	if err == nil {
		return ""
	}
	return truncate(policies.Redact(err.Error()), 1024)
}

func orOther(t string) string {
	if t == "" {
		return "_OTHER"
	}
	return t
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// CircuitStateValue is the retrace.circuit.state value of a failsafe-go
// breaker state's String(): "half-open" becomes "half_open".
func CircuitStateValue(s string) string {
	if s == "half-open" {
		return "half_open"
	}
	return s
}
