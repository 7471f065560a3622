package middleware_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/retrace-go/retrace/clock"
	"github.com/retrace-go/retrace/middleware"
	"github.com/retrace-go/retrace/policies"
	"github.com/retrace-go/retrace/telemetry"
)

var unauthorized = &policies.Error{StatusCode: 401, Code: "invalid_api_key", Message: "Incorrect API key provided"}

// names asserts that err's *policies.Error, read with one errors.As, names
// span s: its trace and span IDs.
func names(t *testing.T, s sdktrace.ReadOnlySpan, err error) *policies.Error {
	t.Helper()
	fe, ok := errors.AsType[*policies.Error](err)
	require.True(t, ok, "%v", err)
	require.True(t, fe.SpanContext().IsValid(), "%v names no span", err)
	assert.Equal(t, s.SpanContext().TraceID(), fe.SpanContext().TraceID())
	assert.Equal(t, s.SpanContext().SpanID(), fe.SpanContext().SpanID(), "want span %q", s.Name())
	sc, ok := policies.TraceOf(err)
	require.True(t, ok)
	assert.Equal(t, fe.SpanContext(), sc, "TraceOf finds the same")
	return fe
}

// roots are the recorded spans without a parent, in the order they ended.
func roots(rec *tracetest.SpanRecorder) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if !s.Parent().IsValid() {
			out = append(out, s)
		}
	}
	return out
}

// A stop a layer stops on for the same reason after one attempt reads as it
// did (its Layer, its diagnosis) and names the outer layer's span: a copy,
// for the value the inner layer returned is not written.
func TestStopPassedUpNamesTheOuterSpan(t *testing.T) {
	rec, tp := recorder(t)
	clk := clock.NewVirtual(epoch)
	inner := middleware.Layer[string, string]("session", spec(retry(4, time.Second, clk)), tp)(
		func(context.Context, string) (string, error) { return "", unauthorized })
	var kept error
	outer := middleware.Layer[string, string]("runtime", spec(retry(3, time.Second, clk)), tp)(
		func(ctx context.Context, req string) (string, error) {
			_, kept = inner(ctx, req)
			return "", kept
		})
	_, err := outer(context.Background(), "hi")
	require.Error(t, err)

	root := layerSpans(rec, "runtime")[0]
	fe := names(t, root, err)
	assert.Equal(t, "session", fe.Layer, "the session's stop, read as it was")
	assert.Equal(t, telemetry.OutcomeFailedPermanent, fe.Outcome)
	assert.Equal(t, 401, fe.StatusCode)
	assert.Equal(t, kept.Error(), err.Error())
	assert.Equal(t, kept.(*policies.Error).Diagnosis(), fe.Diagnosis())
	assert.ErrorIs(t, err, unauthorized)

	names(t, layerSpans(rec, "session")[0], kept) // the value beneath still names its own span
	assert.False(t, unauthorized.SpanContext().IsValid(), "the handler's answer is not written")
}

// A layer that ran out of attempts names its span; the attempts are
// beneath it.
func TestExhaustedStopNamesItsLayer(t *testing.T) {
	rec, tp := recorder(t)
	e503 := &policies.Error{StatusCode: 503, Message: "Service unavailable"}
	h := middleware.Layer[string, string]("tool", spec(retry(3, time.Second, clock.NewVirtual(epoch))), tp)(
		func(context.Context, string) (string, error) { return "", e503 })
	_, err := h(context.Background(), "q")
	fe := names(t, layerSpans(rec, "tool")[0], err)
	assert.Equal(t, telemetry.OutcomeFailedExhausted, fe.Outcome)
	assert.Len(t, attemptSpans(rec, "tool"), 3)
}

