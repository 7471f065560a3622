package middleware

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/attribute"

	"github.com/failsafe-go/failsafe-go/circuitbreaker"

	"github.com/retrace-go/retrace/internal/engine"
	"github.com/retrace-go/retrace/internal/failure"
	"github.com/retrace-go/retrace/internal/redact"
	"github.com/retrace-go/retrace/internal/semconv"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

// failureAttrs is how many attributes appendFailure appends for a failure
// without a Retry-After hint: class, error.type and reason.
const failureAttrs = 3

// appendFailure appends a failure's attributes: retrace.error.class,
// error.type, retrace.error.reason and, if the server or a breaker gave
// one, its Retry-After hint.
func appendFailure(known []string, attrs []attribute.KeyValue, c policies.Classification) []attribute.KeyValue {
	t := c.Type
	if len(known) > 0 {
		// A type or reason is worded from the error's own fields, which may
		// echo a configured credential: then it is not written at all.
		if redact.HasKnown(t, known) {
			t = ""
		}
		if redact.HasKnown(c.Reason, known) {
			c.Reason = "redacted"
		}
	}
	if t == "" {
		t = telemetry.ErrorTypeOther
	}
	attrs = append(attrs, telemetry.ErrorClass.String(string(c.Class)), semconv.ErrorType.String(t))
	if c.Reason != "" {
		attrs = append(attrs, telemetry.ErrorReason.String(c.Reason))
	}
	if c.RetryAfter > 0 {
		attrs = append(attrs, telemetry.RetryAfterMs.Int64(c.RetryAfter.Milliseconds()))
	}
	return attrs
}

// statusText is a span status's text for e, the error at the bottom of a
// failure (a provider's own words when it sent any): without the layer, the attempt count or the status code, which the span's
// own attributes (retrace.diagnosis, error.type, http.response.status_code)
// carry; redacted (the call's known secrets by exact value, secret patterns
// besides), at most engine.CapSpanStatus bytes. Without known secrets it is
// redacted through the layer's memo (by): a layer's failures repeat their
// words.
func statusText(by *redact.Memo, known []string, e error) string {
	var s string
	if api, ok := policies.AsAnswer(e); ok && strings.TrimSpace(api.Message) != "" {
		s = api.Message
	} else if s = engine.ErrorText(e); strings.TrimSpace(s) == "" {
		s = "error without a message"
	}
	if len(known) == 0 {
		return by.Text(s, engine.CapSpanStatus)
	}
	return redact.Text(s, known, engine.CapSpanStatus)
}

// statusMemo words a call's span statuses: the layer span's is its last
// attempt's, whose error it wraps, so the same error is worded (read,
// redacted, cut) once, not once per span.
type statusMemo struct {
	err error
	msg string
}

func (m *statusMemo) of(by *redact.Memo, known []string, err error) string {
	if err == nil {
		return ""
	}
	e := failure.Underlying(err)
	// Only pointers are compared: an error of another kind may not be
	// comparable, and == on it would panic.
	if m.err != nil && reflect.TypeOf(e).Kind() == reflect.Pointer && reflect.TypeOf(m.err) == reflect.TypeOf(e) && m.err == e {
		return m.msg
	}
	m.err, m.msg = e, statusText(by, known, e)
	return m.msg
}

// statusOf is the span status text of err, a failure of this call.
func (c *call[Req, Resp]) statusOf(known []string, err error) string {
	return c.failures().status.of(&c.l.reuse.statuses, known, err)
}

// circuitState is the retrace.circuit.state value of a breaker state.
func circuitState(s circuitbreaker.State) string {
	switch s {
	case circuitbreaker.OpenState:
		return telemetry.CircuitOpen
	case circuitbreaker.HalfOpenState:
		return telemetry.CircuitHalfOpen
	}
	return telemetry.CircuitClosed
}

// outcomeOf is the outcome an error ends every layer it crosses with,
// whatever the layer's attempts: an agent loop's step limit, the last cost
// boundary, which no layer's retrying changes.
func outcomeOf(err error) (string, bool) {
	if e, ok := errors.AsType[*policies.Error](err); ok && e.Outcome == telemetry.OutcomeStepLimit {
		return e.Outcome, true
	}
	return "", false
}

// known are the secrets the call redacts by exact value: its context's, and
// the credentials a layer beneath it saw.
func (c *call[Req, Resp]) known() []string {
	own := engine.SecretsFrom(c.fctx.Context)
	learned := c.frame.root.learned()
	if len(learned) == 0 {
		return own
	}
	return append(slices.Clone(own), learned...)
}

// secretCtx is ctx with the credentials layers beneath saw, for the errors
// the layer builds.
func (c *call[Req, Resp]) secretCtx(ctx context.Context) context.Context {
	if learned := c.frame.root.learned(); len(learned) > 0 {
		return engine.WithSecrets(ctx, learned...)
	}
	return ctx
}
