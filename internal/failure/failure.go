// Package failure holds what retrace's packages do with a *policies.Error
// that users never need to: find the failure beneath the layers' stops,
// make the error of a recovered panic, and say which span a failure may
// name. It reads only the error's exported fields, so the rules stay with
// the type and this package only applies them.
package failure

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/policies"
)

// SpanOf is the span a failure recorded on span may name
// (policies.Error.SpanContext): its trace and span IDs and the sampled
// flag, when span records and is sampled, else the zero SpanContext. A span
// that does not record (a no-op tracer's carries its parent's IDs) or is
// not sampled reaches no backend, and an ID that leads nowhere must not be
// given as the failure's. The tracestate is left out: it is what the caller
// propagated, not the failure's.
func SpanOf(span trace.Span) trace.SpanContext {
	if span == nil || !span.IsRecording() {
		return trace.SpanContext{}
	}
	sc := span.SpanContext()
	if !sc.IsValid() || !sc.IsSampled() {
		return trace.SpanContext{}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: sc.TraceID(), SpanID: sc.SpanID(), TraceFlags: trace.FlagsSampled})
}

// Underlying is the error beneath retrace's layers in err: the last
// attempt's error of the innermost layer that failed, or err itself when no
// layer's failure is in it. It is what a span status, a turn's error text
// and a diagnosis name: the provider's or the tool's own failure, not the
// layers' narration around it.
func Underlying(err error) error {
	for {
		fe, ok := errors.AsType[*policies.Error](err)
		if !ok || fe.Outcome == "" || fe.Err == nil {
			return err
		}
		err = fe.Err
	}
}

// Recovered is a recovered panic: a Programming error, never retried, with
// the panic's value (its Err when the value is an error) and stack.
func Recovered(v any, stack []byte) *policies.Error {
	e := &policies.Error{Class: policies.Programming, Type: "panic", Reason: "panic", Message: fmt.Sprintf("panic: %v", v), Stack: stack}
	if err, ok := v.(error); ok {
		e.Err = err
	}
	return e
}
