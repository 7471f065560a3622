package setup_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/retrace-go/retrace/telemetry/setup"
)

// What WriteOTLPJSON writes, ReadOTLPJSON reads back, with hex IDs in the
// file as the OTLP JSON encoding has them.
func TestOTLPJSONRoundTrip(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, root := tp.Tracer("retrace").Start(context.Background(), "runtime")
	root.AddEvent("retrace.nested_retry", trace.WithAttributes(attribute.String("retrace.nested.layers", "runtime(3) × session(4)")))
	_, child := tp.Tracer("retrace").Start(ctx, "chat m", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.Int("retrace.attempt", 2), attribute.Bool("b", true), attribute.Float64("f", 1.5),
			attribute.StringSlice("gen_ai.response.finish_reasons", []string{"stop"})))
	child.SetStatus(codes.Error, "APIError: 503")
	child.End()
	root.End()

	var buf bytes.Buffer
	require.NoError(t, setup.WriteOTLPJSON(&buf, rec.Ended()))
	require.NoError(t, setup.WriteOTLPJSON(&buf, rec.Ended()[:1]))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2, "one line per call")
	tid := root.SpanContext().TraceID().String()
	assert.Contains(t, lines[0], `"traceId":"`+tid+`"`, "IDs in hex")
	assert.Contains(t, lines[0], `"kind":3`, "enums as numbers")

	got, err := setup.ReadOTLPJSON(&buf)
	require.NoError(t, err)
	require.Len(t, got, 2)
	spans := got[0].ScopeSpans[0].Spans
	require.Len(t, spans, 2)
	assert.Equal(t, "chat m", spans[0].Name)
	assert.Equal(t, tid, hex.EncodeToString(spans[0].TraceId))
	assert.Equal(t, hex.EncodeToString(spans[1].SpanId), hex.EncodeToString(spans[0].ParentSpanId))
	assert.Equal(t, int64(2), spans[0].Attributes[0].Value.GetIntValue())
	assert.Equal(t, "APIError: 503", spans[0].Status.Message)
	assert.Equal(t, "runtime(3) × session(4)", spans[1].Events[0].Attributes[0].Value.GetStringValue())
	assert.Equal(t, root.SpanContext().SpanID().String(), hex.EncodeToString(spans[1].SpanId))
}

// Jaeger's query API wraps each chunk as {"result": …}.
func TestReadOTLPJSONJaegerResult(t *testing.T) {
	body := `{"result":{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331","name":"runtime","startTimeUnixNano":"1","endTimeUnixNano":"2","status":{"code":2}}]}]}]}}`
	got, err := setup.ReadOTLPJSON(strings.NewReader(body))
	require.NoError(t, err)
	s := got[0].ScopeSpans[0].Spans[0]
	assert.Equal(t, "0af7651916cd43dd8448eb211c80319c", hex.EncodeToString(s.TraceId))
	assert.Equal(t, uint64(2), s.EndTimeUnixNano)

	_, err = setup.ReadOTLPJSON(strings.NewReader(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz7651916cd43dd8448eb211c80319c1"}]}]}]}`))
	assert.ErrorContains(t, err, "traceId")
	_, err = setup.ReadOTLPJSON(strings.NewReader(`{"resourceSpans": [`))
	assert.ErrorContains(t, err, "OTLP JSON object 1")
}

// ReadOnlySpans gives back the spans WriteOTLPJSON wrote: a reader of the
// SDK's spans reads a file's alike.
func TestReadOnlySpansRoundTrip(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	res := resource.NewSchemaless(attribute.String("service.name", "agent"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(res))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := tp.Tracer("retrace", trace.WithInstrumentationVersion("v1"))
	ctx, root := tr.Start(context.Background(), "runtime")
	root.AddEvent("retrace.nested_retry", trace.WithAttributes(attribute.String("retrace.nested.layers", "runtime(3) × session(4)")))
	_, child := tr.Start(ctx, "chat m", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.Int("retrace.attempt", 2), attribute.Bool("b", true), attribute.Float64("f", 1.5),
		attribute.StringSlice("gen_ai.response.finish_reasons", []string{"stop", "length"}),
		attribute.Int64Slice("ints", []int64{1, 2}), attribute.BoolSlice("bools", []bool{true}), attribute.Float64Slice("floats", []float64{0.5})))
	child.SetStatus(codes.Error, "APIError: 503")
	child.End()
	root.SetStatus(codes.Ok, "")
	root.End()
	want := rec.Ended()

	var buf bytes.Buffer
	require.NoError(t, setup.WriteOTLPJSON(&buf, want))
	rss, err := setup.ReadOTLPJSON(&buf)
	require.NoError(t, err)
	got, err := setup.ReadOnlySpans(rss)
	require.NoError(t, err)
	require.Len(t, got, len(want))
	for i, w := range want {
		g := got[i]
		assert.Equal(t, w.Name(), g.Name())
		assert.Equal(t, w.SpanContext().TraceID(), g.SpanContext().TraceID())
		assert.Equal(t, w.SpanContext().SpanID(), g.SpanContext().SpanID())
		assert.Equal(t, w.Parent().SpanID(), g.Parent().SpanID())
		assert.Equal(t, w.SpanKind(), g.SpanKind())
		assert.True(t, w.StartTime().Equal(g.StartTime()) && w.EndTime().Equal(g.EndTime()), w.Name())
		assert.Equal(t, w.Attributes(), g.Attributes(), w.Name())
		assert.Equal(t, w.Status(), g.Status(), w.Name())
		assert.Equal(t, len(w.Events()), len(g.Events()), w.Name())
		for j, e := range w.Events() {
			assert.Equal(t, e.Name, g.Events()[j].Name)
			assert.Equal(t, e.Attributes, g.Events()[j].Attributes)
		}
		assert.Equal(t, w.Resource().Attributes(), g.Resource().Attributes())
		assert.Equal(t, w.InstrumentationScope().Name, g.InstrumentationScope().Name)
		assert.Equal(t, "v1", g.InstrumentationScope().Version)
	}

	_, err = setup.ReadOnlySpans([]*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{Name: "orphan"}}}}}})
	assert.ErrorContains(t, err, `span "orphan" has no valid trace and span IDs`)
}
