package policies

import (
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/failsafe-go/failsafe-go/timeout"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/internal/errchain"
	"github.com/retrace-go/retrace/internal/redact"
	"github.com/retrace-go/retrace/telemetry"
)

// Error is a failure as retrace reads it, one value from where the answer
// was read to the root of the call: what it was, and, once a layer stopped
// on it, how the call ended.
//
// Where an answer is read (a provider's error body or stream event, a
// tool's result, a dropped stream, a breaker's refusal, a timeout, a
// panic), an *Error says what failed: its Class, error.type, the rule that
// decided, the server's status, code and words, its Retry-After. The layer
// that stops on a failure (it gave up, or the error's class stops it)
// returns an *Error that carries all of that and adds its Layer, Outcome
// and Attempts, wrapping the last attempt's error; a layer above that stops
// on it for the same reason after one attempt returns it unchanged. So one
// errors.As to *Error answers everything asked of a failure: the outermost
// stop of a 401 that crossed a runtime, a session and a model layer says
// runtime, failed_permanent, permanent, 401, invalid_api_key.
//
// A tool or provider that knows what went wrong builds one with its Class
// (and Type): the classifier takes it as given. One with no Class but a
// StatusCode, Code or Message is a server's answer, classified by the
// rules as the same answer from an SDK would be.
//
// [Error.SpanContext] names the span that recorded the failure, so that a
// failure leads to its trace; [TraceOf] finds it in any error's chain.
type Error struct {
	// What failed.
	Class      Class         // what retrying can achieve; empty: the rules decide
	Type       string        // error.type: provider code, HTTP status or a short name; empty means the class name
	Reason     string        // the rule that decided, e.g. "http 429", "marker: invalid api key"
	RetryAfter time.Duration // the server's hint for the next attempt, 0 if none
	StatusCode int           // the HTTP status of the answer, 0 if it did not come from HTTP
	Code       string        // the server's error code or type, e.g. "insufficient_quota", "overloaded_error"
	Message    string        // the server's own words, cut to 1 KiB; for retrace's own failures, what happened

	// How the call ended, once a layer stopped on it.
	Layer    string // the layer's name, empty for a bare policy
	Outcome  string // why the layer stopped; empty until a layer stops
	Attempts int    // attempts the layer made, the first included
	Detail   string // the outcome in a clause, when it came before the attempts ran out

	Err error // the error beneath: the last attempt's, a network error, the panic's value

	Stack []byte // a recovered panic's stack, nil for any other failure

	event bool       // an error event of a stream that began with 200
	cause error      // the context's cause, when the caller's context ended the call
	known []string   // the secrets of the layer's context, redacted by exact value
	diag  *diagnosis // where a layer's stop keeps its diagnosis once worded; nil: worded when asked
	at    *spanIDs   // the span that recorded the failure; nil: no span did (see SpanContext)
}

// spanIDs are the IDs of the span that recorded a failure. They are held
// by pointer, and never written once an Error names them, so that an Error
// whose call no span recorded is no larger, and copies of an Error share
// them as they share its strings. Only the IDs are kept: the span's
// tracestate is the propagated data of whoever called, not the failure's.
type spanIDs struct {
	trace trace.TraceID
	span  trace.SpanID
}

// SpanContext is the span that recorded the failure, whose trace holds the
// whole story of the call. For a layer's stop it is the span of the
// outermost layer that stopped on it: a layer that stops after one attempt
// on a stop beneath for the same reason returns that stop as it reads (its
// Layer, its diagnosis) but naming its own span, so that a rejected key
// through a runtime around a session names the runtime's span, the root of
// the trace. For a refusal, a timeout or a panic that a layer without a
// retry returns, it is that layer's span; for a stop a handler makes of
// its own (an agent loop's step limit), the span of the layer it ends.
//
// It is the zero SpanContext (IsValid is false) when no span recorded the
// failure: the layer's tracer records nothing (a no-op tracer provider), the
// span was sampled out, or the Error was made outside a layer (a bare
// policy under failsafe.With, a server's answer read by [AsAnswer] or
// [ErrorFrom], an Error a handler made). It has the trace and span IDs and
// the sampled flag, nothing else of the span's context. Its TraceID's
// String is the 32 hex digits a tracing backend, and retrace explain -trace,
// look a trace up by.
func (e *Error) SpanContext() trace.SpanContext {
	if e.at == nil {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: e.at.trace, SpanID: e.at.span, TraceFlags: trace.FlagsSampled})
}

// idsOf is what an Error keeps of span: its IDs, nil when it is not valid.
func idsOf(span trace.SpanContext) *spanIDs {
	if !span.IsValid() {
		return nil
	}
	return &spanIDs{trace: span.TraceID(), span: span.SpanID()}
}

// names reports whether e names span.
func (e *Error) names(span trace.SpanContext) bool {
	return e.at != nil && e.at.trace == span.TraceID() && e.at.span == span.SpanID()
}

// TraceOf is the span that recorded err: the SpanContext of the first error
// in err's chain, in the order errors.As visits it, that names a valid one
// ([Error.SpanContext], and runtime's and session's errors, which have the
// same method). ok is false when none does: no span recorded the failure,
// or err is not retrace's. Log its TraceID with the error, and the failure
// leads to its trace:
//
//	if sc, ok := policies.TraceOf(err); ok {
//		slog.Error("exec failed", "err", err, "trace_id", sc.TraceID().String(), "span_id", sc.SpanID().String())
//	}
func TraceOf(err error) (sc trace.SpanContext, ok bool) {
	var chain errchain.Chain
	chain.Add(err)
	for _, e := range chain.All() {
		if n, named := e.(interface{ SpanContext() trace.SpanContext }); named {
			if sc := n.SpanContext(); sc.IsValid() {
				return sc, true
			}
		}
	}
	return trace.SpanContext{}, false
}

