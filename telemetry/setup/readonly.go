package setup

import (
	"fmt"
	"reflect"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// ReadOnlySpans turns OTLP trace data (what [ReadOTLPJSON] returns) into
// the SDK's read-only spans, in the order they come, so that what reads an
// SDK's spans (retracetest.TraceCounts, [WriteTree], an exporter) reads
// another process's or a file's alike. Each span keeps its IDs, parent,
// kind, times, attributes, events, status, resource and instrumentation
// scope. A span without a valid trace or span ID is an error: nothing
// could place it in a trace.
func ReadOnlySpans(rss []*tracepb.ResourceSpans) ([]sdktrace.ReadOnlySpan, error) {
	var out []sdktrace.ReadOnlySpan
	for _, rs := range rss {
		res := resource.NewSchemaless(keyValuesOf(rs.GetResource().GetAttributes())...)
		for _, ss := range rs.GetScopeSpans() {
			scope := instrumentation.Scope{Name: ss.GetScope().GetName(), Version: ss.GetScope().GetVersion()}
			for _, s := range ss.GetSpans() {
				stub, err := stubOf(s, res, scope)
				if err != nil {
					return nil, err
				}
				out = append(out, stub.Snapshot())
			}
		}
	}
	return out, nil
}

func stubOf(s *tracepb.Span, res *resource.Resource, scope instrumentation.Scope) (tracetest.SpanStub, error) {
	var tid trace.TraceID
	var sid, pid trace.SpanID
	if len(s.GetTraceId()) != len(tid) || len(s.GetSpanId()) != len(sid) {
		return tracetest.SpanStub{}, fmt.Errorf("setup: span %q has no valid trace and span IDs", s.GetName())
	}
	copy(tid[:], s.GetTraceId())
	copy(sid[:], s.GetSpanId())
	stub := tracetest.SpanStub{
		Name:                 s.GetName(),
		SpanContext:          trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}),
		SpanKind:             trace.SpanKind(s.GetKind()),
		StartTime:            time.Unix(0, int64(s.GetStartTimeUnixNano())),
		EndTime:              time.Unix(0, int64(s.GetEndTimeUnixNano())),
		Attributes:           keyValuesOf(s.GetAttributes()),
		Resource:             res,
		InstrumentationScope: scope,
	}
	if len(s.GetParentSpanId()) == len(pid) {
		copy(pid[:], s.GetParentSpanId())
		stub.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: pid, TraceFlags: trace.FlagsSampled})
	}
	for _, e := range s.GetEvents() {
		stub.Events = append(stub.Events, sdktrace.Event{Name: e.GetName(), Time: time.Unix(0, int64(e.GetTimeUnixNano())), Attributes: keyValuesOf(e.GetAttributes())})
	}
	switch st := s.GetStatus(); st.GetCode() {
	case tracepb.Status_STATUS_CODE_ERROR:
		stub.Status = sdktrace.Status{Code: codes.Error, Description: st.GetMessage()}
	case tracepb.Status_STATUS_CODE_OK:
		stub.Status = sdktrace.Status{Code: codes.Ok}
	}
	return stub, nil
}

// keyValuesOf is keyValues undone: OTLP attributes as the SDK's. An array
// of one kind is that kind's slice; a value of no kind the SDK has (a map,
// bytes, a mixed array) is kept as its text.
func keyValuesOf(kvs []*commonpb.KeyValue) []attribute.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]attribute.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, attribute.KeyValue{Key: attribute.Key(kv.GetKey()), Value: valueOf(kv.GetValue())})
	}
	return out
}

func valueOf(v *commonpb.AnyValue) attribute.Value {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return attribute.StringValue(x.StringValue)
	case *commonpb.AnyValue_IntValue:
		return attribute.Int64Value(x.IntValue)
	case *commonpb.AnyValue_DoubleValue:
		return attribute.Float64Value(x.DoubleValue)
	case *commonpb.AnyValue_BoolValue:
		return attribute.BoolValue(x.BoolValue)
	case *commonpb.AnyValue_ArrayValue:
		if s, ok := sliceOf(x.ArrayValue.GetValues()); ok {
			return s
		}
	}
	return attribute.StringValue(v.String())
}

// sliceOf is an OTLP array as the SDK's slice of its items' one kind.
func sliceOf(items []*commonpb.AnyValue) (attribute.Value, bool) {
	if len(items) == 0 {
		return attribute.StringSliceValue(nil), true
	}
	switch items[0].GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return collect(items, (*commonpb.AnyValue).GetStringValue, attribute.StringSliceValue)
	case *commonpb.AnyValue_IntValue:
		return collect(items, (*commonpb.AnyValue).GetIntValue, attribute.Int64SliceValue)
	case *commonpb.AnyValue_DoubleValue:
		return collect(items, (*commonpb.AnyValue).GetDoubleValue, attribute.Float64SliceValue)
	case *commonpb.AnyValue_BoolValue:
		return collect(items, (*commonpb.AnyValue).GetBoolValue, attribute.BoolSliceValue)
	}
	return attribute.Value{}, false
}

// collect reads every item with get, when every item is of the first's
// kind, and makes the slice value.
func collect[T any](items []*commonpb.AnyValue, get func(*commonpb.AnyValue) T, value func([]T) attribute.Value) (attribute.Value, bool) {
	first := reflect.TypeOf(items[0].GetValue())
	out := make([]T, 0, len(items))
	for _, it := range items {
		if reflect.TypeOf(it.GetValue()) != first {
			return attribute.Value{}, false
		}
		out = append(out, get(it))
	}
	return value(out), true
}
