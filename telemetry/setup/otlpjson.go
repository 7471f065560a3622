package setup

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// WriteOTLPJSON writes spans as one line of OTLP JSON (a TracesData
// object), the format the OpenTelemetry Collector's file exporter writes and
// Jaeger's query API answers with: trace and span IDs in hex, enums as
// numbers. Spans are grouped by resource and instrumentation scope.
func WriteOTLPJSON(w io.Writer, spans []sdktrace.ReadOnlySpan) error {
	td := &tracepb.TracesData{}
	resources := map[attribute.Distinct]*tracepb.ResourceSpans{}
	scopes := map[*tracepb.ResourceSpans]map[string]*tracepb.ScopeSpans{}
	for _, s := range spans {
		set := s.Resource().Set()
		rs, ok := resources[set.Equivalent()]
		if !ok {
			rs = &tracepb.ResourceSpans{Resource: &resourcepb.Resource{Attributes: keyValues(set.ToSlice())}, SchemaUrl: s.Resource().SchemaURL()}
			resources[set.Equivalent()] = rs
			scopes[rs] = map[string]*tracepb.ScopeSpans{}
			td.ResourceSpans = append(td.ResourceSpans, rs)
		}
		is := s.InstrumentationScope()
		ss, ok := scopes[rs][is.Name+"\x00"+is.Version]
		if !ok {
			ss = &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: is.Name, Version: is.Version}, SchemaUrl: is.SchemaURL}
			scopes[rs][is.Name+"\x00"+is.Version] = ss
			rs.ScopeSpans = append(rs.ScopeSpans, ss)
		}
		ss.Spans = append(ss.Spans, spanProto(s))
	}
	raw, err := protojson.MarshalOptions{UseEnumNumbers: true}.Marshal(td)
	if err != nil {
		return fmt.Errorf("setup: OTLP JSON: %w", err)
	}
	out, err := recodeIDs(raw, toHex)
	if err != nil {
		return err
	}
	_, err = w.Write(append(out, '\n'))
	return err
}

func spanProto(s sdktrace.ReadOnlySpan) *tracepb.Span {
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	p := &tracepb.Span{
		TraceId:           tid[:],
		SpanId:            sid[:],
		TraceState:        sc.TraceState().String(),
		Name:              s.Name(),
		Kind:              tracepb.Span_SpanKind(s.SpanKind()), // the SDK's kinds are numbered as OTLP's
		StartTimeUnixNano: uint64(max(s.StartTime().UnixNano(), 0)),
		EndTimeUnixNano:   uint64(max(s.EndTime().UnixNano(), 0)),
		Attributes:        keyValues(s.Attributes()),
		Status:            &tracepb.Status{Message: s.Status().Description},
	}
	if par := s.Parent(); par.IsValid() {
		pid := par.SpanID()
		p.ParentSpanId = pid[:]
	}
	switch s.Status().Code {
	case codes.Error:
		p.Status.Code = tracepb.Status_STATUS_CODE_ERROR
	case codes.Ok:
		p.Status.Code = tracepb.Status_STATUS_CODE_OK
	}
	for _, e := range s.Events() {
		p.Events = append(p.Events, &tracepb.Span_Event{TimeUnixNano: uint64(max(e.Time.UnixNano(), 0)), Name: e.Name, Attributes: keyValues(e.Attributes)})
	}
	for _, l := range s.Links() {
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		p.Links = append(p.Links, &tracepb.Span_Link{TraceId: ltid[:], SpanId: lsid[:], Attributes: keyValues(l.Attributes)})
	}
	return p
}

func keyValues(kvs []attribute.KeyValue) []*commonpb.KeyValue {
	out := make([]*commonpb.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, &commonpb.KeyValue{Key: string(kv.Key), Value: anyValue(kv.Value)})
	}
	return out
}

func anyValue(v attribute.Value) *commonpb.AnyValue {
	switch v.Type() {
	case attribute.BOOL:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}}
	case attribute.INT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}}
	case attribute.FLOAT64:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}}
	case attribute.STRING:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.AsString()}}
	}
	var items []*commonpb.AnyValue
	switch v.Type() {
	case attribute.BOOLSLICE:
		for _, b := range v.AsBoolSlice() {
			items = append(items, anyValue(attribute.BoolValue(b)))
		}
	case attribute.INT64SLICE:
		for _, n := range v.AsInt64Slice() {
			items = append(items, anyValue(attribute.Int64Value(n)))
		}
	case attribute.FLOAT64SLICE:
		for _, f := range v.AsFloat64Slice() {
			items = append(items, anyValue(attribute.Float64Value(f)))
		}
	case attribute.STRINGSLICE:
		for _, s := range v.AsStringSlice() {
			items = append(items, anyValue(attribute.StringValue(s)))
		}
	default:
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v.String()}}
	}
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: items}}}
}

// ReadOTLPJSON reads OTLP JSON trace data: one or more TracesData objects
// one after another (the lines of a Collector file exporter's output, the
// demo's -otlp-file), each perhaps wrapped as {"result": …} as Jaeger's
// query API streams it. IDs may be hex, as the OTLP JSON encoding writes
// them, or base64, as a plain protobuf JSON encoder does.
func ReadOTLPJSON(r io.Reader) ([]*tracepb.ResourceSpans, error) {
	dec := json.NewDecoder(r)
	var out []*tracepb.ResourceSpans
	for n := 1; ; n++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("OTLP JSON object %d: %w", n, err)
		}
		var wrapped struct {
			Result json.RawMessage `json:"result"`
		}
		if json.Unmarshal(raw, &wrapped) == nil && len(wrapped.Result) > 0 {
			raw = wrapped.Result
		}
		fixed, err := recodeIDs(raw, toBase64)
		if err != nil {
			return nil, fmt.Errorf("OTLP JSON object %d: %w", n, err)
		}
		td := &tracepb.TracesData{}
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(fixed, td); err != nil {
			return nil, fmt.Errorf("OTLP JSON object %d: %w", n, err)
		}
		out = append(out, td.ResourceSpans...)
	}
}

// idKeys are the fields of OTLP trace data that hold IDs.
var idKeys = map[string]bool{"traceId": true, "spanId": true, "parentSpanId": true}

// recodeIDs rewrites every ID field of an OTLP JSON document with conv.
func recodeIDs(raw []byte, conv func(string) (string, error)) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // 64-bit timestamps and integers pass unchanged
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	var walk func(v any) error
	walk = func(v any) error {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if s, ok := e.(string); ok && idKeys[k] {
					c, err := conv(s)
					if err != nil {
						return fmt.Errorf("%s %q: %w", k, s, err)
					}
					x[k] = c
					continue
				}
				if err := walk(e); err != nil {
					return err
				}
			}
		case []any:
			for _, e := range x {
				if err := walk(e); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(doc); err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// An ID is 16 or 8 bytes: 32 or 16 hex digits, 24 or 12 base64 characters,
// so the two encodings never look alike.
func toHex(s string) (string, error) {
	if len(s) == 32 || len(s) == 16 || s == "" {
		return s, nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func toBase64(s string) (string, error) {
	if len(s) != 32 && len(s) != 16 {
		return s, nil
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return "", errors.New("not a hex ID")
	}
	return base64.StdEncoding.EncodeToString(b), nil
}
