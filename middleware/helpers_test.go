package middleware_test

import (
	"context"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/telemetry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// spec is the Spec of a layer of strings with only the policies ps.
func spec(ps ...failsafe.Policy[string]) middleware.Spec[string] {
	return middleware.Spec[string]{Policies: ps}
}

// recorder returns a tracer provider that records every span, and the
// recorder, shut down with the test.
func recorder(t *testing.T) (*tracetest.SpanRecorder, middleware.Option) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	return rec, middleware.WithTracerProvider(tp)
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func str(s sdktrace.ReadOnlySpan, key attribute.Key) string {
	v, _ := attr(s, key)
	return v.AsString()
}

func num(s sdktrace.ReadOnlySpan, key attribute.Key) int64 {
	v, _ := attr(s, key)
	return v.AsInt64()
}

// layerSpans returns the layer spans of layer (those without an attempt or
// policy attribute).
func layerSpans(rec *tracetest.SpanRecorder, layer string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if str(s, telemetry.Layer) != layer {
			continue
		}
		if _, ok := attr(s, telemetry.Attempt); ok {
			continue
		}
		if _, ok := attr(s, telemetry.Policy); ok {
			continue
		}
		out = append(out, s)
	}
	return out
}

func attemptSpans(rec *tracetest.SpanRecorder, layer string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if _, ok := attr(s, telemetry.Attempt); ok && (layer == "" || s.Name() == layer+" attempt") {
			out = append(out, s)
		}
	}
	return out
}

func policySpans(rec *tracetest.SpanRecorder, policy string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if str(s, telemetry.Policy) == policy {
			out = append(out, s)
		}
	}
	return out
}
