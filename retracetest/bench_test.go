package retracetest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/retracetest"
)

// The benchmark provider records and samples every span, even under a
// parent that was not sampled (a benchmark's calls must all pay the SDK),
// hands each ended span on as a production provider's batcher does, and
// its Shutdown stops it (goleak in TestMain checks the batcher's goroutine
// is gone).
func TestBenchTracerProvider(t *testing.T) {
	tp := retracetest.BenchTracerProvider()
	rec := tracetest.NewSpanRecorder()
	tp.RegisterSpanProcessor(rec) // beside the batcher: what the provider passes on

	unsampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, // no sampled flag
	}))
	for _, ctx := range []context.Context{context.Background(), unsampled} {
		_, span := tp.Tracer("bench").Start(ctx, "call")
		assert.True(t, span.IsRecording())
		assert.True(t, span.SpanContext().IsSampled())
		span.End()
	}
	require.Len(t, rec.Ended(), 2)

	require.NoError(t, tp.Shutdown(context.Background()))
	_, span := tp.Tracer("bench").Start(context.Background(), "after")
	assert.False(t, span.IsRecording(), "a span started after Shutdown records nothing")
	span.End()
	assert.Len(t, rec.Ended(), 2)
}
