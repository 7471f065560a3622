package retracetest

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The attribute keys the span helpers read, as retrace writes them.
const (
	keyLayer     = attribute.Key("retrace.layer")
	keyAttempt   = attribute.Key("retrace.attempt")
	keyPolicy    = attribute.Key("retrace.policy")
	keyCalls     = attribute.Key("retrace.calls")
	keyWorstCase = attribute.Key("retrace.calls.worst_case")
	keyOutcome   = attribute.Key("retrace.outcome")
	keyUncounted = attribute.Key("retrace.uncounted")
	keyDiagnosis = attribute.Key("retrace.diagnosis")
	keyErrorType = attribute.Key("error.type")
	keyNested    = attribute.Key("retrace.nested.layers")
	eventNested  = "retrace.nested_retry"
)

// NestedChains returns the chains of retrying layers that the nested-retry
// events on span tell, in the order they were added: "runtime(3) ×
// session(4)". A root span announces each chain once, before its calls.
func NestedChains(span sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range span.Events() {
		if e.Name != eventNested {
			continue
		}
		for _, kv := range e.Attributes {
			if kv.Key == keyNested {
				out = append(out, kv.Value.AsString())
			}
		}
	}
	return out
}

// Counts is what one trace says about itself: the leaf spans in it, and the
// counts and ending its root span carries.
type Counts struct {
	TraceID   trace.TraceID
	LeafSpans int    // layer and attempt spans beneath which no other started, but those a policy refused and those retrace.calls does not count (retrace.uncounted): calls that reached a downstream
	Calls     int64  // the root's retrace.calls
	WorstCase int64  // the root's retrace.calls.worst_case; 0 when the root does not know it
	Outcome   string // the root's retrace.outcome
	Diagnosis string // the root's retrace.diagnosis, "" when it has none
}

// TraceCounts reads the counts of the trace of the spans given, as a span
// recorder (go.opentelemetry.io/otel/sdk/trace/tracetest) holds them. The
// spans must be those of one trace, whole, or one subtree of it
// ([Subtree]: retrace's root beneath another system's span, such as
// Temporal's RunActivity): it fails on spans of several traces, or when
// their root has not ended.
func TraceCounts(spans []sdktrace.ReadOnlySpan) (Counts, error) {
	if len(spans) == 0 {
		return Counts{}, errors.New("retracetest: no spans")
	}
	id := spans[0].SpanContext().TraceID()
	var root sdktrace.ReadOnlySpan
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		if s.SpanContext().TraceID() != id {
			return Counts{}, fmt.Errorf("retracetest: spans of traces %s and %s: give the spans of one trace (ByTrace)", id, s.SpanContext().TraceID())
		}
		if !s.Parent().IsValid() {
			root = s
		}
		byID[s.SpanContext().SpanID()] = s
	}
	if root == nil {
		// A subtree: its root is the one span whose parent is not given,
		// and it is a retrace root (it states retrace.calls); without it
		// the spans are a trace whose root has not ended.
		var tops []sdktrace.ReadOnlySpan
		for _, s := range spans {
			if _, ok := byID[s.Parent().SpanID()]; !ok {
				tops = append(tops, s)
			}
		}
		if len(tops) == 1 && has(tops[0], keyCalls) {
			root = tops[0]
		}
	}
	if root == nil {
		return Counts{}, fmt.Errorf("retracetest: trace %s has no root span among the %d given", id, len(spans))
	}
	// A layer or attempt span is a leaf when no layer or attempt span
	// started beneath it; a policy's span between them does not count.
	parents := map[trace.SpanID]bool{}
	for _, s := range spans {
		if !isLayer(s) {
			continue
		}
		for p, ok := byID[s.Parent().SpanID()]; ok; p, ok = byID[p.Parent().SpanID()] {
			if isLayer(p) {
				parents[p.SpanContext().SpanID()] = true
				break
			}
		}
	}
	c := Counts{TraceID: id}
	for _, s := range spans {
		if isLayer(s) && !parents[s.SpanContext().SpanID()] && !refused(s) && !has(s, keyUncounted) {
			c.LeafSpans++
		}
	}
	for _, kv := range root.Attributes() {
		switch kv.Key {
		case keyCalls:
			c.Calls = kv.Value.AsInt64()
		case keyWorstCase:
			c.WorstCase = kv.Value.AsInt64()
		case keyOutcome:
			c.Outcome = kv.Value.AsString()
		case keyDiagnosis:
			c.Diagnosis = kv.Value.AsString()
		}
	}
	return c, nil
}

// ByTrace groups spans by trace, each group in the order given, the traces
// in the order their first span appears.
func ByTrace(spans []sdktrace.ReadOnlySpan) [][]sdktrace.ReadOnlySpan {
	index := map[trace.TraceID]int{}
	var out [][]sdktrace.ReadOnlySpan
	for _, s := range spans {
		id := s.SpanContext().TraceID()
		i, ok := index[id]
		if !ok {
			i = len(out)
			index[id] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], s)
	}
	return out
}

// CheckCounts is what every trace of a call through retrace must prove: the
// requests the server received = the trace's leaf spans = the root's
// retrace.calls, and a worst case no lower than what happened. It returns
// nil when they agree and an error that says which differ when not. Use it
// with a fresh server (or after [Server.Reset]) and the spans of one call.
func (s *Server) CheckCounts(spans []sdktrace.ReadOnlySpan) error {
	c, err := TraceCounts(spans)
	if err != nil {
		return err
	}
	var errs []error
	if n := s.Requests(); n != c.LeafSpans || int64(c.LeafSpans) != c.Calls {
		errs = append(errs, fmt.Errorf("retracetest: %d requests, %d leaf spans and retrace.calls %d differ", n, c.LeafSpans, c.Calls))
	}
	if c.WorstCase != 0 && c.WorstCase < c.Calls {
		errs = append(errs, fmt.Errorf("retracetest: retrace.calls.worst_case %d is below retrace.calls %d", c.WorstCase, c.Calls))
	}
	return errors.Join(errs...)
}

// refused reports whether s ended refused by a policy that called nothing:
// an open circuit, a full bulkhead, a rate limiter.
func refused(s sdktrace.ReadOnlySpan) bool {
	for _, kv := range s.Attributes() {
		if kv.Key == keyErrorType {
			switch kv.Value.AsString() {
			case "circuit_open", "bulkhead_full", "rate_limited":
				return true
			}
		}
	}
	return false
}

// isLayer reports whether s is a retrace layer or attempt span, not a
// policy's.
func isLayer(s sdktrace.ReadOnlySpan) bool {
	return (has(s, keyLayer) || has(s, keyAttempt)) && !has(s, keyPolicy)
}

func has(s sdktrace.ReadOnlySpan, k attribute.Key) bool {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return true
		}
	}
	return false
}

// Subtree returns root and the spans beneath it among spans, in the order
// given: one retrace root's tree inside a trace that another system's spans
// begin (a workflow's), for [TraceCounts].
func Subtree(spans []sdktrace.ReadOnlySpan, root sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	parent := map[trace.SpanID]trace.SpanID{}
	for _, s := range spans {
		parent[s.SpanContext().SpanID()] = s.Parent().SpanID()
	}
	top := root.SpanContext().SpanID()
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		for id, ok := s.SpanContext().SpanID(), true; ok; id, ok = parent[id] {
			if id == top {
				out = append(out, s)
				break
			}
		}
	}
	return out
}
