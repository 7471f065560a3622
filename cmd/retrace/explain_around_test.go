package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/failsafe-go/failsafe-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
)

// aroundTrace is a durable engine's trace, as Temporal's tracing
// interceptor and contrib/temporal make it: a workflow's span, one
// activity span per attempt (maxAttempts of them, 0: without a limit,
// attempts made), and beneath each a retrace root (layer temporal) whose
// handler runs a session of 4 attempts failing with fail.
func aroundTrace(t *testing.T, maxAttempts, attempts int, fail error) []sdktrace.ReadOnlySpan {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	opts := []middleware.Option{middleware.WithTracerProvider(tp)}
	retry := policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 4})
	sess := middleware.Layer[string, string]("session", middleware.Spec[string]{Policies: []failsafe.Policy[string]{retry}}, opts...)(
		func(context.Context, string) (string, error) { return "", fail })
	activity := middleware.Layer[string, string]("temporal", middleware.Spec[string]{}, opts...)(
		func(ctx context.Context, req string) (string, error) {
			return sess(middleware.WithinRetryAttempt(ctx, "temporal", maxAttempts), req)
		})
	ctx, workflow := tp.Tracer("temporal-sdk-go").Start(context.Background(), "StartWorkflow:agent")
	for n := 1; n <= attempts; n++ {
		actx, run := tp.Tracer("temporal-sdk-go").Start(ctx, "RunActivity:Turn")
		_, _ = activity(middleware.WithCallAttributes(actx, attribute.Int("temporal.activity.attempt", n)), "status?")
		run.End()
	}
	workflow.End()
	return rec.Ended()
}

func explainSpans(t *testing.T, spans []sdktrace.ReadOnlySpan) (*Analysis, string) {
	t.Helper()
	a, err := analyze(newForest(spans))
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, a.write(&out))
	return a, out.String()
}

// A trace whose root is a workflow's: explain adds up the calls of
// retrace's roots beneath it, one per activity attempt, and says so.
func TestExplainAWorkflowsTrace(t *testing.T) {
	a, out := explainSpans(t, aroundTrace(t, 3, 3, &policies.Error{Class: policies.Transient, Type: "503"}))
	assert.Equal(t, "StartWorkflow:agent", a.Root)
	assert.Equal(t, 3, a.Roots)
	assert.EqualValues(t, 12, a.Calls)
	assert.Equal(t, 12, a.LeafSpans)
	assert.EqualValues(t, 12, a.WorstCase)
	assert.Equal(t, "failed_exhausted", a.Outcome)
	require.Len(t, a.Nested, 2)
	assert.Equal(t, NestedLayer{Layer: "temporal", MaxAttempts: 3}, a.Nested[0], "its attempts are seen, as retrace's roots")
	assert.Contains(t, out, "3 retrace roots beneath StartWorkflow:agent")
}

// A fatal failure that the layer around retrace called again: explain
// says to let retrace's class decide its retries.
func TestExplainAFatalFailureRetriedAround(t *testing.T) {
	a, _ := explainSpans(t, aroundTrace(t, 3, 3, &policies.Error{Class: policies.Fatal, Type: "insufficient_quota"}))
	assert.EqualValues(t, 3, a.Calls)
	kinds := map[string]string{}
	for _, ad := range a.Advice {
		kinds[ad.Kind] = ad.Text
	}
	require.Contains(t, kinds, "outer_retry")
	assert.Contains(t, kinds["outer_retry"], "a fatal failure (insufficient_quota)")
}

// A loop without a limit around a retrying session: no worst case holds,
// and explain says to give it one.
func TestExplainAnUnboundedLayerAround(t *testing.T) {
	a, _ := explainSpans(t, aroundTrace(t, 0, 2, &policies.Error{Class: policies.Transient, Type: "503"}))
	assert.Zero(t, a.WorstCase)
	kinds := map[string]string{}
	for _, ad := range a.Advice {
		kinds[ad.Kind] = ad.Text
	}
	require.Contains(t, kinds, "unbounded")
	assert.Contains(t, kinds["unbounded"], "temporal retries without a limit around session(4)")
}
