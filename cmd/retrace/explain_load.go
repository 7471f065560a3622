package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/retrace-go/retrace/telemetry"
	"github.com/retrace-go/retrace/telemetry/setup"
)

// maxTraceBytes bounds what explain reads of a trace: a trace of a few
// thousand spans is a few megabytes.
const maxTraceBytes = 64 << 20

// fetchJaeger reads one trace from Jaeger's query API (v3), which answers
// with OTLP JSON.
func fetchJaeger(ctx context.Context, base, id string) ([]*tracepb.ResourceSpans, error) {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("-jaeger %q: want the query service's URL, such as http://localhost:16686", base)
	}
	u = u.JoinPath("api", "v3", "traces", id)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jaeger: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("jaeger has no trace %s (%s)", id, strings.TrimSpace(string(body)))
		}
		return nil, fmt.Errorf("jaeger: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return setup.ReadOTLPJSON(io.LimitReader(resp.Body, maxTraceBytes))
}

// readFile reads the OTLP JSON of a file: the demo's -otlp-file, a
// Collector file exporter's output, or a saved Jaeger answer.
func readFile(path string) ([]*tracepb.ResourceSpans, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rs, err := setup.ReadOTLPJSON(io.LimitReader(f, maxTraceBytes))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rs, nil
}

// pickTrace returns the spans of trace id, or, with no id, of the only
// trace there is.
func pickTrace(rs []*tracepb.ResourceSpans, id string) ([]sdktrace.ReadOnlySpan, error) {
	byTrace := map[string][]sdktrace.ReadOnlySpan{}
	var order []string
	for _, r := range rs {
		for _, ss := range r.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				tid := hex.EncodeToString(s.GetTraceId())
				if _, ok := byTrace[tid]; !ok {
					order = append(order, tid)
				}
				byTrace[tid] = append(byTrace[tid], stub(s).Snapshot())
			}
		}
	}
	if id != "" {
		spans, ok := byTrace[strings.ToLower(id)]
		if !ok {
			return nil, fmt.Errorf("no trace %s here (%d traces: %s)", id, len(order), strings.Join(order, ", "))
		}
		return spans, nil
	}
	switch len(order) {
	case 0:
		return nil, errors.New("no spans")
	case 1:
		return byTrace[order[0]], nil
	}
	var named []string
	for _, tid := range order {
		named = append(named, tid+" ("+rootName(byTrace[tid])+")")
	}
	return nil, fmt.Errorf("%d traces here: pass -trace ID, one of\n  %s", len(order), strings.Join(named, "\n  "))
}

// rootName names a trace by its root: name, outcome and calls.
func rootName(spans []sdktrace.ReadOnlySpan) string {
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].StartTime().Before(spans[j].StartTime()) })
	root := spans[0]
	for _, s := range spans {
		if !s.Parent().IsValid() {
			root = s
			break
		}
	}
	parts := []string{root.Name()}
	for _, kv := range root.Attributes() {
		switch kv.Key {
		case telemetry.Outcome:
			parts = append(parts, kv.Value.AsString())
		case telemetry.Calls:
			parts = append(parts, "calls="+kv.Value.String())
		}
	}
	return strings.Join(parts, ", ")
}

// stub turns an OTLP span into the SDK's read-only form, so that the tree
// is printed as the console exporter prints it.
func stub(s *tracepb.Span) tracetest.SpanStub {
	var tid trace.TraceID
	var sid, pid trace.SpanID
	copy(tid[:], s.GetTraceId())
	copy(sid[:], s.GetSpanId())
	copy(pid[:], s.GetParentSpanId())
	st := tracetest.SpanStub{
		Name:        s.GetName(),
		SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}),
		SpanKind:    trace.SpanKind(s.GetKind()),
		StartTime:   time.Unix(0, int64(s.GetStartTimeUnixNano())),
		EndTime:     time.Unix(0, int64(s.GetEndTimeUnixNano())),
		Attributes:  attrs(s.GetAttributes()),
		Status:      sdktrace.Status{Description: s.GetStatus().GetMessage()},
	}
	if pid.IsValid() {
		st.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: pid, TraceFlags: trace.FlagsSampled})
	}
	switch s.GetStatus().GetCode() {
	case tracepb.Status_STATUS_CODE_ERROR:
		st.Status.Code = codes.Error
	case tracepb.Status_STATUS_CODE_OK:
		st.Status.Code = codes.Ok
	}
	for _, e := range s.GetEvents() {
		st.Events = append(st.Events, sdktrace.Event{Name: e.GetName(), Time: time.Unix(0, int64(e.GetTimeUnixNano())), Attributes: attrs(e.GetAttributes())})
	}
	return st
}

func attrs(kvs []*commonpb.KeyValue) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, attribute.KeyValue{Key: attribute.Key(kv.GetKey()), Value: value(kv.GetValue())})
	}
	return out
}

func value(v *commonpb.AnyValue) attribute.Value {
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
		var ss []string
		for _, e := range x.ArrayValue.GetValues() {
			ss = append(ss, value(e).String())
		}
		return attribute.StringSliceValue(ss)
	}
	return attribute.StringValue("")
}