// One stop shared among calls (a handler that hands one result to every
// caller waiting for it, as singleflight does) is named by each call's
// layer through a copy of its own: no call writes the value the others
// read, and each names its own trace.
func TestSharedStopIsNotWritten(t *testing.T) {
	rec, tp := recorder(t)
	clk := clock.NewVirtual(epoch)
	_, err := middleware.Layer[string, string]("session", spec(retry(1, 0, clk)), tp)(
		func(context.Context, string) (string, error) { return "", unauthorized })(context.Background(), "once")
	require.Error(t, err)
	sharedErr := err.(*policies.Error)
	sharedSpan := sharedErr.SpanContext()

	outer := middleware.Layer[string, string]("runtime", spec(retry(3, time.Second, clk)), tp)(
		func(context.Context, string) (string, error) { return "", sharedErr })
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { _, errs[i] = outer(context.Background(), "q") })
	}
	wg.Wait()

	assert.Equal(t, sharedSpan, sharedErr.SpanContext(), "the shared stop still names its own span")
	seen := map[trace.TraceID]bool{}
	for _, e := range errs {
		sc, ok := policies.TraceOf(e)
		require.True(t, ok)
		assert.NotSame(t, sharedErr, e)
		assert.NotEqual(t, sharedSpan.TraceID(), sc.TraceID())
		seen[sc.TraceID()] = true
	}
	assert.Len(t, seen, n, "each call names its own trace")
	assert.Len(t, roots(rec), n+1)
}

// A layer without a retry returns its handler's error as it is, naming no
// span it did not make: an answer, or a sentinel a handler shares, is
// never written.
func TestPassedThroughAnswerIsUnchanged(t *testing.T) {
	_, tp := recorder(t)
	h := middleware.Layer[string, string]("tool", spec(), tp)(
		func(context.Context, string) (string, error) { return "", unauthorized })
	_, err := h(context.Background(), "q")
	assert.Same(t, unauthorized, err)
	assert.False(t, unauthorized.SpanContext().IsValid())
	_, ok := policies.TraceOf(err)
	assert.False(t, ok)
}

// A stop a handler makes of its own (as an agent loop's step limit is)
// names the span of the layer without a retry it ends, through a copy.
func TestHandlerStopNamesTheLayer(t *testing.T) {
	rec, tp := recorder(t)
	own := &policies.Error{Class: policies.Fatal, Type: "step_limit", Outcome: telemetry.OutcomeStepLimit, Err: errors.New("out of steps")}
	h := middleware.Layer[string, string]("agent", spec(), tp)(
		func(context.Context, string) (string, error) { return "", own })
	_, err := h(context.Background(), "q")
	names(t, layerSpans(rec, "agent")[0], err)
	assert.False(t, own.SpanContext().IsValid(), "the handler's value is not written")
}

// What a layer without a retry makes and returns itself, a refusal or a
// panic, names its span.
func TestRefusalAndPanicNameTheLayer(t *testing.T) {
	t.Run("open breaker", func(t *testing.T) {
		rec, tp := recorder(t)
		clk := clock.NewFake(epoch)
		breaker := policies.NewCircuitBreaker[string](policies.BreakerConfig{FailureThreshold: 1, Clock: clk})
		h := middleware.Layer[string, string]("tool", spec(breaker), tp, middleware.WithClock(clk))(
			func(context.Context, string) (string, error) { return "", errors.New("503 service unavailable") })
		_, err := h(context.Background(), "q")
		require.Error(t, err)
		_, err = h(context.Background(), "q")
		fe := names(t, roots(rec)[1], err)
		assert.Equal(t, "circuit_open", fe.Type)
	})
	t.Run("panic", func(t *testing.T) {
		rec, tp := recorder(t)
		h := middleware.Layer[string, string]("tool", spec(), tp)(
			func(context.Context, string) (string, error) { panic("boom") })
		_, err := h(context.Background(), "q")
		fe := names(t, roots(rec)[0], err)
		assert.Equal(t, policies.Programming, fe.Class)
	})
}

// A policy run under failsafe.With has no span of its own: its stop names
// none, not even the caller's recording span it ran in.
func TestBarePolicyNamesNoSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("caller").Start(context.Background(), "caller")
	defer span.End()
	r := policies.NewRetry[string](policies.RetryConfig{MaxAttempts: 2, Clock: clock.NewVirtual(epoch)})
	_, err := failsafe.With[string](r).WithContext(ctx).Get(func() (string, error) { return "", unauthorized })
	fe, ok := errors.AsType[*policies.Error](err)
	require.True(t, ok)
	assert.NotEmpty(t, fe.Outcome)
	assert.False(t, fe.SpanContext().IsValid())
	_, ok = policies.TraceOf(err)
	assert.False(t, ok)
}