// diagnosis is a stop's diagnosis, worded once when first asked for. It is
// held by pointer so that an Error stays a plain value to copy and compare.
// The first wording to claim it is kept in own, which text then points at:
// the kept diagnosis needs no allocation of its own, and own is written
// once, before text publishes it.
type diagnosis struct {
	text    atomic.Pointer[string]
	claimed atomic.Bool
	own     string
	memo    *diagnoses // the stopping policy's last diagnosis (Error.word); nil: none is kept
}

// Error words the failure: for a layer's stop, the layer and its diagnosis
// ("session: failed after 4 attempts: 503 server_error: …"); for a
// server's answer, "<status> <code>: <message>"; else its Message, its
// Err's text, its class. Secrets are redacted: a server's words are its
// input, not retrace's, and may echo a key.
func (e *Error) Error() string {
	switch {
	case e.Outcome != "":
		if e.Layer == "" {
			return e.Diagnosis()
		}
		return e.Layer + ": " + e.Diagnosis()
	case e.Type == typeStreamDropped:
		// A dropped stream's text is the provider's words, possibly none:
		// an empty message is what the rules of a dropped stream read.
		return e.Message
	case e.StatusCode != 0 || e.Code != "" || e.answer():
		return redact.Text(e.text(), nil, 0)
	case e.Message != "":
		return e.Message
	case e.Err != nil:
		return e.Err.Error()
	case e.Type != "":
		return e.Type
	}
	return string(e.Class)
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes a layer that ran out of attempts match failsafe-go's
// retrypolicy.ErrExceeded, one refused by a retry budget (the task's, or a
// rate budget) match failsafe-go's budget.ErrExceeded, an attempt cut by the layer's own timeout match
// timeout.ErrExceeded, and one whose caller's context ended match
// context.Canceled or context.DeadlineExceeded, whatever its last attempt
// returned.
func (e *Error) Is(target error) bool {
	switch target {
	case retrypolicy.ErrExceeded:
		return e.Outcome == telemetry.OutcomeFailedExhausted
	case budget.ErrExceeded:
		return e.Outcome == telemetry.OutcomeBudgetExhausted
	case timeout.ErrExceeded:
		return e.Type == typeAttemptTimeout && e.Outcome == ""
	}
	return e.cause != nil && e.Outcome != "" && errors.Is(e.cause, target)
}

// The error.type of retrace's own failures that their rules and words
// depend on.
const (
	typeStreamDropped  = "stream_dropped"
	typeAttemptTimeout = "attempt_timeout"
	typeCircuitOpen    = "circuit_open"
	typeBulkheadFull   = "bulkhead_full"
)

// answer reports whether e is a server's answer for the rules to classify:
// no class of its own, and a status, code or words.
func (e *Error) answer() bool {
	return e.Class == "" && e.Outcome == "" && e.Type != typeStreamDropped &&
		(e.StatusCode != 0 || e.Code != "" || e.Message != "" || e.event)
}

// text is an answer's text before redaction: "<status> <code>: <message>".
func (e *Error) text() string {
	if e.StatusCode == 0 && e.Code == "" && e.Message == "" {
		return "api error"
	}
	var b strings.Builder
	b.Grow(len(e.Code) + len(e.Message) + 8)
	if e.StatusCode != 0 {
		b.WriteString(statusText(e.StatusCode)) // made once: no string of its own per answer worded
	}
	if e.Code != "" {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(e.Code)
	}
	if e.Message != "" {
		if b.Len() > 0 {
			b.WriteString(": ")
		}
		b.WriteString(e.Message)
	}
	return b.String()
}

// rejection is a call that a policy refused before it reached the handler:
// an open circuit breaker (name is its name, if it has one; retryAfter its
// remaining cool-down) or a full bulkhead. It is Transient: it says nothing
// about the call itself.
func rejection(typ, name string, retryAfter time.Duration, err error) *Error {
	msg := err.Error()
	if name != "" {
		msg = name + ": " + msg
	}
	if retryAfter > 0 {
		msg += " (retry in " + retryAfter.Round(time.Millisecond).String() + ")"
	}
	policy := "circuit_breaker"
	if typ == typeBulkheadFull {
		policy = "bulkhead"
	}
	return &Error{Class: Transient, Type: typ, Reason: policy + " rejected the call", RetryAfter: retryAfter, Message: msg, Err: err}
}

// isRejection reports whether e is a policy's refusal of a call.
func isRejection(e *Error) bool {
	return e.Outcome == "" && e.Class == Transient && (e.Type == typeCircuitOpen || e.Type == typeBulkheadFull)
}

// StreamDropped is a stream that broke after it began, with the provider's
// own words if it sent any (msg) and the cause beneath (a read error, or
// io.ErrUnexpectedEOF for a stream that ended without its terminator). Its
// error.type is "stream_dropped" on every span of the failure, whatever the
// read error was; its class is the rules': one without words is Transient
// ("empty message"), and a session retries it.
func StreamDropped(msg string, err error) *Error {
	return &Error{Type: typeStreamDropped, Message: msg, Err: err}
}
