package runtime_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/retracetest"
	"github.com/retrace-go/retrace/runtime"
	"github.com/retrace-go/retrace/session"
	"github.com/retrace-go/retrace/telemetry"
)

// traced is a tracer provider whose spans rec records, all sampled.
func traced(t *testing.T) (*tracetest.SpanRecorder, trace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return rec, tp
}

// rootOf is the one recorded span without a parent.
func rootOf(t *testing.T, rec *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
	t.Helper()
	var roots []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if !s.Parent().IsValid() {
			roots = append(roots, s)
		}
	}
	require.Len(t, roots, 1)
	return roots[0]
}

// sameSpan asserts that got names span want: its trace and span IDs.
func sameSpan(t *testing.T, want trace.SpanContext, got trace.SpanContext, msg string) {
	t.Helper()
	require.True(t, got.IsValid(), msg)
	assert.Equal(t, want.TraceID(), got.TraceID(), msg)
	assert.Equal(t, want.SpanID(), got.SpanID(), msg)
	assert.True(t, got.IsSampled(), msg)
}

// A rejected key through runtime.Exec → session → the real OpenAI client:
// the one errors.As that reads the failure gives the trace and span of the
// exec's root span, as do policies.TraceOf and the ExecError. The session's
// stop is passed up by the runtime, which names its own span on it.
func TestFailureLeadsToTheRootSpan(t *testing.T) {
	rec, tp := traced(t)
	srv := retracetest.New(retracetest.Always(retracetest.InvalidAPIKey()))
	require.NoError(t, srv.Start())
	t.Cleanup(srv.Close)
	opts := []middleware.Option{middleware.WithClock(clock.NewVirtual(epoch)), middleware.WithTracerProvider(tp)}
	s, err := session.New(session.Config{
		Provider: session.NewOpenAI(session.OpenAIConfig{BaseURL: srv.URL(), APIKey: "sk-test-0123456789abcdefghij"}),
		Model:    "gpt-test", Options: opts,
	})
	require.NoError(t, err)
	_, err = runtime.New(s, runtime.Config{Options: opts}).Exec(context.Background(), "hi")
	require.Error(t, err)
	root := rootOf(t, rec)
	assert.Equal(t, "runtime", root.Name())

	var fe *policies.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "session", fe.Layer, "the session's stop, read as it was")
	assert.Equal(t, telemetry.OutcomeFailedPermanent, fe.Outcome)
	assert.Equal(t, 401, fe.StatusCode)
	sameSpan(t, root.SpanContext(), fe.SpanContext(), "the one errors.As")

	sc, ok := policies.TraceOf(err)
	require.True(t, ok)
	sameSpan(t, root.SpanContext(), sc, "policies.TraceOf")
	var ee *runtime.ExecError
	require.ErrorAs(t, err, &ee)
	sameSpan(t, root.SpanContext(), ee.SpanContext(), "the ExecError")
	assert.Len(t, sc.TraceID().String(), 32)

	// Beneath, the session's own span is in the same trace: what the IDs
	// lead to holds the whole story.
	var sessionSpan sdktrace.ReadOnlySpan
	for _, sp := range rec.Ended() {
		for _, kv := range sp.Attributes() {
			if kv.Key == telemetry.Layer && kv.Value.AsString() == "session" {
				sessionSpan = sp
			}
		}
	}
	require.NotNil(t, sessionSpan)
	assert.Equal(t, sc.TraceID(), sessionSpan.SpanContext().TraceID())
	assert.NotContains(t, sc.TraceState().String(), "sk-", "nothing but the IDs")
}

// Every attempt of an exec is beneath the runtime layer's span: an Exec
// that ran out of its attempts names that span, whose tree has them all.
func TestExecErrorNamesTheExecSpan(t *testing.T) {
	rec, tp := traced(t)
	e503 := &policies.Error{StatusCode: 503, Message: "Service unavailable"}
	a, calls := agent(e503, e503, e503)
	rt := runtime.New(a, runtime.Config{Options: []middleware.Option{middleware.WithClock(clock.NewVirtual(epoch)), middleware.WithTracerProvider(tp)}})
	_, err := rt.Exec(context.Background(), "go")
	require.Equal(t, 3, *calls)

	var ee *runtime.ExecError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, telemetry.OutcomeFailedExhausted, ee.Outcome)
	root := rootOf(t, rec)
	sameSpan(t, root.SpanContext(), ee.SpanContext(), "the ExecError")
	var fe *policies.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "runtime", fe.Layer)
	sameSpan(t, root.SpanContext(), fe.SpanContext(), "the runtime's stop")
	attempts := 0
	for _, sp := range rec.Ended() {
		if sp.Parent().SpanID() == root.SpanContext().SpanID() {
			attempts++
		}
	}
	assert.Equal(t, 3, attempts, "the span the error names has every attempt beneath it")
	// The answer the agent returned is its own value: retrace does not
	// write a span into an error it did not make.
	assert.False(t, e503.SpanContext().IsValid())
}

// Where no span recorded the failure, no ID is given: a no-op tracer
// provider, even beneath a recording span of the caller's (whose IDs a
// no-op span carries on), and a sampler that samples nothing.
func TestNoSpanNoIDs(t *testing.T) {
	_, callerTP := traced(t)
	sampledOut := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { _ = sampledOut.Shutdown(context.Background()) })
	for name, tp := range map[string]trace.TracerProvider{"noop": noop.NewTracerProvider(), "sampled out": sampledOut} {
		t.Run(name, func(t *testing.T) {
			ctx, caller := callerTP.Tracer("caller").Start(context.Background(), "caller")
			defer caller.End()
			e503 := &policies.Error{StatusCode: 503, Message: "Service unavailable"}
			a, _ := agent(e503, e503, e503)
			rt := runtime.New(a, runtime.Config{Options: []middleware.Option{middleware.WithClock(clock.NewVirtual(epoch)), middleware.WithTracerProvider(tp)}})
			_, err := rt.Exec(ctx, "go")
			require.Error(t, err)

			sc, ok := policies.TraceOf(err)
			assert.False(t, ok)
			assert.False(t, sc.IsValid())
			var ee *runtime.ExecError
			require.ErrorAs(t, err, &ee)
			assert.False(t, ee.SpanContext().IsValid())
			var fe *policies.Error
			require.ErrorAs(t, err, &fe)
			assert.False(t, fe.SpanContext().IsValid(), "not the caller's span: the failure was not recorded there")
		})
	}
}

// A loop that reached its step limit ends its agent layer with a stop of
// its own making: it names the agent layer's span, the root of the run.
func TestStepLimitNamesTheAgentSpan(t *testing.T) {
	loop, srv, rec := loopFixture(t, retracetest.Always(retracetest.CallTools(retracetest.ToolCall{Name: "search_docs", Arguments: `{"query":"x"}`})), 2)
	_, err := loop.Run(context.Background(), "go")
	require.ErrorIs(t, err, runtime.ErrStepLimit)
	require.Positive(t, srv.Requests())
	root := rootOf(t, rec)
	var fe *policies.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, telemetry.OutcomeStepLimit, fe.Outcome)
	sameSpan(t, root.SpanContext(), fe.SpanContext(), "the step limit")
	assert.False(t, runtime.ErrStepLimit.SpanContext().IsValid(), "the sentinel is never written")
	assert.True(t, errors.Is(err, runtime.ErrStepLimit))
}
